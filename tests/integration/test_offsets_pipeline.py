"""The offsets table's pipelined commit on a real disk (issue 33 §2): prepared files commit in
order in one Delta commit, a file prepared but never committed (a crash, or a fence) is in no
commit and goes with maintenance, a coordinator fenced while its file was prepared commits
nothing, a successor that commits right after us fences our next commit, and writes pipelined
through the runtime land in the order they were collected."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from pathlib import Path

import pytest
from deltalake import DeltaTable

from sparklog.coordinator.delta_log import check_log
from sparklog.coordinator.offsets_store import (
    APP_ID,
    OffsetsStore,
    OffsetsStoreFencedError,
    maintain_table,
)
from sparklog.coordinator.runtime import CoordinatorRuntime
from sparklog.coordinator.shard import Row, Write

from .test_offsets_store import rows


def offsets(store: OffsetsStore) -> list[int]:
    return [r["committed_offset"] for r in store.read_rows()]


def data_files(path: Path) -> set[str]:
    return {p.name for p in path.glob("*.parquet")}


def test_prepared_appends_commit_in_one_delta_commit_in_order(tmp_path: Path):
    store = OffsetsStore(tmp_path / "offsets")
    store.append(rows(1))
    first, second = store.prepare(rows(2, start=10)), store.prepare(rows(3, start=20))
    assert (first.first_sequence, second.first_sequence) == (1, 3)
    assert offsets(OffsetsStore(tmp_path / "offsets")) == [0]  # prepared is not committed
    version = store.commit([first, second])
    store.sync(version)
    assert version == 2 == DeltaTable(str(tmp_path / "offsets")).version()
    again = OffsetsStore(tmp_path / "offsets")
    assert [r["sequence"] for r in again.read_rows()] == [0, 1, 2, 3, 4, 5]
    assert offsets(again) == [0, 10, 11, 20, 21, 22]
    assert DeltaTable(str(tmp_path / "offsets")).transaction_version(APP_ID) == 5
    check_log(tmp_path / "offsets")  # the commit announces its two files and last sequence


def test_a_crash_between_prepare_and_commit_leaves_a_harmless_orphan(tmp_path: Path):
    path = tmp_path / "offsets"
    store = OffsetsStore(path)
    store.append(rows(2))
    before = data_files(path)
    store.prepare(rows(3, start=50))  # its file is written ...
    (orphan,) = data_files(path) - before
    del store  # ... and the driver dies before the commit
    check_log(path)  # not damage: no commit names it
    again = OffsetsStore(path)
    assert offsets(again) == [0, 1]
    assert again.next_sequence == 2  # its sequences are handed out again
    again.append(rows(1, start=60))
    assert offsets(OffsetsStore(path)) == [0, 1, 60]
    table = DeltaTable(str(path))
    assert orphan not in {Path(f).name for f in table.file_uris()}
    old = (path / orphan).stat().st_mtime - 2 * 3600  # vacuum keeps files of the last hour
    os.utime(path / orphan, (old, old))
    maintain_table(str(path), None, path)
    assert not (path / orphan).exists()
    assert offsets(OffsetsStore(path)) == [0, 1, 60]


def test_a_coordinator_fenced_while_its_file_was_prepared_commits_nothing(tmp_path: Path):
    path = tmp_path / "offsets"
    zombie = OffsetsStore(path)
    zombie.append(rows(1))
    prepared = zombie.prepare(rows(2, start=70))  # in flight when the successor starts
    successor = OffsetsStore(path)
    successor.append(rows(1, start=80))
    with pytest.raises(OffsetsStoreFencedError):
        zombie.commit([prepared])
    zombie.discard(prepared)
    assert offsets(OffsetsStore(path)) == [0, 80]
    files = {Path(f).name for f in DeltaTable(str(path)).file_uris()}
    assert files == data_files(path)  # the zombie's prepared file is gone


def test_a_successor_committing_right_after_us_fences_our_next_commit(tmp_path: Path):
    path = tmp_path / "offsets"
    first = OffsetsStore(path)
    first.append(rows(1))
    catch_up = first._table.update_incremental

    def successor_gets_in_first() -> None:
        # between our commit and our handle catching up with it, a successor opens (it reads
        # our commit, so its own does not conflict) and commits
        OffsetsStore(path).append(rows(1, start=90))
        catch_up()

    first._table.update_incremental = successor_gets_in_first  # type: ignore[method-assign]
    first.append(rows(1, start=10))  # ours stands
    first._table.update_incremental = catch_up  # type: ignore[method-assign]
    with pytest.raises(OffsetsStoreFencedError, match="another group coordinator"):
        first.append(rows(1, start=99))
    assert offsets(OffsetsStore(path)) == [0, 10, 90]


class Numbered:
    """A core whose writes are numbered rows; it records replays and answers."""

    def __init__(self) -> None:
        self.writes: list[Write] = []
        self.replayed: list[int] = []
        self.answered: list[tuple[int, int]] = []

    def submit(self, n: int) -> None:
        row = rows(1, start=n)[0]
        self.writes.append(Write([row], lambda _now, code: self.answered.append((n, code))))

    def take_writes(self) -> list[Write]:
        writes, self.writes = self.writes, []
        return writes

    def replay(self, row: Row, now_ms: int) -> None:
        self.replayed.append(row["committed_offset"])

    def replay_rows(self, rows: Iterable[Row], now_ms: int) -> None:
        for row in rows:
            self.replay(row, now_ms)

    def tick(self, now_ms: int) -> None:
        pass


def test_writes_pipelined_onto_the_table_land_and_complete_in_collect_order(tmp_path: Path):
    path = tmp_path / "offsets"

    async def run() -> None:
        runtime = CoordinatorRuntime(lambda: 0, linger_ms=0, table=str(path), tick_ms=3_600_000)
        await runtime.open(lambda: OffsetsStore(path))
        core = Numbered()
        runtime.start([core])
        for n in range(200):  # collected while earlier commits are in flight
            core.submit(n)
            runtime.collect()
            if n % 7 == 0:
                await asyncio.sleep(0)
        await runtime.flush()
        assert core.answered == [(n, 0) for n in range(200)]
        assert core.replayed == list(range(200))
        await runtime.close()

    asyncio.run(run())
    store = OffsetsStore(path)
    assert offsets(store) == list(range(200))
    assert [r["sequence"] for r in store.read_rows()] == list(range(200))
    assert 1 < store.version() < 200  # group commit: many writes per Delta commit


def test_a_failed_commit_leaves_a_gap_and_the_next_one_commits(tmp_path: Path):
    path = tmp_path / "offsets"
    store = OffsetsStore(path)
    store.append(rows(1))
    failed, after = store.prepare(rows(2, start=10)), store.prepare(rows(1, start=20))
    commit = store._table.create_write_transaction

    def unreachable(*args, **kwargs):
        raise OSError("the store cannot be reached")

    store._table.create_write_transaction = unreachable  # type: ignore[method-assign]
    with pytest.raises(OSError):
        store.commit([failed])
    store._table.create_write_transaction = commit  # type: ignore[method-assign]
    store.sync(store.commit([after]))  # not fenced: the failed one is not in the table
    again = OffsetsStore(path)
    assert [(r["sequence"], r["committed_offset"]) for r in again.read_rows()] == [(0, 0), (3, 20)]
    assert again.next_sequence == 4


def test_a_commit_that_errs_after_landing_counts_as_committed(tmp_path: Path):
    path = tmp_path / "offsets"
    store = OffsetsStore(path)
    commit = store._table.create_write_transaction

    def lands_then_errs(*args, **kwargs):
        commit(*args, **kwargs)
        raise OSError("connection reset after the commit file was in place")

    store._table.create_write_transaction = lands_then_errs  # type: ignore[method-assign]
    store.sync(store.commit([store.prepare(rows(2))]))  # in the table: a success
    store._table.create_write_transaction = commit  # type: ignore[method-assign]
    store.append(rows(1, start=5))  # and the next commit does not take it for a rival's
    assert offsets(OffsetsStore(path)) == [0, 1, 5]
