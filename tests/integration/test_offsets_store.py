"""The group coordinator's Delta table on a real disk: rows round-trip in order, a second
writer fences the first, maintenance keeps the log short, and a foreign table is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable, write_deltalake

from sparklog.coordinator.group.offsets import CommittedOffset
from sparklog.coordinator.group.rows import group_row, offset_row
from sparklog.coordinator.offsets_store import (
    APP_ID,
    SCHEMA,
    OffsetsStore,
    OffsetsStoreFencedError,
)


def rows(n: int, start: int = 0) -> list[dict]:
    return [
        offset_row(
            "g", ("t", i % 3), CommittedOffset(start + i, 4, f"m{i}", 1_700_000_000_000, None)
        )
        for i in range(n)
    ]


def test_rows_round_trip_in_order_with_deletions_and_groups(tmp_path: Path):
    store = OffsetsStore(tmp_path / "offsets")
    store.append(rows(3))
    store.append([offset_row("g", ("t", 1), None), group_row("g", {"generation_id": 2}, 5)])
    again = list(OffsetsStore(tmp_path / "offsets").read_rows())
    assert [r["sequence"] for r in again] == [0, 1, 2, 3, 4]
    assert [r["committed_offset"] for r in again] == [0, 1, 2, None, None]
    assert again[0]["commit_timestamp_ms"] == 1_700_000_000_000
    assert again[0]["leader_epoch"] == 4 and again[0]["metadata"] == "m0"
    assert again[4]["record_type"] == "group" and '"generation_id": 2' in again[4]["group_metadata"]
    table = DeltaTable(str(tmp_path / "offsets"))
    assert table.transaction_version(APP_ID) == 4
    assert table.protocol().min_reader_version == 1 and table.protocol().min_writer_version == 2


def test_a_second_coordinator_on_the_same_table_fences_the_first(tmp_path: Path):
    first = OffsetsStore(tmp_path / "offsets")
    first.append(rows(2))
    second = OffsetsStore(tmp_path / "offsets")  # a restarted driver
    second.append(rows(2, start=10))
    with pytest.raises(OffsetsStoreFencedError, match="another group coordinator"):
        first.append(rows(1, start=99))
    with pytest.raises(OffsetsStoreFencedError):  # and stays fenced
        first.append(rows(1, start=99))
    assert [r["committed_offset"] for r in second.read_rows()] == [0, 1, 10, 11]


def test_maintenance_checkpoints_and_compacts(tmp_path: Path):
    store = OffsetsStore(tmp_path / "offsets", maintenance_commits=10)
    for i in range(25):
        store.append(rows(2, start=i * 2))
        store.wait_for_maintenance()
    log_dir = tmp_path / "offsets" / "_delta_log"
    assert list(log_dir.glob("*.checkpoint.parquet")), "a checkpoint after 10 commits"
    table = DeltaTable(str(tmp_path / "offsets"))
    assert len(table.file_uris()) < 25, "small files were compacted"
    assert [r["committed_offset"] for r in store.read_rows()] == list(range(50))


def test_a_foreign_delta_table_is_refused_with_the_fix(tmp_path: Path):
    import pyarrow as pa

    write_deltalake(str(tmp_path / "other"), pa.table({"x": [1]}))
    with pytest.raises(ValueError, match="offsets.table.path"):
        OffsetsStore(tmp_path / "other")
    assert "sequence" in SCHEMA.names
