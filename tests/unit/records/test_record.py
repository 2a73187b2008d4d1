"""Per-record encode/decode: nulls, headers, timestamps, offsets (Kafka's `DefaultRecord`)."""

from __future__ import annotations

import dataclasses

import pytest

from sparklog.records.batch import RecordBatch, TimestampType, iter_batches, read_header
from sparklog.records.builder import SimpleRecord, assemble_batch, build_batch
from sparklog.records.compression import CompressionType
from sparklog.records.record import Record, decode_records, encode_record
from sparklog.records.varint import encode_varint

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
CODECS = list(CompressionType)


def decode(raw: bytes) -> list[Record]:
    (batch,) = iter_batches(raw)
    batch.ensure_valid()
    return batch.records()


def test_record_bytes_match_the_v2_layout() -> None:
    # length | attributes | timestampDelta | offsetDelta | key | value | headers
    assert encode_record(0, 0, None, b"v") == bytes.fromhex("0e 00 00 00 01 02 76 00")
    assert encode_record(3, -1, b"ab", None, (("h", b""), ("n", None))) == bytes.fromhex(
        "1c 00 01 06 04 6162 01 04 02 68 00 02 6e 01"
    )


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_null_and_empty_keys_and_values_stay_distinct(codec: CompressionType) -> None:
    records = [
        SimpleRecord(None, key=b"tombstone"),
        SimpleRecord(b"", key=b""),
        SimpleRecord(None, key=None),
        SimpleRecord(b"v", key=None),
        SimpleRecord(b"", key=None),
    ]
    got = decode(build_batch(records, compression=codec))
    assert [(r.key, r.value) for r in got] == [
        (b"tombstone", None),
        (b"", b""),
        (None, None),
        (None, b"v"),
        (None, b""),
    ]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_headers_round_trip_in_order(codec: CompressionType) -> None:
    headers = (
        ("trace-id", b"\x00\x01\x02"),
        ("empty", b""),
        ("null", None),
        ("trace-id", b"duplicate keys are kept"),
        ("", b"empty key"),
        ("ключ-😀", "значение".encode()),
    )
    (got,) = decode(build_batch([SimpleRecord(b"v", headers=headers)], compression=codec))
    assert got.headers == headers


def test_records_without_headers_have_an_empty_tuple() -> None:
    (got,) = decode(build_batch([SimpleRecord(b"v")]))
    assert got.headers == ()


def test_malformed_utf8_header_key_decodes_with_replacement_like_java() -> None:
    body = b"\x00\x00\x00" + encode_varint(-1) + encode_varint(-1) + encode_varint(1)
    body += encode_varint(2) + b"\xff\xfe" + encode_varint(-1)
    raw = assemble_batch(
        encode_varint(len(body)) + body,
        records_count=1,
        last_offset_delta=0,
        base_offset=0,
        base_timestamp=0,
        max_timestamp=0,
    )
    (got,) = decode(raw)
    assert got.headers == (("\ufffd\ufffd", None),)


@pytest.mark.parametrize("size", [0, 1, 63, 64, 127, 128, 8191, 8192, 70_000])
def test_lengths_cross_varint_byte_boundaries(size: int) -> None:
    key, value = b"k" * size, bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    (got,) = decode(build_batch([SimpleRecord(value, key=key, headers=(("h" * size, value),))]))
    assert (got.key, got.value, got.headers) == (key, value, (("h" * size, value),))


def test_create_time_keeps_each_records_timestamp() -> None:
    stamps = [1_700_000_000_500, 1_700_000_000_000, 1_700_000_009_999, 1_700_000_000_001]
    raw = build_batch([SimpleRecord(b"v", timestamp=t) for t in stamps], now_ms=1)
    header = read_header(raw)
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert header.base_timestamp == stamps[0]
    assert header.max_timestamp == max(stamps)
    got = decode(raw)
    assert [r.timestamp for r in got] == stamps
    assert {r.timestamp_type for r in got} == {TimestampType.CREATE_TIME}


def test_record_without_a_timestamp_gets_now_ms() -> None:
    raw = build_batch([SimpleRecord(b"a"), SimpleRecord(b"b", timestamp=5)], now_ms=1234)
    assert [r.timestamp for r in decode(raw)] == [1234, 5]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_log_append_time_gives_every_record_the_batch_max_timestamp(
    codec: CompressionType,
) -> None:
    raw = build_batch(
        [SimpleRecord(b"a", timestamp=10), SimpleRecord(b"b", timestamp=99), SimpleRecord(b"c")],
        now_ms=1_700_000_123_456,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        compression=codec,
    )
    header = read_header(raw)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == 1_700_000_123_456  # the log append time
    assert header.base_timestamp == 10  # records keep their create time deltas, as in Kafka
    got = decode(raw)
    assert [r.timestamp for r in got] == [1_700_000_123_456] * 3
    assert {r.timestamp_type for r in got} == {TimestampType.LOG_APPEND_TIME}


def test_log_append_time_read_from_a_header_set_by_a_broker() -> None:
    # A broker sets LOG_APPEND_TIME and maxTimestamp in the header; the record deltas stay.
    raw = assemble_batch(
        encode_record(0, 0, None, b"a") + encode_record(1, 50, None, b"b"),
        records_count=2,
        last_offset_delta=1,
        base_offset=7,
        base_timestamp=1000,
        max_timestamp=5555,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
    )
    assert [(r.offset, r.timestamp) for r in decode(raw)] == [(7, 5555), (8, 5555)]


@pytest.mark.parametrize(
    "stamps",
    [
        [INT64_MIN, INT64_MAX],
        [INT64_MAX, INT64_MIN, 0],
        [-1, INT64_MAX],
        [0, -1, 2**62],
    ],
)
def test_any_int64_timestamps_round_trip(stamps: list[int]) -> None:
    # The delta overflows int64; like Java longs it wraps on write and wraps back on read.
    raw = build_batch([SimpleRecord(b"v", timestamp=t) for t in stamps])
    assert [r.timestamp for r in decode(raw)] == stamps


def test_offsets_are_base_offset_plus_delta() -> None:
    raw = build_batch([SimpleRecord(b"v")] * 3, base_offset=2**40)
    assert [r.offset for r in decode(raw)] == [2**40, 2**40 + 1, 2**40 + 2]


def test_offset_deltas_with_gaps_as_after_compaction() -> None:
    raw = build_batch(
        [SimpleRecord(b"a"), SimpleRecord(b"b")], base_offset=10, offset_deltas=[0, 5]
    )
    header = read_header(raw)
    assert (header.last_offset_delta, header.next_offset, header.records_count) == (5, 16, 2)
    assert [r.offset for r in decode(raw)] == [10, 15]


def test_offset_deltas_must_match_the_records() -> None:
    with pytest.raises(ValueError):
        build_batch([SimpleRecord(b"a"), SimpleRecord(b"b")], offset_deltas=[0])


def test_an_empty_batch_cannot_be_built() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        build_batch([])


def test_build_accepts_any_iterable() -> None:
    raw = build_batch(SimpleRecord(bytes([i])) for i in range(3))
    assert [r.value for r in decode(raw)] == [b"\x00", b"\x01", b"\x02"]


def test_records_are_frozen_values() -> None:
    (got,) = decode(build_batch([SimpleRecord(b"v", key=b"k", timestamp=3)], base_offset=4))
    assert got == Record(4, 3, b"k", b"v", (), TimestampType.CREATE_TIME)
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.value = b"x"  # type: ignore[misc]


def test_batch_iterates_its_records() -> None:
    raw = build_batch([SimpleRecord(b"a"), SimpleRecord(b"b")])
    assert [r.value for r in RecordBatch(raw)] == [b"a", b"b"]


def test_decode_records_directly_from_a_section() -> None:
    raw = build_batch([SimpleRecord(b"a", timestamp=1), SimpleRecord(None, key=b"k", timestamp=3)])
    got = decode_records(read_header(raw), raw[61:])
    assert [(r.offset, r.timestamp, r.key, r.value) for r in got] == [
        (0, 1, None, b"a"),
        (1, 3, b"k", None),
    ]
