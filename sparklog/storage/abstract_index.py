"""What the offset and time indexes share (Kafka's `AbstractIndex`), and the index errors.

`IndexFile` is the file: open, append whole entries, truncate, flush, rename, delete (the
transaction index uses it too). `AbstractIndex` adds what Kafka's `AbstractIndex` gives
`OffsetIndex` and `TimeIndex`: a size bound (`segment.index.bytes`, checked when the index is
opened), the entry count and fullness, truncation to an offset, the binary searches
(`largest_lower_bound_slot`, `smallest_upper_bound_slot`) and the sanity checks common to both
(a torn file, an entry below the base offset).

Deviation from Kafka (the resize/mmap half of `AbstractIndex`): Kafka preallocates the file to
`maxIndexSize`, mmaps it, and trims it to its valid entries on close (`trimToValidSize`); here
the entries live in memory as parallel arrays, binary-searched, and each entry is appended to
the file as it is added, so the file always holds exactly the valid entries and never has a
zero-filled tail to trim or resize. The files are byte-identical to Kafka's closed indexes.
"""

from __future__ import annotations

import os
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sparklog.structs import INT32_MAX

__all__ = [
    "DEFAULT_MAX_INDEX_SIZE_BYTES",
    "AbstractIndex",
    "CorruptIndexError",
    "IndexFile",
    "IndexOffsetOverflowError",
    "InvalidOffsetError",
]

DEFAULT_MAX_INDEX_SIZE_BYTES = 10 * 1024 * 1024  # segment.index.bytes


class CorruptIndexError(Exception):
    """An index file on disk is inconsistent (Kafka's `CorruptIndexException`); rebuild it."""


class InvalidOffsetError(ValueError):
    """An index append whose offset does not follow the last one (Kafka's `InvalidOffsetException`)."""


class IndexOffsetOverflowError(ValueError):
    """The offset is not within int32 of the base offset (Kafka's `IndexOffsetOverflowException`)."""


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


class AbstractIndex(IndexFile):
    """A sparse index of a segment sorted by relative offset (Kafka's `AbstractIndex`): its
    entries are parallel arrays (`_columns()`, one of them `_relative_offsets`), loaded from
    the file by `_load` and bounded by `max_index_size_bytes`.

    Subclasses set `entry_size_bytes` and `kind` (the name their errors use), and implement
    `_load`, `_columns`, `entry` and their own appends and lookups.
    Thread-safety: none; the owning log serialises access.
    """

    #: what the errors call this index ("index", "time index")
    kind = "index"
    _relative_offsets: array

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
        self._load(self._read_file())

    def _load(self, data: bytes) -> None:
        """Set the columns from the file's bytes (a torn last entry is left out)."""
        raise NotImplementedError

    def _columns(self) -> tuple[array, ...]:
        raise NotImplementedError

    def entry(self, n: int) -> Any:
        """The n-th entry (0-based)."""
        raise NotImplementedError

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

    def is_full(self) -> bool:
        return self.entries_count >= self.max_entries

    def entries(self) -> list[Any]:
        """All entries, oldest first."""
        return [self.entry(n) for n in range(self.entries_count)]

    def _check_slot(self, n: int) -> None:
        if not 0 <= n < self.entries_count:
            raise IndexError(
                f"entry {n} requested from {self.kind} {self.path} of {self.entries_count}"
            )

    def _check_not_full(self) -> None:
        if self.is_full():
            raise ValueError(
                f"Attempt to append to a full {self.kind} {self.path} ({self.entries_count})"
            )

    # -- binary search (Kafka's largestLowerBoundSlotFor / smallestUpperBoundSlotFor) ---------

    @staticmethod
    def largest_lower_bound_slot(keys: Sequence[int], target: int) -> int:
        """The slot of the largest key <= `target` in sorted `keys`; -1 if there is none."""
        return bisect_right(keys, target) - 1

    @staticmethod
    def smallest_upper_bound_slot(keys: Sequence[int], target: int) -> int:
        """The slot of the smallest key >= `target` in sorted `keys`; `len(keys)` if none."""
        return bisect_left(keys, target)

    # -- truncation (Kafka's truncateTo / truncate / reset) -----------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove the entries with offset >= `offset`."""
        self._truncate_to_entries(
            self.smallest_upper_bound_slot(self._relative_offsets, offset - self.base_offset)
        )

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

    # -- sanity check (Kafka's sanityCheck) ---------------------------------------------------

    def _check_base(self, first_relative_offset: int) -> None:
        """The common checks: a whole number of entries, none below the base offset."""
        if first_relative_offset < 0:
            raise CorruptIndexError(
                f"Corrupt {self.kind} found, {self.kind} file {self.path} has an offset "
                f"{self.base_offset + first_relative_offset} less than the base offset "
                f"{self.base_offset}"
            )
