"""Transaction markers: control batches with Kafka's key/value layout (ABORT=0, COMMIT=1)."""

from __future__ import annotations

import struct

import pytest

from sparklog.records.batch import RecordBatch, read_header
from sparklog.records.builder import SimpleRecord, build_batch
from sparklog.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
    control_type_of,
    decode_end_txn_marker,
)
from sparklog.records.errors import CorruptRecordError

CONTROL_HEADER = read_header(
    build_end_txn_marker_batch(
        EndTransactionMarker(ControlRecordType.COMMIT, 0),
        producer_id=1,
        producer_epoch=0,
        timestamp_ms=0,
    )
)


def test_type_ids_are_kafkas() -> None:
    assert (ControlRecordType.ABORT, ControlRecordType.COMMIT) == (0, 1)


@pytest.mark.parametrize(
    ("kind", "key_hex"),
    [(ControlRecordType.ABORT, "00000000"), (ControlRecordType.COMMIT, "00000001")],
)
def test_marker_batch_layout(kind: ControlRecordType, key_hex: str) -> None:
    raw = build_end_txn_marker_batch(
        EndTransactionMarker(kind, coordinator_epoch=0x01020304),
        producer_id=4242,
        producer_epoch=7,
        timestamp_ms=1_700_000_000_000,
        base_offset=99,
        partition_leader_epoch=3,
    )
    batch = RecordBatch(raw)
    batch.ensure_valid()
    header = batch.header
    assert struct.unpack_from(">h", raw, 21)[0] == 0x30  # transactional | control
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch) == (4242, 7)
    assert (
        header.base_sequence == -1
    )  # markers carry no sequence (MemoryRecords.withEndTransactionMarker)
    assert (header.base_offset, header.partition_leader_epoch) == (99, 3)
    assert (header.records_count, header.last_offset_delta) == (1, 0)
    assert header.max_timestamp == 1_700_000_000_000
    (record,) = batch.records()
    assert record.key == bytes.fromhex(key_hex)  # version int16 0, type int16
    assert record.value == bytes.fromhex(
        "0000 01020304"
    )  # version int16 0, coordinator epoch int32
    assert (record.offset, record.timestamp, record.headers) == (99, 1_700_000_000_000, ())


@pytest.mark.parametrize("kind", list(ControlRecordType))
@pytest.mark.parametrize("epoch", [0, 1, 2**31 - 1, -1])
def test_marker_round_trip(kind: ControlRecordType, epoch: int) -> None:
    marker = EndTransactionMarker(kind, epoch)
    batch = RecordBatch(
        build_end_txn_marker_batch(marker, producer_id=1, producer_epoch=2, timestamp_ms=3)
    )
    (record,) = batch.records()
    assert control_type_of(record.key) is kind
    assert decode_end_txn_marker(batch.header, record.key, record.value) == marker


def test_marker_is_a_frozen_value() -> None:
    marker = EndTransactionMarker(ControlRecordType.ABORT, 5)
    assert marker == EndTransactionMarker(ControlRecordType.ABORT, 5)
    with pytest.raises(AttributeError):
        marker.coordinator_epoch = 6  # type: ignore[misc]


def test_a_newer_value_version_is_read_as_version_0_like_kafka() -> None:
    value = struct.pack(">hi", 1, 77) + b"future fields"
    marker = decode_end_txn_marker(CONTROL_HEADER, b"\x00\x00\x00\x01", value)
    assert marker == EndTransactionMarker(ControlRecordType.COMMIT, 77)


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (None, b"\x00" * 6, "key shorter than 4 bytes"),
        (b"\x00\x00\x00", b"\x00" * 6, "key shorter than 4 bytes"),
        (b"\x00\x00\x00\x07", b"\x00" * 6, "unknown control record type 7"),
        (b"\xff\xff\x00\x01", b"\x00" * 6, "negative control record key version -1"),
        (b"\x00\x00\x00\x01", None, "value shorter than 6 bytes"),
        (b"\x00\x00\x00\x01", b"\x00" * 5, "value shorter than 6 bytes"),
        (
            b"\x00\x00\x00\x00",
            b"\xff\xfe\x00\x00\x00\x01",
            "negative end-transaction marker version -2",
        ),
    ],
)
def test_bad_markers_are_corrupt(key: bytes | None, value: bytes | None, reason: str) -> None:
    with pytest.raises(CorruptRecordError, match=reason) as info:
        decode_end_txn_marker(CONTROL_HEADER, key, value, position=1234)
    assert info.value.position == 1234


def test_only_control_batches_hold_markers() -> None:
    header = read_header(
        build_batch([SimpleRecord(b"\x00\x00\x00\x00\x00\x00", key=b"\x00\x00\x00\x01")])
    )
    with pytest.raises(ValueError, match="not a control batch"):
        decode_end_txn_marker(header, b"\x00\x00\x00\x01", b"\x00" * 6)
