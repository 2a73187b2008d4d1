"""The broker's data-path metrics (Kafka's `BrokerTopicStats`/`BrokerTopicMetrics` and the
gauges of `ReplicaManager`, `Log` and `ReplicaFetcherManager`), registered into
`BrokerServer.metrics` under Kafka's JMX names so the exposition gives the JMX exporter's names
(`kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=t` →
`kafka_server_brokertopicmetrics_bytesin_total{topic="t"}`).

Hot-path cost: a partition keeps its topic's `TopicStats` (looked up once, when the partition
is hosted), and recording an append or a read is a method call that marks a few counters (one
addition each). With `sparklog.metrics.enabled=false` every partition gets `NO_STATS`, whose
methods do nothing, so the cost of the meters can be measured against their absence.

What Kafka counts, and where this follows it (`ReplicaManager.appendToLocalLog`,
`readFromLog`, `KafkaApis.handleFetchRequest`, `UnifiedLog.analyzeAndValidateRecords`):
- `TotalProduceRequestsPerSec`/`TotalFetchRequestsPerSec` count partitions of requests, one per
  partition a produce or fetch names (a delayed fetch is counted as it arrives, not again on
  each re-read). Per topic only for partitions this broker hosts: a client naming made-up
  topics grows the all-topics count, not the registry.
- `FailedProduceRequestsPerSec`/`FailedFetchRequestsPerSec` count the unexpected failures only:
  Kafka leaves out the errors a client causes or retries (not leader, unknown partition, too
  large, corrupt, storage, out of range, fenced epoch).
- `BytesInPerSec`/`MessagesInPerSec`: the batch bytes and records of a leader append (not a
  follower's, not a duplicate); `BytesRejectedPerSec`: the bytes of a produce refused as too
  large; `InvalidMessageCrcRecordsPerSec` (all topics only): batches failing their CRC.
- `BytesOutPerSec`: the record bytes of fetch responses to consumers, counted as the response
  is built; follower fetches count as `ReplicationBytesOutPerSec`, and what a follower appends
  as `ReplicationBytesInPerSec` (both all topics only, as in Kafka).
- `ProduceMessageConversionsPerSec`/`FetchMessageConversionsPerSec` stay 0: sparklog keeps and
  serves v2 batches only (no down-conversion), but dashboards expect the series.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol

from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Histogram, Meter, Metrics

SERVER = "kafka.server"
BROKER_TOPIC_METRICS = "BrokerTopicMetrics"

#: attribute → Kafka's meter name, for every topic and for the total
TOPIC_METERS = {
    "bytes_in": "BytesInPerSec",
    "bytes_out": "BytesOutPerSec",
    "messages_in": "MessagesInPerSec",
    "bytes_rejected": "BytesRejectedPerSec",
    "total_produce_requests": "TotalProduceRequestsPerSec",
    "total_fetch_requests": "TotalFetchRequestsPerSec",
    "failed_produce_requests": "FailedProduceRequestsPerSec",
    "failed_fetch_requests": "FailedFetchRequestsPerSec",
    "produce_message_conversions": "ProduceMessageConversionsPerSec",
    "fetch_message_conversions": "FetchMessageConversionsPerSec",
}

#: meters Kafka keeps for all topics only
ALL_TOPICS_METERS = {
    "replication_bytes_in": "ReplicationBytesInPerSec",
    "replication_bytes_out": "ReplicationBytesOutPerSec",
    "invalid_message_crc_records": "InvalidMessageCrcRecordsPerSec",
}


def broker_topic_metric(name: str, topic: str | None = None) -> MetricName:
    """`kafka.server:type=BrokerTopicMetrics,name=<name>[,topic=<topic>]`."""
    tags = () if topic is None else (("topic", topic),)
    return MetricName.of(SERVER, BROKER_TOPIC_METRICS, name, tags)


class _Meters:
    """One set of `TOPIC_METERS` (a topic's, or the total)."""

    __slots__ = tuple(TOPIC_METERS)

    def __init__(self, metrics: Metrics, topic: str | None) -> None:
        def meter(attr: str) -> Meter:
            return metrics.meter(broker_topic_metric(TOPIC_METERS[attr], topic))

        self.bytes_in = meter("bytes_in")
        self.bytes_out = meter("bytes_out")
        self.messages_in = meter("messages_in")
        self.bytes_rejected = meter("bytes_rejected")
        self.total_produce_requests = meter("total_produce_requests")
        self.total_fetch_requests = meter("total_fetch_requests")
        self.failed_produce_requests = meter("failed_produce_requests")
        self.failed_fetch_requests = meter("failed_fetch_requests")
        self.produce_message_conversions = meter("produce_message_conversions")
        self.fetch_message_conversions = meter("fetch_message_conversions")


class TopicStats:
    """What a hosted partition records into: its topic's meters and the totals."""

    __slots__ = ("topic", "total")

    def __init__(self, topic: _Meters, total: _Meters) -> None:
        self.topic = topic
        self.total = total

    def on_appended(self, size_bytes: int, records_count: int) -> None:
        """A produce to this topic appended `size_bytes` of batches holding `records_count`."""
        topic, total = self.topic, self.total
        topic.total_produce_requests.count += 1
        total.total_produce_requests.count += 1
        topic.bytes_in.count += size_bytes
        total.bytes_in.count += size_bytes
        topic.messages_in.count += records_count
        total.messages_in.count += records_count

    def on_produce_failed(self, unexpected: bool, rejected_bytes: int = 0) -> None:
        """A produce to this topic failed; `unexpected`: not an error Kafka leaves uncounted."""
        self.topic.total_produce_requests.count += 1
        self.total.total_produce_requests.count += 1
        if unexpected:
            self.topic.failed_produce_requests.count += 1
            self.total.failed_produce_requests.count += 1
        if rejected_bytes:
            self.topic.bytes_rejected.count += rejected_bytes
            self.total.bytes_rejected.count += rejected_bytes

    def on_fetch(self) -> None:
        """A fetch named a partition of this topic."""
        self.topic.total_fetch_requests.count += 1
        self.total.total_fetch_requests.count += 1

    def on_fetch_failed(self) -> None:
        """Reading it failed unexpectedly."""
        self.topic.failed_fetch_requests.count += 1
        self.total.failed_fetch_requests.count += 1


class _NoStats(TopicStats):
    """`sparklog.metrics.enabled=false`: records nothing."""

    __slots__ = ()

    def __init__(self) -> None:
        pass

    def on_appended(self, size_bytes: int, records_count: int) -> None:
        pass

    def on_produce_failed(self, unexpected: bool, rejected_bytes: int = 0) -> None:
        pass

    def on_fetch(self) -> None:
        pass

    def on_fetch_failed(self) -> None:
        pass


NO_STATS: TopicStats = _NoStats()


class BrokerTopicStats:
    """Kafka's `BrokerTopicStats`: the meters of every topic this broker hosts, and the totals.
    `metrics=None` (`sparklog.metrics.enabled=false`) records nothing."""

    def __init__(self, metrics: Metrics | None) -> None:
        self.metrics = metrics
        self.enabled = metrics is not None
        self._topics: dict[str, TopicStats] = {}
        self._hosted: dict[str, int] = {}  # partitions hosted per topic
        target = metrics if metrics is not None else Metrics()  # unregistered: never served
        self.total = _Meters(target, None)
        self.replication_bytes_in: Meter = target.meter(
            broker_topic_metric(ALL_TOPICS_METERS["replication_bytes_in"])
        )
        self.replication_bytes_out: Meter = target.meter(
            broker_topic_metric(ALL_TOPICS_METERS["replication_bytes_out"])
        )
        self.invalid_message_crc_records: Meter = target.meter(
            broker_topic_metric(ALL_TOPICS_METERS["invalid_message_crc_records"])
        )
        self._unhosted = (
            TopicStats(_Meters(Metrics(), None), self.total) if self.enabled else NO_STATS
        )

    def acquire(self, topic: str) -> TopicStats:
        """The stats of `topic` for one more partition hosted here (made on first use;
        `NO_STATS` when disabled)."""
        if self.metrics is None:
            return NO_STATS
        self._hosted[topic] = self._hosted.get(topic, 0) + 1
        found = self._topics.get(topic)
        if found is None:
            found = self._topics[topic] = TopicStats(_Meters(self.metrics, topic), self.total)
        return found

    def release(self, topic: str) -> None:
        """One partition of `topic` left this broker; with the last one go the topic's meters
        (Kafka's `maybeRemoveTopicMetrics`: a deleted topic's series stop being served)."""
        left = self._hosted.get(topic, 0) - 1
        if left > 0:
            self._hosted[topic] = left
            return
        self._hosted.pop(topic, None)
        if self._topics.pop(topic, None) is not None and self.metrics is not None:
            for name in TOPIC_METERS.values():
                self.metrics.remove(broker_topic_metric(name, topic))

    def unhosted(self) -> TopicStats:
        """What a request naming a partition this broker does not host records into: the
        totals only (its `topic` meters are a private set, never served)."""
        return self._unhosted

    def bytes_out(self, topic: str, size_bytes: int, from_follower: bool) -> None:
        """Kafka's `updateBytesOut`: a fetch response carries `size_bytes` of `topic`'s records."""
        if not self.enabled or not size_bytes:
            return
        if from_follower:
            self.replication_bytes_out.count += size_bytes
            return
        self.total.bytes_out.count += size_bytes
        stats = self._topics.get(topic)  # None: the topic left while the fetch waited
        if stats is not None:
            stats.topic.bytes_out.count += size_bytes


# -- ReplicaManager, Log, ReplicaFetcherManager ----------------------------------------------

REPLICA_MANAGER = "ReplicaManager"


def replica_manager_metric(name: str) -> MetricName:
    return MetricName.of(SERVER, REPLICA_MANAGER, name)


#: Kafka's `UnifiedLog` gauges, per partition
LOG_GAUGES = {
    "Size": "size",
    "NumLogSegments": "num_log_segments",
    "LogStartOffset": "log_start_offset",
    "LogEndOffset": "log_end_offset",
}


#: Kafka's `Partition` gauges, per partition (values on the leader; 0 on a follower)
PARTITION_GAUGES = {
    "UnderReplicated": "under_replicated",
    "UnderMinIsr": "under_min_isr",
    "AtMinIsr": "at_min_isr",
    "InSyncReplicasCount": "in_sync_replicas_count",
    "ReplicasCount": "replicas_count",
    "LastStableOffsetLag": "last_stable_offset_lag",
}


def partition_metric(name: str, topic: str, partition: int) -> MetricName:
    """`kafka.cluster:type=Partition,name=<name>,topic=<topic>,partition=<partition>`."""
    tags = (("topic", topic), ("partition", str(partition)))
    return MetricName.of("kafka.cluster", "Partition", name, tags)


def log_metric(name: str, topic: str, partition: int) -> MetricName:
    """`kafka.log:type=Log,name=<name>,topic=<topic>,partition=<partition>`."""
    return MetricName.of(
        "kafka.log", "Log", name, (("topic", topic), ("partition", str(partition)))
    )


class PartitionView(Protocol):
    """What the ReplicaManager gauges read of a hosted partition (`partition.Partition`)."""

    @property
    def is_leader(self) -> bool: ...

    @property
    def is_under_min_isr(self) -> bool: ...

    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    min_insync_replicas: int


class LogView(Protocol):
    """What the Log gauges read (`storage.log.Log`)."""

    @property
    def size_in_bytes(self) -> int: ...

    @property
    def segments(self) -> Sequence[object]: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...


class ReplicaManagerMetrics:
    """Kafka's `ReplicaManager` metrics: the ISR change meters (marked when the controller
    committed a leader's AlterPartition, as Kafka's `IsrChangeListener` does; an ISR the
    controller changes itself, e.g. when it fences a broker, is not a leader's shrink) and the
    partition gauges, computed from the hosted partitions when read (scrape time, not the data
    path). Every hosted partition's `kafka.log:type=Log` and `kafka.cluster:type=Partition`
    gauges come and go with it."""

    def __init__(
        self,
        metrics: Metrics,
        partitions: Callable[[], Iterable[PartitionView]],
        offline: Callable[[], bool],
    ) -> None:
        self.metrics = metrics
        self.isr_shrinks = metrics.meter(replica_manager_metric("IsrShrinksPerSec"))
        self.isr_expands = metrics.meter(replica_manager_metric("IsrExpandsPerSec"))
        self.failed_isr_updates = metrics.meter(replica_manager_metric("FailedIsrUpdatesPerSec"))

        def count(predicate: Callable[[PartitionView], bool]) -> Callable[[], float]:
            return lambda: float(sum(1 for p in partitions() if predicate(p)))

        gauges: dict[str, Callable[[], float]] = {
            "LeaderCount": count(lambda p: p.is_leader),
            "PartitionCount": count(lambda p: True),
            # one log dir per broker: when it is offline, every replica on it is
            "OfflineReplicaCount": lambda: float(sum(1 for _ in partitions()) if offline() else 0),
            "UnderReplicatedPartitions": count(
                lambda p: p.is_leader and len(p.isr) < len(p.replicas)
            ),
            "UnderMinIsrPartitionCount": count(lambda p: p.is_leader and p.is_under_min_isr),
            "AtMinIsrPartitionCount": count(
                lambda p: p.is_leader and len(p.isr) == min(p.min_insync_replicas, len(p.replicas))
            ),
        }
        for name, read in gauges.items():
            metrics.gauge(replica_manager_metric(name), read)

    def on_isr_committed(self, before: Sequence[int], after: Sequence[int]) -> None:
        if len(after) < len(before):
            self.isr_shrinks.count += 1
        elif len(after) > len(before):
            self.isr_expands.count += 1

    def on_isr_update_failed(self) -> None:
        self.failed_isr_updates.count += 1

    def add_partition(
        self, topic: str, index: int, partition: PartitionView, log_: LogView
    ) -> None:
        """The gauges of a newly hosted partition: Kafka's `UnifiedLog` ones (`kafka.log:
        type=Log`) and its `Partition` ones (`kafka.cluster:type=Partition`, 0 on a follower).
        Ten per partition, so they share one tags tuple and one reader object (a broker with
        10,000 partitions holds 100,000 of them)."""
        tags = (("topic", topic), ("partition", str(index)))
        reader = _PartitionGauges(partition, log_)
        for name in LOG_GAUGES:
            read = getattr(reader, LOG_GAUGES[name])
            self.metrics.gauge(MetricName("kafka.log", "Log", name, tags), read)
        for name in PARTITION_GAUGES:
            read = getattr(reader, PARTITION_GAUGES[name])
            self.metrics.gauge(MetricName("kafka.cluster", "Partition", name, tags), read)

    def remove_partition(self, topic: str, index: int) -> None:
        """The partition left this broker (deleted, or moved): its gauges go with it."""
        for name in LOG_GAUGES:
            self.metrics.remove(log_metric(name, topic, index))
        for name in PARTITION_GAUGES:
            self.metrics.remove(partition_metric(name, topic, index))


class _PartitionGauges:
    """The readers of one hosted partition's gauges (read at scrape time)."""

    __slots__ = ("partition", "log")

    def __init__(self, partition: PartitionView, log_: LogView) -> None:
        self.partition = partition
        self.log = log_

    def size(self) -> float:
        return float(self.log.size_in_bytes)

    def num_log_segments(self) -> float:
        return float(len(self.log.segments))

    def log_start_offset(self) -> float:
        return float(self.log.log_start_offset)

    def log_end_offset(self) -> float:
        return float(self.log.log_end_offset)

    # Kafka's Partition gauges read 0 unless this broker leads the partition

    def under_replicated(self) -> float:
        p = self.partition
        return float(p.is_leader and len(p.isr) < len(p.replicas))

    def under_min_isr(self) -> float:
        return float(self.partition.is_leader and self.partition.is_under_min_isr)

    def at_min_isr(self) -> float:
        p = self.partition  # Kafka's effective min ISR: min.insync.replicas capped at replicas
        return float(p.is_leader and len(p.isr) == min(p.min_insync_replicas, len(p.replicas)))

    def in_sync_replicas_count(self) -> float:
        return float(len(self.partition.isr)) if self.partition.is_leader else 0.0

    def replicas_count(self) -> float:
        return float(len(self.partition.replicas)) if self.partition.is_leader else 0.0

    def last_stable_offset_lag(self) -> float:
        if not self.partition.is_leader:
            return 0.0
        return float(self.log.high_watermark - self.log.last_stable_offset)


#: Kafka's `kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs` (a Yammer timer: its
#: count is the flush rate, its quantiles the fsync time in ms)
LOG_FLUSH = MetricName.of("kafka.log", "LogFlushStats", "LogFlushRateAndTimeMs")


class LogFlushTimer:
    """What every log's fsyncs run inside (`Log.flush_timer`): times them into `LOG_FLUSH`.
    Flushes happen on whichever thread flushes (the loop on a roll, the log manager's scheduler
    for flush.ms, shutdown); the time is handed to the broker's loop by `post` (its
    `call_soon_threadsafe`) so the histogram is only ever touched where it is read. A flush
    after the loop closed (shutdown) goes unrecorded."""

    def __init__(self, metrics: Metrics, post: Callable[[Callable[[float], None], float], None]):
        self.histogram: Histogram = metrics.histogram(LOG_FLUSH)
        self._post = post

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        started_ns = time.perf_counter_ns()
        try:
            yield
        finally:
            elapsed_ms = (time.perf_counter_ns() - started_ns) / 1e6
            with contextlib.suppress(RuntimeError):  # the loop is closed or gone
                self._post(self.histogram.update, elapsed_ms)


def add_purgatory_gauges(metrics: Metrics, operation: str, waiting: Callable[[], int]) -> None:
    """Kafka's `kafka.server:type=DelayedOperationPurgatory,name=PurgatorySize|
    NumDelayedOperations,delayedOperation=<operation>`: the requests of that kind waiting
    (acks=all produces for the ISR, fetches for min_bytes). Kafka's PurgatorySize counts an
    operation once per key it watches; sparklog's waits are not kept per key, so both read the
    number of waiting operations."""
    for name in ("PurgatorySize", "NumDelayedOperations"):
        metric = MetricName.of(
            SERVER, "DelayedOperationPurgatory", name, {"delayedOperation": operation}
        )
        metrics.gauge(metric, lambda: float(waiting()))
