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


def test_shares_follow_demand_and_sum_to_one() -> None:
    balancer = ClusterQuotaBalancer(window_ms=1000)
    balancer.report(0, {("Produce", ALICE): 300.0}, 0)
    balancer.report(1, {("Produce", ALICE): 100.0, ("Produce", BOB): 50.0}, 0)
    shares, default = balancer.report(2, {}, 0)
    assert default == pytest.approx(1 / 3)
    floor = FLOOR_FRACTION / 3
    alice = [balancer.shares_for(b)[("Produce", ALICE)] for b in (0, 1, 2)]
    assert sum(alice) == pytest.approx(1.0)
    assert alice == pytest.approx([floor + 0.9 * 0.75, floor + 0.9 * 0.25, floor])
    bob = [balancer.shares_for(b)[("Produce", BOB)] for b in (0, 1, 2)]
    assert sum(bob) == pytest.approx(1.0) and bob[1] > 0.9
    assert shares[("Produce", ALICE)] == pytest.approx(floor)  # broker 2 sees no alice yet


def test_an_idle_entity_splits_evenly_and_a_silent_broker_drops_out() -> None:
    balancer = ClusterQuotaBalancer(window_ms=1000)
    balancer.report(0, {("Fetch", ALICE): 0.0}, 0)
    shares, _ = balancer.report(1, {("Fetch", ALICE): 0.0}, 0)
    assert shares[("Fetch", ALICE)] == pytest.approx(0.5)
    later = STALE_WINDOWS * 1000 + 1
    shares, default = balancer.report(1, {("Fetch", ALICE): 10.0}, later)
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
        demand = {("Produce", ALICE): rng.choice([0.0, 10.0, 1000.0])}
        shares, _default = balancer.report(b, demand, step)
        in_force[b] = shares[("Produce", ALICE)]
        assert sum(in_force.values()) <= 1.0 + 1e-9, (step, in_force)
    balancer.report(0, {("Produce", ALICE): 900.0}, 400)
    balancer.report(1, {("Produce", ALICE): 100.0}, 400)
    balancer.report(2, {("Produce", ALICE): 0.0}, 400)
    shares, _ = balancer.report(0, {("Produce", ALICE): 900.0}, 401)  # steady: at its target
    assert shares[("Produce", ALICE)] == pytest.approx(balancer.shares_for(0)[("Produce", ALICE)])


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
    balancer.report(1, {("Produce", ALICE): 100.0}, 0)
    quotas = Quotas()
    sent: list[Any] = []

    async def send(request: Any) -> Any:
        sent.append(request)
        rates = {
            (e.quota_type, tuple((t.name, t.value) for t in e.tags)): float(e.value)
            for e in request.entries
        }
        shares, default = balancer.report(int(request.node_id), rates, 0)
        return _response(shares, default)

    reporter = ClusterQuotaReporter(0, send, lambda: quota_managers(quotas), 1000, lambda: 0)
    assert asyncio.run(reporter.report_once())
    assert [(e.quota_type, e.value) for e in sent[0].entries] == [("Produce", 300.0)]
    assert quotas.produce.shares is not None
    produce_shares, default = quotas.produce.shares
    # its target is 0.05 + 0.9 × 0.75, but broker 1 (alone before) still holds the whole
    # quota: it keeps the even split until broker 1 gives some up
    assert produce_shares[ALICE] == pytest.approx(0.5) and default == 0.5
    assert quotas.fetch.shares == ({}, 0.5)


def test_without_the_controller_a_broker_goes_back_to_whole_quotas() -> None:
    quotas = Quotas()

    async def send(request: Any) -> Any:
        raise ConnectionError("controller gone")

    reporter = ClusterQuotaReporter(0, send, lambda: quota_managers(quotas), 1000, lambda: 0)
    for _ in range(STALE_WINDOWS):
        assert not asyncio.run(reporter.report_once())
    assert quotas.produce.shares == ({}, 1.0)


def _response(shares: dict, default: float) -> Any:
    return kio_build.build(
        QuotaUsageResponse,
        {
            "throttle_time": 0,
            "error_code": 0,
            "default_share": default,
            "shares": [
                {"quota_type": q, "tags": [{"name": k, "value": v} for k, v in t], "value": s}
                for (q, t), s in shares.items()
            ],
        },
    )
