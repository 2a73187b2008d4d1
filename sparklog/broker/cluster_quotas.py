"""A broker's part in cluster-wide client quotas (`quota.scope=cluster`,
`metrics/cluster_quota.py`): once per quota window, report the rate each quota entity measured
here to the controller (sparklog's QuotaUsage) and enforce the shares it answers
(`ClientQuotaManager.set_shares`).

If the controller cannot be reached the broker keeps its last shares for a few windows, then
enforces the even split of the brokers the controller last counted (`1 / n` of each quota): a
cut-off broker must not hold its clients to a lopsided share nobody balances any more, nor let
them through n times over.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from kio.static.primitive import f64, i32

from sparklog.metrics.cluster_quota import STALE_WINDOWS
from sparklog.metrics.metric import MetricName
from sparklog.protocol.sparklog_apis import QuotaTag, QuotaUsageEntry, QuotaUsageRequest

logger = logging.getLogger(__name__)

_NETWORK_ERRORS = (ConnectionError, OSError, TimeoutError)
#: the quota managers of a broker's `BrokerQuotas` taking part, by their QuotaUsage name
MANAGER_NAMES = {
    "produce": "Produce",
    "fetch": "Fetch",
    "request": "Request",
    "topic_produce": "TopicProduce",
    "topic_fetch": "TopicFetch",
}


def quota_managers(quotas: Any) -> dict[str, Any]:
    """The managers of a broker's `BrokerQuotas` (those it has) by QuotaUsage name."""
    if quotas is None:
        return {}
    found = {name: getattr(quotas, attr, None) for attr, name in MANAGER_NAMES.items()}
    return {name: m for name, m in found.items() if m is not None and hasattr(m, "set_shares")}


def enforced_limit(manager: Any, tags: tuple[tuple[str, str], ...]) -> float:
    """The limit `manager` enforces for the entity `tags` now (its share of the quota): the
    bound of the entity's quota metric (`kafka.server:type=<group>,<tags>` `<metric>`, Kafka's
    name); 0 when unknown."""
    quota_type = getattr(manager, "quota_type", None)
    metrics = getattr(manager, "metrics", None)
    if quota_type is None or metrics is None:
        return 0.0
    metric = metrics.metric(
        MetricName.of("kafka.server", quota_type.group, quota_type.metric, tags)
    )
    quota = None if metric is None else metric.config.quota
    if quota is None or quota.bound == float("inf"):
        return 0.0
    return float(quota.bound)


def throttled(manager: Any, tags: tuple[tuple[str, str], ...], now_ms: int) -> bool:
    """Whether `manager` throttled the entity `tags` within its quota windows (its
    `throttle-time` average, Kafka's metric, is above zero)."""
    quota_type = getattr(manager, "quota_type", None)
    metrics = getattr(manager, "metrics", None)
    if quota_type is None or metrics is None:
        return False
    metric = metrics.metric(MetricName.of("kafka.server", quota_type.group, "throttle-time", tags))
    if metric is None:
        return False
    value = metric.value(now_ms)
    return value == value and value > 0  # NaN: nothing recorded


class ClusterQuotaReporter:
    """Reports usage and applies shares every `window_ms` (run as a broker task)."""

    def __init__(
        self,
        node_id: int,
        send: Callable[[QuotaUsageRequest], Any],
        managers: Callable[[], Mapping[str, Any]],
        window_ms: int,
        clock_ms: Callable[[], int],
    ) -> None:
        self.node_id = node_id
        self._send = send
        self._managers = managers
        self.window_ms = window_ms
        self._clock_ms = clock_ms
        self._failures = 0
        self.reports = 0
        #: (quota type, entity tags) -> when it was last seen throttled
        self._throttled_at: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
        self._memory_ms = STALE_WINDOWS * window_ms
        #: what a broker cut off from the controller enforces: the even split of the brokers
        #: the controller last counted (if every broker lost it, they still add up to one
        #: quota; the whole quota each would let a client through n times)
        self.fallback_share = 1.0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.window_ms / 1000)
            await self.report_once()

    def usage_request(self, now_ms: int) -> QuotaUsageRequest:
        horizon = now_ms - self._memory_ms
        self._throttled_at = {k: t for k, t in self._throttled_at.items() if t >= horizon}
        entries = []
        for name, manager in sorted(self._managers().items()):
            held_until = manager.held_until() if hasattr(manager, "held_until") else {}
            for tags, rate in sorted(manager.rates(now_ms).items()):
                limit = enforced_limit(manager, tags)
                key = (name, tags)
                # a client muted by a throttle (which may outlast the rate's windows) sends
                # nothing until it ends: it counts as held back until then
                muted = held_until.get(tags, 0) + self.window_ms >= now_ms
                if limit > 0 and (muted or throttled(manager, tags, now_ms)):
                    self._throttled_at[key] = now_ms
                held = now_ms - self._throttled_at.get(key, -(2**62)) <= self._memory_ms
                if limit > 0 and held:
                    # held back lately: it wants at least its limit, whatever the rate shows
                    # while its connections sit muted (a throttle may outlast the windows)
                    rate = max(rate, limit)
                entries.append(
                    QuotaUsageEntry(
                        quota_type=name,
                        tags=tuple(QuotaTag(name=k, value=v) for k, v in tags),
                        value=f64(rate),
                        limit=f64(limit),
                    )
                )
        return QuotaUsageRequest(node_id=i32(self.node_id), entries=tuple(entries))

    async def report_once(self) -> bool:
        """One report; False when the controller did not answer."""
        managers = self._managers()
        try:
            response = await self._send(self.usage_request(self._clock_ms()))
        except _NETWORK_ERRORS as e:
            self._failures += 1
            if self._failures == STALE_WINDOWS:
                logger.warning(
                    "cluster quotas: the controller has not answered for %d windows (%s); "
                    "enforcing an even split (%.3f) of every quota until it does",
                    self._failures,
                    e,
                    self.fallback_share,
                )
                for manager in managers.values():
                    manager.set_shares({}, self.fallback_share)
            return False
        if int(response.error_code):
            logger.error("cluster quotas: the controller refused the usage report (error %d)",
                         int(response.error_code))  # fmt: skip
            return False
        self._failures = 0
        self.reports += 1
        self.fallback_share = float(response.default_share) or 1.0
        shares: dict[str, dict[tuple[tuple[str, str], ...], float]] = {n: {} for n in managers}
        for entry in response.shares:
            by_type = shares.get(entry.quota_type)
            if by_type is not None:
                tags = tuple((t.name, t.value) for t in entry.tags)
                by_type[tags] = min(1.0, max(0.0, float(entry.value)))
        default = min(1.0, max(0.0, float(response.default_share)))
        for name, manager in managers.items():
            manager.set_shares(shares[name], default)
        return True
