"""The sparse offset index of a log segment (`<base>.index`), Kafka's `OffsetIndex` byte for byte.

Also holds `IndexFile`, the file handling shared with the time and transaction indexes (Kafka's
`AbstractIndex`), and the index errors.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import NamedTuple

import numpy as np

from sparklog.structs import INT32_MAX

__all__ = [
    "DEFAULT_MAX_INDEX_SIZE_BYTES",
    "CorruptIndexError",
    "IndexFile",
    "IndexOffsetOverflowError",
    "InvalidOffsetError",
    "OffsetIndex",
    "OffsetPosition",
    "SortedIndexFile",
]

DEFAULT_MAX_INDEX_SIZE_BYTES = 10 * 1024 * 1024  # segment.index.bytes
_ENTRY = struct.Struct(">ii")  # relative offset, file position
assert array("i").itemsize == 4 and array("q").itemsize == 8


class CorruptIndexError(Exception):
    """An index file on disk is inconsistent (Kafka's `CorruptIndexException`); rebuild it."""


class InvalidOffsetError(ValueError):
    """An index append whose offset does not follow the last one (Kafka's `InvalidOffsetException`)."""


class IndexOffsetOverflowError(ValueError):
    """The offset is not within int32 of the base offset (Kafka's `IndexOffsetOverflowException`)."""


class OffsetPosition(NamedTuple):
    """An offset and the byte position of its batch in the segment's `.log` file."""

    offset: int
    position: int


class IndexFile:
    """An append-only index file of fixed-size entries: open, append, truncate, rename, delete.

    Kafka mmaps a preallocated file; we append each entry with one `write` and truncate the file
    on truncation, so the file always holds exactly the valid entries (what Kafka's
    `trimToValidSize` leaves on close). The write descriptor opens on the first write and is
    released by `close`/`delete`; later writes reopen it.

    Thread-safety: none; the owning log serialises access.
    """

    entry_size_bytes: int = 0  # set by subclasses

    def __init__(self, path: str | os.PathLike[str], base_offset: int, *, create: bool) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self._fd: int | None = None
        self._dirty = False  # written since the last fsync
        self._deleted = False
        self._file_size_bytes = 0  # size on disk, kept to report torn files in sanity checks
        if create and not self.path.exists():
            self.path.touch()

    def _read_file(self) -> bytes:
        """The file's bytes at load time (empty if missing)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        self._file_size_bytes = len(data)
        return data

    def _write_fd(self) -> int:
        assert not self._deleted, f"write to deleted index {self.path}"
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return self._fd

    def _append_bytes(self, data: bytes) -> None:
        assert self._file_size_bytes % self.entry_size_bytes == 0, f"append to torn {self.path}"
        fd = self._write_fd()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        self._file_size_bytes += len(data)
        self._dirty = True

    def _truncate_file(self, size_bytes: int) -> None:
        os.ftruncate(self._write_fd(), size_bytes)
        self._file_size_bytes = size_bytes
        self._dirty = True

    def _check_file_size(self) -> None:
        if self._file_size_bytes % self.entry_size_bytes:
            raise CorruptIndexError(
                f"Index file {self.path} is corrupt, found {self._file_size_bytes} bytes which is "
                f"not a multiple of {self.entry_size_bytes}"
            )

    def relative_offset(self, offset: int) -> int:
        """`offset - base_offset`, raising `IndexOffsetOverflowError` if it does not fit an int32."""
        relative = offset - self.base_offset
        if not 0 <= relative <= INT32_MAX:
            raise IndexOffsetOverflowError(f"Integer overflow for offset: {offset} ({self.path})")
        return relative

    def can_append_offset(self, offset: int) -> bool:
        """True if `offset` can be stored relative to this index's base offset."""
        return 0 <= offset - self.base_offset <= INT32_MAX

    def flush(self) -> None:
        """fsync what was written since the last flush."""
        if self._dirty and not self._deleted:
            os.fsync(self._write_fd())
            self._dirty = False

    def close(self) -> None:
        """Release the file descriptor (Kafka's `close`; the file already has its valid size)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> bool:
        """Close and delete the file; False if it did not exist (Kafka's `deleteIfExists`)."""
        self.close()
        self._deleted = True
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    def rename(self, new_path: str | os.PathLike[str]) -> None:
        """Rename the file (e.g. to a `.deleted`, `.cleaned` or `.swap` name); an open fd follows."""
        new_path = Path(new_path)
        if self.path.exists():
            os.replace(self.path, new_path)
        self.path = new_path


class SortedIndexFile(IndexFile):
    """An index whose entries are sorted by relative offset, kept as parallel arrays
    (`_columns()`, the first being `_relative_offsets`): shared truncation of the offset and
    time indexes."""

    _relative_offsets: array

    def _columns(self) -> tuple[array, ...]:
        raise NotImplementedError

    def truncate_to(self, offset: int) -> None:
        """Remove the entries with offset >= `offset`."""
        self._truncate_to_entries(bisect_left(self._relative_offsets, offset - self.base_offset))

    def truncate(self) -> None:
        """Remove all entries."""
        self._truncate_to_entries(0)

    def reset(self) -> None:
        """Remove all entries (Kafka's `reset`, used before rebuilding the index)."""
        self._truncate_to_entries(0)

    def _truncate_to_entries(self, count: int) -> None:
        size_bytes = count * self.entry_size_bytes
        if count >= len(self._relative_offsets) and size_bytes == self._file_size_bytes:
            return
        self._truncate_file(size_bytes)
        for column in self._columns():
            del column[count:]


class OffsetIndex(SortedIndexFile):
    """Maps offsets to byte positions in a segment's `.log`; sparse (one entry per
    `index.interval.bytes` of appended batches).

    On disk: 8-byte big-endian entries `(int32 offset - base_offset, int32 position)`, exactly
    Kafka's `.index` format. Deviation: Kafka preallocates `max_index_size_bytes` and mmaps the
    file; we keep the entries in memory (two int32 arrays, binary-searched) and append each entry
    to the file as it is added, so the file never carries a zero-filled tail.

    Invariants: relative offsets strictly increase and lie in [0, 2**31 - 1]; positions are
    non-decreasing and >= 0; the file holds exactly `entries_count` entries (a loaded file may
    not: `sanity_check` reports it, and the log then rebuilds the index).
    Thread-safety: none; the owning log serialises access.
    """

    entry_size_bytes = _ENTRY.size

    def __init__(
        self,
        path: str | os.PathLike[str],
        base_offset: int,
        max_index_size_bytes: int = DEFAULT_MAX_INDEX_SIZE_BYTES,
    ) -> None:
        if max_index_size_bytes < self.entry_size_bytes:
            raise ValueError(f"Invalid max index size: {max_index_size_bytes}")
        super().__init__(path, base_offset, create=True)
        self.max_index_size_bytes = max_index_size_bytes
        data = self._read_file()
        words = array("i", data[: len(data) - len(data) % self.entry_size_bytes])
        if sys.byteorder == "little":
            words.byteswap()
        self._relative_offsets = words[0::2]
        self._positions = words[1::2]

    @property
    def entries_count(self) -> int:
        return len(self._relative_offsets)

    @property
    def max_entries(self) -> int:
        return self.max_index_size_bytes // self.entry_size_bytes

    @property
    def size_bytes(self) -> int:
        """Bytes used by the entries (Kafka's `sizeInBytes`)."""
        return self.entries_count * self.entry_size_bytes

    @property
    def last_offset(self) -> int:
        """The offset of the last entry, or `base_offset` when the index is empty."""
        if not self._relative_offsets:
            return self.base_offset
        return self.base_offset + self._relative_offsets[-1]

    def is_full(self) -> bool:
        return self.entries_count >= self.max_entries

    def entry(self, n: int) -> OffsetPosition:
        """The n-th entry (0-based)."""
        if not 0 <= n < self.entries_count:
            raise IndexError(f"entry {n} requested from index {self.path} of {self.entries_count}")
        return OffsetPosition(self.base_offset + self._relative_offsets[n], self._positions[n])

    def entries(self) -> list[OffsetPosition]:
        """All entries, oldest first."""
        return [self.entry(n) for n in range(self.entries_count)]

    def append(self, offset: int, position: int) -> None:
        """Add an entry; the offset must exceed `last_offset`, the position must not go back."""
        if self.is_full():
            raise ValueError(
                f"Attempt to append to a full index {self.path} ({self.entries_count})"
            )
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
        slot = bisect_right(self._relative_offsets, target_offset - self.base_offset) - 1
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
        slot = bisect_left(self._positions, fetch_position + fetch_size_bytes)
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
        if relative[0] < 0:
            raise CorruptIndexError(
                f"Corrupt index found, index file {self.path} has an offset "
                f"{self.base_offset + int(relative[0])} less than the base offset {self.base_offset}"
            )
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
