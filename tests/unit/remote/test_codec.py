"""The topic table's codec: v2 batches -> rows -> v2 batches is record-identical (every header
and record field, gaps inside batches, control batches, LogAppendTime, null keys and values,
headers, every compression codec) with valid CRCs."""

from __future__ import annotations

import random

import pytest

from sparklog.records.batch import TimestampType, iter_batches
from sparklog.records.builder import SimpleRecord, build_batch
from sparklog.records.compression import CompressionType
from sparklog.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from sparklog.storage.remote.codec import batches_to_rows, rows_to_batch_list, rows_to_batches
from sparklog.storage.remote.schema import TABLE_SCHEMA
from sparklog.storage.txn_index import AbortedTxn

_DAY_MS = 86_400_000


def _bytes(rng: random.Random, null_chance: float) -> bytes | None:
    if rng.random() < null_chance:
        return None
    return rng.randbytes(rng.choice([0, 1, 3, 20, 300]))


def random_batch(rng: random.Random, base_offset: int) -> tuple[bytes, int]:
    """One random batch at `base_offset`; returns it and the next offset."""
    now = 1_700_000_000_000 + rng.randrange(-3 * _DAY_MS, 3 * _DAY_MS)
    if rng.random() < 0.1:
        marker = EndTransactionMarker(
            rng.choice([ControlRecordType.COMMIT, ControlRecordType.ABORT]), rng.randrange(5)
        )
        batch = build_end_txn_marker_batch(
            marker,
            producer_id=rng.randrange(3),
            producer_epoch=rng.randrange(3),
            timestamp_ms=now,
            base_offset=base_offset,
            partition_leader_epoch=rng.randrange(10),
        )
        return batch, base_offset + 1
    n = rng.randrange(1, 30)
    gaps = rng.random() < 0.3
    deltas, d = [], 0
    for _ in range(n):
        deltas.append(d)
        d += rng.choice([1, 1, 2, 5]) if gaps else 1
    records = [
        SimpleRecord(
            value=_bytes(rng, 0.1),
            key=_bytes(rng, 0.3),
            timestamp=now + rng.randrange(-_DAY_MS, _DAY_MS),  # may cross midnight
            headers=tuple(
                (f"h{i}-{rng.randrange(100)}", _bytes(rng, 0.2))
                for i in range(rng.choice([0, 0, 1, 3]))
            ),
        )
        for _ in range(n)
    ]
    transactional = rng.random() < 0.3
    batch = build_batch(
        records,
        base_offset=base_offset,
        now_ms=now,
        compression=rng.choice(list(CompressionType)),
        timestamp_type=rng.choice(list(TimestampType)[-2:]),
        producer_id=rng.randrange(3) if transactional or rng.random() < 0.5 else -1,
        producer_epoch=rng.randrange(3),
        base_sequence=rng.randrange(1000),
        is_transactional=transactional,
        partition_leader_epoch=rng.randrange(10),
        offset_deltas=deltas if gaps else None,
    )
    return batch, base_offset + deltas[-1] + 1


def random_batches(rng: random.Random, count: int, base_offset: int = 0) -> list[bytes]:
    out = []
    for _ in range(count):
        batch, base_offset = random_batch(rng, base_offset)
        out.append(batch)
        base_offset += rng.choice([0, 0, 0, 4])  # a gap between batches too
    return out


def _described(buf: bytes) -> list[tuple]:
    """Every header field (but length and CRC, which the check validates) and every record."""
    out = []
    for batch in iter_batches(buf):
        batch.ensure_valid()
        h = batch.header
        fields = (
            h.base_offset,
            h.partition_leader_epoch,
            h.attributes,
            h.last_offset_delta,
            h.base_timestamp,
            h.max_timestamp,
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            h.records_count,
            h.compression,
            h.timestamp_type,
            h.is_transactional,
            h.is_control,
        )
        out.append((fields, batch.records_bytes(), batch.records()))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_round_trip_is_record_identical(seed: int) -> None:
    rng = random.Random(seed)
    batches = random_batches(rng, rng.randrange(1, 25))
    original = b"".join(batches)
    rows = batches_to_rows(original, partition=3)
    assert rows.schema == TABLE_SCHEMA
    rebuilt = rows_to_batches(rows)
    assert _described(rebuilt) == _described(original), f"seed={seed}"
    for old, new in zip(batches, rows_to_batch_list(rows), strict=True):
        if old[21:23] == new[21:23] and (old[22] & 0x07) == 0:  # uncompressed: same bytes
            assert new == old


def test_rows_carry_the_records_and_their_batches() -> None:
    records = [SimpleRecord(b"v1", b"k1", 1000), SimpleRecord(None, None, 86_400_000 + 5)]
    batch = build_batch(
        records,
        base_offset=10,
        producer_id=7,
        producer_epoch=2,
        base_sequence=4,
        is_transactional=True,
        partition_leader_epoch=3,
        offset_deltas=[0, 2],
    )
    marker = build_end_txn_marker_batch(
        EndTransactionMarker(ControlRecordType.ABORT, 0),
        producer_id=7,
        producer_epoch=2,
        timestamp_ms=99,
        base_offset=13,
    )
    rows = batches_to_rows(batch + marker, 1, [AbortedTxn(7, 10, 13, 10)]).to_pylist()
    assert [r["offset"] for r in rows] == [10, 12, 13]
    assert [r["date"].toordinal() - 719163 for r in rows] == [0, 1, 0]
    assert [r["aborted"] for r in rows] == [True, True, False]  # the marker is control
    assert [r["is_control"] for r in rows] == [False, False, True]
    first = rows[0]
    assert first["key"] == b"k1" and rows[1]["key"] is None and rows[1]["value"] is None
    assert (first["producer_id"], first["producer_epoch"], first["base_sequence"]) == (7, 2, 4)
    assert (first["batch_base_offset"], first["batch_last_offset_delta"]) == (10, 2)
    assert first["leader_epoch"] == 3 and first["partition"] == 1


def test_log_append_time_keeps_the_records_own_timestamps() -> None:
    records = [SimpleRecord(b"a", None, 5_000), SimpleRecord(b"b", None, 4_000)]
    batch = build_batch(records, now_ms=9_000, timestamp_type=TimestampType.LOG_APPEND_TIME)
    rows = batches_to_rows(batch, 0)
    assert [t.timestamp() * 1000 for t in rows.column("timestamp").to_pylist()] == [9000, 9000]
    assert rows.column("create_timestamp").to_pylist() == [5_000, 4_000]
    assert rows_to_batches(rows) == batch


def test_rows_in_any_order_rebuild_the_same_batches() -> None:
    batches = random_batches(random.Random(7), 10)
    rows = batches_to_rows(b"".join(batches), 0)
    shuffled = rows.take(list(reversed(range(rows.num_rows))))
    assert _described(rows_to_batches(shuffled)) == _described(b"".join(batches))


def test_empty() -> None:
    assert batches_to_rows(b"", 0).num_rows == 0
    assert rows_to_batches(TABLE_SCHEMA.empty_table()) == b""
