"""Cluster-wide quotas (`quota.scope=cluster`): the driver's shares follow demand and add up
to one quota over the brokers, stale brokers drop out, and a broker's reporter applies the
shares to its quota managers (and whole quotas again when the controller is gone)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sparklog.broker.cluster_quotas import ClusterQuotaReporter, quota_managers
from sparklog.metrics.cluster_quota import FLOOR_FRACTION, STALE_WINDOWS, ClusterQuotaBalancer
from sparklog.protocol import kio_build
from sparklog.protocol.sparklog_apis import QuotaUsageResponse

ALICE = (("user", "alice"), ("client-id", "app"))
BOB = (("user", "bob"), ("client-id", "app"))


P_ALICE = ("Produce", ALICE)


def test_throttled_brokers_share_what_the_others_leave() -> None:
    balancer = ClusterQuotaBalancer(window_ms=1000)
    # a 300 B/s quota, each broker enforcing it whole (not answered yet)
    balancer.report(0, {P_ALICE: (300.0, 300.0)}, 0)  # at its limit: wants more
    balancer.report(1, {P_ALICE: (30.0, 300.0)}, 0)  # uses a tenth: wants that + 25 %
    balancer.report(2, {}, 0)  # no traffic: the floor
    floor = FLOOR_FRACTION / 3
    targets = [balancer.shares_for(b)[P_ALICE] for b in (0, 1, 2)]
    assert sum(targets) == pytest.approx(1.0)
    assert targets[1] == pytest.approx(30 * 1.25 / 300)
    assert targets[2] == pytest.approx(floor)
    assert targets[0] == pytest.approx(1 - 30 * 1.25 / 300 - floor)


def test_even_demand_splits_evenly_whatever_split_it_started_from() -> None:
    balancer = ClusterQuotaBalancer(window_ms=1000)
    for b in (0, 1, 2):  # a lopsided start: 0.8 / 0.1 / 0.1 of a 300 B/s quota
        balancer._issued[b] = ({P_ALICE: (0.8, 0.1, 0.1)[b]}, 1 / 3)
        balancer.report(b, {P_ALICE: (300.0 * (0.8, 0.1, 0.1)[b],) * 2}, 0)
    shares = {b: (0.8, 0.1, 0.1)[b] for b in (0, 1, 2)}
    for now in range(1, 5):  # every broker at its limit: the held ones grow to an even split
        for b in (0, 1, 2):
            given, _default = balancer.report(b, {P_ALICE: (300.0 * shares[b],) * 2}, now)
            shares[b] = given[P_ALICE]
    assert shares == pytest.approx({0: 1 / 3, 1: 1 / 3, 2: 1 / 3})
    balancer.report(3, {P_ALICE: 5.0}, 0)  # a rate alone: no limit known from it


def test_without_known_limits_the_split_is_even() -> None:
    balancer = ClusterQuotaBalancer(window_ms=1000)
    balancer.report(0, {P_ALICE: 300.0}, 0)
    shares, default = balancer.report(1, {P_ALICE: 100.0}, 0)
    assert default == 0.5 and balancer.shares_for(0)[P_ALICE] == pytest.approx(0.5)


def test_an_idle_entity_splits_evenly_and_a_silent_broker_drops_out() -> None:
    balancer = ClusterQuotaBalancer(window_ms=1000)
    balancer.report(0, {("Fetch", ALICE): (0.0, 100.0)}, 0)
    shares, _ = balancer.report(1, {("Fetch", ALICE): (0.0, 100.0)}, 0)
    assert shares[("Fetch", ALICE)] == pytest.approx(0.5)
    later = STALE_WINDOWS * 1000 + 1
    shares, default = balancer.report(1, {("Fetch", ALICE): (10.0, 50.0)}, later)
    assert balancer.brokers == [1] and default == 1.0
    assert shares[("Fetch", ALICE)] == pytest.approx(1.0)


def test_shares_in_force_never_add_up_to_more_than_one_quota() -> None:
    import random

    rng = random.Random(31)
    balancer = ClusterQuotaBalancer(window_ms=1000)
    brokers = [0, 1, 2]
    for _round in range(2):  # while brokers join, each holds the split of its time for a round
        for b in brokers:
            balancer.report(b, {("Produce", ALICE): 0.0}, 0)
    in_force = {b: balancer._issued_share(b, ("Produce", ALICE)) for b in brokers}
    for step in range(300):
        b = rng.choice(brokers)
        limit = 300.0 * in_force[b]
        rate = rng.choice([0.0, 0.1, 0.5, 1.0]) * limit
        shares, _default = balancer.report(b, {P_ALICE: (rate, limit)}, step)
        in_force[b] = shares[P_ALICE]
        assert sum(in_force.values()) <= 1.0 + 1e-9, (step, in_force)
    for _round in range(3):  # a steady load: every broker at its target
        for b, rate in ((0, 1000.0), (1, 10.0), (2, 0.0)):
            balancer.report(b, {P_ALICE: (rate, 300.0 * in_force[b])}, 500)
            in_force[b] = balancer._issued_share(b, P_ALICE)
    assert in_force == pytest.approx({b: balancer.shares_for(b)[P_ALICE] for b in (0, 1, 2)})
    assert in_force[0] > 0.9


class Manager:
    """What the reporter uses of a `ClientQuotaManager` (`rates`, `set_shares`)."""

    def __init__(self, rates: dict) -> None:
        self._rates = rates
        self.shares: tuple[dict, float] | None = None

    def rates(self, now_ms: int) -> dict:
        return dict(self._rates)

    def set_shares(self, shares: dict, default: float = 1.0) -> None:
        self.shares = (shares, default)


class Quotas:
    def __init__(self) -> None:
        self.produce = Manager({ALICE: 300.0})
        self.fetch = Manager({})


def test_the_reporter_sends_rates_and_applies_the_controllers_shares() -> None:
    balancer = ClusterQuotaBalancer(window_ms=1000)
    balancer.report(1, {P_ALICE: 100.0}, 0)
    quotas = Quotas()
    sent: list[Any] = []

    async def send(request: Any) -> Any:
        sent.append(request)
        usage = {
            (e.quota_type, tuple((t.name, t.value) for t in e.tags)): (
                float(e.value),
                float(e.limit),
            )
            for e in request.entries
        }
        shares, default = balancer.report(int(request.node_id), usage, 0)
        return _response(shares, default)

    reporter = ClusterQuotaReporter(0, send, lambda: quota_managers(quotas), 1000, lambda: 0)
    assert asyncio.run(reporter.report_once())
    # (this manager has no quota metric: its limit is unknown, 0)
    assert [(e.quota_type, e.value, e.limit) for e in sent[0].entries] == [("Produce", 300.0, 0)]
    assert quotas.produce.shares is not None
    produce_shares, default = quotas.produce.shares
    # no limits known: the even split
    assert produce_shares[ALICE] == pytest.approx(0.5) and default == 0.5
    assert quotas.fetch.shares == ({}, 0.5)


def test_without_the_controller_a_broker_falls_back_to_an_even_split() -> None:
    quotas = Quotas()
    answer = {"up": True}

    async def send(request: Any) -> Any:
        if not answer["up"]:
            raise ConnectionError("controller gone")
        return _response({P_ALICE: 0.9}, 1 / 3)

    reporter = ClusterQuotaReporter(0, send, lambda: quota_managers(quotas), 1000, lambda: 0)
    assert asyncio.run(reporter.report_once())
    assert quotas.produce.shares == ({ALICE: pytest.approx(0.9)}, pytest.approx(1 / 3))
    answer["up"] = False
    for _ in range(STALE_WINDOWS):
        assert not asyncio.run(reporter.report_once())
    # the split of the three brokers it last heard of: never the whole quota on each
    assert quotas.produce.shares == ({}, pytest.approx(1 / 3))


def _response(shares: dict, default: float) -> Any:
    return kio_build.build(
        QuotaUsageResponse,
        {
            "throttle_time": 0,
            "error_code": 0,
            "default_share": default,
            "shares": [
                {
                    "quota_type": q,
                    "tags": [{"name": k, "value": v} for k, v in t],
                    "value": s,
                    "limit": 0.0,
                }
                for (q, t), s in shares.items()
            ],
        },
    )
