"""The sparse offset index of a log segment (`<base>.index`), Kafka's `OffsetIndex` byte for byte
(the file handling, truncation and searches it shares with the time index are `AbstractIndex`'s).
"""

from __future__ import annotations

import struct
import sys
from array import array
from typing import NamedTuple

import numpy as np

from sparklog.storage.abstract_index import (
    AbstractIndex,
    CorruptIndexError,
    InvalidOffsetError,
)
from sparklog.structs import INT32_MAX

__all__ = ["OffsetIndex", "OffsetPosition"]

_ENTRY = struct.Struct(">ii")  # relative offset, file position
assert array("i").itemsize == 4 and array("q").itemsize == 8


class OffsetPosition(NamedTuple):
    """An offset and the byte position of its batch in the segment's `.log` file."""

    offset: int
    position: int


class OffsetIndex(AbstractIndex):
    """Maps offsets to byte positions in a segment's `.log`; sparse (one entry per
    `index.interval.bytes` of appended batches).

    On disk: 8-byte big-endian entries `(int32 offset - base_offset, int32 position)`, exactly
    Kafka's `.index` format; the entries live in memory as two int32 arrays (no preallocated
    mmap: see `AbstractIndex`).

    Invariants: relative offsets strictly increase and lie in [0, 2**31 - 1]; positions are
    non-decreasing and >= 0; the file holds exactly `entries_count` entries (a loaded file may
    not: `sanity_check` reports it, and the log then rebuilds the index).
    Thread-safety: none; the owning log serialises access.
    """

    entry_size_bytes = _ENTRY.size
    kind = "index"

    def _load(self, data: bytes) -> None:
        words = array("i", data[: len(data) - len(data) % self.entry_size_bytes])
        if sys.byteorder == "little":
            words.byteswap()
        self._relative_offsets = words[0::2]
        self._positions = words[1::2]

    @property
    def last_offset(self) -> int:
        """The offset of the last entry, or `base_offset` when the index is empty."""
        if not self._relative_offsets:
            return self.base_offset
        return self.base_offset + self._relative_offsets[-1]

    def entry(self, n: int) -> OffsetPosition:
        """The n-th entry (0-based)."""
        self._check_slot(n)
        return OffsetPosition(self.base_offset + self._relative_offsets[n], self._positions[n])

    def append(self, offset: int, position: int) -> None:
        """Add an entry; the offset must exceed `last_offset`, the position must not go back."""
        self._check_not_full()
        if self._relative_offsets and offset <= self.last_offset:
            raise InvalidOffsetError(
                f"Attempt to append an offset {offset} to position {self.entries_count} no larger "
                f"than the last offset appended ({self.last_offset}) to {self.path}"
            )
        last_position = self._positions[-1] if self._positions else 0
        if not last_position <= position <= INT32_MAX:
            raise ValueError(
                f"Attempt to append position {position} after position {last_position} to {self.path}"
            )
        relative = self.relative_offset(offset)
        self._append_bytes(_ENTRY.pack(relative, position))
        self._relative_offsets.append(relative)
        self._positions.append(position)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset <= `target_offset`; `(base_offset, 0)` if none."""
        slot = self.largest_lower_bound_slot(
            self._relative_offsets, target_offset - self.base_offset
        )
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return OffsetPosition(
            self.base_offset + self._relative_offsets[slot], self._positions[slot]
        )

    def fetch_upper_bound_offset(
        self, fetch_position: int, fetch_size_bytes: int
    ) -> OffsetPosition | None:
        """The first entry at or past `fetch_position + fetch_size_bytes`: an offset surely
        outside a fetch of that size (Kafka's `fetchUpperBoundOffset`); None if there is none."""
        slot = self.smallest_upper_bound_slot(self._positions, fetch_position + fetch_size_bytes)
        return self.entry(slot) if slot < self.entries_count else None

    def _columns(self) -> tuple[array, ...]:
        return (self._relative_offsets, self._positions)

    def sanity_check(self) -> None:
        """Raise `CorruptIndexError` if the file is torn or its entries break the invariants."""
        self._check_file_size()
        if not self._relative_offsets:
            return
        # Copies: a view would pin the arrays (BufferError on resize) while the raised error's
        # traceback keeps this frame alive, e.g. in the caller's `except` that resets the index.
        relative = np.frombuffer(self._relative_offsets.tobytes(), dtype=np.int32)
        positions = np.frombuffer(self._positions.tobytes(), dtype=np.int32)
        self._check_base(int(relative[0]))
        bad = np.flatnonzero(np.diff(relative) <= 0)
        if bad.size:
            slot = int(bad[0]) + 1
            raise CorruptIndexError(
                f"Corrupt index found, index file {self.path} entry {slot} has offset "
                f"{self.entry(slot).offset} not above the previous entry's {self.entry(slot - 1).offset}"
            )
        if positions[0] < 0 or np.any(np.diff(positions) < 0):
            raise CorruptIndexError(
                f"Corrupt index found, index file {self.path} has decreasing positions"
            )
