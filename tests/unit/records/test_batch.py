"""The v2 batch header, attributes, stamping, batch iteration, and corrupt input."""

from __future__ import annotations

import struct

import pytest

from sparklog.records.batch import (
    HEADER_SIZE,
    BatchHeader,
    RecordBatch,
    TimestampType,
    attributes_for,
    iter_batches,
    pack_header,
    read_header,
    stamp,
)
from sparklog.records.builder import SimpleRecord, assemble_batch, build_batch
from sparklog.records.compression import CompressionType
from sparklog.records.crc import crc32c
from sparklog.records.errors import CorruptRecordError
from sparklog.records.record import encode_record
from sparklog.records.varint import encode_varint

RECORDS = [
    SimpleRecord(b"value-0", key=b"key-0", timestamp=1_700_000_000_000),
    SimpleRecord(None, key=b"k", timestamp=1_700_000_000_005, headers=(("h", b"1"), ("n", None))),
]


def recrc(batch: bytes | bytearray) -> bytes:
    """The batch with its CRC recomputed, so a test reaches the structural checks."""
    out = bytearray(batch)
    out[17:21] = crc32c(memoryview(out)[21:]).to_bytes(4, "big")
    return bytes(out)


def patched(batch: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(batch)
    struct.pack_into(fmt, out, offset, value)
    return recrc(out)


def section(*records: bytes) -> bytes:
    return b"".join(records)


def batch_of(records_section: bytes, count: int, **kw) -> bytes:
    return assemble_batch(
        records_section,
        records_count=count,
        last_offset_delta=max(count - 1, 0),
        base_offset=kw.pop("base_offset", 0),
        base_timestamp=1000,
        max_timestamp=1000,
        **kw,
    )


# --- header layout ----------------------------------------------------------------------


def test_header_fields_sit_at_kafkas_offsets() -> None:
    raw = build_batch(
        [
            SimpleRecord(b"v", timestamp=0x0A0B0C0D0E0F1011),
            SimpleRecord(b"w", timestamp=0x0A0B0C0D0E0F1012),
        ],
        base_offset=0x0102030405060708,
        partition_leader_epoch=0x11121314,
        producer_id=0x2122232425262728,
        producer_epoch=0x3132,
        base_sequence=0x41424344,
        compression=CompressionType.NONE,
    )
    # DefaultRecordBatch's *_OFFSET constants
    assert raw[0:8] == bytes.fromhex("0102030405060708")
    assert struct.unpack_from(">i", raw, 8)[0] == len(raw) - 12
    assert raw[12:16] == bytes.fromhex("11121314")
    assert raw[16] == 2
    assert struct.unpack_from(">I", raw, 17)[0] == crc32c(raw[21:])
    assert raw[21:23] == b"\x00\x00"
    assert struct.unpack_from(">i", raw, 23)[0] == 1
    assert raw[27:35] == bytes.fromhex("0a0b0c0d0e0f1011")
    assert raw[35:43] == bytes.fromhex("0a0b0c0d0e0f1012")
    assert raw[43:51] == bytes.fromhex("2122232425262728")
    assert raw[51:53] == bytes.fromhex("3132")
    assert raw[53:57] == bytes.fromhex("41424344")
    assert struct.unpack_from(">i", raw, 57)[0] == 2
    assert HEADER_SIZE == 61
    assert raw[61:] == encode_record(0, 0, None, b"v") + encode_record(1, 1, None, b"w")


def test_pack_and_read_header_round_trip_at_any_position() -> None:
    header = BatchHeader(
        base_offset=2**63 - 1,
        batch_length=49,
        partition_leader_epoch=-(2**31),
        magic=2,
        crc=0xFFFFFFFF,
        attributes=0x7C,
        last_offset_delta=0,
        base_timestamp=-(2**63),
        max_timestamp=2**63 - 1,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=2**31 - 1,
        records_count=0,
    )
    raw = pack_header(header)
    assert len(raw) == 61
    assert read_header(b"\xee" * 5 + raw, 5) == header


@pytest.mark.parametrize(
    ("kw", "attributes"),
    [
        ({}, 0x00),
        ({"compression": CompressionType.GZIP}, 0x01),
        ({"compression": CompressionType.SNAPPY}, 0x02),
        ({"compression": CompressionType.LZ4}, 0x03),
        ({"compression": CompressionType.ZSTD}, 0x04),
        ({"timestamp_type": TimestampType.LOG_APPEND_TIME}, 0x08),
        ({"is_transactional": True}, 0x10),
        ({"is_control": True}, 0x20),
        ({"has_delete_horizon": True}, 0x40),
        (
            {
                "compression": CompressionType.ZSTD,
                "timestamp_type": TimestampType.LOG_APPEND_TIME,
                "is_transactional": True,
                "is_control": True,
                "has_delete_horizon": True,
            },
            0x7C,
        ),
    ],
)
def test_attribute_bits(kw: dict, attributes: int) -> None:
    assert attributes_for(**kw) == attributes


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
@pytest.mark.parametrize("timestamp_type", list(TimestampType), ids=lambda t: t.name)
@pytest.mark.parametrize("transactional", [False, True])
def test_built_batch_carries_its_attributes(
    codec: CompressionType, timestamp_type: TimestampType, transactional: bool
) -> None:
    raw = build_batch(
        RECORDS,
        compression=codec,
        timestamp_type=timestamp_type,
        is_transactional=transactional,
        producer_id=7 if transactional else -1,
        producer_epoch=0 if transactional else -1,
    )
    expected = attributes_for(codec, timestamp_type, transactional)
    assert struct.unpack_from(">h", raw, 21)[0] == expected
    header = RecordBatch(raw).header
    assert header.compression is codec
    assert header.timestamp_type is timestamp_type
    assert header.is_transactional is transactional
    assert header.is_control is False
    assert header.has_delete_horizon is False
    assert header.attributes == expected


def test_header_properties_decode_every_bit() -> None:
    header = read_header(build_batch(RECORDS, is_control=True, delete_horizon_ms=5))
    assert header.is_control and header.has_delete_horizon
    assert header.attributes == 0x60


def test_defaults_are_kafkas_sentinels() -> None:
    header = RecordBatch(build_batch(RECORDS)).header
    assert header.producer_id == -1
    assert header.producer_epoch == -1
    assert header.base_sequence == -1
    assert header.partition_leader_epoch == -1
    assert header.has_producer_id is False
    assert header.last_sequence == -1
    assert header.delete_horizon_ms == -1
    assert header.magic == 2


def test_offsets_sizes_and_sequences() -> None:
    raw = build_batch(RECORDS, base_offset=100, producer_id=9, producer_epoch=3, base_sequence=40)
    header = RecordBatch(raw).header
    assert (header.last_offset_delta, header.last_offset, header.next_offset) == (1, 101, 102)
    assert header.size_in_bytes == len(raw)
    assert header.batch_length == len(raw) - 12
    assert header.records_count == 2
    assert header.has_producer_id
    assert header.last_sequence == 41


def test_last_sequence_wraps_at_int32_max_like_kafka() -> None:
    # DefaultRecordBatch.incrementSequence
    raw = build_batch(
        [SimpleRecord(b"x")] * 4, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2
    )
    assert read_header(raw).last_sequence == 1


def test_delete_horizon_lives_in_base_timestamp() -> None:
    raw = build_batch(RECORDS, delete_horizon_ms=1_800_000_000_000)
    batch = RecordBatch(raw)
    assert batch.header.has_delete_horizon
    assert batch.header.base_timestamp == batch.header.delete_horizon_ms == 1_800_000_000_000
    assert [r.timestamp for r in batch.records()] == [r.timestamp for r in RECORDS]


# --- stamp ------------------------------------------------------------------------------


def test_stamp_rewrites_offset_and_leader_epoch_and_keeps_the_crc_valid() -> None:
    first = build_batch(RECORDS)
    second = build_batch(RECORDS, compression=CompressionType.LZ4)
    buf = bytearray(first + second)
    before = bytes(buf)
    stamp(buf, len(first), 5000, 17)

    assert buf[: len(first)] == first
    assert buf[len(first) + 8 : len(first) + 12] == before[len(first) + 8 : len(first) + 12]
    assert buf[len(first) + 16 :] == before[len(first) + 16 :]
    batches = list(iter_batches(buf))
    assert batches[1].position == len(first)
    header = batches[1].header
    assert (header.base_offset, header.partition_leader_epoch) == (5000, 17)
    assert header.crc == read_header(second).crc
    batches[1].ensure_valid()
    assert batches[1].is_valid()
    assert [r.offset for r in batches[1].records()] == [5000, 5001]


def test_stamp_works_through_a_memoryview() -> None:
    buf = bytearray(build_batch(RECORDS))
    stamp(memoryview(buf), 0, 2**40, 0)
    assert RecordBatch(bytes(buf)).header.base_offset == 2**40


# --- RecordBatch and iter_batches -------------------------------------------------------


def test_iter_batches_yields_each_batch_with_its_position() -> None:
    a, b, c = (build_batch(RECORDS, base_offset=o) for o in (0, 2, 4))
    buf = a + b + c
    batches = list(iter_batches(buf))
    assert [x.position for x in batches] == [0, len(a), len(a) + len(b)]
    assert [bytes(x.data) for x in batches] == [a, b, c]
    assert [r.offset for x in batches for r in x.records()] == [0, 1, 2, 3, 4, 5]
    assert [x.position for x in iter_batches(buf, len(a), len(a) + len(b))] == [len(a)]
    assert list(iter_batches(b"")) == []


def test_iter_batches_allows_a_partial_tail_only_when_asked() -> None:
    a, b = build_batch(RECORDS), build_batch(RECORDS)
    buf = a + b[:-1]
    with pytest.raises(CorruptRecordError, match="truncated batch") as info:
        list(iter_batches(buf))
    assert info.value.position == len(a)
    assert [x.position for x in iter_batches(buf, allow_partial_tail=True)] == [0]
    assert [x.position for x in iter_batches(a + b[:5], allow_partial_tail=True)] == [0]


def test_repr_names_offsets_and_codec() -> None:
    text = repr(RecordBatch(build_batch(RECORDS, base_offset=10, compression=CompressionType.GZIP)))
    assert "offsets=10..11" in text and "gzip" in text and "count=2" in text


def test_empty_batch_decodes_to_no_records() -> None:
    # Kafka's DefaultRecordBatch.writeEmptyHeader: header only, recordsCount 0
    raw = batch_of(b"", 0)
    assert RecordBatch(raw).records() == []
    # with a codec attribute but no codec stream, as a compacted-away batch may be left
    assert RecordBatch(batch_of(b"", 0, compression=CompressionType.ZSTD)).records() == []


# --- corrupt input: header --------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_wrong_magic(magic: int) -> None:
    raw = patched(build_batch(RECORDS), 16, ">b", magic)
    with pytest.raises(CorruptRecordError) as info:
        RecordBatch(raw)
    assert info.value.position == 16
    assert f"magic {magic}" in info.value.reason


def test_old_message_set_shorter_than_a_v2_header_reports_its_magic() -> None:
    # A v1 message (offset, size, crc, magic=1, ...) of 30 bytes
    legacy = struct.pack(">qiIbbq", 0, 18, 0, 1, 0, 0) + b"\xff\xff\xff\xff"
    with pytest.raises(CorruptRecordError, match="magic 1") as info:
        list(iter_batches(legacy))
    assert info.value.position == 16


def test_bad_crc() -> None:
    raw = bytearray(build_batch(RECORDS))
    raw[-1] ^= 0x01
    batch = RecordBatch(bytes(raw))
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError, match="CRC-32C mismatch") as info:
        batch.ensure_valid()
    assert info.value.position == 17


def test_bad_crc_position_is_absolute_in_a_buffer() -> None:
    a = build_batch(RECORDS)
    b = bytearray(build_batch(RECORDS))
    b[30] ^= 0x10
    with pytest.raises(CorruptRecordError) as info:
        for batch in iter_batches(a + bytes(b)):
            batch.ensure_valid()
    assert info.value.position == len(a) + 17


def test_batch_length_smaller_than_the_header() -> None:
    raw = patched(build_batch(RECORDS), 8, ">i", 10)
    with pytest.raises(CorruptRecordError, match="smaller than the header") as info:
        list(iter_batches(raw))
    assert info.value.position == 8
    with pytest.raises(CorruptRecordError, match="smaller than the header"):
        RecordBatch(raw)


@pytest.mark.parametrize("delta", [1, -1, 1000])
def test_batch_length_disagreeing_with_the_buffer(delta: int) -> None:
    raw = build_batch(RECORDS)
    bad = patched(raw, 8, ">i", len(raw) - 12 + delta)
    with pytest.raises(CorruptRecordError, match="batchLength says") as info:
        RecordBatch(bad)
    assert info.value.position == 8
    with pytest.raises(CorruptRecordError):
        for batch in iter_batches(bad):
            batch.records()


def test_negative_records_count() -> None:
    raw = patched(build_batch(RECORDS), 57, ">i", -1)
    with pytest.raises(CorruptRecordError, match="negative recordsCount") as info:
        RecordBatch(raw)
    assert info.value.position == 57


def test_negative_last_offset_delta() -> None:
    raw = patched(build_batch(RECORDS), 23, ">i", -3)
    with pytest.raises(CorruptRecordError, match="negative lastOffsetDelta") as info:
        RecordBatch(raw)
    assert info.value.position == 23


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_unknown_codec_id_is_corrupt_not_a_crash(codec_id: int) -> None:
    raw = patched(build_batch(RECORDS), 21, ">h", codec_id)
    with pytest.raises(
        CorruptRecordError, match=f"unknown compression codec id {codec_id}"
    ) as info:
        RecordBatch(raw)
    assert info.value.position == 21


def test_header_error_position_is_absolute_in_a_buffer() -> None:
    a = build_batch(RECORDS)
    b = patched(build_batch(RECORDS), 16, ">b", 1)
    with pytest.raises(CorruptRecordError, match="magic 1") as info:
        list(iter_batches(a + b))
    assert info.value.position == len(a) + 16


# --- corrupt input: records section -----------------------------------------------------


def _body(*fields: bytes) -> bytes:
    body = b"".join(fields)
    return encode_varint(len(body)) + body


NULL = encode_varint(-1)
GOOD = encode_record(0, 0, b"k", b"v")


def _decode_error(raw: bytes) -> CorruptRecordError:
    batch = RecordBatch(raw)
    batch.ensure_valid()  # the CRC is fine: the structure is what is wrong
    with pytest.raises(CorruptRecordError) as info:
        batch.records()
    return info.value


def test_more_records_declared_than_present() -> None:
    sec = section(GOOD, encode_record(1, 0, None, b"w"))
    err = _decode_error(batch_of(sec, 3))
    assert "records end after 2 of the 3" in err.reason
    assert err.position == 61 + len(sec)


def test_fewer_records_declared_than_present() -> None:
    err = _decode_error(batch_of(section(GOOD, encode_record(1, 0, None, b"w")), 1))
    assert "bytes left after the 1 records" in err.reason
    assert err.position == 61 + len(GOOD)


def test_leftover_bytes_after_the_last_record() -> None:
    err = _decode_error(batch_of(section(GOOD, b"\x00\x00"), 1))
    assert "2 bytes left" in err.reason
    assert err.position == 61 + len(GOOD)


def test_record_length_larger_than_its_fields() -> None:
    # length 9 but the fields use 8; one stray byte sits inside the record
    rec = _body(b"\x00", b"\x00", b"\x00", NULL, NULL, b"\x00", b"\xaa")
    second = encode_record(1, 0, None, b"x")
    err = _decode_error(batch_of(section(GOOD, rec, second), 3))
    assert "record length says 7 bytes but its fields use 6" in err.reason
    assert err.position == 61 + len(GOOD)


def test_record_length_smaller_than_its_fields() -> None:
    full = encode_record(0, 0, b"key", b"value")
    rec = encode_varint(len(full) - 3) + full[1:]  # claims 2 bytes fewer than it has
    err = _decode_error(batch_of(rec, 1))
    assert "value of 5 bytes overruns its record" in err.reason
    assert err.position == 61 + 8  # at the value's length varint


def test_record_length_overrunning_the_batch() -> None:
    err = _decode_error(batch_of(encode_varint(500) + GOOD[1:], 1))
    assert "record length 500 overruns the batch" in err.reason
    assert err.position == 61


def test_negative_record_length() -> None:
    err = _decode_error(batch_of(encode_varint(-4) + b"\x00" * 8, 1))
    assert "record length -4" in err.reason


def test_empty_record() -> None:
    err = _decode_error(batch_of(encode_varint(0), 1))
    assert "shorter than its attributes" in err.reason


def test_impossible_varint_inside_a_record() -> None:
    six_byte = bytes.fromhex("ffffffffff01")
    rec = _body(b"\x00", b"\x00", six_byte, NULL, NULL, b"\x00")
    err = _decode_error(batch_of(section(GOOD, rec), 2))
    assert "longer than 5 bytes" in err.reason
    assert err.position == 61 + len(GOOD) + 1 + 2  # length varint, attributes, timestampDelta


def test_impossible_varlong_timestamp_delta() -> None:
    rec = _body(b"\x00", b"\xff" * 10 + b"\x01", b"\x00", NULL, NULL, b"\x00")
    err = _decode_error(batch_of(rec, 1))
    assert "longer than 10 bytes" in err.reason


def test_key_length_below_minus_one() -> None:
    rec = _body(b"\x00", b"\x00", b"\x00", encode_varint(-2), NULL, b"\x00")
    err = _decode_error(batch_of(rec, 1))
    assert "key length -2 is negative" in err.reason
    assert err.position == 61 + 1 + 3


def test_value_overrunning_its_record() -> None:
    rec = _body(b"\x00", b"\x00", b"\x00", NULL, encode_varint(40), b"abc", b"\x00")
    err = _decode_error(batch_of(rec, 1))
    assert "value of 40 bytes overruns its record" in err.reason


def test_null_header_key() -> None:
    rec = _body(b"\x00", b"\x00", b"\x00", NULL, NULL, encode_varint(1), NULL, NULL)
    err = _decode_error(batch_of(rec, 1))
    assert "null header key" in err.reason
    assert err.position == 61 + 1 + 6


def test_negative_header_count() -> None:
    rec = _body(b"\x00", b"\x00", b"\x00", NULL, NULL, encode_varint(-1))
    err = _decode_error(batch_of(rec, 1))
    assert "negative header count -1" in err.reason


def test_header_count_larger_than_the_headers_present() -> None:
    rec = _body(
        b"\x00", b"\x00", b"\x00", NULL, NULL, encode_varint(1000), encode_varint(1), b"h", NULL
    )
    with pytest.raises(CorruptRecordError):
        RecordBatch(batch_of(section(rec, GOOD), 2)).records()


def test_record_error_position_is_absolute_in_a_buffer() -> None:
    a = build_batch(RECORDS)
    b = batch_of(section(GOOD, b"\x00"), 1)
    with pytest.raises(CorruptRecordError, match="1 bytes left") as info:
        for batch in iter_batches(a + b):
            batch.records()
    assert info.value.position == len(a) + 61 + len(GOOD)


@pytest.mark.parametrize("codec", [c for c in CompressionType if c], ids=lambda c: c.name)
def test_record_error_in_a_compressed_batch_names_the_section_and_decompressed_byte(
    codec: CompressionType,
) -> None:
    a = build_batch(RECORDS)
    b = batch_of(section(GOOD, b"\x00\x00\x00"), 1, compression=codec)
    with pytest.raises(CorruptRecordError) as info:
        for batch in iter_batches(a + b):
            batch.records()
    assert info.value.position == len(a) + 61
    assert f"byte {len(GOOD)} of the decompressed records" in info.value.reason


def test_corrupt_compressed_payload_with_a_valid_crc() -> None:
    raw = batch_of(b"", 1)
    raw = recrc(raw[:21] + struct.pack(">h", CompressionType.GZIP) + raw[23:] + b"not gzip at all")
    raw = patched(raw, 8, ">i", len(raw) - 12)
    with pytest.raises(CorruptRecordError, match="cannot decompress gzip") as info:
        RecordBatch(raw).records()
    assert info.value.position == 61


# --- never a silent partial read ---------------------------------------------------------


def _small_batches() -> dict[str, bytes]:
    out = {}
    for codec in CompressionType:
        out[codec.name] = build_batch(
            RECORDS + [SimpleRecord(b"", key=b"", timestamp=1_700_000_000_001)],
            base_offset=40,
            compression=codec,
            producer_id=3,
            producer_epoch=1,
            base_sequence=0,
        )
    return out


SMALL = _small_batches()


@pytest.mark.parametrize("name", list(SMALL))
def test_truncation_at_every_length_is_corrupt(name: str) -> None:
    raw = SMALL[name]
    for cut in range(1, len(raw)):
        with pytest.raises(CorruptRecordError):
            list(iter_batches(raw[:cut]))
        with pytest.raises(CorruptRecordError):
            RecordBatch(raw[:cut])
        assert list(iter_batches(raw[:cut], allow_partial_tail=True)) == []


@pytest.mark.parametrize("name", list(SMALL))
def test_records_section_cut_at_every_length_is_corrupt(name: str) -> None:
    # The header is made consistent (batchLength, CRC) with the shorter section, so only the
    # record decoding can notice: it must fail, never return fewer records.
    raw = SMALL[name]
    for cut in range(HEADER_SIZE, len(raw)):
        short = bytearray(raw[:cut])
        struct.pack_into(">i", short, 8, cut - 12)
        batch = RecordBatch(recrc(short))
        batch.ensure_valid()
        with pytest.raises(CorruptRecordError):
            batch.records()


def _decode(raw: bytes) -> list:
    return [(b.header, b.records()) for b in iter_batches(raw)]


@pytest.mark.parametrize("mask", [0xFF, 0x01, 0x80])
@pytest.mark.parametrize("name", list(SMALL))
def test_every_flipped_byte_is_caught(name: str, mask: int) -> None:
    raw = SMALL[name]
    ((header, records),) = _decode(raw)
    for i in range(len(raw)):
        flipped = bytearray(raw)
        flipped[i] ^= mask
        try:
            ((got_header, got),) = _decode(bytes(flipped))
        except CorruptRecordError:
            assert not (0 <= i < 8 or 12 <= i < 16), f"byte {i}: CRC-free fields still decode"
            continue
        batch = RecordBatch(bytes(flipped))
        if i < 8:  # baseOffset is outside the CRC (brokers assign it)
            shift = got_header.base_offset - header.base_offset
            assert [r.offset - shift for r in got] == [r.offset for r in records]
            batch.ensure_valid()
        elif 12 <= i < 16:  # partitionLeaderEpoch is outside the CRC (brokers stamp it)
            assert got == records
            batch.ensure_valid()
        else:
            with pytest.raises(CorruptRecordError, match="CRC-32C mismatch"):
                batch.ensure_valid()
