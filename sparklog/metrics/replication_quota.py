"""Replication throttles for reassignment (KIP-73, Kafka's `ReplicationQuotaManager`).

Moving a partition's replicas copies its whole log; unthrottled, that copy takes the leader's
disk and network from its clients. Kafka bounds it with two quotas per broker, set as dynamic
broker configs (per broker or cluster-wide), and two topic configs that say which replicas they
apply to:

- `leader.replication.throttled.rate` (bytes/s): what a leader serves, summed over the throttled
  partitions it leads, to followers out of the ISR; `leader.replication.throttled.replicas`
  (`partition:broker,...` or `*`) lists the throttled partitions on broker `broker`;
- `follower.replication.throttled.rate` and `follower.replication.throttled.replicas` the same
  for what a follower fetches.

Semantics (Kafka's): a partition is throttled on this broker when the topic config lists it
with this broker's id (or is `*`); a throttled partition whose follower is out of the ISR gets
no data (the leader answers it empty / the follower leaves it out of its fetch) while the
broker's measured rate (`Rate` over `replication.quota.window.num` ×
`replication.quota.window.size.seconds`) is over the quota; what throttled partitions move is
recorded after the fact. In-sync followers are never held back, so a throttle never stalls
produce acks.

Sans-IO (the caller passes `now_ms`). Metrics, Kafka's names:
`kafka.server:type=LeaderReplication|FollowerReplication,name=byte-rate`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Metrics
from sparklog.metrics.stats import MetricConfig, Quota, Rate
from sparklog.settings import LONG_MAX, ConfigType, Range, Setting, UpdateMode, define

logger = logging.getLogger(__name__)

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
#: every partition of the topic (`*`)
ALL_PARTITIONS: frozenset[int] = frozenset({-1})

REPLICATION_QUOTA_SETTINGS = define(
    Setting(
        LEADER_RATE,
        ConfigType.LONG,
        LONG_MAX,
        Range(0),
        doc="bytes/s a leader serves to out-of-sync followers of its throttled replicas "
        "(KIP-73; Kafka's, dynamic)",
        group="replication-quota",
        dynamic=UpdateMode.CLUSTER_WIDE,
    ),
    Setting(
        FOLLOWER_RATE,
        ConfigType.LONG,
        LONG_MAX,
        Range(0),
        doc="bytes/s a follower fetches for its throttled replicas while out of sync "
        "(KIP-73; Kafka's, dynamic)",
        group="replication-quota",
        dynamic=UpdateMode.CLUSTER_WIDE,
    ),
    Setting(
        "replication.quota.window.num",
        ConfigType.INT,
        11,
        Range(1),
        doc="The number of samples to retain in memory for replication quotas (Kafka's)",
        group="replication-quota",
    ),
    Setting(
        "replication.quota.window.size.seconds",
        ConfigType.INT,
        1,
        Range(1),
        doc="The time span of each sample for replication quotas (Kafka's)",
        group="replication-quota",
    ),
)


def quota_window(props: Mapping[str, object] | None) -> MetricConfig:
    """The windows of the replication quotas (`replication.quota.window.*`)."""
    values = REPLICATION_QUOTA_SETTINGS.parse(props or {}, unknown="ignore")
    samples = values.get("replication_quota_window_num", 11)
    seconds = values.get("replication_quota_window_size_seconds", 1)
    return MetricConfig(samples=int(samples), time_window_ms=int(seconds) * 1000)


def throttled_rate(layers: Iterable[Mapping[str, str]], name: str) -> int:
    """The rate `name` of the dynamic broker config layers (lowest precedence first)."""
    rate = LONG_MAX
    for layer in layers:
        raw = layer.get(name)
        if raw is not None and raw != "":
            try:
                rate = int(raw)
            except ValueError:
                logger.warning("ignoring %s=%r: not a number of bytes per second", name, raw)
    return rate


def parse_throttled_replicas(value: str, broker_id: int) -> frozenset[int]:
    """The partitions of `value` (`p:b,...` or `*`) throttled on broker `broker_id`
    (Kafka's `TopicConfigHandler.parseThrottledPartitions`)."""
    value = value.strip()
    if not value:
        return frozenset()
    if value == "*":
        return ALL_PARTITIONS
    partitions = set()
    for entry in value.split(","):
        partition, _sep, broker = entry.strip().partition(":")
        if partition.isdigit() and broker.isdigit() and int(broker) == broker_id:
            partitions.add(int(partition))
    return frozenset(partitions)


class ReplicationQuotaManager:
    """One broker's leader or follower replication quota (Kafka's `ReplicationQuotaManager`)."""

    def __init__(self, metrics: Metrics, config: MetricConfig, kind: str) -> None:
        assert kind in ("LeaderReplication", "FollowerReplication")
        self.kind = kind
        self._config = config
        self._metrics = metrics
        self._rate = Rate()
        self.quota = float(LONG_MAX)
        self._throttled: dict[str, frozenset[int]] = {}
        self._metric = metrics.add_metric(
            MetricName.of("kafka.server", kind, "byte-rate"), self._rate, config
        )

    def update_quota(self, bytes_per_s: float) -> None:
        if bytes_per_s != self.quota:
            logger.info("%s quota: %s bytes/s", self.kind, bytes_per_s)
        self.quota = float(bytes_per_s)

    def mark_throttled(self, topic: str, partitions: frozenset[int]) -> None:
        if partitions:
            self._throttled[topic] = partitions
        else:
            self._throttled.pop(topic, None)

    def set_throttled(self, throttled: Mapping[str, frozenset[int]]) -> None:
        """Every topic's throttled partitions at once (from a metadata image)."""
        self._throttled = {t: p for t, p in throttled.items() if p}

    def is_throttled(self, topic: str, partition: int) -> bool:
        partitions = self._throttled.get(topic)
        return partitions is not None and (partitions is ALL_PARTITIONS or partition in partitions)

    @property
    def any_throttled(self) -> bool:
        return bool(self._throttled) and self.quota < LONG_MAX

    def is_quota_exceeded(self, now_ms: int) -> bool:
        """Kafka's `isQuotaExceeded`: the measured rate is over the quota."""
        if self.quota >= LONG_MAX:
            return False
        return not Quota.upper_bound(self.quota).acceptable(
            self._rate.measure(self._config, now_ms)
        )

    def record(self, value: float, now_ms: int) -> None:
        """What throttled partitions moved (recorded after the fact, never refused)."""
        self._rate.record(self._config, value, now_ms)

    def should_throttle(self, topic: str, partition: int, in_sync: bool, now_ms: int) -> bool:
        """Kafka's `shouldLeaderThrottle` / `shouldFollowerThrottle`: hold an out-of-sync
        replica of a throttled partition back while the quota is exceeded."""
        return (
            not in_sync
            and self.any_throttled
            and self.is_throttled(topic, partition)
            and self.is_quota_exceeded(now_ms)
        )
