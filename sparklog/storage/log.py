"""One partition replica's log: offsets, appends, producer state, transactions, the high
watermark, truncation and retention (Kafka's `UnifiedLog`).

The leader appends client batches with `append_as_leader` (validate, assign offsets by
rewriting baseOffset, stamp the leader epoch, check producer state, then write); followers
append fetched batches unchanged with `append_as_follower`. The segment files are a
`local_log.LocalLog`; opening and crash recovery live in `log_loader`, offset assignment in
`offset_assignment`, which segments retention deletes in `retention`.

Invariants: log_start_offset <= local_log_start_offset <= log_end_offset (the two starts differ
only for a log with a remote tier: `log_retention`); log_start_offset <= high_watermark <=
log_end_offset; segments are sorted by base
offset, contiguous in offsets, and only the last (active) one is appended to; the recovery
point never passes the log end offset.
Thread-safety: every public method takes the log's lock, so a background cleaner or retention
thread may run beside the appender.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from sparklog.errors import (
    InvalidRecordError,
    OutOfOrderSequenceNumberError,
)
from sparklog.records.batch import (
    NO_PARTITION_LEADER_EPOCH,
    BatchHeader,
)
from sparklog.records.control import end_txn_marker_at
from sparklog.records.file_records import FileRecords
from sparklog.storage.config import LogConfig
from sparklog.storage.epoch_cache import LeaderEpochFileCache
from sparklog.storage.local_log import LocalLog
from sparklog.storage.log_retention import LogStartMixin
from sparklog.storage.log_validator import (
    DEFAULT_DECOMPRESSED_MAX_BYTES,
    analyze_and_validate_records,
)
from sparklog.storage.offset_assignment import restamped, stamped_pieces
from sparklog.storage.producer_append_info import (
    AppendOrigin,
    CompletedTxn,
    DuplicateBatch,
    ProducerAppendInfo,
)
from sparklog.storage.producer_state import ProducerStateManager
from sparklog.storage.segment import LogSegment
from sparklog.storage.txn_index import AbortedTxn
from sparklog.structs import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP

EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    """What an append did (Kafka's `LogAppendInfo`); `duplicate` means nothing was written."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time_ms: int
    log_start_offset: int
    records_count: int
    valid_bytes: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """Bytes read from the log: whole batches starting at or before `fetch_offset`."""

    fetch_offset: int
    records: bytes | FileRecords
    high_watermark: int
    log_start_offset: int
    aborted_transactions: tuple[AbortedTxn, ...] | None = None


class Log(LogStartMixin):
    """A partition replica's log on local disk. Build one with `Log.open`."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: list[LogSegment],
        *,
        log_start_offset: int,
        recovery_point: int,
        epoch_cache: LeaderEpochFileCache,
        producer_state: ProducerStateManager,
        now_ms: int,
        remote_storage_system_enable: bool = False,
    ) -> None:
        self.directory = directory
        self.config = config
        self._local = LocalLog(directory, config, segments)
        self._lock = threading.RLock()
        self.epoch_cache = epoch_cache
        self.producer_state = producer_state
        self.log_end_offset = segments[-1].read_next_offset()
        self.remote_storage_system_enable = remote_storage_system_enable
        self.local_log_start_offset = max(log_start_offset, segments[0].base_offset)
        # a log with no remote tier starts where its first segment does
        self.log_start_offset = (
            log_start_offset if self.remote_log_enabled else self.local_log_start_offset
        )
        self.highest_offset_in_remote_storage = -1
        self.recovery_point = min(recovery_point, self.log_end_offset)
        self.high_watermark = max(
            self.log_start_offset, min(self.recovery_point, self.log_end_offset)
        )
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms
        self.closed = False
        #: wraps every fsync of segments (the broker's times them as Kafka's LogFlushStats
        #: LogFlushRateAndTimeMs; the log itself reads no clock)
        self.flush_timer: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        config: LogConfig | None = None,
        *,
        now_ms: int,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        producer_id_expiration_ms: int = 86_400_000,
        remote_storage_system_enable: bool = False,
    ) -> Log:
        """Open (creating or recovering) the log in `directory`; see `log_loader.load_log`."""
        from sparklog.storage.log_loader import load_log

        return load_log(
            cls,
            Path(directory),
            config or LogConfig(),
            now_ms=now_ms,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            producer_id_expiration_ms=producer_id_expiration_ms,
            remote_storage_system_enable=remote_storage_system_enable,
        )

    # -- shape ------------------------------------------------------------------------------

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._local.segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._local.active

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return self._local.size_in_bytes

    @property
    def latest_epoch(self) -> int | None:
        return self.epoch_cache.latest_epoch

    # -- appends ----------------------------------------------------------------------------

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int,
        now_ms: int,
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        decompressed_max_bytes: int = DEFAULT_DECOMPRESSED_MAX_BYTES,
        transaction_version: int = 0,
    ) -> LogAppendInfo:
        """Validate client batches, assign offsets and the leader epoch, append them.

        Raises CorruptRecordError (bad bytes), MessageTooLargeError (also for a compressed
        section unpacking to more than `decompressed_max_bytes`), InvalidRecordError,
        RecordValidationError (per-record errors, KIP-467) and the producer-state errors; the log
        is untouched when it raises. A retried idempotent batch already in the log returns its original offsets
        (`duplicate=True`) and writes nothing. `origin=COORDINATOR` appends transaction markers
        (control batches), which clients may not write.
        """
        with self._lock:
            buf = memoryview(records).cast("B")
            headers = analyze_and_validate_records(
                buf,
                self.config,
                now_ms,
                self.directory.name,
                origin=AppendOrigin(origin),
                decompressed_max_bytes=decompressed_max_bytes,
            )
            append_time = now_ms if self.config.log_append_time else -1
            next_offset = self.log_end_offset
            stamped: list[tuple[int, BatchHeader]] = []
            for pos, header in headers:
                stamped.append((pos, restamped(header, next_offset, leader_epoch, append_time)))
                next_offset += header.last_offset_delta + 1
            pending = self._prepare_producer_state(
                buf, stamped, AppendOrigin(origin), transaction_version
            )
            if isinstance(pending, DuplicateBatch):
                return LogAppendInfo(
                    pending.base_offset,
                    pending.last_offset,
                    pending.max_timestamp,
                    pending.last_offset,
                    -1,
                    self.log_start_offset,
                    pending.last_offset - pending.base_offset + 1,
                    0,
                    duplicate=True,
                )
            pieces = stamped_pieces(buf, stamped, leader_epoch, append_time)
            return self._append(pieces, stamped, pending, now_ms, leader_epoch, append_time)

    def append_as_follower(
        self, records: bytes | bytearray | memoryview, now_ms: int
    ) -> LogAppendInfo:
        """Append batches fetched from the leader as they are (offsets and epochs kept)."""
        with self._lock:
            buf = memoryview(records).cast("B")
            headers = analyze_and_validate_records(
                buf, self.config, now_ms, self.directory.name, origin=AppendOrigin.REPLICATION
            )
            first = headers[0][1]
            if first.base_offset < self.log_end_offset:
                raise InvalidRecordError(
                    f"follower append at offset {first.base_offset} is below the log end offset "
                    f"{self.log_end_offset} of {self.directory.name}"
                )
            pending = self._prepare_producer_state(buf, headers, AppendOrigin.REPLICATION)
            assert not isinstance(pending, DuplicateBatch)
            return self._append([buf], headers, pending, now_ms, None, -1)

    def _prepare_producer_state(
        self,
        buf: bytes | bytearray | memoryview,
        headers: list[tuple[int, BatchHeader]],
        origin: AppendOrigin,
        transaction_version: int = 0,
    ) -> dict[int, ProducerAppendInfo] | DuplicateBatch:
        """Validate every batch against producer state; nothing changes until `_append` writes.
        `transaction_version`: the markers' (WriteTxnMarkers v2; 2 = KIP-890 strict epochs)."""
        pending: dict[int, ProducerAppendInfo] = {}
        for pos, header in headers:
            if not header.has_producer_id:
                continue
            marker = end_txn_marker_at(buf, pos, header) if header.is_control else None
            result = self.producer_state.prepare_append(
                header,
                origin,
                marker=marker,
                transaction_version=transaction_version,
                pending=pending.get(header.producer_id),
            )
            if isinstance(result, DuplicateBatch):
                if len(headers) == 1:
                    return result
                raise OutOfOrderSequenceNumberError(
                    f"a retried batch of producer {header.producer_id} arrived together with "
                    "other batches; send retries alone"
                )
            pending[header.producer_id] = result
        return pending

    def _append(
        self,
        pieces: list[bytes | bytearray | memoryview],
        headers: list[tuple[int, BatchHeader]],
        pending: dict[int, ProducerAppendInfo],
        now_ms: int,
        leader_epoch: int | None,
        append_time: int,
    ) -> LogAppendInfo:
        batches = [h for _, h in headers]
        first, last = batches[0], batches[-1]
        max_ts, offset_of_max = -1, first.base_offset
        for h in batches:
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max = h.max_timestamp, h.last_offset
        size = sum(len(p) for p in pieces)
        segment = self._maybe_roll(size, max_ts, last.last_offset, now_ms)
        segment.append(pieces, batches)
        if leader_epoch is not None:
            self._assign_epoch(leader_epoch, first.base_offset)
        else:
            for h in batches:
                if h.partition_leader_epoch != NO_PARTITION_LEADER_EPOCH:
                    self._assign_epoch(h.partition_leader_epoch, h.base_offset)
        for info in pending.values():
            self.producer_state.update(info)
        # Kafka's UnifiedLog.append completes transactions in the order of their markers: one
        # append may hold several producers' markers (a follower's fetched chunk), and the txn
        # index only takes entries in offset order.
        completed_txns = sorted(
            (txn for info in pending.values() for txn in info.completed_txns),
            key=lambda txn: txn.last_offset,
        )
        for completed in completed_txns:
            self._on_txn_completed(completed)
        self.log_end_offset = last.next_offset
        self.producer_state.update_map_end_offset(self.log_end_offset)
        self._unflushed_messages += sum(h.records_count for h in batches)
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush(self.log_end_offset)
        return LogAppendInfo(
            first_offset=first.base_offset,
            last_offset=last.last_offset,
            max_timestamp=append_time if append_time >= 0 else max_ts,
            offset_of_max_timestamp=offset_of_max,
            log_append_time_ms=append_time,
            log_start_offset=self.log_start_offset,
            records_count=sum(h.records_count for h in batches),
            valid_bytes=size,
        )

    def _assign_epoch(self, epoch: int, start_offset: int) -> None:
        latest = self.epoch_cache.latest_epoch
        if latest is None or epoch > latest:
            self.epoch_cache.assign(epoch, start_offset)

    def _on_txn_completed(self, completed: CompletedTxn) -> None:
        """Index an aborted transaction (read_committed consumers skip it), then close it
        (Kafka's `LogSegment.updateTxnIndex` + `completeTxn`)."""
        if completed.is_aborted:
            lso = self.producer_state.last_stable_offset_for(completed)
            self._segment_of(completed).txn_index.append(_aborted_txn(completed, lso))
        self.producer_state.complete_txn(completed)

    def _segment_of(self, completed: CompletedTxn) -> LogSegment:
        return self._local.segments[self._local.index_for(completed.last_offset)]

    def replay_producer_state(self, from_offset: int) -> None:
        """Rebuild producer state from batches at or after `from_offset` (load, truncation),
        re-indexing aborted transactions whose index entry a crash (or, before issue 27, a
        follower's multi-producer append) lost (`TransactionIndex.restore`)."""
        with self._lock:
            start = self._local.index_for(from_offset)
            for segment in self._local.segments[start:]:
                for found in segment.iter_batches():
                    header = found.header
                    if header.next_offset <= from_offset:
                        continue
                    marker = None
                    if header.is_control and header.has_producer_id:
                        raw = segment.read_bytes(found.position, header.size_in_bytes)
                        marker = end_txn_marker_at(raw, 0, header)
                    recovered = self.producer_state.replay_batch(header, marker)
                    if recovered is not None and recovered.txn.is_aborted:
                        txn = recovered.txn
                        self._segment_of(txn).txn_index.restore(
                            _aborted_txn(txn, recovered.last_stable_offset)
                        )
            self.producer_state.update_map_end_offset(self.log_end_offset)
            self.producer_state.on_high_watermark_updated(self.high_watermark)

    def _maybe_roll(
        self, records_size: int, max_timestamp: int, last_offset: int, now_ms: int
    ) -> LogSegment:
        active = self.active_segment
        if active.should_roll(records_size, max_timestamp, last_offset, now_ms):
            return self.roll(now_ms)
        return active

    def roll(self, now_ms: int) -> LogSegment:
        """Close the active segment for appends and start a new one at the log end offset."""
        with self._lock:
            active = self.active_segment
            if active.size_bytes == 0:
                return active
            new_base = self.log_end_offset
            active.on_becoming_inactive()
            with self.flush_timer():
                active.flush()
            self.producer_state.take_snapshot(new_base)
            return self._local.roll(new_base, now_ms)

    # -- reads ------------------------------------------------------------------------------

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        upper_bound_offset: int | None = None,
        min_one_batch: bool = True,
        include_aborted: bool = False,
        zero_copy: bool = False,
    ) -> FetchDataInfo:
        """Whole batches from the one holding `start_offset`, below `upper_bound_offset`.

        The upper bound is the high watermark for consumers, the LSO for read_committed ones
        and None (the log end) for followers. Offsets outside [log start, log end] raise
        OffsetOutOfRangeError, offsets only the remote tier holds (below the local log start)
        OffsetMovedToTieredStorageError (`check_local_offset`). With `zero_copy`, large reads
        are file slices for sendfile.
        """
        with self._lock:
            self.check_local_offset(start_offset)
            upper = self.log_end_offset if upper_bound_offset is None else upper_bound_offset
            data = self._local.read(start_offset, max_bytes, upper, min_one_batch, zero_copy)
            aborted = None
            if include_aborted:
                aborted = tuple(self.collect_aborted_transactions(start_offset, upper))
            return FetchDataInfo(
                start_offset, data, self.high_watermark, self.log_start_offset, aborted
            )

    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets: (offset, timestamp) for -2 earliest, -1 latest, -3 max timestamp, or
        the first record at or after `timestamp`; None when no record is that late."""
        with self._lock:
            if timestamp == EARLIEST_TIMESTAMP:
                return self.log_start_offset, -1
            if timestamp == LATEST_TIMESTAMP:
                return self.log_end_offset, -1
            if timestamp == MAX_TIMESTAMP:
                return self._local.max_timestamp()
            return self._local.offset_by_timestamp(timestamp, self.local_log_start_offset)

    # -- transactions -----------------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """The LSO: below the first open transaction and never above the high watermark."""
        with self._lock:
            return self.producer_state.last_stable_offset(self.high_watermark)

    def last_records_of_active_producers(self) -> dict[int, tuple[int, int]]:
        """producer id -> (last data offset or -1, epoch), for the cleaner (Kafka's
        `lastRecordsOfActiveProducers`)."""
        with self._lock:
            return {
                pid: (entry.last_data_offset, entry.producer_epoch)
                for pid, entry in self.producer_state.active_producers.items()
            }

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper) (read_committed fetches)."""
        with self._lock:
            found: list[AbortedTxn] = []
            for segment in self._local.segments[self._local.index_for(start_offset) :]:
                aborted, complete = segment.txn_index.collect_aborted_txns(
                    start_offset, upper_bound_offset
                )
                found.extend(aborted)
                if complete:
                    break
            return found

    # -- high watermark, truncation, log start ----------------------------------------------

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW, clamped into [log start, log end]; returns the value kept."""
        with self._lock:
            self.high_watermark = max(self.log_start_offset, min(offset, self.log_end_offset))
            self.producer_state.on_high_watermark_updated(self.high_watermark)
            return self.high_watermark

    def truncate_to(self, target_offset: int, now_ms: int) -> bool:
        """Follower truncation: drop every batch at or above `target_offset`; returns whether
        any was dropped. Producer state is reloaded from the newest snapshot left and rebuilt
        from the batches after it, as at load (Kafka's `UnifiedLog.truncateTo` ->
        `rebuildProducerState`); `now_ms` expires idle producers found in that snapshot."""
        with self._lock:
            if target_offset >= self.log_end_offset:
                # Kafka's UnifiedLog.truncateTo: an epoch this broker stamped as leader and never
                # appended to starts at the log end; it must go, or the follower keeps asking
                # the new leader about an epoch no record has (a truncation livelock).
                self.epoch_cache.truncate_from_end(self.log_end_offset)
                return False
            if (
                target_offset <= self.local_log_start_offset
                and target_offset < self._local.bases[0]
            ):
                tiered_start = self.log_start_offset if self.remote_log_enabled else None
                self.truncate_fully_and_start_at(target_offset, tiered_start)
                return True
            self.log_end_offset = self._local.truncate_to(target_offset)
            self.epoch_cache.truncate_from_end(self.log_end_offset)
            # log_start_offset <= high_watermark <= log_end_offset before anything else can fail
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
            self.high_watermark = min(self.high_watermark, self.log_end_offset)
            reloaded = self.producer_state.truncate_and_reload(
                self.log_start_offset, self.log_end_offset, now_ms, self.high_watermark
            )
            self.replay_producer_state(reloaded.map_end_offset)
            return True

    def truncate_fully_and_start_at(
        self, new_offset: int, log_start_offset: int | None = None
    ) -> None:
        """Delete everything and restart the log empty at `new_offset`; `log_start_offset`
        (a follower rebuilding from the remote tier, Kafka's `truncateFullyAndStartAt(offset,
        Optional.of(logStartOffset))`) keeps the log start below it, else both starts move."""
        with self._lock:
            self._local.reset_at(new_offset, self._last_flush_ms)
            self.epoch_cache.clear_and_flush()
            self.producer_state.truncate_fully_and_start_at(new_offset)
            start = new_offset if log_start_offset is None else min(log_start_offset, new_offset)
            self.log_start_offset = start
            self.local_log_start_offset = self.log_end_offset = new_offset
            self.recovery_point = self.high_watermark = new_offset

    # -- cleaner support -----------------------------------------------------------------

    def replace_segments(self, cleaned: LogSegment, old_segments: list[LogSegment]) -> None:
        """Swap the cleaner's output in for `old_segments` (see `LocalLog.replace`); raises
        SegmentsChangedError when retention or truncation got there first."""
        with self._lock:
            self._local.replace(cleaned, old_segments)

    def read_segment_bytes(self, segment: LogSegment, position: int, size: int) -> bytes | None:
        """Bytes of a segment read under the log lock; None if the segment is gone."""
        with self._lock:
            if segment not in self._local.segments:
                return None
            return segment.read_bytes(position, size)

    # -- flush and close --------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """fsync segments holding offsets below `offset` (all by default) and move the recovery point."""
        with self._lock:
            offset = self.log_end_offset if offset is None else offset
            with self.flush_timer():
                self._local.flush(offset)
            self.recovery_point = max(self.recovery_point, min(offset, self.log_end_offset))
            self._unflushed_messages = 0

    def maybe_flush(self, now_ms: int) -> bool:
        """The `flush.ms` policy: fsync when the last flush is older than flush.ms."""
        with self._lock:
            if now_ms - self._last_flush_ms >= self.config.flush_ms:
                self.flush()
                self._last_flush_ms = now_ms
                return True
            return False

    def close(self) -> None:
        """Flush, snapshot producer state and close every file."""
        with self._lock:
            if self.closed:
                return
            self.flush()
            self.producer_state.take_snapshot(self.log_end_offset)
            self._local.close()
            self.closed = True

    def __repr__(self) -> str:
        return (
            f"Log({self.directory.name}, start={self.log_start_offset}, "
            f"local_start={self.local_log_start_offset}, hw={self.high_watermark}, "
            f"end={self.log_end_offset}, segments={len(self._local.segments)})"
        )


def _aborted_txn(completed: CompletedTxn, last_stable_offset: int) -> AbortedTxn:
    return AbortedTxn(
        completed.producer_id, completed.first_offset, completed.last_offset, last_stable_offset
    )
