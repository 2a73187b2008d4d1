"""Cluster-wide client quotas (sparklog's `quota.scope=cluster`; no Kafka anchor).

Kafka's client quotas are per broker: a client whose partitions are led by three brokers gets
its `producer_byte_rate` three times. sparklog's driver sees every broker, so with
`quota.scope=cluster` each broker reports, once per quota window, the rate each quota entity
measured there (`ClientQuotaManager.rates`), and the controller answers with this broker's
**share** of each entity's quota; the broker then enforces `quota × share`
(`ClientQuotaManager.set_shares`). The shares of one entity add up to 1 over the brokers that
report, so the cluster as a whole holds the entity to its quota once.

Shares follow demand, water-filling style. Each broker reports, per entity, the rate it
measured and the limit it enforces (its share of the quota): a broker using less than
`SATURATION` of its limit wants what it uses plus `HEADROOM` (at least `floor` =
`FLOOR_FRACTION / n` of the quota, n the reporting brokers, so the client's load can move
there); the rest of the quota is split evenly among the brokers at their limit (throttling).
So a client producing to three brokers evenly gets a third of its quota on each, one sending
everything to one broker gets almost all of it there, and an idle entity splits evenly. Rates
alone would not do: a throttled broker's rate is its limit, so a split by rates keeps whatever
split it started from. An entity a broker has not reported yet gets `1 / n` there
(`default_share`). A broker whose report is older than `STALE_WINDOWS` windows is dropped (it
stopped, or lost its channel) and the split is recomputed without it.

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
from collections.abc import Mapping

from sparklog.settings import ConfigType, OneOf, Setting, define

logger = logging.getLogger(__name__)

#: (quota type, the entity's metric tags): one quota entity of one quota type
EntityKey = tuple[str, tuple[tuple[str, str], ...]]

#: the share every reporting broker keeps of an entity it sees no traffic for, as a fraction
#: of an even split (so the client's load can move to it)
FLOOR_FRACTION = 0.1
#: reports older than this many quota windows are dropped
STALE_WINDOWS = 3
#: a broker using at least this fraction of its limit is at its limit (being throttled)
SATURATION = 0.9
#: what an unthrottled broker is given beyond its use, as a factor
HEADROOM = 1.25

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

    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms
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
                others = sum(self._issued_share(b, key) for b in self._reports if b != broker_id)
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

    def default_share(self) -> float:
        return 1.0 / max(1, len(self._reports))

    def shares_for(self, broker_id: int) -> dict[EntityKey, float]:
        """Broker `broker_id`'s target shares (by demand; `report` hands them out)."""
        entities: set[EntityKey] = set()
        for _at, usage in self._reports.values():
            entities.update(usage)
        return {key: self._targets(key).get(broker_id, 0.0) for key in entities}

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
        wants: dict[int, float] = {}
        saturated = []
        for b, (rate, limit, _whole) in usage.items():
            if limit > 0 and rate >= SATURATION * limit:
                saturated.append(b)
            else:
                wants[b] = min(1.0, max(floor, rate * HEADROOM / whole))
        left = 1.0 - sum(wants.values())
        if saturated:
            for b in saturated:
                wants[b] = max(floor, left / len(saturated))
        else:  # nobody is held back: the spare goes evenly
            for b in wants:
                wants[b] += left / n
        total = sum(wants.values())
        return {b: w / total for b, w in wants.items()}


def _usage(value: Usage | float) -> Usage:
    if isinstance(value, tuple):
        rate, limit = value
        return max(0.0, float(rate)), max(0.0, float(limit))
    return max(0.0, float(value)), 0.0
