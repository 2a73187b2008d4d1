"""The sparse time index of a log segment (`<base>.timeindex`), Kafka's `TimeIndex` byte for byte
(the file handling, truncation and searches it shares with the offset index are `AbstractIndex`'s).
"""

from __future__ import annotations

import struct
from array import array
from typing import NamedTuple

import numpy as np

from sparklog.storage.abstract_index import AbstractIndex, CorruptIndexError, InvalidOffsetError
from sparklog.structs import NO_TIMESTAMP

__all__ = ["NO_TIMESTAMP", "TimeIndex", "TimestampOffset"]

_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
_ENTRY_DTYPE = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])


class TimestampOffset(NamedTuple):
    """A timestamp and the offset at or after which every record has a larger timestamp."""

    timestamp: int
    offset: int


class TimeIndex(AbstractIndex):
    """Maps timestamps to offsets in a segment: entry (T, O) says the largest timestamp seen
    before offset O is T, so any record with a timestamp above T comes at or after O.

    On disk: 12-byte big-endian entries `(int64 timestamp, int32 offset - base_offset)`, exactly
    Kafka's `.timeindex`. Deviation: no preallocation/mmap (see `OffsetIndex`); entries live in
    memory and are appended to the file as they are added. As in Kafka, the last slot is kept for
    the entry written when the segment rolls (`is_full` leaves one free; roll passes
    `skip_full_check=True`).

    Invariants: timestamps strictly increase; relative offsets are non-decreasing and lie in
    [0, 2**31 - 1]; a timestamp <= the last one (or NO_TIMESTAMP on an empty index) is not added.
    Thread-safety: none; the owning log serialises access.
    """

    entry_size_bytes = _ENTRY.size
    kind = "time index"

    def _load(self, data: bytes) -> None:
        loaded = np.frombuffer(data, dtype=_ENTRY_DTYPE, count=len(data) // _ENTRY.size)
        self._timestamps = array("q", loaded["timestamp"].astype(np.int64).tobytes())
        self._relative_offsets = array("i", loaded["relative_offset"].astype(np.int32).tobytes())

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or `(NO_TIMESTAMP, base_offset)` when the index is empty."""
        if not self._timestamps:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(self._timestamps[-1], self.base_offset + self._relative_offsets[-1])

    def is_full(self) -> bool:
        """True when only the slot reserved for the roll entry is left (Kafka's override)."""
        return self.entries_count >= self.max_entries - 1

    def entry(self, n: int) -> TimestampOffset:
        """The n-th entry (0-based)."""
        self._check_slot(n)
        return TimestampOffset(self._timestamps[n], self.base_offset + self._relative_offsets[n])

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add `(timestamp, offset)` if `timestamp` is above the last entry's (Kafka's `maybeAppend`).

        An offset below the last entry's, or a timestamp below the last entry's, is a caller bug
        and raises; re-adding the last entry (as a roll does) is a no-op.
        """
        if not skip_full_check:
            self._check_not_full()
        last = self.last_entry
        if self._timestamps and offset < last.offset:
            raise InvalidOffsetError(
                f"Attempt to append an offset ({offset}) to slot {self.entries_count} no larger "
                f"than the last offset appended ({last.offset}) to {self.path}"
            )
        if self._timestamps and timestamp < last.timestamp:
            raise ValueError(
                f"Attempt to append a timestamp ({timestamp}) to slot {self.entries_count} no "
                f"larger than the last timestamp appended ({last.timestamp}) to {self.path}"
            )
        if timestamp <= last.timestamp:
            return
        relative = self.relative_offset(offset)
        self._append_bytes(_ENTRY.pack(timestamp, relative))
        self._timestamps.append(timestamp)
        self._relative_offsets.append(relative)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= `target_timestamp`; `(-1, base_offset)` if none."""
        slot = self.largest_lower_bound_slot(self._timestamps, target_timestamp)
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self.entry(slot)

    def _columns(self) -> tuple[array, ...]:
        return (self._relative_offsets, self._timestamps)

    def sanity_check(self) -> None:
        """Raise `CorruptIndexError` if the file is torn or its entries break the invariants."""
        self._check_file_size()
        if not self._timestamps:
            return
        # Copies, not views: see OffsetIndex.sanity_check.
        timestamps = np.frombuffer(self._timestamps.tobytes(), dtype=np.int64)
        relative = np.frombuffer(self._relative_offsets.tobytes(), dtype=np.int32)
        self._check_base(int(relative[0]))
        bad = np.flatnonzero(np.diff(timestamps) <= 0)
        if bad.size:
            slot = int(bad[0]) + 1
            raise CorruptIndexError(
                f"Corrupt time index found, time index file {self.path} entry {slot} has "
                f"timestamp {int(timestamps[slot])} not above the previous entry's "
                f"{int(timestamps[slot - 1])}"
            )
        if np.any(np.diff(relative) < 0):
            raise CorruptIndexError(
                f"Corrupt time index found, time index file {self.path} has decreasing offsets"
            )
