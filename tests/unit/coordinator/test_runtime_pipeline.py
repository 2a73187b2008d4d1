"""The runtime's pipelined group commit (issue 33 §2) against a store whose commits the test
holds in flight: the next chunk is prepared meanwhile, commits and answers keep the order
writes were collected in, a client is answered only once its own commit is synced, a failed
commit fails exactly its writes, and fencing while a commit is in flight answers every later
write NOT_COORDINATOR and deletes the prepared files."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from sparklog.coordinator.offsets_store import OffsetsStoreFencedError
from sparklog.coordinator.runtime import CoordinatorRuntime
from sparklog.coordinator.shard import Row, Write
from sparklog.coordinator.store import PreparedAppend
from sparklog.errors import CoordinatorNotAvailableError, NotCoordinatorError

WAIT_S = 30  # a safety net for a hung pipeline, never a timing assertion


class GatedStore:
    """A `CoordinatorStore` whose every commit waits for the test to let it through (or to
    make it fail); it records what happened in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.rows: list[Row] = []
        self.next_sequence = 0
        self.version_ = 0
        self.discarded: list[int] = []
        self.outcomes: list[BaseException | None] = []  # per commit; default: succeed
        self._gate = threading.Semaphore(0)
        self._lock = threading.Lock()
        self.in_flight = threading.Event()

    # the test's side
    def release(self, outcome: BaseException | None = None) -> None:
        self.outcomes.append(outcome)
        self._gate.release()

    def log(self, kind: str, value: Any) -> None:
        with self._lock:
            self.events.append((kind, value))

    def kinds(self, kind: str) -> list[Any]:
        with self._lock:
            return [v for k, v in self.events if k == kind]

    # the store's side
    def read_rows(self) -> list[Row]:
        return []

    def prepare(self, rows: list[Row]) -> PreparedAppend:
        first = self.next_sequence
        self.next_sequence += len(rows)
        self.log("prepare", [r["n"] for r in rows])
        return PreparedAppend(first, first + len(rows) - 1, list(rows))

    def commit(self, prepared: Sequence[PreparedAppend]) -> int:
        self.log("commit", [r["n"] for p in prepared for r in p.payload])
        self.in_flight.set()
        self._gate.acquire()
        self.in_flight.clear()
        outcome = self.outcomes.pop(0)
        if outcome is not None:
            raise outcome
        for p in prepared:
            self.rows.extend(p.payload)
        self.version_ += 1
        return self.version_

    def sync(self, version: int) -> None:
        self.log("sync", version)

    def discard(self, prepared: PreparedAppend) -> None:
        self.discarded.extend(r["n"] for r in prepared.payload)

    def append(self, rows: list[Row]) -> None:
        raise AssertionError("the runtime prepares and commits")

    def version(self) -> int:
        return self.version_

    def wait_for_maintenance(self, timeout_s: float = 60.0) -> None:
        pass


class RecordingShard:
    """A core that hands the runtime one write per submitted number and records replays."""

    def __init__(self, store: GatedStore) -> None:
        self.store = store
        self.writes: list[Write] = []
        self.replayed: list[int] = []
        self.answers: dict[int, int] = {}

    def submit(self, n: int) -> None:
        def done(_now_ms: int, error_code: int) -> None:
            # answered only once durable: its commit's sync came first
            if not error_code:
                assert self.store.kinds("sync"), f"{n} answered before any sync"
            self.answers[n] = error_code
            self.store.log("answer", (n, error_code))

        self.writes.append(Write([{"n": n}], done))

    def take_writes(self) -> list[Write]:
        writes, self.writes = self.writes, []
        return writes

    def replay(self, row: Row, now_ms: int) -> None:
        self.replayed.append(row["n"])

    def replay_rows(self, rows: Iterable[Row], now_ms: int) -> None:
        for row in rows:
            self.replay(row, now_ms)

    def tick(self, now_ms: int) -> None:
        pass


async def until(condition: Any) -> None:
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.001)


async def started(store: GatedStore) -> tuple[CoordinatorRuntime, RecordingShard]:
    runtime = CoordinatorRuntime(lambda: 0, linger_ms=0, table="gated", tick_ms=3_600_000)
    await runtime.open(lambda: store)  # type: ignore[arg-type,return-value]
    shard = RecordingShard(store)
    runtime.start([shard])
    return runtime, shard


def submit(runtime: CoordinatorRuntime, shard: RecordingShard, *numbers: int) -> None:
    for n in numbers:
        shard.submit(n)
    runtime.collect()


def test_the_next_chunk_is_prepared_while_a_commit_is_in_flight_and_order_is_kept() -> None:
    async def run() -> None:
        store = GatedStore()
        runtime, shard = await started(store)
        submit(runtime, shard, 1)
        await until(store.in_flight.is_set)
        submit(runtime, shard, 2)
        await until(lambda: store.kinds("prepare") == [[1], [2]])
        submit(runtime, shard, 3)
        await until(lambda: store.kinds("prepare") == [[1], [2], [3]])
        # both prepared while commit [1] is still in flight; nobody answered yet
        assert store.kinds("commit") == [[1]] and not shard.answers
        store.release()
        await until(lambda: len(store.kinds("commit")) == 2)
        assert store.kinds("commit")[1] == [2, 3]  # what was prepared meanwhile: one commit
        store.release()
        await runtime.flush()
        assert shard.answers == {1: 0, 2: 0, 3: 0}
        assert shard.replayed == [1, 2, 3]
        answers_and_syncs = [(k, v) for k, v in store.events if k in ("sync", "answer")]
        assert answers_and_syncs == [
            ("sync", 1),
            ("answer", (1, 0)),
            ("sync", 2),
            ("answer", (2, 0)),
            ("answer", (3, 0)),
        ]
        await runtime.close()

    asyncio.run(run())


def test_a_failed_commit_in_the_pipeline_fails_exactly_its_writes() -> None:
    async def run() -> None:
        store = GatedStore()
        runtime, shard = await started(store)
        submit(runtime, shard, 1)
        await until(store.in_flight.is_set)
        submit(runtime, shard, 2)
        await until(lambda: len(store.kinds("prepare")) == 2)
        store.release()  # [1] commits
        await until(lambda: len(store.kinds("commit")) == 2)
        submit(runtime, shard, 3)  # prepared while [2] is in flight
        await until(lambda: len(store.kinds("prepare")) == 3)
        store.release(OSError("the disk went away"))  # [2] fails
        await until(lambda: len(store.kinds("commit")) == 3)
        store.release()  # [3] commits after the failure, on its own
        await runtime.flush()
        assert shard.answers == {1: 0, 2: CoordinatorNotAvailableError.code, 3: 0}
        assert shard.replayed == [1, 3]
        assert [r["n"] for r in store.rows] == [1, 3]
        assert [n for n, _ in store.kinds("answer")] == [1, 2, 3]
        submit(runtime, shard, 4)  # and the coordinator keeps serving
        await until(lambda: len(store.kinds("commit")) == 4)
        store.release()
        await runtime.flush()
        assert shard.answers[4] == 0 and not runtime.fenced
        await runtime.close()

    asyncio.run(run())


def test_fencing_while_a_commit_is_in_flight_answers_every_later_write_not_coordinator() -> None:
    async def run() -> None:
        store = GatedStore()
        runtime, shard = await started(store)
        submit(runtime, shard, 1)
        await until(store.in_flight.is_set)
        store.release()
        await runtime.flush()
        submit(runtime, shard, 2)
        await until(store.in_flight.is_set)
        submit(runtime, shard, 3)
        await until(lambda: len(store.kinds("prepare")) == 3)
        store.release(OffsetsStoreFencedError("another coordinator wrote"))
        await runtime.flush()
        submit(runtime, shard, 4)
        await runtime.flush()
        assert runtime.fenced
        assert shard.answers == {
            1: 0,
            2: NotCoordinatorError.code,
            3: NotCoordinatorError.code,
            4: NotCoordinatorError.code,
        }
        assert store.kinds("commit") == [[1], [2]]  # nothing tried after the fence
        assert sorted(store.discarded) == [2, 3]  # their prepared files are deleted
        assert shard.replayed == [1]
        await runtime.close()

    asyncio.run(run())


def test_a_failed_sync_fails_every_write_of_that_commit() -> None:
    class FailingSync(GatedStore):
        def sync(self, version: int) -> None:
            super().sync(version)
            if version == 2:
                raise OSError("fsync failed")

    async def run() -> None:
        store = FailingSync()
        runtime, shard = await started(store)
        submit(runtime, shard, 1)
        await until(store.in_flight.is_set)
        submit(runtime, shard, 2)
        await until(lambda: len(store.kinds("prepare")) == 2)
        submit(runtime, shard, 3)
        await until(lambda: len(store.kinds("prepare")) == 3)
        store.release()
        await until(lambda: len(store.kinds("commit")) == 2)
        store.release()  # [2, 3] commit as version 2, whose sync fails
        await runtime.flush()
        failed = CoordinatorNotAvailableError.code
        assert shard.answers == {1: 0, 2: failed, 3: failed}
        assert shard.replayed == [1]
        await runtime.close()

    asyncio.run(run())
