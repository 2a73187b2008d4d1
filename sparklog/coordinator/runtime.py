"""The coordinators' runtime (Kafka's `CoordinatorRuntime`): the asyncio edge that turns the
cores' `Write`s into store commits.

Theory of operation. Handlers call a core, then `collect()`: every core's new writes join
`pending` and the flush task wakes. After `linger_ms` (group commit: many requests, one store
commit) it appends the rows of everything pending, at most `max_rows_per_commit` per commit,
on the store's own thread (the Delta writer blocks), then completes each write in order on the
loop: its rows are replayed into every core (`shard.complete_write`) and its `done` answers the
client. A failed append replays nothing and answers COORDINATOR_NOT_AVAILABLE; a fenced one
(another coordinator took the table over: `OffsetsStoreFencedError`) answers NOT_COORDINATOR,
now and for every later write, so clients find the new coordinator. The tick task fires the
cores' timers every `tick_ms`.

Thread-safety: everything but the store's append runs on the loop.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from sparklog.coordinator.offsets_store import OffsetsStoreFencedError
from sparklog.coordinator.shard import CoordinatorShard, Row, Write, complete_write
from sparklog.coordinator.store import CoordinatorStore
from sparklog.errors import CoordinatorNotAvailableError, NotCoordinatorError

logger = logging.getLogger(__name__)

#: how often the cores' timers fire (sessions, rebalances, transaction timeouts)
TICK_MS = 50
#: rows per store commit at most (a bigger backlog takes several commits)
MAX_ROWS_PER_COMMIT = 50_000


class CoordinatorRuntime:
    """Pending writes, linger, group commit, tick and fencing for a set of cores."""

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
        #: told of every successful store commit: (rows, elapsed ms) (the server's
        #: `batch-flush-time-ms`)
        self.on_appended = on_appended
        self.store: CoordinatorStore | None = None
        self.shards: Sequence[CoordinatorShard] = ()
        self.pending: collections.deque[Write] = collections.deque()
        #: once fenced, no write is attempted again (another coordinator owns the table)
        self.fenced = False
        self._store_thread = concurrent.futures.ThreadPoolExecutor(1, "sparklog-offsets-store")
        self._flush_wanted = asyncio.Event()
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
        """Drive `shards` (loaded already): start the flush and tick tasks."""
        self.shards = shards
        self._tasks = [
            asyncio.create_task(self._tick_loop(), name="group-coordinator-tick"),
            asyncio.create_task(self._flush_loop(), name="group-coordinator-flush"),
        ]

    async def close(self) -> None:
        """Stop the tasks, flush what is pending, release the store's thread."""
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.pending:
            await self.flush()
        self._store_thread.shutdown(wait=True)
        if self.store is not None:  # its upkeep thread must not outlive the coordinator
            await asyncio.get_running_loop().run_in_executor(None, self.store.wait_for_maintenance)

    # -- writes -----------------------------------------------------------------------------

    def collect(self) -> None:
        """Take every core's new writes; wake the flush task if there are any."""
        writes = [w for shard in self.shards for w in shard.take_writes()]
        if writes:
            self.pending.extend(writes)
            self._flush_wanted.set()
        self.on_collect()

    async def _flush_loop(self) -> None:
        while True:
            await self._flush_wanted.wait()
            self._flush_wanted.clear()
            if self.linger_ms > 0:
                await asyncio.sleep(self.linger_ms / 1000)
            await self.flush()

    async def flush(self) -> None:
        """Persist pending writes in one store commit, then complete them on the loop."""
        loop = asyncio.get_running_loop()
        while self.pending:
            batch: list[Write] = []
            rows: list[Row] = []
            while self.pending and len(rows) < self.max_rows_per_commit:
                write = self.pending.popleft()
                batch.append(write)
                rows.extend(write.rows)
            code = await self._append(loop, rows)
            now_ms = self.now_ms()
            for write in batch:
                try:
                    complete_write(write, self.shards, now_ms, code)
                except Exception:  # noqa: BLE001
                    logger.exception("completing a group coordinator write failed")
            self.collect()

    async def _append(self, loop: asyncio.AbstractEventLoop, rows: list[Row]) -> int:
        """Append `rows` on the store's thread: 0, or the error code the writes get."""
        if self.fenced:
            return NotCoordinatorError.code
        assert self.store is not None
        started_ns = time.monotonic_ns()
        try:
            await loop.run_in_executor(self._store_thread, self.store.append, rows)
        except OffsetsStoreFencedError as e:
            logger.error("%s", e)
            self.fenced = True
            return NotCoordinatorError.code
        except Exception:  # noqa: BLE001 - answer the clients, keep serving
            logger.exception("writing %d rows to %s failed", len(rows), self.table)
            return CoordinatorNotAvailableError.code
        self.on_appended(len(rows), (time.monotonic_ns() - started_ns) / 1e6)
        return 0

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
