"""The state every path of the replica manager shares (see `replica_manager`): the hosted
partitions, the topics of the image, the purgatory, and the two things every path does to a
partition — apply the events its sans-IO `Partition` returns, and wake the requests waiting on it.

`ReplicaManager` is this base plus its three paths, each a module of its own as Kafka splits
them: `replica_append` (produce, acks), `replica_read` (fetch, long-poll) and `replica_follower`
(what the replica fetchers write). Thread-safety: use from the broker's event loop only.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from sparklog.broker.broker_metrics import (
    NO_STATS,
    BrokerTopicStats,
    ReplicaManagerMetrics,
    TopicStats,
    add_purgatory_gauges,
)
from sparklog.broker.delayed import DelayedOperations, FollowerFetches
from sparklog.broker.log_manager import LogManager
from sparklog.broker.partition import (
    BecameFollower,
    BecameLeader,
    Event,
    HighWatermarkAdvanced,
    IsrChangeProposed,
    Partition,
    PartitionRegistration,
)
from sparklog.broker.remote_fetch import RemoteLogReader
from sparklog.errors import (
    CorruptMessageError,
    FencedLeaderEpochError,
    KafkaError,
    KafkaStorageError,
    MessageTooLargeError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    ReplicaNotAvailableError,
    UnknownLeaderEpochError,
    UnknownServerError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from sparklog.metrics.registry import Metrics
from sparklog.metrics.replication_quota import ReplicationQuotaManager
from sparklog.records.errors import CorruptRecordError
from sparklog.storage.config import LogConfig
from sparklog.storage.log import Log
from sparklog.structs import TopicPartition

logger = logging.getLogger(__name__)


class FollowerFetchers(Protocol):
    """Who fetches the partitions this broker follows (`ReplicaFetcherManager`)."""

    def add_partition(
        self, tp: TopicPartition, topic_id: uuid.UUID, leader_id: int, leader_epoch: int
    ) -> None: ...

    def remove_partition(self, tp: TopicPartition) -> None: ...


class IsrProposals(Protocol):
    """Where a leader's ISR changes go to the controller (`AlterPartitionManager`)."""

    def submit(
        self, tp: TopicPartition, topic_id: uuid.UUID, proposal: IsrChangeProposed
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """What the replica manager needs to know about one topic from the image."""

    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration]
    config: LogConfig


@dataclass(slots=True)
class HostedPartition:
    partition: Partition
    log: Log
    topic_id: uuid.UUID
    #: its topic's `BrokerTopicMetrics`, looked up once (the data path marks them)
    stats: TopicStats = NO_STATS


#: The errors Kafka leaves out of FailedProduceRequestsPerSec (`ReplicaManager.
#: appendToLocalLog`: a client causes or retries them, they are no broker failure) ...
EXPECTED_PRODUCE_ERRORS: tuple[type[Exception], ...] = (
    UnknownTopicOrPartitionError,
    NotLeaderOrFollowerError,
    MessageTooLargeError,
    RecordListTooLargeError,
    CorruptMessageError,
    CorruptRecordError,
    KafkaStorageError,
    UnknownTopicIdError,
    OSError,
)
#: ... and out of FailedFetchRequestsPerSec (`ReplicaManager.readFromLog`)
EXPECTED_FETCH_ERRORS: tuple[type[Exception], ...] = (
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
    ReplicaNotAvailableError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    FencedLeaderEpochError,
    UnknownLeaderEpochError,
    UnknownTopicIdError,
    OSError,
)


def error_code_of(e: Exception, what: str) -> tuple[int, str]:
    """Kafka's error code (and message) for an exception raised while serving `what`."""
    if isinstance(e, KafkaError):
        return e.code, str(e)
    if isinstance(e, CorruptRecordError):
        return CorruptMessageError.code, str(e)
    if isinstance(e, OSError):  # a full or failing disk: Kafka's KAFKA_STORAGE_ERROR, no traceback
        logger.error("storage error serving %s: %s", what, e)
        return KafkaStorageError.code, f"the broker's log dir failed: {e}"
    logger.exception("unexpected error serving %s", what)
    return UnknownServerError.code, f"{type(e).__name__}: {e}"


class ReplicaManagerBase:
    """Hosted partitions of broker `node_id`, backed by `log_manager`."""

    def __init__(
        self,
        node_id: int,
        log_manager: LogManager,
        *,
        clock_ms: Callable[[], int],
        fetch_max_bytes: int = 57_671_680,
        delayed: DelayedOperations | None = None,
        metrics: Metrics | None = None,
        data_path_metrics: bool = True,
    ) -> None:
        self.node_id = node_id
        self.log_manager = log_manager
        self.dir_failures = log_manager.dir_failures
        self.fetch_max_bytes = fetch_max_bytes
        self.decompressed_max_bytes = log_manager.config.sparklog_batch_decompressed_max_bytes
        self._clock_ms = clock_ms
        self.delayed = delayed or DelayedOperations()
        #: the keys fetches of live followers have waited under (one per broker; any other
        #: replica id waits under its partitions, so a client cannot grow this set)
        self._follower_keys: set[FollowerFetches] = set()
        self._partitions: dict[TopicPartition, HostedPartition] = {}
        self._topics: dict[str, TopicMetadata] = {}
        self._live_brokers: frozenset[int] | None = None  # None: every replica may join an ISR
        self.fetchers: FollowerFetchers | None = None  # set by the broker server
        self.alter_partition: IsrProposals | None = None  # set by the broker server
        #: reads the remote tier (KIP-405); set by the broker server when it has one
        self.remote_reader: RemoteLogReader | None = None
        #: `BrokerTopicMetrics` (`sparklog.metrics.enabled=false`: `data_path_metrics` off)
        self.topic_stats = BrokerTopicStats(metrics if data_path_metrics else None)
        #: the ReplicaManager and Log gauges (None: a registry-less replica manager in tests)
        self.replica_metrics = (
            None
            if metrics is None
            else ReplicaManagerMetrics(
                metrics,
                lambda: (h.partition for h in self._partitions.values()),
                lambda: self.dir_failures.offline,
            )
        )
        #: requests waiting in the purgatory, by kind (acks=all produces, long-poll fetches)
        self.delayed_produces = 0
        self.delayed_fetches = 0
        if metrics is not None:
            add_purgatory_gauges(metrics, "Produce", lambda: self.delayed_produces)
            add_purgatory_gauges(metrics, "Fetch", lambda: self.delayed_fetches)
        #: `leader.replication.throttled.rate` (KIP-73); set by the broker server
        self.leader_quota: ReplicationQuotaManager | None = None

    @property
    def partitions(self) -> dict[TopicPartition, HostedPartition]:
        return dict(self._partitions)

    def _apply_events(
        self, tp: TopicPartition, hosted: HostedPartition, events: list[Event]
    ) -> None:
        for event in events:
            if isinstance(event, HighWatermarkAdvanced):
                kept = hosted.log.update_high_watermark(event.high_watermark)
                assert kept == event.high_watermark, (tp, kept, event)
            elif isinstance(event, BecameLeader):
                if self.fetchers is not None:  # first: nothing fetched lands after we lead
                    self.fetchers.remove_partition(tp)
                # Kafka's maybeAssignEpochStartOffset: the epoch starts at the current log end,
                # so OffsetForLeaderEpoch answers for it before the first append.
                latest = hosted.log.latest_epoch
                if latest is None or event.leader_epoch > latest:
                    hosted.log.epoch_cache.assign(event.leader_epoch, hosted.log.log_end_offset)
            elif isinstance(event, BecameFollower):
                if self.fetchers is not None and not self.dir_failures.offline:
                    self.fetchers.add_partition(
                        tp, hosted.topic_id, event.leader, event.leader_epoch
                    )
            elif isinstance(event, IsrChangeProposed):
                logger.info("%s-%d: proposing ISR %s", *tp, list(event.isr))
                if self.alter_partition is not None:
                    self.alter_partition.submit(tp, hosted.topic_id, event)
        if events:
            self._notify_all(tp)

    def _notify_all(self, tp: TopicPartition) -> None:
        """Wake every request waiting on `tp`: its own waiters and every follower's fetch (a
        change of leadership, ISR, high watermark or log start)."""
        delayed = self.delayed
        delayed.notify(tp)
        for key in self._follower_keys:
            delayed.notify(key, tp)

    def _notify_appended(self, tp: TopicPartition, hosted: HostedPartition) -> None:
        """Wake the requests an append interests: waiters on `tp` and its followers' fetches."""
        delayed = self.delayed
        delayed.notify(tp)
        node_id = self.node_id
        for replica_id in hosted.partition.replicas:
            if replica_id != node_id:
                delayed.notify(FollowerFetches(replica_id), tp)

    def now_ms(self) -> int:
        return self._clock_ms()

    def hosted(self, topic: str, partition: int) -> HostedPartition:
        """The hosted partition, or the error Kafka gives for it."""
        found = self._partitions.get(TopicPartition(topic, partition))
        if found is not None:
            return found
        meta = self._topics.get(topic)
        if meta is None or partition not in meta.partitions:
            raise UnknownTopicOrPartitionError(
                f"this broker knows no partition {topic}-{partition}"
            )
        leader = meta.partitions[partition].leader
        raise NotLeaderOrFollowerError(
            f"broker {self.node_id} does not host {topic}-{partition} (leader is {leader})"
        )

    def leader_of(self, topic: str, partition: int) -> tuple[int, int]:
        """(leader id, leader epoch) per the image, (-1, -1) when unknown."""
        meta = self._topics.get(topic)
        registration = meta.partitions.get(partition) if meta else None
        if registration is None:
            return -1, -1
        return registration.leader, registration.leader_epoch

    def _on_storage_error(self, e: Exception, what: str) -> None:
        if isinstance(e, OSError):
            self.dir_failures.mark_offline(e, what)

    @contextlib.contextmanager
    def _storage_errors(self, what: str) -> Iterator[None]:
        """An OSError inside takes the log dir offline and leaves as KafkaStorageError."""
        try:
            yield
        except OSError as e:
            self.dir_failures.mark_offline(e, what)
            raise KafkaStorageError(f"{what} failed: {e}") from None
