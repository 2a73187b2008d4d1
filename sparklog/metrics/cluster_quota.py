"""Cluster-wide client quotas (sparklog's `quota.scope=cluster`; no Kafka anchor).

Kafka's client quotas are per broker: a client whose partitions are led by three brokers gets
its `producer_byte_rate` three times. sparklog's driver sees every broker, so with
`quota.scope=cluster` each broker reports, once per quota window, the rate each quota entity
measured there (`ClientQuotaManager.rates`), and the controller answers with this broker's
**share** of each entity's quota; the broker then enforces `quota × share`
(`ClientQuotaManager.set_shares`). The shares of one entity add up to 1 over the brokers that
report, so the cluster as a whole holds the entity to its quota once.

Shares are max-min fair sharing of one budget by demand (YouTube's Doorman's idea). Each
broker reports, per entity, the rate it measured and the limit it enforces (its share of the
quota); a broker that held the client back reports at least its limit. A broker using less
than `SATURATION` of its limit wants what it uses plus `HEADROOM` (at least `floor` =
`FLOOR_FRACTION / n` of the quota, so the client's load can move there); a broker at its limit
wants `GROWTH` times it (a throttled rate is the limit: its true demand is unknown). The quota
is water-filled over those wants, smallest first, each capped at an even split of what is left;
what no want takes goes to the held-back brokers by their wants. So a client producing to three
brokers evenly gets a third on each, one sending everything to one broker gets almost all of it
there, and an idle entity splits evenly. An entity a broker has not reported yet gets `1 / n`
there (`default_share`; n counts the brokers the controller knows that have not reported yet).
A broker whose report is older than `STALE_WINDOWS` windows is dropped (it stopped, or lost its
channel) and the split is recomputed without it.

Brokers report at their own moments, so shares are handed out conservatively: a broker's share
falls to its target at once, but rises only into what the other brokers' current shares leave
free (`issued`). The shares in force thus never add up to more than one quota while the split
moves (a broker whose load grows gets its larger share a window or two later). Only when the
number of reporting brokers changes (start-up, a broker joining or leaving) does a broker keep
the split of its time until its next report: up to one window of overshoot.

Sans-IO (the caller passes `now_ms`); the controller owns one `ClusterQuotaBalancer`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from sparklog.settings import ConfigType, OneOf, Setting, define

logger = logging.getLogger(__name__)

#: (quota type, the entity's metric tags): one quota entity of one quota type
EntityKey = tuple[str, tuple[tuple[str, str], ...]]

#: the share every reporting broker keeps of an entity it sees no traffic for, as a fraction
#: of an even split (so the client's load can move to it)
FLOOR_FRACTION = 0.05
#: reports older than this many quota windows are dropped
STALE_WINDOWS = 3
#: a broker using at least this fraction of its limit is at its limit (being throttled)
SATURATION = 0.9
#: what an unthrottled broker is given beyond its use, as a factor
HEADROOM = 1.25
#: what a broker holding the client back wants, as a factor of its limit (its share can
#: double every window while the others leave room)
GROWTH = 3.0

#: what a broker reports of an entity: its measured rate and the limit it enforces (0: unknown)
Usage = tuple[float, float]

QUOTA_SCOPE = "quota.scope"
CLUSTER_QUOTA_SETTINGS = define(
    Setting(
        QUOTA_SCOPE,
        ConfigType.STRING,
        "broker",
        OneOf(("broker", "cluster")),
        doc="sparklog's own: `broker` enforces each client quota on every broker (Kafka's); "
        "`cluster` has the driver split each quota among the brokers by demand every quota "
        "window, so a client gets it once in total",
        group="metrics",
    ),
)


class ClusterQuotaBalancer:
    """The driver's view of every broker's quota usage, and each broker's shares."""

    def __init__(self, window_ms: int, expected_brokers: Callable[[], int] | None = None) -> None:
        self.window_ms = window_ms
        #: how many brokers the cluster has (the controller's unfenced brokers): those that
        #: have not reported yet keep an even split for themselves
        self._expected = expected_brokers or (lambda: 0)
        #: broker id -> (when it reported, its usage by entity: rate, limit, the whole quota
        #: that limit implies under the share the broker enforced when it measured)
        self._reports: dict[int, tuple[int, dict[EntityKey, tuple[float, float, float]]]] = {}
        #: broker id -> the shares it enforces now (what it was last told) and its default
        self._issued: dict[int, tuple[dict[EntityKey, float], float]] = {}

    def report(
        self, broker_id: int, usage: Mapping[EntityKey, Usage | float], now_ms: int
    ) -> tuple[dict[EntityKey, float], float]:
        """Take broker `broker_id`'s usage (rate and enforced limit, or a rate alone); its
        shares (for every entity any broker reported) and the share of entities not named."""
        reported = {}
        for key, value in usage.items():
            rate, limit = _usage(value)
            # a broker never answered enforces the whole quota
            share = self._issued_share(broker_id, key) if broker_id in self._issued else 1.0
            reported[key] = (rate, limit, limit / share if limit > 0 and share > 0 else 0.0)
        self._reports[broker_id] = (now_ms, reported)
        self._drop_stale(now_ms)
        default = self.default_share()
        issued, _old_default = self._issued.get(broker_id, ({}, default))
        shares = {}
        for key, target in self.shares_for(broker_id).items():
            current = issued.get(key, default)
            if target > current:  # rise only into what the others leave free
                told = set(self._reports) | set(self._issued)
                others = sum(self._issued_share(b, key) for b in told if b != broker_id)
                others += self._unreported() * default
                target = min(target, max(current, 1.0 - others))
            shares[key] = target
        self._issued[broker_id] = (shares, default)
        return dict(shares), default

    def _issued_share(self, broker_id: int, key: EntityKey) -> float:
        """The share of `key` broker `broker_id` enforces now (its default when never told)."""
        issued = self._issued.get(broker_id)
        if issued is None:
            return self.default_share()
        shares, default = issued
        return shares.get(key, default)

    def _drop_stale(self, now_ms: int) -> None:
        horizon = now_ms - STALE_WINDOWS * self.window_ms
        for broker_id in [b for b, (at, _r) in self._reports.items() if at < horizon]:
            logger.info("cluster quotas: broker %d stopped reporting; re-splitting", broker_id)
            del self._reports[broker_id]
            self._issued.pop(broker_id, None)

    @property
    def brokers(self) -> list[int]:
        return sorted(self._reports)

    def _unreported(self) -> int:
        """Brokers of the cluster that have not reported (yet): each keeps the default."""
        return max(0, self._expected() - len(self._reports))

    def default_share(self) -> float:
        return 1.0 / max(1, len(self._reports), self._expected())

    def shares_for(self, broker_id: int) -> dict[EntityKey, float]:
        """Broker `broker_id`'s target shares (by demand; `report` hands them out)."""
        entities: set[EntityKey] = set()
        for _at, usage in self._reports.values():
            entities.update(usage)
        # what the brokers yet to report keep is not the reporting brokers' to split
        room = 1.0 - self._unreported() * self.default_share()
        return {key: room * self._targets(key).get(broker_id, 0.0) for key in entities}

    def _targets(self, key: EntityKey) -> dict[int, float]:
        """Every reporting broker's target share of entity `key` (adding up to 1)."""
        brokers = sorted(self._reports)
        n = len(brokers)
        floor = FLOOR_FRACTION / n
        usage = {b: self._reports[b][1].get(key, (0.0, 0.0, 0.0)) for b in brokers}
        # the whole quota: any broker's limit over the share it enforced
        wholes = [whole for _rate, _limit, whole in usage.values() if whole > 0]
        if not wholes:  # no limit known yet: split evenly
            return {b: 1.0 / n for b in brokers}
        whole = max(wholes)
        # max-min fair sharing of one budget (Doorman's FairShare): each broker wants what it
        # uses plus headroom (at least the floor); one that held the client back wants
        # `GROWTH` times its limit (its true demand is unknown: a throttled rate is the limit).
        # Water-fill 1 over the wants, smallest first, each capped at an even split of what is
        # left; what no want takes goes to the held brokers by their wants (evenly to all
        # when none is held: room for any broker to grow).
        wants: dict[int, float] = {}
        held = []
        for b, (rate, limit, _whole) in usage.items():
            if limit > 0 and rate >= SATURATION * limit:
                held.append(b)
                wants[b] = min(1.0, max(floor, GROWTH * max(rate, limit) / whole))
            else:
                wants[b] = min(1.0, max(floor, rate * HEADROOM / whole))
        shares: dict[int, float] = {}
        left, unserved = 1.0, n
        for b, want in sorted(wants.items(), key=lambda item: (item[1], item[0])):
            shares[b] = min(want, left / unserved)
            left -= shares[b]
            unserved -= 1
        if held:
            weight = sum(wants[b] for b in held)
            for b in held:
                shares[b] += left * wants[b] / weight
        else:
            for b in shares:
                shares[b] += left / n
        return shares


def _usage(value: Usage | float) -> Usage:
    if isinstance(value, tuple):
        rate, limit = value
        return max(0.0, float(rate)), max(0.0, float(limit))
    return max(0.0, float(value)), 0.0
