"""The coordinators' runtime (Kafka's `CoordinatorRuntime`): the asyncio edge that turns the
cores' `Write`s into store commits.

Theory of operation. Handlers call a core, then `collect()`: every core's new writes join
`pending` and the pipeline wakes. Writes then pass three stages, each a task on the loop with
its own thread for the store's blocking part, so that while one Delta commit is in flight the
next one is being prepared and the previous one synced (Kafka's `CoordinatorRuntime` likewise
fills its next write batch while the previous one is being written):

1. prepare: after `linger_ms` (group commit: many requests, one file) everything pending (at
   most `max_rows_per_commit` rows) becomes one chunk: the store numbers its rows and writes
   its data file (`store.prepare`).
2. commit: every chunk prepared by the time the previous commit ended goes into ONE store
   commit (`store.commit`, Delta's app transaction fences a zombie), in preparation order.
3. sync: the commit is made durable (`store.sync`, the fsync), then each chunk's writes
   complete in order on the loop: their rows are replayed into every core
   (`shard.complete_write`) and their `done` answers the client. Only then.

So a write waits for the commit in flight and its own, not for the preparation and sync of
either. A failed commit fails exactly the writes of its chunks (COORDINATOR_NOT_AVAILABLE, no
replay); later chunks were numbered after it and commit on their own (a gap in the sequence
is harmless: readers order by it). A fenced commit (another coordinator took the table over:
`OffsetsStoreFencedError`) answers NOT_COORDINATOR, for its chunks and every later write,
whose prepared files are deleted (`store.discard`), so clients find the new coordinator. A
crash between prepare and commit leaves an unreferenced file, never a row. The tick task
fires the cores' timers every `tick_ms`.

Ordering: writes complete in the order `collect` took them, whatever stage failed: chunks
keep that order through the bounded queues between the stages, and the sync stage completes
them one after another.

Thread-safety: everything but the store's prepare, commit and sync runs on the loop; those
three run on one thread each, and the store keeps their state apart (see `CoordinatorStore`).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence

from sparklog.coordinator.offsets_store import OffsetsStoreFencedError
from sparklog.coordinator.shard import CoordinatorShard, Row, Write, complete_write
from sparklog.coordinator.store import CoordinatorStore, PreparedAppend
from sparklog.errors import CoordinatorNotAvailableError, NotCoordinatorError

logger = logging.getLogger(__name__)

#: how often the cores' timers fire (sessions, rebalances, transaction timeouts)
TICK_MS = 50
#: rows per store commit at most (a bigger backlog takes several commits)
MAX_ROWS_PER_COMMIT = 50_000
#: chunks waiting between two stages at most (the pipeline's bound; `pending` waits behind it)
MAX_QUEUED_CHUNKS = 16


@dataclasses.dataclass(slots=True)
class _Chunk:
    """Writes whose rows went into one prepared append (None: preparing them failed)."""

    writes: list[Write]
    rows: int
    prepared: PreparedAppend | None
    #: once committed: the store version to sync; else the error code the writes get
    version: int = -1
    error_code: int = 0
    #: when its commit started, and how many rows that commit holds (for `on_appended`)
    started_ns: int = 0
    commit_rows: int = 0


class CoordinatorRuntime:
    """Pending writes, linger, pipelined group commit, tick and fencing for a set of cores."""

    def __init__(
        self,
        now_ms: Callable[[], int],
        *,
        linger_ms: int,
        table: str,
        on_collect: Callable[[], None] = lambda: None,
        tick_ms: int = TICK_MS,
        max_rows_per_commit: int = MAX_ROWS_PER_COMMIT,
        on_appended: Callable[[int, float], None] = lambda rows, elapsed_ms: None,
    ) -> None:
        self.now_ms = now_ms
        self.linger_ms = linger_ms
        #: the table's location, for log lines
        self.table = table
        #: called after every collect (the server hands decided transactions to the markers)
        self.on_collect = on_collect
        self.tick_ms = tick_ms
        self.max_rows_per_commit = max_rows_per_commit
        #: told of every successful store commit: (rows, elapsed ms from commit to durable)
        #: (the server's `batch-flush-time-ms`)
        self.on_appended = on_appended
        self.store: CoordinatorStore | None = None
        self.shards: Sequence[CoordinatorShard] = ()
        self.pending: collections.deque[Write] = collections.deque()
        #: once fenced, no write is attempted again (another coordinator owns the table)
        self.fenced = False
        # one thread per stage; `open` runs on the commit thread, which owns the table handle
        self._prepare_thread = concurrent.futures.ThreadPoolExecutor(1, "sparklog-store-prepare")
        self._store_thread = concurrent.futures.ThreadPoolExecutor(1, "sparklog-offsets-store")
        self._sync_thread = concurrent.futures.ThreadPoolExecutor(1, "sparklog-store-sync")
        self._flush_wanted = asyncio.Event()
        #: set whenever writes complete (what `flush` waits on)
        self._progress = asyncio.Event()
        #: writes taken from `pending` and not completed yet
        self._unfinished = 0
        self._prepared: asyncio.Queue[_Chunk] = asyncio.Queue(MAX_QUEUED_CHUNKS)
        self._committed: asyncio.Queue[_Chunk] = asyncio.Queue(MAX_QUEUED_CHUNKS)
        #: a chunk taken off `_prepared` beyond what one commit holds, first in the next one
        self._carried: _Chunk | None = None
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle --------------------------------------------------------------------------

    async def open(self, open_store: Callable[[], CoordinatorStore]) -> list[Row]:
        """Open the store on its thread and read every row (for the cores' `load`)."""
        loop = asyncio.get_running_loop()

        def read() -> list[Row]:
            self.store = open_store()
            return list(self.store.read_rows())

        return await loop.run_in_executor(self._store_thread, read)

    def start(self, shards: Sequence[CoordinatorShard]) -> None:
        """Drive `shards` (loaded already): start the pipeline's and the tick's tasks."""
        self.shards = shards
        self._tasks = [
            asyncio.create_task(self._tick_loop(), name="group-coordinator-tick"),
            asyncio.create_task(self._prepare_loop(), name="group-coordinator-prepare"),
            asyncio.create_task(self._commit_loop(), name="group-coordinator-commit"),
            asyncio.create_task(self._sync_loop(), name="group-coordinator-sync"),
        ]

    async def close(self) -> None:
        """Complete what is pending, stop the tasks, release the store's threads."""
        if self._tasks:
            await self.flush()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for thread in (self._prepare_thread, self._store_thread, self._sync_thread):
            thread.shutdown(wait=True)
        if self.store is not None:  # its upkeep thread must not outlive the coordinator
            await asyncio.get_running_loop().run_in_executor(None, self.store.wait_for_maintenance)

    # -- writes -----------------------------------------------------------------------------

    def collect(self) -> None:
        """Take every core's new writes; wake the pipeline if there are any."""
        writes = [w for shard in self.shards for w in shard.take_writes()]
        if writes:
            self.pending.extend(writes)
            self._flush_wanted.set()
        self.on_collect()

    async def flush(self) -> None:
        """Wait until every write collected so far has completed (durable or failed)."""
        self._flush_wanted.set()
        while self.pending or self._unfinished:
            if stopped := [t for t in self._tasks if t.done()]:  # a bug: say so, do not hang
                logger.error("the group coordinator's pipeline stopped: %s", stopped)
                return
            self._progress.clear()
            progress = asyncio.ensure_future(self._progress.wait())
            await asyncio.wait([progress, *self._tasks], return_when=asyncio.FIRST_COMPLETED)
            progress.cancel()

    async def _prepare_loop(self) -> None:
        """Stage 1: pending writes -> one prepared chunk at a time, in order."""
        loop = asyncio.get_running_loop()
        while True:
            await self._flush_wanted.wait()
            if self.linger_ms > 0:
                await asyncio.sleep(self.linger_ms / 1000)
            self._flush_wanted.clear()
            while self.pending:
                writes: list[Write] = []
                rows: list[Row] = []
                while self.pending and len(rows) < self.max_rows_per_commit:
                    writes.append(self.pending.popleft())
                    rows.extend(writes[-1].rows)
                self._unfinished += len(writes)
                await self._prepared.put(await self._prepare(loop, writes, rows))

    async def _prepare(
        self, loop: asyncio.AbstractEventLoop, writes: list[Write], rows: list[Row]
    ) -> _Chunk:
        if self.fenced:  # nowhere to write: the writes pass the stages in order to be answered
            return _Chunk(writes, len(rows), None, error_code=NotCoordinatorError.code)
        if not rows:  # nothing to write: answered in order, with the writes before it
            return _Chunk(writes, 0, None)
        assert self.store is not None
        try:
            prepared = await loop.run_in_executor(self._prepare_thread, self.store.prepare, rows)
        except Exception:  # noqa: BLE001 - answer the clients, keep serving
            logger.exception("preparing %d rows for %s failed", len(rows), self.table)
            return _Chunk(writes, len(rows), None, error_code=CoordinatorNotAvailableError.code)
        return _Chunk(writes, len(rows), prepared)

    async def _commit_loop(self) -> None:
        """Stage 2: every chunk prepared meanwhile -> one store commit, in order."""
        loop = asyncio.get_running_loop()
        while True:
            chunks = [self._carried if self._carried is not None else await self._prepared.get()]
            self._carried = None
            rows = chunks[0].rows
            while not self._prepared.empty():
                chunk = self._prepared.get_nowait()
                if rows + chunk.rows > self.max_rows_per_commit:
                    self._carried = chunk
                    break
                chunks.append(chunk)
                rows += chunk.rows
            await self._commit(loop, chunks)
            for chunk in chunks:
                await self._committed.put(chunk)

    async def _commit(self, loop: asyncio.AbstractEventLoop, chunks: list[_Chunk]) -> None:
        """Commit the prepared chunks; set each chunk's version or error code."""
        assert self.store is not None
        store = self.store
        ready = [c for c in chunks if c.prepared is not None and not c.error_code]
        prepared = [c.prepared for c in ready if c.prepared is not None]
        if not prepared:
            return
        started_ns = time.monotonic_ns()
        version, code = -1, 0
        if self.fenced:
            code = NotCoordinatorError.code
        else:
            try:
                version = await loop.run_in_executor(self._store_thread, store.commit, prepared)
            except OffsetsStoreFencedError as e:
                logger.error("%s", e)
                self.fenced = True
                code = NotCoordinatorError.code
            except Exception:  # noqa: BLE001 - answer the clients, keep serving
                rows = sum(c.rows for c in ready)
                logger.exception("committing %d rows to %s failed", rows, self.table)
                code = CoordinatorNotAvailableError.code
        for chunk in ready:
            chunk.started_ns, chunk.commit_rows = started_ns, sum(c.rows for c in ready)
            chunk.version, chunk.error_code = version, code
        if code == NotCoordinatorError.code:  # never committed: their files go
            for p in prepared:
                await loop.run_in_executor(self._prepare_thread, store.discard, p)

    async def _sync_loop(self) -> None:
        """Stage 3: make each commit durable, then complete its chunks' writes in order."""
        loop = asyncio.get_running_loop()
        #: the newest version synced, and one whose sync failed (every chunk of it fails)
        synced, unsynced = -1, -1
        while True:
            chunk = await self._committed.get()
            if chunk.version >= 0 and chunk.version == unsynced:
                chunk.error_code = CoordinatorNotAvailableError.code
            elif chunk.version > synced:
                assert self.store is not None
                try:
                    await loop.run_in_executor(self._sync_thread, self.store.sync, chunk.version)
                    synced = chunk.version
                    elapsed_ms = (time.monotonic_ns() - chunk.started_ns) / 1e6
                    self.on_appended(chunk.commit_rows, elapsed_ms)  # once per commit
                except Exception:  # noqa: BLE001 - the disk failed: not durable, say so
                    logger.exception("syncing %s to version %d failed", self.table, chunk.version)
                    unsynced = chunk.version
                    chunk.error_code = CoordinatorNotAvailableError.code
            self._complete(chunk)

    def _complete(self, chunk: _Chunk) -> None:
        now_ms = self.now_ms()
        for write in chunk.writes:
            try:
                complete_write(write, self.shards, now_ms, chunk.error_code)
            except Exception:  # noqa: BLE001
                logger.exception("completing a group coordinator write failed")
        self._unfinished -= len(chunk.writes)
        self._progress.set()
        self.collect()

    # -- timers -----------------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.tick_ms / 1000)
            try:
                now_ms = self.now_ms()
                for shard in self.shards:
                    shard.tick(now_ms)
                self.collect()
            except Exception:  # noqa: BLE001
                logger.exception("group coordinator tick failed; retrying")
