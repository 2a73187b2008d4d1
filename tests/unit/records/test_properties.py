"""Property-based tests: arbitrary records round-trip; arbitrary damage is always caught."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.records.batch import RecordBatch, TimestampType, iter_batches, stamp
from sparklog.records.builder import SimpleRecord, build_batch
from sparklog.records.compression import CompressionType
from sparklog.records.crc import crc32c
from sparklog.records.errors import CorruptRecordError
from sparklog.records.varint import decode_varint, encode_varint, size_of_varint

INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
BLOB = st.none() | st.binary(max_size=200)
HEADERS = st.lists(
    st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=40)), max_size=4
).map(tuple)
RECORD = st.builds(
    SimpleRecord,
    value=BLOB,
    key=BLOB,
    timestamp=st.none() | INT64 | st.integers(0, 2**42),
    headers=HEADERS,
)
CODEC = st.sampled_from(list(CompressionType))
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@given(INT64)
def test_varlong_round_trip(value: int) -> None:
    raw = encode_varint(value)
    assert len(raw) == size_of_varint(value) <= 10
    assert decode_varint(raw + b"\x00", 0, long=True) == (value, len(raw))


@given(INT32)
def test_varint_round_trip(value: int) -> None:
    raw = encode_varint(value)
    assert len(raw) <= 5
    assert decode_varint(b"\x01" + raw, 1) == (value, len(raw) + 1)


@st.composite
def batches(draw: st.DrawFn) -> tuple[bytes, list[SimpleRecord], dict]:
    records = draw(st.lists(RECORD, min_size=1, max_size=12))
    transactional = draw(st.booleans())
    kw = {
        "base_offset": draw(st.integers(0, 2**62)),
        "now_ms": draw(INT64),
        "compression": draw(CODEC),
        "timestamp_type": draw(st.sampled_from(list(TimestampType))),
        "producer_id": draw(st.integers(0, 2**63 - 1)) if transactional else -1,
        "producer_epoch": draw(st.integers(0, 2**15 - 1)) if transactional else -1,
        "base_sequence": draw(st.integers(0, 2**31 - 1)) if transactional else -1,
        "is_transactional": transactional,
        "partition_leader_epoch": draw(INT32),
    }
    return build_batch(records, **kw), records, kw


@SETTINGS
@given(batches())
def test_records_round_trip(case: tuple[bytes, list[SimpleRecord], dict]) -> None:
    raw, records, kw = case
    (batch,) = iter_batches(raw)
    batch.ensure_valid()
    header = batch.header
    assert header.compression is kw["compression"]
    assert header.timestamp_type is kw["timestamp_type"]
    assert header.is_transactional is kw["is_transactional"]
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        kw["producer_id"],
        kw["producer_epoch"],
        kw["base_sequence"],
    )
    assert header.partition_leader_epoch == kw["partition_leader_epoch"]
    assert header.records_count == len(records)
    create_times = [kw["now_ms"] if r.timestamp is None else r.timestamp for r in records]
    if kw["timestamp_type"] == TimestampType.LOG_APPEND_TIME:
        expected_times = [kw["now_ms"]] * len(records)
    else:
        expected_times = create_times
        assert header.max_timestamp == max(create_times)
    got = batch.records()
    assert [r.offset for r in got] == [kw["base_offset"] + i for i in range(len(records))]
    assert [r.timestamp for r in got] == expected_times
    assert [(r.key, r.value, r.headers) for r in got] == [
        (r.key, r.value, r.headers) for r in records
    ]
    assert {r.timestamp_type for r in got} == {kw["timestamp_type"]}


@SETTINGS
@given(batches(), st.integers(0, 2**62), INT32)
def test_stamp_never_breaks_the_crc(
    case: tuple[bytes, list[SimpleRecord], dict], base_offset: int, epoch: int
) -> None:
    raw, records, _kw = case
    buf = bytearray(raw)
    stamp(buf, 0, base_offset, epoch)
    batch = RecordBatch(bytes(buf))
    batch.ensure_valid()
    assert (batch.header.base_offset, batch.header.partition_leader_epoch) == (base_offset, epoch)
    assert [r.offset for r in batch.records()] == [base_offset + i for i in range(len(records))]


@SETTINGS
@given(batches(), st.data())
def test_any_truncation_is_corrupt(
    case: tuple[bytes, list[SimpleRecord], dict], data: st.DataObject
) -> None:
    raw, _records, _kw = case
    cut = data.draw(st.integers(1, len(raw) - 1))
    try:
        list(iter_batches(raw[:cut]))
    except CorruptRecordError as e:
        assert 0 <= e.position <= cut
    else:
        raise AssertionError(f"a batch cut at {cut} of {len(raw)} bytes was accepted")


def _recrc(buf: bytearray) -> None:
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[21:]))


@SETTINGS
@given(batches(), st.data(), st.booleans())
def test_random_damage_is_corrupt_or_caught_by_the_crc(
    case: tuple[bytes, list[SimpleRecord], dict], data: st.DataObject, fix_crc: bool
) -> None:
    """Overwrite a few bytes, optionally re-CRC (to reach the structural checks): decoding either
    raises CorruptRecordError or, without the re-CRC, `ensure_valid()` fails for damage it covers."""
    raw, _records, _kw = case
    buf = bytearray(raw)
    positions = data.draw(st.lists(st.integers(21, len(raw) - 1), min_size=1, max_size=4))
    for p in positions:
        buf[p] = data.draw(st.integers(0, 255))
    changed = bytes(buf) != raw
    if fix_crc:
        _recrc(buf)
    try:
        for batch in iter_batches(bytes(buf)):
            batch.records()
    except CorruptRecordError:
        return
    if changed and not fix_crc:
        assert not RecordBatch(bytes(buf)).is_valid()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_but_corrupt_record(blob: bytes) -> None:
    try:
        for batch in iter_batches(blob):
            batch.is_valid()
            batch.records()
    except CorruptRecordError:
        pass
