"""The start of a partition log and what retention deletes (Kafka's `UnifiedLog` log start
offset, `localLogStartOffset`, `highestOffsetInRemoteStorage` and `deleteOldSegments`).

A log whose topic has `remote.storage.enable` on a broker with
`remote.log.storage.system.enable` (KIP-405, DESIGN D17) spans two tiers: [log start, local
log start) lives only in the topic's Delta table, [local log start, log end) on local disk (the
oldest local segments may also be in the table). Invariant: log_start_offset <=
local_log_start_offset <= log_end_offset. Without remote storage both starts are equal.

Local retention of a remote log uses `local.retention.ms/bytes` (effective values) and deletes
a segment only when it is wholly copied (its end <= `highest_offset_in_remote_storage` + 1)
and past local retention; the local log start moves, the log start stays. `retention.ms/bytes`
and DeleteRecords govern the whole log: the remote log manager expires the table and moves
the log start with `maybe_increment_log_start_offset`.

`LogStartMixin` is part of `log.Log`: its methods run under the log's lock.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from sparklog.errors import OffsetMovedToTieredStorageError, OffsetOutOfRangeError
from sparklog.storage.config import LogConfig
from sparklog.storage.epoch_cache import LeaderEpochFileCache
from sparklog.storage.local_log import LocalLog
from sparklog.storage.producer_state import ProducerStateManager
from sparklog.storage.retention import deletable_segments, should_roll_for_retention
from sparklog.storage.segment import LogSegment


class LogStartMixin:
    """Log start offsets and retention of `log.Log` (see module doc)."""

    # provided by Log
    _lock: threading.RLock
    _local: LocalLog
    config: LogConfig
    epoch_cache: LeaderEpochFileCache
    producer_state: ProducerStateManager
    high_watermark: int
    log_end_offset: int
    log_start_offset: int
    #: Kafka's localLogStartOffset: the first offset on local disk
    local_log_start_offset: int
    #: Kafka's highestOffsetInRemoteStorage: the last offset the remote tier holds, -1 if none
    highest_offset_in_remote_storage: int
    #: the broker's remote.log.storage.system.enable (set by the log manager)
    remote_storage_system_enable: bool

    if TYPE_CHECKING:

        def roll(self, now_ms: int) -> LogSegment: ...  # Log's

    @property
    def remote_log_enabled(self) -> bool:
        """Kafka's `remoteLogEnabled`: this log has a remote tier (the broker allows it and the
        topic asks for it; compacted topics never do)."""
        return (
            self.remote_storage_system_enable
            and self.config.remote_storage_enable
            and not self.config.compact
        )

    def check_local_offset(self, offset: int) -> None:
        """Raise for a read at `offset` that local disk cannot serve: OffsetOutOfRangeError
        outside [log start, log end], OffsetMovedToTieredStorageError in [log start, local log
        start) of a remote log (the fetch path reads those from the table; a follower gets
        OFFSET_MOVED_TO_TIERED_STORAGE and rebuilds from the table)."""
        name = self._local.directory.name
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, "
                f"{self.log_end_offset}] of {name}"
            )
        if offset < self.local_log_start_offset:
            raise OffsetMovedToTieredStorageError(
                f"offset {offset} of {name} is in the remote tier: below the local log start "
                f"{self.local_log_start_offset}, at or above the log start {self.log_start_offset}"
            )

    def update_highest_offset_in_remote_storage(self, offset: int) -> None:
        """The remote tier now holds every offset up to `offset` (inclusive; it only grows,
        except that -1 resets it after the tier was dropped)."""
        with self._lock:
            if offset < 0:
                self.highest_offset_in_remote_storage = -1
            else:
                self.highest_offset_in_remote_storage = max(
                    self.highest_offset_in_remote_storage, offset
                )

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to `offset` (at most the HW); the remote
        tier follows on the remote log manager's next round."""
        with self._lock:
            if offset > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {offset}: above the high watermark "
                    f"{self.high_watermark} of {self._local.directory.name}"
                )
            self.maybe_increment_log_start_offset(offset)
            self.delete_old_segments(now_ms=None)
            return self.log_start_offset

    def maybe_increment_log_start_offset(self, offset: int) -> None:
        """Move the log start up (DeleteRecords, the leader's log start on a follower, whole-log
        retention of the remote tier); the local log start never stays below it."""
        with self._lock:
            if offset > self.log_start_offset:
                self.log_start_offset = offset
                self.local_log_start_offset = max(self.local_log_start_offset, offset)
                self.epoch_cache.truncate_from_start(offset)
                self.high_watermark = max(self.high_watermark, offset)
                self.producer_state.on_log_start_offset_incremented(offset)

    def delete_old_segments(self, now_ms: int | None) -> int:
        """Retention: drop whole non-active segments below the log start offset, or (cleanup
        policy delete) older than the retention time or beyond the retention size: local
        retention, and only what the remote tier holds, for a remote log that copies
        (`remote.log.copy.disable` false); `retention.*` otherwise. A copying log rolls an
        active segment past local retention once nothing closed is left to keep (see
        `retention.should_roll_for_retention`). Returns the count."""
        with self._lock:
            copying = self.remote_log_enabled and not self.config.remote_log_copy_disable
            deletable = self._deletable(now_ms, copying)
            if (
                copying
                and now_ms is not None
                and should_roll_for_retention(
                    self._local.segments,
                    deletable,
                    self._local.size_in_bytes,
                    self.log_end_offset,
                    self.high_watermark,
                    self.config,
                    now_ms,
                )
            ):
                self.roll(now_ms)
                deletable = self._deletable(now_ms, copying)
            self._local.delete(deletable)
            if deletable:
                first = self._local.bases[0]
                self.local_log_start_offset = max(self.local_log_start_offset, first)
                if not self.remote_log_enabled:
                    self.log_start_offset = max(self.log_start_offset, first)
                    self.epoch_cache.truncate_from_start(self.log_start_offset)
                self.producer_state.delete_snapshots_before(self.local_log_start_offset)
            return len(deletable)

    def _deletable(self, now_ms: int | None, copying: bool) -> list[LogSegment]:
        return deletable_segments(
            self._local.segments,
            self._local.bases,
            self._local.size_in_bytes,
            self.high_watermark,
            self.log_start_offset,
            self.config,
            now_ms,
            remote_copied_end=self.highest_offset_in_remote_storage + 1 if copying else None,
        )

    def only_local_bytes(self) -> int:
        """Bytes of the local segments not (wholly) in the remote tier: what whole-log
        `retention.bytes` counts beside the table (Kafka's onlyLocalLogSegmentsSize)."""
        with self._lock:
            copied_end = self.highest_offset_in_remote_storage + 1
            segments, bases = self._local.segments, self._local.bases
            total = 0
            for i, segment in enumerate(segments):
                upper = bases[i + 1] if i + 1 < len(bases) else self.log_end_offset
                if upper > copied_end:
                    total += segment.size_bytes
            return total
