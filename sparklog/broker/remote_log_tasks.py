"""The broker's remote-tier task: runs `RemoteLogManager` rounds from the event loop (Kafka's
`RemoteLogManager` thread pools, here one round at a time in a worker thread).

On the loop: what this broker hosts is read from the replica manager (leadership and epochs
as the last metadata left them) and the metadata's topics are handed to the manager
(`on_metadata`, from the broker's publish); the round itself (table I/O, log reads) runs in
`asyncio.to_thread`, so the loop never blocks on the table. Between rounds the task sleeps
until the earliest topic is due (`remote.log.manager.task.interval.ms`, or the topic's
`remote.table.freshness.ms`).

Metrics (Kafka's names, `kafka.server:type=BrokerTopicMetrics`): RemoteCopyBytesPerSec,
RemoteCopyRequestsPerSec, RemoteCopyErrorsPerSec, and per topic RemoteCopyLagBytes (local bytes
not in the table) and RemoteCopyLagSegments (closed segments not wholly in it), plus sparklog's
RemoteCopyLagOffsets (offsets below min(HW, LSO) not in the table) and RemoteCopyLagMs (time
since the table last held everything stable).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping

from sparklog.broker.config import BrokerConfig
from sparklog.broker.log_manager import wall_clock_ms
from sparklog.broker.metadata import BrokerMetadata
from sparklog.broker.remote_log_manager import (
    RemoteLogManager,
    TieredPartition,
    TopicState,
)
from sparklog.broker.remote_tables import RemoteTables
from sparklog.broker.replica_base import TopicMetadata
from sparklog.broker.replica_manager import ReplicaManager
from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Metrics
from sparklog.storage.remote.config import RemoteLogManagerConfig, remote_table_storage_options

logger = logging.getLogger(__name__)

_SERVER, _TOPIC_METRICS = "kafka.server", "BrokerTopicMetrics"
#: shortest sleep between rounds (a topic due "now" after a fenced copy)
MIN_SLEEP_S = 0.01


class RemoteLogTasks:
    """Drives the remote log manager for one broker (see module doc)."""

    def __init__(
        self,
        node_id: int,
        config: RemoteLogManagerConfig,
        tables: RemoteTables,
        replica_manager: ReplicaManager,
        *,
        clock_ms: Callable[[], int],
        metrics: Metrics | None = None,
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.tables = tables
        self.replica_manager = replica_manager
        self._clock_ms = clock_ms
        self.manager = RemoteLogManager(config, tables, now_ms=clock_ms())
        self.metrics = metrics
        self._topic_gauges: set[str] = set()
        self.rounds = 0

    def on_metadata(self, topics: Mapping[str, TopicMetadata]) -> None:
        """The broker published a new image (event loop)."""
        states = {
            name: TopicState(
                meta.topic_id,
                meta.config.remote_storage_enable and not meta.config.compact,
                meta.config.remote_log_delete_on_disable,
                _dropper_of(meta) == self.node_id,
            )
            for name, meta in topics.items()
        }
        self.manager.on_topics(states)

    def snapshot(self) -> list[TieredPartition]:
        """The hosted partitions with a remote tier, as the loop sees them now."""
        out = []
        for tp, hosted in self.replica_manager.partitions.items():
            if hosted.log.remote_log_enabled:
                partition = hosted.partition
                out.append(
                    TieredPartition(
                        tp.topic,
                        tp.partition,
                        hosted.topic_id,
                        hosted.log,
                        partition.is_leader,
                        partition.leader_epoch,
                    )
                )
        return out

    async def run(self) -> None:
        """Rounds until cancelled (a failing round is logged; the next one runs)."""
        interval_s = self.config.remote_log_manager_task_interval_ms / 1000
        while True:
            partitions = self.snapshot()
            try:
                stats = await asyncio.to_thread(
                    self.manager.run_round, partitions, self._clock_ms()
                )
            except Exception:  # noqa: BLE001 - one bad round must not end the tier
                logger.exception("remote log manager round failed")
            else:
                self._record(stats.copied_bytes, stats.commits, len(stats.failed_topics))
                self._track_topics(partitions)
            self.rounds += 1
            now = self._clock_ms()
            wait_s = (self.manager.next_due_ms(now) - now) / 1000
            await asyncio.sleep(min(interval_s, max(MIN_SLEEP_S, wait_s)))

    async def close(self) -> None:
        """No more rounds; waits (off the loop) for one in flight."""
        await asyncio.to_thread(self.manager.close)
        if self.metrics is not None:
            self.metrics.remove_matching(
                lambda n: n.type == _TOPIC_METRICS and n.name.startswith("RemoteCopy")
            )

    # -- metrics ----------------------------------------------------------------------------

    def _record(self, copied_bytes: int, commits: int, failures: int) -> None:
        if self.metrics is None:
            return
        self.metrics.meter(MetricName.of(_SERVER, _TOPIC_METRICS, "RemoteCopyBytesPerSec")).mark(
            copied_bytes
        )
        self.metrics.meter(MetricName.of(_SERVER, _TOPIC_METRICS, "RemoteCopyRequestsPerSec")).mark(
            commits
        )
        self.metrics.meter(MetricName.of(_SERVER, _TOPIC_METRICS, "RemoteCopyErrorsPerSec")).mark(
            failures
        )

    def _track_topics(self, partitions: list[TieredPartition]) -> None:
        led = {(p.topic, p.partition) for p in partitions if p.is_leader}
        self.manager.forget_partitions(led)
        if self.metrics is None:
            return
        topics = {t for t, _ in led}
        for topic in topics - self._topic_gauges:
            self._add_topic_gauges(topic)
        for topic in self._topic_gauges - topics:
            self._remove_topic_gauges(topic)
        self._topic_gauges = topics

    def _remove_topic_gauges(self, topic: str) -> None:
        assert self.metrics is not None
        tag = ("topic", topic)
        self.metrics.remove_matching(lambda n: n.type == _TOPIC_METRICS and tag in n.tags)

    def _add_topic_gauges(self, topic: str) -> None:
        assert self.metrics is not None
        progress = self.manager.progress

        def total(attr: str) -> Callable[[], float]:
            return lambda: float(
                sum(getattr(v, attr) for (t, _), v in list(progress.items()) if t == topic)
            )

        def lag_ms() -> float:
            now = self._clock_ms()
            behind = [
                now - v.caught_up_ms
                for (t, _), v in list(progress.items())
                if t == topic and v.caught_up_ms >= 0
            ]
            return float(max(behind, default=0))

        tags = {"topic": topic}
        for name, read in (
            ("RemoteCopyLagBytes", total("pending_bytes")),
            ("RemoteCopyLagSegments", total("pending_segments")),
            ("RemoteCopyLagOffsets", total("pending_offsets")),
            ("RemoteCopyLagMs", lag_ms),
        ):
            self.metrics.gauge(MetricName.of(_SERVER, _TOPIC_METRICS, name, tags), read)


def build_remote_tier(
    node_id: int,
    config: BrokerConfig,
    replica_manager: ReplicaManager,
    metadata: BrokerMetadata,
    metrics: Metrics | None,
) -> tuple[RemoteTables | None, RemoteLogTasks | None]:
    """The broker's topic tables and copy task; (None, None) without a remote tier
    (`remote.log.storage.system.enable` off or no `remote.table.root`)."""
    remote = config.remote
    if not remote.remote_log_storage_system_enable or not remote.remote_table_root:
        return None, None

    def topic_id(topic: str) -> uuid.UUID | None:
        found = metadata.image.topic(topic)
        return None if found is None else found.topic_id

    tables = RemoteTables(
        remote.remote_table_root, remote_table_storage_options(config.originals), topic_ids=topic_id
    )
    tasks = RemoteLogTasks(
        node_id, remote, tables, replica_manager, clock_ms=wall_clock_ms, metrics=metrics
    )
    return tables, tasks


def _dropper_of(meta: TopicMetadata) -> int | None:
    """The broker that drops the topic's table and maintains it: the leader of partition 0,
    or while it has none the lowest replica of partition 0."""
    registration = meta.partitions.get(0)
    if registration is None:
        return None
    if registration.leader >= 0:
        return registration.leader
    return min(registration.replicas, default=None)
