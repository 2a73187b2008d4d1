"""The segments of one partition replica on local disk (Kafka's `LocalLog`).

Keeps the segments in offset order with their base offsets for lookups, and does what only
touches files: roll, read whole batches up to a byte budget, find offsets by timestamp, cut the
tail, swap in cleaned segments, flush and close. Offsets, producer state, transactions and the
high watermark live in `log.Log` (Kafka's `UnifiedLog`), which owns a `LocalLog` and holds its
lock around every call: a `LocalLog` is not thread-safe on its own.

Invariants: at least one segment; segments sorted by base offset; only the last (active) one
is appended to.
"""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import cast

from sparklog.records.errors import CorruptRecordError
from sparklog.records.file_records import FileRecords, FileSlice
from sparklog.storage.checkpoint import fsync_dir
from sparklog.storage.config import LogConfig
from sparklog.storage.segment import LogSegment


class SegmentsChangedError(RuntimeError):
    """Retention or truncation changed the segments a clean read; the cleaner retries."""


class LocalLog:
    """A replica's segment files, in offset order."""

    def __init__(self, directory: Path, config: LogConfig, segments: list[LogSegment]) -> None:
        assert segments, "a log has at least one segment"
        self.directory = directory
        self.config = config
        self.segments = segments
        self.bases = [s.base_offset for s in segments]

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)

    def index_for(self, offset: int) -> int:
        """Index of the segment that holds `offset` (the first one for offsets below it)."""
        return max(0, bisect.bisect_right(self.bases, offset) - 1)

    def roll(self, new_base: int, now_ms: int) -> LogSegment:
        """Start a new active segment at `new_base` (the caller flushed the old one)."""
        segment = LogSegment(self.directory, new_base, self.config, created_ms=now_ms)
        self.segments.append(segment)
        self.bases.append(new_base)
        return segment

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        upper: int,
        min_one_batch: bool,
        zero_copy: bool = False,
    ) -> bytes | FileRecords:
        """Whole batches from the one holding `start_offset` to below `upper`, at most
        `max_bytes` (but one batch at least when `min_one_batch`); with `zero_copy`, large
        reads are file slices for sendfile (`FileRecords`)."""
        chunks: list[bytes | FileSlice] = []
        budget = max_bytes
        index = self.index_for(start_offset)
        offset = start_offset
        while index < len(self.segments) and offset < upper:
            segment = self.segments[index]
            max_position = self.position_of(upper, index)
            got = segment.read(
                offset,
                budget,
                max_position,
                min_one_batch=min_one_batch and not chunks,
                zero_copy=zero_copy,
            )
            if got is not None:
                position, data = got
                if data:
                    chunks.append(data)
                    budget -= len(data)
                end = segment.size_bytes if max_position is None else max_position
                if budget <= 0 or position + len(data) < end:
                    # stopped inside this segment (budget, upper bound, damaged batch):
                    # a read never skips to a later segment past unread batches
                    break
            index += 1
            if index < len(self.segments):
                offset = max(offset, self.bases[index])
        if any(isinstance(c, FileSlice) for c in chunks):
            return FileRecords(tuple(chunks))
        plain = cast(list[bytes], chunks)  # no FileSlice among them
        return plain[0] if len(plain) == 1 else b"".join(plain)

    def position_of(self, offset: int, index: int) -> int | None:
        """Byte position of `offset` in segment `index`, None if it lies beyond it."""
        if index + 1 < len(self.segments) and offset >= self.bases[index + 1]:
            return None
        try:
            found = self.segments[index].translate_offset(offset)
        except CorruptRecordError:
            # a batch damaged on disk lies below `offset`: the segment's read stops at it
            return None
        return None if found is None else found.position

    def max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp."""
        best = max(self.segments, key=lambda s: s.largest_timestamp)
        return best.find_max_timestamp()

    def offset_by_timestamp(self, timestamp: int, log_start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `timestamp`, if any."""
        for segment in self.segments:
            if segment.largest_timestamp >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp, log_start_offset)
                if found is not None:
                    return found
        return None

    def truncate_to(self, target_offset: int) -> int:
        """Drop every batch at or above `target_offset`; returns the new next offset."""
        while len(self.segments) > 1 and self.bases[-1] > target_offset:
            self.segments.pop().delete()
            self.bases.pop()
        self.active.truncate_to(target_offset)
        return self.active.read_next_offset()

    def reset_at(self, new_offset: int, now_ms: int) -> None:
        """Delete every segment and start over with one empty segment at `new_offset`."""
        for segment in self.segments:
            segment.delete()
        self.segments = [LogSegment(self.directory, new_offset, self.config, created_ms=now_ms)]
        self.bases = [new_offset]

    def delete(self, segments: list[LogSegment]) -> None:
        """Remove these (non-active) segments and their files."""
        for segment in segments:
            self.segments.remove(segment)
            self.bases.remove(segment.base_offset)
            segment.delete()

    def replace(self, cleaned: LogSegment, old_segments: list[LogSegment]) -> None:
        """Swap `cleaned` (files with suffix `.cleaned`) in for `old_segments` (Kafka's
        `replaceSegments`). The rename to `.swap` is the commit point: after a crash the loader
        completes the swap, before it the `.cleaned` files are discarded."""
        if any(s not in self.segments for s in old_segments) or self.active in old_segments:
            raise SegmentsChangedError(
                "segments changed while cleaning (retention or truncation ran)"
            )
        assert cleaned.base_offset == old_segments[0].base_offset
        cleaned.flush()
        cleaned.change_suffix(".swap")
        fsync_dir(self.directory)  # the rename to .swap is the commit point
        for segment in old_segments:
            self.segments.remove(segment)
            segment.delete()
        self.segments.append(cleaned)
        self.segments.sort(key=lambda s: s.base_offset)
        self.bases = [s.base_offset for s in self.segments]
        cleaned.change_suffix("")

    def flush(self, offset: int) -> None:
        """fsync the segments holding offsets below `offset`, and the active one."""
        for segment in self.segments:
            if segment.base_offset < offset or segment is self.active:
                segment.flush()

    def close(self) -> None:
        for segment in self.segments:
            segment.close()
