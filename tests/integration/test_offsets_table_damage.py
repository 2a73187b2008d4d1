"""The coordinator's Delta table under damage (issue 27, item 4): every commit is synced to disk
before the coordinator answers; a newest commit cut mid-line, cut at a line boundary or emptied,
a data file cut short and a torn checkpoint are recognised at start with a message naming the
file and the repair; the repair works; and a cluster whose table is damaged keeps its brokers
serving while the coordinator answers COORDINATOR_NOT_AVAILABLE. Real Delta tables, real files
cut with truncate."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.coordinator import delta_log
from sparklog.coordinator.group.offsets import CommittedOffset
from sparklog.coordinator.group.rows import offset_row
from sparklog.coordinator.offsets_store import OffsetsStore, OffsetsTableDamagedError
from sparklog.protocol.api_versions import ApiKey
from sparklog.storage import delta_sync

from .broker_wire import batch, call, connect, create_topic, fetch, produce, records_of
from .conftest import TEST_CONFIG
from .test_coordinator_wire import commit

COORDINATOR_NOT_AVAILABLE = 15


def rows(*offsets: int) -> list[dict]:
    return [
        offset_row("g", ("t", 0), CommittedOffset(o, -1, "", 1_700_000_000_000, None))
        for o in offsets
    ]


def newest_commit(table: Path) -> Path:
    return max((table / "_delta_log").glob("*.json"))


def line_ends(path: Path) -> list[int]:
    """Byte offsets just after each newline of `path`."""
    data = path.read_bytes()
    return [i + 1 for i, b in enumerate(data) if b == ord("\n")]


def offsets_in(table: Path) -> list[int]:
    return [r["committed_offset"] for r in OffsetsStore(table).read_rows()]


def three_commits(tmp_path: Path) -> Path:
    table = tmp_path / "offsets"
    store = OffsetsStore(table)
    for offset in (10, 11, 12):
        store.append(rows(offset))
    return table


CUTS = {
    "mid-line": lambda path: path.stat().st_size // 2,
    "after the commitInfo line": lambda path: line_ends(path)[0],
    "after the add line": lambda path: line_ends(path)[1],
    "empty": lambda path: 0,
    "one byte short": lambda path: path.stat().st_size - 1,
}


@pytest.mark.parametrize("cut", list(CUTS))
def test_a_torn_newest_commit_is_refused_with_its_file_and_repair(tmp_path, cut):
    table = three_commits(tmp_path)
    newest = newest_commit(table)
    os.truncate(newest, CUTS[cut](newest))
    with pytest.raises(OffsetsTableDamagedError) as refused:
        OffsetsStore(table)
    message = str(refused.value)
    assert str(newest) in message and "newest commit" in message
    assert f"move {newest.name} out of" in message and "ends at version 2" in message
    # the repair the message names: the table is the one before that commit, and goes on
    shutil.move(newest, tmp_path / newest.name)
    store = OffsetsStore(table)
    assert [r["committed_offset"] for r in store.read_rows()] == [10, 11]
    store.append(rows(13))
    assert [(r["sequence"], r["committed_offset"]) for r in OffsetsStore(table).read_rows()] == [
        (0, 10),
        (1, 11),
        (2, 13),
    ]


def test_a_commit_that_lost_its_app_transaction_is_refused_even_without_its_marker(tmp_path):
    """A commit written before commits named their last sequence: its rows are there but its
    `txn` line is not, so the next append would reuse their sequences."""
    table = three_commits(tmp_path)
    newest = newest_commit(table)
    actions = [json.loads(line) for line in newest.read_bytes().splitlines()]
    actions[0]["commitInfo"].pop(delta_log.LAST_SEQUENCE_KEY)
    kept = [a for a in actions if "txn" not in a]
    newest.write_text("\n".join(json.dumps(a) for a in kept))
    store = OffsetsStore(table)  # nothing in the log itself says a line is missing...
    with pytest.raises(OffsetsTableDamagedError, match="lost its last line"):
        list(store.read_rows())  # ...but the rows run past the app transaction


def test_an_older_damaged_commit_names_every_commit_to_move(tmp_path):
    table = three_commits(tmp_path)
    second = table / "_delta_log" / f"{2:020d}.json"
    os.truncate(second, line_ends(second)[0])
    with pytest.raises(OffsetsTableDamagedError, match="1 newer commits follow it") as refused:
        OffsetsStore(table)
    assert f"{2:020d}.json to {3:020d}.json" in str(refused.value)
    assert "acknowledged offsets and transaction decisions included" in str(refused.value)


def test_a_data_file_cut_short_is_refused(tmp_path):
    table = three_commits(tmp_path)
    add = next(
        json.loads(line)["add"]
        for line in newest_commit(table).read_bytes().splitlines()
        if b'"add"' in line
    )
    os.truncate(table / add["path"], 100)
    with pytest.raises(OffsetsTableDamagedError, match=f"{add['path']}, which has 100 of"):
        OffsetsStore(table)


def test_a_torn_checkpoint_is_refused_and_the_json_commits_rebuild_the_table(tmp_path):
    table = tmp_path / "offsets"
    store = OffsetsStore(table, maintenance_commits=5)
    for offset in range(7):
        store.append(rows(offset))
        store.wait_for_maintenance()
    (checkpoint,) = (table / "_delta_log").glob("*.checkpoint.parquet")
    os.truncate(checkpoint, 1000)
    with pytest.raises(OffsetsTableDamagedError, match="nothing is lost") as refused:
        OffsetsStore(table)
    assert str(checkpoint) in str(refused.value)
    for name in (checkpoint.name, "_last_checkpoint"):
        shutil.move(table / "_delta_log" / name, tmp_path / name)
    assert offsets_in(table) == list(range(7))


def test_every_commit_is_on_disk_before_append_returns(tmp_path, monkeypatch):
    synced: list[Path] = []
    real = delta_sync._fsync

    def recording(path: Path, directory: bool = False) -> None:
        synced.append(Path(path))
        real(path, directory)

    monkeypatch.setattr(delta_sync, "_fsync", recording)
    table = tmp_path / "offsets"
    store = OffsetsStore(table)
    synced.clear()
    store.append(rows(1))
    commit = newest_commit(table)
    (data_file,) = [p for p in synced if p.suffix == ".parquet"]
    # data file, then the commit naming it, then the directories naming both
    assert synced.index(data_file) < synced.index(commit)
    assert synced.index(commit) < synced.index(table / "_delta_log")
    assert table in synced[synced.index(commit) :]
    # an object store's PUT is durable when it returns: nothing to sync there
    assert delta_log.local_dir("s3://bucket/offsets") is None
    assert delta_log.local_dir(f"file://{table}") == table


@pytest.mark.parametrize("cut", ["after the commitInfo line", "mid-line"])
def test_brokers_keep_serving_while_a_damaged_table_keeps_the_coordinator_down(tmp_path, cut):
    """A confirmed commit cut at a line boundary (today: the offset silently goes back) or
    mid-line (today: the whole cluster dies with a deltalake traceback)."""
    topic = "damage"

    async def commit_twice(cluster):
        broker = await connect(cluster.bootstrap_servers)
        coord = await connect(cluster.coordinator.bootstrap)
        try:
            await create_topic(broker, topic, partitions=1)
            for offset in (10_545, 10_637):
                response = await commit(coord, "g", topic, {0: offset})
                assert int(response.topics[0].partitions[0].error_code) == 0
        finally:
            await broker.close()
            await coord.close()

    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=TEST_CONFIG) as cluster:
        asyncio.run(commit_twice(cluster))
        table = Path(cluster.coordinator.table_path)
    newest = newest_commit(table)
    os.truncate(newest, CUTS[cut](newest))

    async def served(cluster):
        broker = await connect(cluster.bootstrap_servers)
        coord = await connect(cluster.coordinator.bootstrap)
        try:
            await produce(broker, topic, batch([b"still"]), 0, acks=-1)
            fetched = records_of((await fetch(broker, topic, 0)).records)
            found = await call(coord, ApiKey.FIND_COORDINATOR, {"key": "g", "key_type": 0}, 3)
            committed = await commit(coord, "g", topic, {0: 1})
            listed = await call(coord, ApiKey.LIST_GROUPS, {"states_filter": []}, 4)
            return fetched, found, committed, listed
        finally:
            await broker.close()
            await coord.close()

    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=TEST_CONFIG) as cluster:
        reason = cluster.coordinator.unavailable
        assert reason is not None and str(newest) in reason and "move" in reason
        fetched, found, committed, listed = asyncio.run(served(cluster))
        assert [r.value for r in fetched] == [b"still"]  # the broker serves as ever
        assert int(found.error_code) == COORDINATOR_NOT_AVAILABLE
        assert int(committed.topics[0].partitions[0].error_code) == COORDINATOR_NOT_AVAILABLE
        assert int(listed.error_code) == COORDINATOR_NOT_AVAILABLE

        shutil.move(newest, tmp_path / newest.name)  # the repair the message names
        cluster.restart_coordinator()
        assert cluster.coordinator.unavailable is None
        committed = cluster.coordinator.call(lambda core: core.fetch_offsets("g", None))
        assert {tp: o.committed_offset for tp, o in committed.items()} == {(topic, 0): 10_545}


def test_serve_says_why_the_coordinator_is_not_serving(capsys):
    from types import SimpleNamespace

    from sparklog.cli.serve import report_coordinator

    report_coordinator(SimpleNamespace(coordinator=SimpleNamespace(unavailable=None)))
    assert capsys.readouterr().err == ""
    reason = "The group coordinator's offsets table /x is damaged: ... move it"
    report_coordinator(SimpleNamespace(coordinator=SimpleNamespace(unavailable=reason)))
    assert "not serving groups or transactions: " + reason in capsys.readouterr().err
