"""The follower side of the replica manager: what the replica fetchers
(`replica_fetcher.ReplicaFetcherManager`) write into the partitions this broker follows — fetched
batches (Kafka's `Partition.appendRecordsToFollowerOrFutureReplica`) and truncations to the
leader's log (divergent suffix, or a leader whose log start passed ours), and the restart of a
follower below its leader's local log start from the remote tier (`tier_state`). Every write
first checks that the partition is still followed at the fetcher's leader epoch. Thread-safety: use
from the broker's event loop only.
"""

from __future__ import annotations

import logging

from sparklog.broker.partition import Role
from sparklog.broker.replica_base import HostedPartition, ReplicaManagerBase
from sparklog.broker.tier_state import TierState, read_tier_state, restore_from_tier
from sparklog.errors import NotLeaderOrFollowerError
from sparklog.records.batch import read_header
from sparklog.structs import TopicPartition

logger = logging.getLogger(__name__)


class FollowerPath(ReplicaManagerBase):
    """Follower writes: `append_fetched`, `truncate_follower`, `truncate_fully_follower`."""

    def log_start_offset(self, tp: TopicPartition) -> int:
        """The hosted log's start offset, -1 when not hosted (what a follower's fetch says)."""
        hosted = self._partitions.get(tp)
        return -1 if hosted is None else hosted.log.log_start_offset

    def following(self, tp: TopicPartition, leader_epoch: int) -> HostedPartition:
        """The partition, if this broker still follows it at `leader_epoch`; else raises."""
        hosted = self._partitions.get(tp)
        if hosted is None or hosted.partition.role is not Role.FOLLOWER:
            raise NotLeaderOrFollowerError(f"broker {self.node_id} does not follow {tp[0]}-{tp[1]}")
        hosted.partition.check_leader_epoch(leader_epoch)
        return hosted

    def append_fetched(
        self,
        tp: TopicPartition,
        leader_epoch: int,
        records: bytes,
        *,
        leader_high_watermark: int,
        leader_log_start_offset: int,
    ) -> int:
        """Append what a follower fetched, then take the leader's HW (capped by our log end)
        and log start offset (capped by our HW); returns the new log end offset."""
        self.dir_failures.check()
        hosted = self.following(tp, leader_epoch)
        log_ = hosted.log
        if records:
            first_base = read_header(records).base_offset
            with self._storage_errors(f"follower append to {tp[0]}-{tp[1]}"):
                if first_base < log_.log_end_offset == log_.log_start_offset:
                    # Kafka's UnexpectedAppendOffsetException on an empty log: the leader's
                    # log start is inside a batch; start ours where that batch starts.
                    log_.truncate_fully_and_start_at(first_base)
                log_.append_as_follower(records, self._clock_ms())
            if self.topic_stats.enabled:  # Kafka's updateReplicationBytesIn (all topics only)
                self.topic_stats.replication_bytes_in.count += len(records)
        high_watermark = min(leader_high_watermark, log_.log_end_offset)
        if high_watermark > log_.high_watermark:
            log_.update_high_watermark(high_watermark)
        if log_.log_start_offset < leader_log_start_offset <= log_.high_watermark:
            log_.maybe_increment_log_start_offset(leader_log_start_offset)
        self._after_follower_change(tp, hosted)
        return log_.log_end_offset

    def truncate_follower(self, tp: TopicPartition, leader_epoch: int, offset: int) -> int:
        """Cut a followed log to `offset` (divergent suffix); returns the new log end offset."""
        self.dir_failures.check()
        hosted = self.following(tp, leader_epoch)
        before = hosted.log.log_end_offset
        with self._storage_errors(f"truncation of {tp[0]}-{tp[1]}"):
            cut = hosted.log.truncate_to(offset, self._clock_ms())
        if cut:
            logger.info("%s-%d: truncated from %d to %d", *tp, before, hosted.log.log_end_offset)
        self._after_follower_change(tp, hosted)
        return hosted.log.log_end_offset

    def truncate_fully_follower(self, tp: TopicPartition, leader_epoch: int, offset: int) -> int:
        """Empty a followed log and restart it at `offset` (the leader's log start passed ours)."""
        self.dir_failures.check()
        hosted = self.following(tp, leader_epoch)
        with self._storage_errors(f"truncation of {tp[0]}-{tp[1]}"):
            hosted.log.truncate_fully_and_start_at(offset)
        logger.info("%s-%d: log restarted empty at %d", *tp, offset)
        self._after_follower_change(tp, hosted)
        return offset

    async def rebuild_from_tier(
        self, tp: TopicPartition, leader_epoch: int, local_start: int, log_start: int
    ) -> int:
        """Restart a followed log at its leader's local log start `local_start` (log start
        `log_start`), with the leader epochs and producer state the table holds below it
        (Kafka's `TierStateMachine`); returns the new log end offset. The table is read on the
        remote reader's threads; without a remote tier here the log restarts without them."""
        self.dir_failures.check()
        self.following(tp, leader_epoch)
        reader = self.remote_reader
        state = TierState()
        if reader is not None:
            table_for = reader.table_for
            state = await reader.run(lambda: read_tier_state(table_for, *tp, local_start))
        else:
            logger.warning(
                "%s-%d: the leader's offsets below %d are tiered and this broker reads no "
                "remote tier; restarting without their epochs and producer state",
                *tp,
                local_start,
            )
        hosted = self.following(tp, leader_epoch)  # still ours after the read
        with self._storage_errors(f"rebuild of {tp[0]}-{tp[1]} from the remote tier"):
            restore_from_tier(hosted.log, local_start, log_start, state)
        logger.info(
            "%s-%d: log restarted at the leader's local log start %d (log start %d) with %d "
            "leader epochs and %d producers from the remote tier",
            *tp,
            local_start,
            log_start,
            len(state.epochs),
            len(state.producers),
        )
        self._after_follower_change(tp, hosted)
        return local_start

    def _after_follower_change(self, tp: TopicPartition, hosted: HostedPartition) -> None:
        hosted.partition.reset_high_watermark(hosted.log.high_watermark)
        self._notify_all(tp)
