"""The aborted-transaction index of a log segment (`<base>.txnindex`), Kafka's `TransactionIndex`.

A read_committed fetch asks each segment from the fetch offset on for the aborted transactions
overlapping the fetched range, so the consumer can drop their records.
"""

from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass

from sparklog.storage.abstract_index import CorruptIndexError, IndexFile

__all__ = ["ABORTED_TXN_VERSION", "AbortedTxn", "TransactionIndex"]

ABORTED_TXN_VERSION = 0
# version, producerId, firstOffset, lastOffset, lastStableOffset (Kafka's AbortedTxn, 34 bytes)
_ENTRY = struct.Struct(">hqqqq")


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction: its producer, first and last (marker) offsets, and the last
    stable offset when it was aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        """The 34-byte on-disk entry (version 0)."""
        return _ENTRY.pack(
            ABORTED_TXN_VERSION,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )


class TransactionIndex(IndexFile):
    """The aborted transactions whose ABORT markers were written in one segment.

    On disk: 34-byte big-endian entries (int16 version = 0, int64 producerId, int64 firstOffset,
    int64 lastOffset, int64 lastStableOffset), exactly Kafka's `.txnindex`. As in Kafka the file
    is created by the first append; unlike Kafka (which re-reads the file on every query) the
    entries are also kept in memory. A transaction may start in an earlier segment, so
    `first_offset` can be below `start_offset`.

    Invariants: `last_offset` strictly increases from entry to entry and is >= `start_offset`
    (the segment's base offset).
    Thread-safety: none; the owning log serialises access.
    """

    entry_size_bytes = _ENTRY.size

    def __init__(self, path: str | os.PathLike[str], start_offset: int) -> None:
        super().__init__(path, start_offset, create=False)
        self._aborted: list[AbortedTxn] = []
        self._bad_version: int | None = None  # first unknown entry version found at load
        data = self._read_file()
        for n in range(len(data) // _ENTRY.size):
            version, *fields = _ENTRY.unpack_from(data, n * _ENTRY.size)
            if version != ABORTED_TXN_VERSION:
                self._bad_version = version
                break
            self._aborted.append(AbortedTxn(*fields))

    @property
    def start_offset(self) -> int:
        return self.base_offset

    @property
    def entries_count(self) -> int:
        return len(self._aborted)

    def is_empty(self) -> bool:
        return not self._aborted

    @property
    def last_offset(self) -> int | None:
        """The last offset of the last aborted transaction, None when the index is empty."""
        return self._aborted[-1].last_offset if self._aborted else None

    def append(self, aborted: AbortedTxn) -> None:
        """Add a transaction; its last offset must exceed the previous entry's."""
        assert self._bad_version is None, f"append to corrupt {self.path}"
        last_offset = self.last_offset
        if last_offset is not None and aborted.last_offset <= last_offset:
            raise ValueError(
                f"The last offset of appended transactions must increase sequentially, but "
                f"{aborted.last_offset} is not greater than current last offset {last_offset} "
                f"of index {self.path}"
            )
        self._append_bytes(aborted.to_bytes())
        self._aborted.append(aborted)

    def restore(self, aborted: AbortedTxn) -> None:
        """Replay found `aborted` in the log: keep its entry, or put it back in its place.

        Kafka rebuilds a recovered segment's index from scratch; the log's replay (load without
        a newer snapshot, truncation) also mends an index that lost an entry below its last one
        (a follower append before issue 27's fix): the entries from there on are dropped, and the
        rest of the replay, which goes on in offset order, appends them again.
        """
        n = bisect.bisect_left(self._aborted, aborted.last_offset, key=lambda a: a.last_offset)
        if n < len(self._aborted):
            found = self._aborted[n]
            same = (found.producer_id, found.first_offset, found.last_offset)
            if same == (aborted.producer_id, aborted.first_offset, aborted.last_offset):
                return
            self._truncate_to_entries(n)
        self.append(aborted)

    def all_aborted(self) -> list[AbortedTxn]:
        """Every entry, oldest first."""
        return list(self._aborted)

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset), and whether
        the search is complete (True: later segments need not be searched).

        Kafka's `collectAbortedTxns`: the search stops at the first entry whose last stable
        offset reaches the upper bound, since every later abort happened past the fetch range.
        """
        found: list[AbortedTxn] = []
        for aborted in self._aborted:
            if aborted.last_offset >= fetch_offset and aborted.first_offset < upper_bound_offset:
                found.append(aborted)
            if aborted.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Remove the entries with last offset >= `offset`."""
        keep = next(
            (n for n, aborted in enumerate(self._aborted) if aborted.last_offset >= offset),
            len(self._aborted),
        )
        self._truncate_to_entries(keep)

    def reset(self) -> None:
        """Remove all entries (Kafka's `reset`)."""
        self._truncate_to_entries(0)

    def _truncate_to_entries(self, count: int) -> None:
        size_bytes = count * self.entry_size_bytes
        if size_bytes == self._file_size_bytes:
            return
        self._truncate_file(size_bytes)
        del self._aborted[count:]
        self._bad_version = None

    def sanity_check(self) -> None:
        """Raise `CorruptIndexError` if the file is torn, has an unknown version, or its entries
        break the invariants (Kafka checks only last offset >= start offset)."""
        self._check_file_size()
        if self._bad_version is not None:
            raise CorruptIndexError(
                f"Unexpected aborted transaction version {self._bad_version} in transaction index "
                f"{self.path}, current version is {ABORTED_TXN_VERSION}"
            )
        previous: AbortedTxn | None = None
        for aborted in self._aborted:
            if aborted.last_offset < self.start_offset:
                raise CorruptIndexError(
                    f"Last offset of aborted transaction {aborted} in index {self.path} is less "
                    f"than start offset {self.start_offset}"
                )
            if previous is not None and aborted.last_offset <= previous.last_offset:
                raise CorruptIndexError(
                    f"Aborted transaction {aborted} in index {self.path} does not end after the "
                    f"previous one {previous}"
                )
            previous = aborted
