"""Consumer lag as metrics, from the coordinator (what Burrow and kafka-lag-exporter give Kafka
users), under kafka-lag-exporter's Prometheus names: `kafka_consumergroup_group_lag`,
`..._group_offset` (labels group, topic, partition), `..._group_max_lag`, `..._group_sum_lag`
(label group), `..._group_topic_sum_lag` (group, topic) and `kafka_partition_latest_offset`
(topic, partition).

Theory of operation. The coordinator holds every group's committed offsets; the log end
offsets live on the partition leaders. Off the request path, every
`sparklog.metrics.lag.poll.interval.ms` a task on the coordinator's loop takes the partitions
that have a committed offset (at most `sparklog.metrics.lag.max.partitions`, the rest skipped
with one WARN per poll), asks each leader for their latest offsets (ListOffsets, timestamp -1,
read_uncommitted: the high watermark, which is what a consumer can reach), then replaces the
lag gauges at once: lag = max(0, latest - committed), as kafka-lag-exporter computes it. A
partition whose leader is unknown or does not answer keeps no lag gauge for that poll (a
missing series, not a wrong number). Values are as of the last poll.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Metrics
from sparklog.protocol import codec, kio_build
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.async_client import BrokerConnections
from sparklog.protocol.outbound import PLAINTEXT, ClientSecurity
from sparklog.settings import ConfigType, Range, Scope, Setting, define
from sparklog.structs import LATEST_TIMESTAMP, TopicPartition

logger = logging.getLogger(__name__)

LAG_SETTINGS = define(
    Setting(
        "sparklog.metrics.lag.poll.interval.ms",
        ConfigType.LONG,
        30_000,
        Range(0),
        doc="sparklog's own: how often the group coordinator asks the partition leaders for "
        "their latest offsets to publish consumer lag (kafka-lag-exporter's poll interval); "
        "0 = no lag metrics",
        scope=Scope.COORDINATOR,
        group="metrics",
    ),
    Setting(
        "sparklog.metrics.lag.max.partitions",
        ConfigType.INT,
        10_000,
        Range(1),
        doc="sparklog's own: the most committed partitions one lag poll covers (the rest are "
        "skipped, with a warning)",
        scope=Scope.COORDINATOR,
        group="metrics",
    ),
)


@dataclass(frozen=True, slots=True)
class LagConfig:
    sparklog_metrics_lag_poll_interval_ms: int = LAG_SETTINGS.default(
        "sparklog.metrics.lag.poll.interval.ms"
    )
    sparklog_metrics_lag_max_partitions: int = LAG_SETTINGS.default(
        "sparklog.metrics.lag.max.partitions"
    )

    @classmethod
    def from_properties(cls, props: Mapping[str, object] | None) -> LagConfig:
        return cls(**LAG_SETTINGS.parse(props or {}, unknown="ignore"))


#: the exposition turns domain `kafka`, type `consumergroup`, name `group_lag` into
#: `kafka_consumergroup_group_lag`, kafka-lag-exporter's name
DOMAIN = "kafka"
GROUP_TYPE = "consumergroup"
PARTITION_TYPE = "partition"
_LIST_OFFSETS_VERSIONS = (1, 7)
#: a leader that does not answer within this is skipped for the poll
REQUEST_TIMEOUT_S = 10.0

Committed = dict[tuple[str, TopicPartition], int]
LeaderLookup = Callable[[str, int], tuple[int, str, int] | None]


class ConsumerLagPoller:
    """Polls the leaders' latest offsets and publishes lag gauges into `metrics`."""

    def __init__(
        self,
        metrics: Metrics,
        committed: Callable[[], Committed],
        leader_of: LeaderLookup,
        *,
        interval_ms: int,
        max_partitions: int,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.metrics = metrics
        self.committed = committed
        self.leader_of = leader_of
        self.interval_ms = interval_ms
        self.max_partitions = max_partitions
        self.security = security
        self._connections = BrokerConnections(security, client_id="sparklog-lag")
        #: completed polls (tests wait on it instead of sleeping)
        self.polls = 0
        #: the published values; each gauge reads its own entry, so a poll that finds the
        #: same series again only updates numbers (no metric objects made or dropped)
        self._values: dict[MetricName, float] = {}
        self._names: dict[tuple[Any, ...], MetricName] = {}

    async def run(self) -> None:
        while True:
            try:
                await self.poll()
            except Exception:  # noqa: BLE001 - a failed poll leaves the last values; next one
                logger.exception("consumer lag poll failed; retrying")
            await asyncio.sleep(self.interval_ms / 1000)

    async def close(self) -> None:
        await self._connections.close()

    async def poll(self) -> None:
        """One poll: latest offsets of every committed partition, then the gauges."""
        committed = self.committed()
        partitions = sorted({tp for _, tp in committed})
        if len(partitions) > self.max_partitions:
            logger.warning(
                "consumer lag covers %d of %d committed partitions "
                "(sparklog.metrics.lag.max.partitions)",
                self.max_partitions,
                len(partitions),
            )
            partitions = partitions[: self.max_partitions]
        latest = await self._latest_offsets(partitions)
        self.publish(committed, latest)
        self.polls += 1

    def publish(self, committed: Committed, latest: dict[TopicPartition, int]) -> None:
        """Replace every lag gauge by the values of this poll."""
        names, self._names = self._names, {}
        fresh: dict[MetricName, float] = {}

        def put(key: tuple[Any, ...], tags: tuple[tuple[str, str], ...], value: float) -> None:
            # one MetricName per series for as long as it is published (making ~20,000 of
            # them per poll was most of a poll's cost)
            name = names.get(key)
            if name is None:
                name = MetricName(
                    DOMAIN,
                    PARTITION_TYPE if key[0] == "latest_offset" else GROUP_TYPE,
                    key[0],
                    tags,
                )
            self._names[key] = name
            fresh[name] = value

        max_lag: dict[str, int] = {}
        sum_lag: dict[str, int] = {}
        topic_sum: dict[tuple[str, str], int] = {}
        for (group, tp), offset in committed.items():
            end = latest.get(tp)
            if end is None:
                continue
            lag = max(0, end - offset)
            topic, partition = tp
            tags = (("group", group), ("topic", topic), ("partition", str(partition)))
            put(("group_lag", group, topic, partition), tags, lag)
            put(("group_offset", group, topic, partition), tags, offset)
            max_lag[group] = max(max_lag.get(group, 0), lag)
            sum_lag[group] = sum_lag.get(group, 0) + lag
            topic_sum[(group, topic)] = topic_sum.get((group, topic), 0) + lag
        for group, value in max_lag.items():
            put(("group_max_lag", group), (("group", group),), value)
            put(("group_sum_lag", group), (("group", group),), sum_lag[group])
        for (group, topic), value in topic_sum.items():
            put(("group_topic_sum_lag", group, topic), (("group", group), ("topic", topic)), value)
        for (topic, partition), end in latest.items():
            put(
                ("latest_offset", topic, partition),
                (("topic", topic), ("partition", str(partition))),
                end,
            )
        values = self._values
        for name in [n for n in values if n not in fresh]:
            del values[name]
            self.metrics.remove(name)
        for name, fresh_value in fresh.items():
            if name not in values:
                self.metrics.gauge(name, _reader(values, name))
            values[name] = float(fresh_value)

    async def _latest_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        by_leader: dict[int, tuple[str, int, list[TopicPartition]]] = {}
        for tp in partitions:
            leader = self.leader_of(tp[0], tp[1])
            if leader is not None:
                broker_id, host, port = leader
                by_leader.setdefault(broker_id, (host, port, []))[2].append(tp)
        answers = await asyncio.gather(
            *(self._ask(b, host, port, tps) for b, (host, port, tps) in by_leader.items())
        )
        latest: dict[TopicPartition, int] = {}
        for answer in answers:
            latest.update(answer)
        return latest

    async def _ask(
        self, broker_id: int, host: str, port: int, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, int]:
        topics: dict[str, list[dict[str, Any]]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "current_leader_epoch": -1,
                    "timestamp": LATEST_TIMESTAMP,
                }
            )
        data = {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }
        try:
            conn = await self._connections.get(broker_id, host, port)
            version = conn.version_for(ApiKey.LIST_OFFSETS, _LIST_OFFSETS_VERSIONS)
            body = kio_build.build(codec.request_schema(ApiKey.LIST_OFFSETS, version), data)
            response = await conn.request(body, timeout_s=REQUEST_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - this leader's partitions miss one poll
            logger.info("lag poll: ListOffsets to broker %d failed (%r)", broker_id, e)
            await self._connections.drop(broker_id)
            return {}
        found: dict[TopicPartition, int] = {}
        for topic in response.topics:
            for p in topic.partitions:
                if not p.error_code and int(p.offset) >= 0:
                    found[TopicPartition(str(topic.name), int(p.partition_index))] = int(p.offset)
        return found


def _reader(values: dict[MetricName, float], name: MetricName) -> Callable[[], float]:
    return lambda: values[name]
