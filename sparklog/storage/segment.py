"""One log segment: `<base>.log` plus its `.index`, `.timeindex` and `.txnindex` (Kafka's `LogSegment`).

The `.log` file holds whole v2 batches back to back, exactly as they arrived (after the leader
assigned offsets). The offset and time indexes are sparse: an entry after every
`index.interval.bytes` of appended batches, pointing at a batch start.

Invariants: batches in the file are contiguous, valid and in offset order; `size_bytes` is the
file length; every index entry points at a batch start inside the file.
Thread-safety: none; the owning `Log` serialises access.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sparklog.records.batch import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    RecordBatch,
    TimestampType,
    read_header,
)
from sparklog.records.crc import crc32c
from sparklog.records.errors import CorruptRecordError
from sparklog.records.file_records import ZERO_COPY_MIN_BYTES, FileSlice
from sparklog.storage.abstract_index import CorruptIndexError
from sparklog.storage.config import LogConfig
from sparklog.storage.offset_index import OffsetIndex
from sparklog.storage.time_index import TimeIndex
from sparklog.storage.txn_index import TransactionIndex
from sparklog.structs import NO_TIMESTAMP

_log = logging.getLogger(__name__)

_READ_AHEAD_BYTES = 64 * 1024
_OFFSET_AND_LENGTH = struct.Struct(">qi")


_IOV_MAX = 1024  # pwritev takes at most this many buffers (Linux UIO_MAXIOV)


def _write_all(fd: int, pieces: list, offset: int) -> int:
    """Write `pieces` at `offset` with pwritev, finishing any short write; returns the bytes."""
    start = offset
    for i in range(0, len(pieces), _IOV_MAX):
        group = pieces[i : i + _IOV_MAX]
        size = sum(len(p) for p in group)
        written = os.pwritev(fd, group, offset)
        if written < size:
            rest = memoryview(b"".join(bytes(p) for p in group))[written:]
            while rest:
                n = os.pwrite(fd, rest, offset + size - len(rest))
                rest = rest[n:]
        offset += size
    return offset - start


def file_name(base_offset: int, suffix: str) -> str:
    """Kafka's file name for a segment file: 20-digit zero-padded base offset + suffix."""
    return f"{base_offset:020d}{suffix}"


@dataclass(frozen=True, slots=True)
class BatchPosition:
    """Where a batch sits in a segment file."""

    header: BatchHeader
    position: int


class LogSegment:
    """A segment's files and the bookkeeping for appends, reads, rolls and recovery."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        base_offset: int,
        config: LogConfig,
        *,
        created_ms: int,
        suffix: str = "",
    ) -> None:
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.config = config
        self.suffix = suffix
        self.created_ms = created_ms
        # set by the log loader when an index file was missing at start: recover before use
        self.needs_recovery = False
        self._reported_corruption: set[int] = set()  # positions of damaged batches, logged once
        self.log_path = self.directory / file_name(base_offset, ".log" + suffix)
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self.size_bytes = os.fstat(self._fd).st_size
        self.offset_index = OffsetIndex(
            self.directory / file_name(base_offset, ".index" + suffix),
            base_offset,
            config.segment_index_bytes,
        )
        self.time_index = TimeIndex(
            self.directory / file_name(base_offset, ".timeindex" + suffix),
            base_offset,
            config.segment_index_bytes,
        )
        self.txn_index = TransactionIndex(
            self.directory / file_name(base_offset, ".txnindex" + suffix), base_offset
        )
        self._bytes_since_last_index_entry = 0
        self.max_timestamp_so_far = NO_TIMESTAMP
        self.offset_of_max_timestamp_so_far = base_offset
        self.rolling_based_timestamp: int | None = None
        self._dirty = False
        self.closed = False
        if self.size_bytes:
            self._load_timestamps()

    def _load_timestamps(self) -> None:
        """Largest timestamp and roll base of an existing segment (Kafka's
        `loadLargestTimestamp`): the last time index entry, then a scan of the batches after it."""
        last = self.time_index.last_entry
        if last.timestamp != NO_TIMESTAMP:
            self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = last
        try:
            first = next(self.iter_batches(0), None)
            if first is not None:
                self.rolling_based_timestamp = first.header.max_timestamp
            hint = self.offset_index.lookup(self.offset_of_max_timestamp_so_far).position
            for found in self.iter_batches(min(hint, self.size_bytes)):
                if found.header.max_timestamp > self.max_timestamp_so_far:
                    self.max_timestamp_so_far = found.header.max_timestamp
                    self.offset_of_max_timestamp_so_far = found.header.last_offset
        except CorruptRecordError:
            pass  # a torn tail: recovery rebuilds everything from the batches

    # -- appends --------------------------------------------------------------------------

    def append(
        self,
        records: bytes | memoryview | list[bytes | bytearray | memoryview],
        batches: list[BatchHeader],
    ) -> None:
        """Append whole batches (already validated, offsets assigned) and index them.

        `records` is the bytes, or a list of pieces written with one `pwritev` (the log stamps
        offsets into small prefixes instead of copying batches). `batches` are the headers in
        order; the caller has checked that offsets increase and fit this segment (`can_hold`).
        """
        if not batches:
            return
        pieces = records if isinstance(records, list) else [records]
        total = _write_all(self._fd, pieces, self.size_bytes)
        position = self.size_bytes
        for header in batches:
            self.append_indexes_only(header, position)
            position += header.size_in_bytes
        assert position == self.size_bytes + total, "batch headers disagree with the bytes"
        self.size_bytes = position
        self._dirty = True

    def can_hold(self, last_offset: int) -> bool:
        """Whether `last_offset` fits this segment's int32 relative offsets."""
        return 0 <= last_offset - self.base_offset <= 2**31 - 1

    def should_roll(
        self, records_size: int, max_timestamp: int, last_offset: int, now_ms: int
    ) -> bool:
        """Kafka's `LogSegment.shouldRoll`: size, age (segment.ms), full indexes, offset overflow."""
        if self.size_bytes == 0:
            return not self.can_hold(last_offset)
        if self.size_bytes > self.config.segment_bytes - records_size:
            return True
        if self.rolling_based_timestamp is not None and self.rolling_based_timestamp >= 0:
            waited_ms = max_timestamp - self.rolling_based_timestamp
        else:
            waited_ms = now_ms - self.created_ms
        if waited_ms > self.config.segment_ms - self.config.segment_jitter_ms:
            return True
        return (
            self.offset_index.is_full()
            or self.time_index.is_full()
            or not self.can_hold(last_offset)
        )

    def on_becoming_inactive(self) -> None:
        """At roll: write the final time index entry (Kafka's `onBecomeInactiveSegment`)."""
        if self.max_timestamp_so_far != NO_TIMESTAMP:
            self.time_index.maybe_append(
                self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, skip_full_check=True
            )

    # -- reads ----------------------------------------------------------------------------

    def read_bytes(self, position: int, size: int) -> bytes:
        """`size` bytes of the `.log` file from `position` (fewer at the end of the file)."""
        return os.pread(self._fd, max(0, min(size, self.size_bytes - position)), position)

    def iter_batches(
        self, start_position: int = 0, end_position: int | None = None
    ) -> Iterator[BatchPosition]:
        """Headers of the batches from `start_position` on (the file is trusted: use `recover` first)."""
        end = self.size_bytes if end_position is None else end_position
        position = start_position
        buf = b""
        buf_start = position
        while position + LOG_OVERHEAD <= end:
            if position + HEADER_SIZE > buf_start + len(buf):
                buf_start = position
                buf = os.pread(self._fd, _READ_AHEAD_BYTES, position)
                if len(buf) < HEADER_SIZE:
                    return
            header = read_header(buf, position - buf_start)
            if position + header.size_in_bytes > end:
                return
            yield BatchPosition(header, position)
            position += header.size_in_bytes

    def translate_offset(self, offset: int, starting_position: int = 0) -> BatchPosition | None:
        """The first batch whose last offset >= `offset`, searching from the index hint."""
        hint = self.offset_index.lookup(offset).position
        for found in self.iter_batches(max(hint, starting_position)):
            if found.header.last_offset >= offset:
                return found
        return None

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_position: int | None = None,
        *,
        min_one_batch: bool = True,
        zero_copy: bool = False,
    ) -> tuple[int, bytes | FileSlice] | None:
        """Whole batches from the one holding `start_offset`, up to `max_bytes` and `max_position`.

        Returns (position, bytes), or None when no batch in this segment reaches `start_offset`.
        With `min_one_batch` the first batch is returned whole even if larger than `max_bytes`
        (Kafka's KIP-74 rule, so a consumer always makes progress). With `zero_copy` a read of
        at least `ZERO_COPY_MIN_BYTES` is a `FileSlice` for sendfile, its CRCs checked in place.
        """
        first = self.translate_offset(start_offset)
        if first is None:
            return None
        limit = self.size_bytes if max_position is None else min(max_position, self.size_bytes)
        if first.position >= limit:
            return first.position, b""
        end = first.position
        batches: list[BatchPosition] = []
        try:
            for found in self.iter_batches(first.position, limit):
                next_end = found.position + found.header.size_in_bytes
                if next_end - first.position > max_bytes and not (
                    min_one_batch and end == first.position
                ):
                    break
                batches.append(found)
                end = next_end
                if end - first.position >= max_bytes:
                    break
        except CorruptRecordError:
            if not batches:  # the header the reader asked for is itself damaged
                raise self._corrupt_on_disk(first.position, "its header is damaged") from None
        size = min(end, self.size_bytes) - first.position
        records: FileSlice | bytes | None = (
            self._zero_copy_read(first.position, size, batches) if zero_copy else None
        )
        if records is not None:
            length = len(records)
        else:
            data = self.read_bytes(first.position, end - first.position)
            length = _good_length(data, batches)
            records = data[:length]
        if not length and batches:  # no reader is ever handed a damaged batch
            raise self._corrupt_on_disk(first.position, "its CRC-32C does not match")
        return first.position, records

    def _zero_copy_read(
        self, start: int, size: int, batches: list[BatchPosition]
    ) -> FileSlice | None:
        """A `FileSlice` of the batches at [start, start + size) whose CRCs match, checked in
        the page cache without a copy; None for a small read, or when no descriptor or
        mapping is to be had (the copying read then runs, and reports a real disk error)."""
        if size < ZERO_COPY_MIN_BYTES:
            return None
        aligned = start - start % mmap.ALLOCATIONGRANULARITY
        try:
            with mmap.mmap(
                self._fd,
                size + start - aligned,
                flags=mmap.MAP_SHARED | _MAP_POPULATE,
                prot=mmap.PROT_READ,
                offset=aligned,
            ) as mapped:
                length = _good_length(memoryview(mapped)[start - aligned :], batches)
            return FileSlice(self._fd, start, length) if length else None
        except OSError as e:
            _log.debug("zero-copy read of %s failed (%s); copying instead", self.log_path, e)
            return None

    def _corrupt_on_disk(self, position: int, why: str) -> CorruptRecordError:
        """The error (CORRUPT_MESSAGE) for a batch damaged after it was written, logged once per
        batch with the file, the byte and the way to repair it."""
        path = self.log_path
        if position in self._reported_corruption:
            return CorruptRecordError(position, f"batch in {path.name} is corrupt on disk: {why}")
        self._reported_corruption.add(position)
        _log.error(
            "batch at byte %d of %s is corrupt on disk (%s): refusing to serve it; stop the "
            "broker and delete this partition's directory so the replica re-fetches from the "
            "leader, or let a follower with a good copy take leadership",
            position,
            path,
            why,
        )
        return CorruptRecordError(position, f"batch in {path.name} is corrupt on disk: {why}")

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int = 0
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp`, or None."""
        hint_offset = self.time_index.lookup(timestamp).offset
        start = self.translate_offset(max(hint_offset, starting_offset))
        if start is None:
            return None
        for found in self.iter_batches(start.position):
            header = found.header
            if header.max_timestamp < timestamp or header.is_control:
                continue
            raw = self.read_bytes(found.position, header.size_in_bytes)
            for record in RecordBatch(raw, found.position).records():
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    return record.offset, record.timestamp
        return None

    def find_max_timestamp(self) -> tuple[int, int] | None:
        """ListOffsets MAX_TIMESTAMP: (offset, timestamp) of the first record holding the largest
        timestamp, as Kafka's `RecordBatch.offsetOfMaxTimestamp` (a LogAppendTime batch: its
        first record); None when the segment has no timestamps."""
        largest = self.max_timestamp_so_far
        if largest < 0:
            return None
        start = self.translate_offset(self.offset_of_max_timestamp_so_far)
        if start is None:
            return None
        for found in self.iter_batches(start.position):
            header = found.header
            if header.max_timestamp != largest:
                continue
            if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
                return header.base_offset, largest
            raw = self.read_bytes(found.position, header.size_in_bytes)
            for record in RecordBatch(raw, found.position).records():
                if record.timestamp == largest:
                    return record.offset, largest
        return None

    def read_next_offset(self) -> int:
        """The offset after the last batch (the base offset when empty)."""
        hint = (
            self.offset_index.lookup(2**63 - 1).position if self.offset_index.entries_count else 0
        )
        next_offset = self.base_offset
        for found in self.iter_batches(hint):
            next_offset = found.header.next_offset
        return next_offset

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp in the segment (retention by time compares it)."""
        return self.max_timestamp_so_far

    # -- recovery and truncation ----------------------------------------------------------

    def recover(self, on_batch=None) -> int:
        """Validate every batch, rebuild the indexes, cut the file at the first bad byte.

        `on_batch(header, position)` sees each valid batch (the log rebuilds producer state and
        the epoch cache through it). Returns the number of bytes truncated.
        """
        self.offset_index.reset()
        self.time_index.reset()
        try:
            self.txn_index.sanity_check()
        except CorruptIndexError:
            self.txn_index.reset()
        self._bytes_since_last_index_entry = 0
        self.max_timestamp_so_far = NO_TIMESTAMP
        self.offset_of_max_timestamp_so_far = self.base_offset
        self.rolling_based_timestamp = None
        size = os.fstat(self._fd).st_size
        position = 0
        next_offset = self.base_offset
        while position < size:
            try:
                header, raw = self._read_valid_batch(position, size)
            except CorruptRecordError:
                break
            self.size_bytes = position
            self.append_indexes_only(header, position)
            if on_batch is not None:
                on_batch(header, position, raw)
            position += header.size_in_bytes
            next_offset = header.next_offset
        truncated = size - position
        self.txn_index.truncate_to(next_offset)
        if truncated:
            os.ftruncate(self._fd, position)
        self.size_bytes = position
        self._dirty = True
        return truncated

    def _read_valid_batch(self, position: int, file_size: int) -> tuple[BatchHeader, bytes]:
        head = os.pread(self._fd, HEADER_SIZE, position)
        header = read_header(head, 0)
        if position + header.size_in_bytes > file_size:
            raise CorruptRecordError(position, "batch runs past the end of the file")
        if header.last_offset < self.base_offset or not self.can_hold(header.last_offset):
            raise CorruptRecordError(position, f"offset {header.base_offset} outside the segment")
        raw = os.pread(self._fd, header.size_in_bytes, position)
        RecordBatch(raw, position).ensure_valid()
        return header, raw

    def append_indexes_only(self, header: BatchHeader, position: int) -> None:
        """Index a batch written at `position` (appends, and recovery of a file)."""
        if header.max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = header.max_timestamp
            self.offset_of_max_timestamp_so_far = header.last_offset
        if self.rolling_based_timestamp is None:
            self.rolling_based_timestamp = header.max_timestamp
        if self._bytes_since_last_index_entry > self.config.index_interval_bytes:
            self.offset_index.append(header.last_offset, position)
            self.time_index.maybe_append(
                self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far
            )
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += header.size_in_bytes

    def sanity_check(self) -> None:
        """Raise CorruptIndexError when an index file is inconsistent or missing."""
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.sanity_check()
        last = self.offset_index.last_offset if self.offset_index.entries_count else None
        if (
            last is not None
            and self.offset_index.entry(self.offset_index.entries_count - 1).position
            > self.size_bytes
        ):
            raise CorruptIndexError(
                f"index {self.offset_index.path} points past the end of {self.log_path}"
            )

    def truncate_to(self, offset: int) -> int:
        """Drop every batch with last offset >= `offset`; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = self.size_bytes - found.position
        os.ftruncate(self._fd, found.position)
        self.size_bytes = found.position
        self._bytes_since_last_index_entry = 0
        self._refresh_after_truncation()
        self._dirty = True
        return removed

    def _refresh_after_truncation(self) -> None:
        self.max_timestamp_so_far = NO_TIMESTAMP
        self.offset_of_max_timestamp_so_far = self.base_offset
        self.rolling_based_timestamp = None
        if self.size_bytes:
            self._load_timestamps()

    # -- files ----------------------------------------------------------------------------

    def flush(self) -> None:
        """fsync the log and its indexes."""
        if self._dirty:
            os.fsync(self._fd)
            self._dirty = False
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        if self.closed:
            return
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        os.close(self._fd)
        self.closed = True

    def delete(self) -> None:
        """Close and remove every file of the segment."""
        self.close()
        self.log_path.unlink(missing_ok=True)
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.delete()

    def change_suffix(self, new_suffix: str) -> None:
        """Rename every file from `<name><old suffix>` to `<name><new suffix>` (cleaner swaps)."""
        new_log = self.directory / file_name(self.base_offset, ".log" + new_suffix)
        os.replace(self.log_path, new_log)
        self.log_path = new_log
        for kind, index in (
            (".index", self.offset_index),
            (".timeindex", self.time_index),
            (".txnindex", self.txn_index),
        ):
            index.rename(self.directory / file_name(self.base_offset, kind + new_suffix))
        self.suffix = new_suffix

    def __repr__(self) -> str:
        return (
            f"LogSegment(base={self.base_offset}, bytes={self.size_bytes}, suffix={self.suffix!r})"
        )


#: map the pages at once (Linux): as fast as a copying read, and nothing is copied
_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


def _good_length(data: bytes | memoryview, batches: list[BatchPosition]) -> int:
    """How many bytes of `data` (the bytes of `batches`) come before the first batch whose
    CRC-32C no longer matches (a flipped bit on disk)."""
    with memoryview(data) as view:
        start = batches[0].position if batches else 0
        for found in batches:
            at = found.position - start
            size = found.header.size_in_bytes
            if at + size > len(view) or crc32c(view[at + ATTRIBUTES_OFFSET : at + size]) != (
                found.header.crc
            ):
                return at
        return len(view)
