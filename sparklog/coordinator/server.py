"""The group coordinator as a server on the driver: the sans-IO `GroupCoordinator` behind Kafka's
protocol, its offsets and membership in a Delta table (`OffsetsStore`).

Flow of a write: a handler calls the core; the core's `Write`s join `_pending`; the flush task
takes everything pending (group commit: one Delta commit for many requests, after a short
linger), appends it on the store's own thread, then calls each write's `done` on the loop,
which applies the change and answers the client. A write that is not durable within
`offsets.commit.timeout.ms` is answered with REQUEST_TIMED_OUT by its handler.

Clients find the coordinator with FindCoordinator on any broker (node 3001,
this listener's host and port). It also answers Metadata and DescribeCluster, from the
controller's image, for clients that use it as one more node. Starting on the same table
reloads every group and offset, so a driver restart on the same disk loses nothing.

Embedding: `start_in_thread()` runs the loop in a daemon thread; `stop()` joins it.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sparklog.broker import kio_build
from sparklog.broker.kafka_apis import GROUP_COORDINATOR_NODE_ID, find_coordinator_response
from sparklog.coordinator.group.apis import GroupCoordinatorApis
from sparklog.coordinator.group.config import GroupConfig
from sparklog.coordinator.group.coordinator import GroupCoordinator, Write
from sparklog.coordinator.offsets_store import OffsetsStore, OffsetsStoreFencedError
from sparklog.errors import CoordinatorNotAvailableError, NotCoordinatorError
from sparklog.protocol.api_versions import (
    COORDINATOR_DELEGATED_APIS,
    GROUP_COORDINATOR_APIS,
    ApiKey,
)
from sparklog.protocol.async_client import api_versions_response
from sparklog.protocol.connection import ProtocolError, Request
from sparklog.protocol.loop_thread import LoopThread
from sparklog.protocol.server import KafkaServer

log = logging.getLogger(__name__)

_TICK_MS = 50
_MAX_ROWS_PER_COMMIT = 50_000


class GroupCoordinatorServer:
    """Serves the group APIs on (host, port); state in the Delta table at `offsets_table_path`
    (default `<data_dir>/__consumer_offsets`)."""

    def __init__(
        self,
        data_dir: str | Path,
        controller: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        config: Mapping[str, object] | None = None,
        store_factory: Callable[[str, int], Any] | None = None,
    ) -> None:
        self.config = GroupConfig.from_properties(config or {})
        #: (path, maintenance commits) -> store; benchmarks swap in an in-memory one
        self.store_factory = store_factory or (
            lambda path, every: OffsetsStore(path, maintenance_commits=every)
        )
        self.table_path = self.config.offsets_table_path or str(
            Path(data_dir) / "__consumer_offsets"
        )
        self.controller = controller
        self.host = host
        self.port = port
        self.core: GroupCoordinator | None = None
        self.store: OffsetsStore | None = None
        self._server: KafkaServer | None = None
        self._apis: GroupCoordinatorApis | None = None
        self._tasks: list[asyncio.Task] = []
        self._pending: collections.deque[Write] = collections.deque()
        self._flush_wanted: asyncio.Event | None = None
        self._store_thread = concurrent.futures.ThreadPoolExecutor(1, "sparklog-offsets-store")
        self._fenced = False
        self._producer_ids = [0, 0]  # the current block: [next, end)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: LoopThread | None = None
        self._stopping = False

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    # -- lifecycle (on the loop) ------------------------------------------------------------

    async def start(self) -> None:
        """Open the table, load every group and offset, then listen."""
        loop = self._loop = asyncio.get_running_loop()
        self.store = await loop.run_in_executor(
            self._store_thread,
            lambda: self.store_factory(
                self.table_path, self.config.offsets_table_maintenance_commits
            ),
        )
        rows = await loop.run_in_executor(self._store_thread, lambda: list(self.store.read_rows()))
        self.core = GroupCoordinator(
            self.config,
            self.controller.partition_count,
            topic_names=self.controller.topic_names,
        )
        self.core.load(rows, self.now_ms())
        self._flush_wanted = asyncio.Event()
        self._apis = GroupCoordinatorApis(
            self.core, self.now_ms, self._collect_writes, self.controller
        )
        self._server = KafkaServer(
            self.handle,
            GROUP_COORDINATOR_APIS,
            host=self.host,
            port=self.port,
            name="group-coordinator",
        )
        await self._server.start()
        self.port = self._server.port
        self._tasks = [
            asyncio.create_task(self._tick_loop(), name="group-coordinator-tick"),
            asyncio.create_task(self._flush_loop(), name="group-coordinator-flush"),
        ]
        log.info(
            "group coordinator listening on %s (offsets table %s, %d rows loaded)",
            self.bootstrap,
            self.table_path,
            len(rows),
        )

    async def shutdown(self) -> None:
        """Stop serving, flush what is pending, and stop the flush and tick tasks."""
        if self._stopping:
            return
        self._stopping = True
        if self._server is not None:
            await self._server.stop()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._pending:
            await self._flush()
        self._store_thread.shutdown(wait=True)
        log.info("group coordinator on %s stopped", self.bootstrap)

    def start_in_thread(self, timeout_s: float = 60.0) -> GroupCoordinatorServer:
        """Run the coordinator's loop in a daemon thread; returns once it is listening."""
        self._runner = LoopThread("sparklog-group-coordinator")
        self._runner.start(self.start, timeout_s)
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        if self._runner is not None:
            self._runner.stop(self.shutdown, timeout_s)
            self._runner = None

    # -- requests ---------------------------------------------------------------------------

    async def handle(self, request: Request) -> Any:
        api = ApiKey(request.api_key)
        assert self._apis is not None
        if api == ApiKey.API_VERSIONS:
            return api_versions_response(
                GROUP_COORDINATOR_APIS, 0 if request.body is None else request.api_version
            )
        if api == ApiKey.FIND_COORDINATOR:
            return find_coordinator_response(request, self.host, self.port)
        if api in COORDINATOR_DELEGATED_APIS:
            return await self.controller.handle_from_other_loop(request)
        if api == ApiKey.INIT_PRODUCER_ID:
            return await self._init_producer_id(request)
        handler = self._apis.handlers.get(api)
        if handler is None:
            raise ProtocolError(f"no handler for api {request.api_key}")
        try:
            return await handler(request)
        except TimeoutError:
            raise ProtocolError(f"{api.name} was not answered in time; closing") from None

    async def _init_producer_id(self, request: Request) -> Any:
        """InitProducerId for idempotent producers (ids from a controller block, like a
        broker's); transactional ids wait for the transaction coordinator."""
        answer: dict[str, Any] = {"throttle_time": 0, "producer_id": -1, "producer_epoch": -1}
        if request.body.transactional_id is not None:
            answer["error_code"] = CoordinatorNotAvailableError.code
            return kio_build.response(request, answer)
        if self._producer_ids[0] >= self._producer_ids[1]:
            assert self._loop is not None
            start, count = await self._loop.run_in_executor(
                None, self.controller.allocate_producer_ids, GROUP_COORDINATOR_NODE_ID
            )
            self._producer_ids = [start, start + count]
        answer.update(error_code=0, producer_id=self._producer_ids[0], producer_epoch=0)
        self._producer_ids[0] += 1
        return kio_build.response(request, answer)

    # -- writes -----------------------------------------------------------------------------

    def _collect_writes(self) -> None:
        assert self.core is not None and self._flush_wanted is not None
        writes = self.core.take_writes()
        if writes:
            self._pending.extend(writes)
            self._flush_wanted.set()

    async def _flush_loop(self) -> None:
        assert self._flush_wanted is not None
        while True:
            await self._flush_wanted.wait()
            self._flush_wanted.clear()
            if self.config.offsets_commit_linger_ms > 0:
                await asyncio.sleep(self.config.offsets_commit_linger_ms / 1000)
            await self._flush()

    async def _flush(self) -> None:
        """Persist pending writes in one Delta commit, then complete them on the loop."""
        assert self.store is not None and self._loop is not None
        while self._pending:
            batch, rows = [], []
            while self._pending and len(rows) < _MAX_ROWS_PER_COMMIT:
                write = self._pending.popleft()
                batch.append(write)
                rows.extend(write.rows)
            code = 0
            if self._fenced:
                code = NotCoordinatorError.code
            else:
                try:
                    await self._loop.run_in_executor(self._store_thread, self.store.append, rows)
                except OffsetsStoreFencedError as e:
                    log.error("%s", e)
                    self._fenced = True
                    code = NotCoordinatorError.code
                except Exception:  # noqa: BLE001 - answer the clients, keep serving
                    log.exception("writing %d rows to %s failed", len(rows), self.table_path)
                    code = CoordinatorNotAvailableError.code
            now_ms = self.now_ms()
            for write in batch:
                try:
                    write.done(now_ms, code)
                except Exception:  # noqa: BLE001
                    log.exception("completing a group coordinator write failed")
            self._collect_writes()

    async def _tick_loop(self) -> None:
        assert self.core is not None
        while True:
            await asyncio.sleep(_TICK_MS / 1000)
            try:
                self.core.tick(self.now_ms())
                self._collect_writes()
            except Exception:  # noqa: BLE001
                log.exception("group coordinator tick failed; retrying")

    # -- views (any thread) -----------------------------------------------------------------

    def call(self, fn: Any, timeout_s: float = 30.0) -> Any:
        """Run `fn(core)` on the coordinator's loop and return its result."""
        loop = self._loop
        if loop is None or self._stopping:
            raise RuntimeError("the group coordinator is not running")
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn(self.core))
            except BaseException as e:  # noqa: BLE001
                future.set_exception(e)

        loop.call_soon_threadsafe(run)
        return future.result(timeout_s)
