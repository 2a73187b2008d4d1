"""Choosing a topic table's files from their statistics: read order and candidates by batch
bounds, retention in offset order over files that may overlap (a batch across midnight)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparklog.storage.remote.files import partition_files


def files(rows: list[dict]) -> pa.Table:
    columns = {
        "path": [f"f{i}" for i in range(len(rows))],
        "partition.partition": [r.get("partition", 0) for r in rows],
        "size_bytes": [r.get("size", 100) for r in rows],
        "num_records": [10] * len(rows),
        "min.offset": [r["min"] for r in rows],
        "max.offset": [r["max"] for r in rows],
        "min.batch_base_offset": [r.get("min_base", r["min"]) for r in rows],
        "max.batch_base_offset": [r.get("max_base", r["max"]) for r in rows],
        "max.batch_last_offset_delta": [r.get("delta", 0) for r in rows],
        "max.batch_max_timestamp": [r.get("ts", 0) for r in rows],
    }
    return pa.table(columns)


def test_reads_pick_files_by_batch_bounds_in_base_order() -> None:
    (p,) = partition_files(
        files(
            [
                {"min": 20, "max": 29, "delta": 4},
                {"min": 0, "max": 9, "max_base": 5, "delta": 6},  # its last batch ends at 11
                {"min": 10, "max": 19},
            ]
        )
    ).values()
    assert p.paths == ["f1", "f2", "f0"]  # by smallest batch base offset
    assert [p.paths[i] for i in p.for_read(11, None)] == ["f1", "f2", "f0"]
    assert [p.paths[i] for i in p.for_read(12, None)] == ["f2", "f0"]
    assert [p.paths[i] for i in p.for_read(12, upper=20)] == ["f2"]
    assert p.start_offset == 0


def test_retention_drops_whole_files_in_offset_order() -> None:
    (p,) = partition_files(
        files(
            [
                {"min": 0, "max": 100, "ts": 10},
                {"min": 50, "max": 150, "ts": 90},  # overlaps the first (another date)
                {"min": 151, "max": 200, "ts": 10},
            ]
        )
    ).values()
    # the first is old, but the newer second holds offsets below its end: nothing goes
    assert p.expire_offset(cutoff_ms=50, retention_bytes=None) is None
    assert p.expire_offset(cutoff_ms=95, retention_bytes=None) == 201
    # size: keep at least 150 of 300 bytes: the first file alone cannot go (the second holds
    # offsets below its end), both would leave 100
    assert p.expire_offset(cutoff_ms=None, retention_bytes=150) is None
    assert p.expire_offset(cutoff_ms=None, retention_bytes=100) == 151
    assert p.expire_offset(cutoff_ms=None, retention_bytes=300) is None
    assert p.expire_offset(cutoff_ms=None, retention_bytes=0) == 201


def test_files_group_by_partition() -> None:
    grouped = partition_files(
        files([{"min": 0, "max": 1, "partition": 2}, {"min": 5, "max": 9, "partition": 0}])
    )
    assert sorted(grouped) == [0, 2]
    assert np.array_equal(grouped[2].max_offset, [1])
