"""The partitions a broker hosts and the reads and writes on them (Kafka's `ReplicaManager`).

`apply_metadata` reconciles the hosted partitions with the metadata image: it opens or creates
the log of every partition assigned here, hands the registration to the sans-IO `Partition`
(leader, follower), applies the events it returns (high watermark to the log, follower fetchers
started or stopped, ISR proposals sent, waiting requests woken) and deletes the logs of
partitions that left. Produce appends through the leader's log; acks=all waits until the high
watermark passes the batch. Fetch reads up to the high watermark (read_uncommitted), the last
stable offset (read_committed) or the log end (followers, whose fetch position moves the high
watermark and the ISR) and long-polls through `DelayedOperations` until `min_bytes` are there
or `max_wait_ms` passed. Every leader append wakes waiting fetches, so followers see it at once.

Replication hooks (set by the broker; None in tests without replication): `fetchers` follows
partitions this broker does not lead (`replica_fetcher_manager.ReplicaFetcherManager`), and
`alter_partition` carries ISR proposals to the controller (`isr_manager.AlterPartitionManager`).
The fetchers write through `append_fetched` / `truncate_follower`, which check that the
partition is still followed at the fetcher's leader epoch.

The class is assembled from its paths, each in a module of its own as Kafka keeps them:
`replica_append` (produce, with `delayed_produce.DelayedProduce` for acks=all), `replica_read`
(fetch, with `delayed_fetch.DelayedFetch` for the long-poll), `replica_follower` (the fetchers'
writes); their shared state is `replica_base.ReplicaManagerBase`. This module keeps the metadata
reconciliation, ListOffsets/OffsetForLeaderEpoch/DeleteRecords and the leader's ISR tasks.

Errors are per partition, as Kafka answers them: every `KafkaError` becomes its code, a corrupt
batch CORRUPT_MESSAGE, anything unexpected UNKNOWN_SERVER_ERROR (logged). Thread-safety: use from
the broker's event loop only (logs guard themselves against the background threads).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from sparklog.broker.partition import (
    IsrChanged,
    IsrChangeProposed,
    Partition,
    PartitionRegistration,
)
from sparklog.broker.remote_fetch import TierOffsets, merge_offsets, tier_offsets
from sparklog.broker.replica_append import AppendPath
from sparklog.broker.replica_base import HostedPartition, TopicMetadata
from sparklog.broker.replica_follower import FollowerPath
from sparklog.broker.replica_read import ReadPath, local_log_start
from sparklog.errors import OffsetNotAvailableError, OffsetOutOfRangeError
from sparklog.structs import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    IsolationLevel,
    TopicPartition,
)

logger = logging.getLogger(__name__)

DELETE_TO_HIGH_WATERMARK = -1  # DeleteRecords offset -1 = up to the high watermark


class ReplicaManager(AppendPath, ReadPath, FollowerPath):
    """Hosted partitions of broker `node_id`, backed by `log_manager` (the state and its
    constructor are `replica_base.ReplicaManagerBase`'s)."""

    # -- metadata ---------------------------------------------------------------------------

    def apply_metadata(
        self, topics: Mapping[str, TopicMetadata], live_brokers: Collection[int] | None = None
    ) -> None:
        """Make the hosted partitions match the image (see module doc). `live_brokers`: the
        unfenced brokers, the only ones a leader proposes for its ISR (None: all)."""
        for _step in self._apply_steps(topics, live_brokers):
            pass

    async def apply_metadata_cooperatively(
        self,
        topics: Mapping[str, TopicMetadata],
        live_brokers: Collection[int] | None = None,
        slice_s: float = 0.05,
    ) -> None:
        """`apply_metadata`, letting the event loop run every `slice_s`: creating a thousand
        logs takes seconds of file-system calls, and a loop blocked that long misses its
        heartbeats and gets the broker fenced (Kafka applies metadata on its own thread)."""
        loop = asyncio.get_running_loop()
        yield_at = loop.time() + slice_s
        for _step in self._apply_steps(topics, live_brokers):
            if loop.time() >= yield_at:
                await asyncio.sleep(0)
                yield_at = loop.time() + slice_s

    def _apply_steps(
        self, topics: Mapping[str, TopicMetadata], live_brokers: Collection[int] | None
    ) -> Iterator[None]:
        """The reconciliation, one step per partition removed, created or updated."""
        self._topics = dict(topics)
        self._live_brokers = None if live_brokers is None else frozenset(live_brokers)
        self._follower_keys = {
            k for k in self._follower_keys if live_brokers is None or k.replica_id in live_brokers
        }
        wanted: dict[TopicPartition, tuple[TopicMetadata, PartitionRegistration]] = {}
        for topic in topics.values():
            for index, registration in topic.partitions.items():
                if self.node_id in registration.replicas:
                    wanted[TopicPartition(topic.name, index)] = (topic, registration)
        for tp, hosted in list(self._partitions.items()):
            found = wanted.get(tp)
            if found is None or found[0].topic_id != hosted.topic_id:
                self._remove(tp)
                yield
        for tp, (topic, registration) in wanted.items():
            if tp not in self._partitions and self.dir_failures.offline:
                continue  # no new logs on a dead disk; a restart creates them
            hosted = self._partitions.get(tp) or self._host(tp, topic)
            self.log_manager.update_config(*tp, topic.config)
            hosted.partition.min_insync_replicas = hosted.log.config.min_insync_replicas
            pending, isr_before = hosted.partition.pending_isr, hosted.partition.isr
            events = hosted.partition.apply_registration(
                registration, self._clock_ms(), hosted.log.log_end_offset
            )
            if pending is not None and self.replica_metrics is not None:
                self._maybe_count_isr_change(hosted.partition, pending, isr_before)
            self._apply_events(tp, hosted, events)
            yield

    def _host(self, tp: TopicPartition, topic: TopicMetadata) -> HostedPartition:
        opened = self.log_manager.get_or_create_log(*tp, topic.topic_id, topic.config)
        partition = Partition(tp[0], tp[1], self.node_id)
        partition.reset_high_watermark(opened.high_watermark)
        stats = self.topic_stats.acquire(tp[0])
        hosted = HostedPartition(partition, opened, topic.topic_id, stats)
        self._partitions[tp] = hosted
        if self.replica_metrics is not None:
            self.replica_metrics.add_partition(*tp, partition, opened)
        return hosted

    def _remove(self, tp: TopicPartition) -> None:
        if self.fetchers is not None:
            self.fetchers.remove_partition(tp)
        hosted = self._partitions.pop(tp)
        hosted.partition.mark_deleted()
        self.log_manager.delete_log(*tp)
        self._notify_all(tp)
        self._maybe_remove_metrics(tp)

    def _maybe_remove_metrics(self, tp: TopicPartition) -> None:
        """A partition left: its Log gauges go, and its topic's meters when it was the topic's
        last partition here (Kafka's `maybeRemoveTopicMetrics`)."""
        if self.replica_metrics is not None:
            self.replica_metrics.remove_partition(*tp)
        self.topic_stats.release(tp[0])

    # -- offsets ----------------------------------------------------------------------------

    def list_offset(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        *,
        isolation_level: int = 0,
        current_leader_epoch: int = -1,
        replica_id: int = -1,
        tier: TierOffsets | None = None,
    ) -> tuple[int, int, int]:
        """ListOffsets for one partition: (offset, timestamp, leader epoch), -1s when no record
        is that late. A follower (`replica_id` >= 0) may read up to the log end, as in Kafka.
        -2 is the log start (the remote tier's included), -4 the local log start (KIP-405),
        -5 the last offset in the remote tier (KIP-1005); `tier` is what the table answered
        (`list_offset_with_tier`), without which timestamps search the local log only.
        Raises the partition's KafkaError."""
        self.dir_failures.check()
        hosted = self.hosted(topic, partition)
        hosted.partition.check_leader(current_leader_epoch)
        log_ = hosted.log
        if replica_id >= 0:
            last_fetchable = log_.log_end_offset
        elif isolation_level == IsolationLevel.READ_COMMITTED:
            last_fetchable = log_.last_stable_offset
        else:
            last_fetchable = log_.high_watermark
        # KIP-207 (Kafka's Partition.fetchOffsetForTimestamp): a new leader's HW can lag the
        # one its predecessor served until the followers fetch again; answering with it would
        # show a client the high watermark going back, so a client is told to retry instead.
        epoch_start = hosted.partition.leader_epoch_start_offset
        lagging = replica_id < 0 and epoch_start > log_.high_watermark
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            local_start = local_log_start(log_)
            epoch = log_.epoch_cache.epoch_for_offset(local_start)
            return local_start, -1, -1 if epoch is None else epoch
        if timestamp == LATEST_TIERED_TIMESTAMP:  # Kafka's highestOffsetInRemoteStorage
            highest = log_.highest_offset_in_remote_storage
            if not log_.config.remote_storage_enable or highest < 0:
                return -1, -1, -1
            epoch = log_.epoch_cache.epoch_for_offset(highest)
            return highest, -1, -1 if epoch is None else epoch
        if timestamp == LATEST_TIMESTAMP:
            if lagging:
                raise OffsetNotAvailableError(
                    f"{topic}-{partition}: the high watermark ({log_.high_watermark}) is behind "
                    f"the start offset of leader epoch {hosted.partition.leader_epoch} "
                    f"({epoch_start}); retry"
                )
            return last_fetchable, -1, hosted.partition.leader_epoch
        found = log_.fetch_offset_by_timestamp(timestamp)
        if tier is not None and timestamp != EARLIEST_TIMESTAMP:
            found = merge_offsets(timestamp, tier.found, found)
        if timestamp != EARLIEST_TIMESTAMP and (found is None or found[0] >= last_fetchable):
            if lagging:
                raise OffsetNotAvailableError(
                    f"{topic}-{partition}: no offset for timestamp {timestamp} below the high "
                    f"watermark ({log_.high_watermark}), which is behind the start offset of "
                    f"leader epoch {hosted.partition.leader_epoch} ({epoch_start}); retry"
                )
            return -1, -1, -1  # Kafka answers only with offsets a consumer could fetch
        if found is None:
            return -1, -1, -1
        offset, found_timestamp = found
        epoch = log_.epoch_cache.epoch_for_offset(offset)
        return offset, found_timestamp, -1 if epoch is None else epoch

    def lists_with_tier(self, topic: str, partition: int, timestamp: int) -> bool:
        """Whether ListOffsets for `timestamp` must ask the partition's table: a timestamp or
        -3 once the log's start is in the remote tier."""
        hosted = self._partitions.get(TopicPartition(topic, partition))
        if self.remote_reader is None or hosted is None:
            return False
        log_ = hosted.log
        by_time = timestamp >= 0 or timestamp == MAX_TIMESTAMP
        return by_time and log_.log_start_offset < local_log_start(log_)

    async def list_offset_with_tier(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        *,
        isolation_level: int = 0,
        current_leader_epoch: int = -1,
        replica_id: int = -1,
    ) -> tuple[int, int, int]:
        """`list_offset` with the table's answer, read on the remote reader's pool (Kafka's
        `asyncOffsetRead`); leadership is checked before and again after the read."""
        reader = self.remote_reader
        assert reader is not None
        self.dir_failures.check()
        hosted = self.hosted(topic, partition)
        hosted.partition.check_leader(current_leader_epoch)
        start = hosted.log.log_start_offset
        tier = await reader.run(
            lambda: tier_offsets(reader.table_for, topic, partition, timestamp, start)
        )
        return self.list_offset(
            topic,
            partition,
            timestamp,
            isolation_level=isolation_level,
            current_leader_epoch=current_leader_epoch,
            replica_id=replica_id,
            tier=tier,
        )

    def end_offset_for_epoch(
        self, topic: str, partition: int, leader_epoch: int, current_leader_epoch: int = -1
    ) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset) from the leader's epoch cache."""
        hosted = self.hosted(topic, partition)
        hosted.partition.check_leader(current_leader_epoch)
        return hosted.log.epoch_cache.end_offset_for(leader_epoch, hosted.log.log_end_offset)

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords: move the log start offset up; returns the new low watermark."""
        self.dir_failures.check()
        hosted = self.hosted(topic, partition)
        hosted.partition.check_leader()
        log_ = hosted.log
        if offset == DELETE_TO_HIGH_WATERMARK:
            offset = log_.high_watermark
        if offset < 0:
            raise OffsetOutOfRangeError(f"cannot delete records before negative offset {offset}")
        low_watermark = log_.delete_records_before(offset)
        hosted.partition.reset_high_watermark(log_.high_watermark)
        self._notify_all(TopicPartition(topic, partition))
        return low_watermark

    # -- ISR (leader side) ---------------------------------------------------------------------

    def maybe_shrink_isr(self, now_ms: int, replica_lag_time_max_ms: int) -> int:
        """Propose removing lagging followers from every led ISR (Kafka's `maybeShrinkIsr`
        task); returns how many partitions proposed."""
        proposed = 0
        for tp, hosted in list(self._partitions.items()):
            if not hosted.partition.is_leader:
                continue
            events = hosted.partition.maybe_shrink_isr(
                now_ms, replica_lag_time_max_ms, hosted.log.log_end_offset
            )
            proposed += bool(events)
            self._apply_events(tp, hosted, events)
        return proposed

    def _maybe_count_isr_change(
        self, partition: Partition, pending: IsrChangeProposed, isr_before: tuple[int, ...]
    ) -> None:
        """The metadata carried the ISR this leader proposed before the controller's answer
        did (the controller publishes, then answers): that is the leader's change committing,
        which Kafka counts when the answer comes; the answer then finds its proposal replaced
        and is ignored, so the change is counted here, once."""
        assert self.replica_metrics is not None
        if (
            partition.is_leader
            and partition.pending_isr is None
            and set(partition.isr) == set(pending.isr)
        ):
            self.replica_metrics.on_isr_committed(isr_before, partition.isr)

    def on_isr_outcome(self, tp: TopicPartition, proposal: IsrChangeProposed, outcome: Any) -> bool:
        """The controller answered an ISR proposal (an `IsrChangeOutcome`); True: send again."""
        hosted = self._partitions.get(tp)
        if hosted is None or hosted.topic_id != outcome.topic_id:
            return False
        isr_before = hosted.partition.isr
        events, retry = hosted.partition.apply_isr_outcome(
            proposal,
            outcome.error_code,
            leader_epoch=outcome.leader_epoch,
            isr=tuple(outcome.isr),
            partition_epoch=outcome.partition_epoch,
            leader_log_end_offset=hosted.log.log_end_offset,
        )
        if events:
            logger.info("%s-%d: ISR is now %s", *tp, list(hosted.partition.isr))
        if self.replica_metrics is not None:
            if outcome.error_code:  # Kafka's IsrChangeListener.markFailed
                self.replica_metrics.on_isr_update_failed()
            elif any(isinstance(e, IsrChanged) for e in events):
                self.replica_metrics.on_isr_committed(isr_before, hosted.partition.isr)
        self._apply_events(tp, hosted, events)
        return retry

    # -- shutdown ---------------------------------------------------------------------------

    def close(self) -> None:
        """Answer every waiting request now and let no new one wait (shutdown)."""
        self.delayed.close()
