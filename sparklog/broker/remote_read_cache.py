"""Read-ahead of tiered data (sparklog's, as the chunk caches of Kafka's remote storage plug-ins,
e.g. Aiven's): a consumer reading history reads a partition's tier forward, fetch after fetch,
while each read of the topic table costs about a whole data file however few bytes it returns.
So a remote read asks the table for `READ_AHEAD_BYTES` at once and keeps the batches; the next
fetches of that partition are served from them without touching the table.

At most `MAX_CACHED_BYTES` are kept over all partitions, least recently used chunks dropped
first; one chunk per partition. Offsets below the log start never reach the cache (the fetch
path answers them OFFSET_OUT_OF_RANGE first), so retention of the tier needs no invalidation; a
table of another topic id (the topic re-created) has other keys. Thread-safety: every method
takes the cache's lock (used from the remote reader's threads).
"""

from __future__ import annotations

import bisect
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from sparklog.records import iter_batches
from sparklog.storage.remote.tier import RemoteRead
from sparklog.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)

#: How much one table read asks for (whole batches, at least the fetch's own max bytes).
READ_AHEAD_BYTES = 16 << 20
#: The most the cache keeps over all partitions.
MAX_CACHED_BYTES = 64 << 20

Key = tuple[uuid.UUID, int]


@dataclass(frozen=True, slots=True)
class Chunk:
    """Whole consecutive batches read from the tier: `bases[i]`/`ends[i]` (exclusive) are the
    offsets of `batches[i]`; `aborted` lists the aborted transactions overlapping them."""

    bases: tuple[int, ...]
    ends: tuple[int, ...]
    batches: tuple[bytes, ...]
    aborted: tuple[AbortedTxn, ...]
    size: int

    @classmethod
    def of(cls, read: RemoteRead) -> Chunk:
        bases, ends, batches = [], [], []
        for batch in iter_batches(read.records):
            h = batch.header
            bases.append(h.base_offset)
            ends.append(h.base_offset + h.last_offset_delta + 1)
            batches.append(bytes(batch.data))
        return cls(tuple(bases), tuple(ends), tuple(batches), read.aborted or (), len(read.records))

    def holds(self, offset: int) -> bool:
        return bool(self.bases) and self.bases[0] <= offset < self.ends[-1]

    def serve(
        self,
        offset: int,
        max_bytes: int,
        upper_bound_offset: int | None,
        include_aborted: bool,
    ) -> RemoteRead:
        """Whole batches from the one holding `offset` (at least one), within `max_bytes` and
        below `upper_bound_offset`, up to the chunk's end (a fetch may get less than its max:
        the next one reads on from the table)."""
        i = bisect.bisect_right(self.ends, offset)
        out: list[bytes] = []
        size = 0
        end = offset
        while i < len(self.batches):
            if upper_bound_offset is not None and self.bases[i] >= upper_bound_offset:
                break
            batch = self.batches[i]
            if out and size + len(batch) > max_bytes:
                break
            out.append(batch)
            size += len(batch)
            end = self.ends[i]
            i += 1
        aborted = None
        if include_aborted:
            aborted = tuple(
                a for a in self.aborted if a.last_offset >= offset and a.first_offset < end
            )
        return RemoteRead(offset, b"".join(out), aborted)


#: `read(offset, read_bytes)`: whole batches of the partition's tier from `offset`, aborted
#: transactions included (a `TopicTable.read`), on the calling thread.
ReadAt = Callable[[int, int], RemoteRead]
#: `submit(fn)`: run `fn` on the remote reader's pool.
Submit = Callable[[Callable[[], None]], object]


class ReadAheadCache:
    """Per partition the chunk being read and the one after it (read ahead in the background
    once the first is loaded), `max_bytes` in all, least recently used partitions dropped."""

    def __init__(self, max_bytes: int = MAX_CACHED_BYTES, submit: Submit | None = None) -> None:
        self.max_bytes = max_bytes
        self._submit = submit
        self._chunks: OrderedDict[Key, list[Chunk]] = OrderedDict()  # [current, next]
        #: a load running per partition: (its start offset, its chunk to be)
        self._loading: dict[Key, tuple[int, Future[Chunk]]] = {}
        #: how each partition's chunks are read (to read ahead)
        self._readers: dict[Key, tuple[ReadAt, int]] = {}
        self._size = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.read_ahead = 0

    @property
    def size(self) -> int:
        return self._size

    def lookup(
        self,
        key: Key,
        offset: int,
        max_bytes: int,
        upper_bound_offset: int | None,
        include_aborted: bool,
    ) -> RemoteRead | None:
        """The answer from the partition's chunks (waiting for a load of `offset` already
        running), None when they do not hold `offset`."""
        with self._lock:
            chunk, moved_on = self._holding(key, offset)
            running = self._loading.get(key)
            if chunk is None and (running is None or running[0] != offset):
                self.misses += 1
                return None
            self.hits += 1
            reader = self._readers.get(key)
        if chunk is None:
            assert running is not None
            chunk = running[1].result()
        elif moved_on and reader is not None:
            self._read_ahead(key, chunk, *reader)
        return chunk.serve(offset, max_bytes, upper_bound_offset, include_aborted)

    def load(
        self,
        key: Key,
        read: ReadAt,
        offset: int,
        max_bytes: int,
        upper_bound_offset: int | None,
        include_aborted: bool,
    ) -> RemoteRead:
        """Read a chunk from `offset` (at least `max_bytes`), keep it, read the next one ahead
        and answer from it."""
        read_bytes = max(READ_AHEAD_BYTES, max_bytes)
        with self._lock:
            self._readers[key] = (read, read_bytes)
        chunk = self._load(key, read, offset, read_bytes)
        self._read_ahead(key, chunk, read, read_bytes)
        return chunk.serve(offset, max_bytes, upper_bound_offset, include_aborted)

    def _holding(self, key: Key, offset: int) -> tuple[Chunk | None, bool]:
        """The partition's chunk holding `offset` (under the lock), and whether it is the one
        read ahead (the current one is then dropped)."""
        chunks = self._chunks.get(key)
        if not chunks:
            return None, False
        self._chunks.move_to_end(key)
        for i, chunk in enumerate(chunks):
            if chunk.holds(offset):
                if i:  # the consumer moved on to the chunk read ahead
                    self._size -= sum(c.size for c in chunks[:i])
                    del chunks[:i]
                return chunk, i > 0
        return None, False

    def _load(self, key: Key, read: ReadAt, offset: int, read_bytes: int) -> Chunk:
        mine: Future[Chunk] | None = None
        with self._lock:
            running = self._loading.get(key)
            if running is not None and running[0] == offset:
                waiting: Future[Chunk] | None = running[1]
            else:
                waiting, mine = None, Future()
                self._loading[key] = (offset, mine)
        if waiting is not None:
            return waiting.result()
        assert mine is not None
        try:
            chunk = Chunk.of(read(offset, read_bytes))
        except BaseException as e:
            mine.set_exception(e)
            raise
        finally:
            with self._lock:
                if self._loading.get(key, (None, None))[1] is mine:
                    del self._loading[key]
        self._keep(key, chunk)
        mine.set_result(chunk)
        return chunk

    def _read_ahead(self, key: Key, chunk: Chunk, read: ReadAt, read_bytes: int) -> None:
        """Load the chunk after `chunk` in the background, when `chunk` was a full one (the
        tier likely holds more)."""
        if self._submit is None or chunk.size < read_bytes // 2 or not chunk.ends:
            return
        self.read_ahead += 1
        self._submit(lambda: self._ahead(key, read, chunk.ends[-1], read_bytes))

    def _ahead(self, key: Key, read: ReadAt, offset: int, read_bytes: int) -> None:
        try:
            self._load(key, read, offset, read_bytes)
        except Exception as e:  # noqa: BLE001 - read again on demand, with its error then
            logger.debug("reading ahead from %d failed: %s", offset, e)

    def _keep(self, key: Key, chunk: Chunk) -> None:
        """Add `chunk` after the partition's chunks it follows (replacing any it does not)."""
        if chunk.size > self.max_bytes:
            return
        with self._lock:
            chunks = self._chunks.setdefault(key, [])
            if chunks and (not chunks[-1].ends or chunks[-1].ends[-1] != chunk.bases[0]):
                self._size -= sum(c.size for c in chunks)
                chunks.clear()  # not the continuation: a seek elsewhere
            chunks.append(chunk)
            self._size += chunk.size
            if len(chunks) > 2:
                self._size -= chunks.pop(0).size
            self._chunks.move_to_end(key)
            while self._size > self.max_bytes and self._chunks:
                dropped_key, dropped = self._chunks.popitem(last=False)
                self._size -= sum(c.size for c in dropped)
                self._readers.pop(dropped_key, None)
