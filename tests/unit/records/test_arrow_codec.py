"""The vectorized Arrow paths: build_batches / decode_batches against the per-record codec."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.records.arrow_codec import (
    HEADERS_TYPE,
    RECORDS_SCHEMA,
    build_batches,
    decode_batches,
    encode_records_section,
    read_batches,
)
from sparklog.records.batch import HEADER_SIZE, TimestampType, iter_batches, read_header, stamp
from sparklog.records.builder import SimpleRecord, assemble_batch, build_batch
from sparklog.records.compression import CompressionType
from sparklog.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from sparklog.records.crc import crc32c
from sparklog.records.errors import CorruptRecordError
from sparklog.records.record import encode_record

NOW_MS = 1_700_000_000_000
CODECS = list(CompressionType)


# ------------------------------------------------------------------------------- helpers


def reference(
    buf: bytes,
    *,
    skip_control: bool = True,
    allow_partial_tail: bool = True,
    check_crcs: bool = True,
) -> list:
    """What a sequential reader yields: rows of (key, value, offset, ts, ts type, headers)."""
    rows = []
    for batch in iter_batches(buf, allow_partial_tail=allow_partial_tail):
        if check_crcs:
            batch.ensure_valid()
        if batch.header.is_control and skip_control:
            continue
        for r in batch.records():
            rows.append(
                (r.key, r.value, r.offset, r.timestamp, int(r.timestamp_type), tuple(r.headers))
            )
    return rows


def rows_of(records: pa.RecordBatch) -> list:
    d = records.to_pydict()
    headers = d.get("headers", [None] * records.num_rows)
    return [
        (k, v, o, t, tt, tuple((h["key"], h["value"]) for h in hs or ()))
        for k, v, o, t, tt, hs in zip(
            d["key"],
            d["value"],
            d["offset"],
            d["timestamp"],
            d["timestampType"],
            headers,
            strict=True,
        )
    ]


def assert_like_reference(buf: bytes, **kw) -> None:
    """decode_batches equals the per-record decoder, or both refuse the bytes."""
    try:
        expected = reference(
            buf,
            allow_partial_tail=kw.get("allow_partial_tail", True),
            check_crcs=kw.get("check_crcs", True),
        )
    except Exception:
        with pytest.raises(CorruptRecordError):
            decode_batches(buf, include_headers=True, **kw)
        return
    assert rows_of(decode_batches(buf, include_headers=True, **kw)) == expected


def with_offsets(batches: list[bytes], first_offset: int = 0) -> bytes:
    buf = bytearray(b"".join(batches))
    offset = first_offset
    for batch in iter_batches(buf):
        stamp(buf, batch.position, offset, 3)
        offset += batch.header.records_count
    return bytes(buf)


def recrc(raw: bytes | bytearray, pos: int = 0) -> bytes:
    out = bytearray(raw)
    size = 12 + struct.unpack_from(">i", out, pos + 8)[0]
    out[pos + 17 : pos + 21] = crc32c(memoryview(out)[pos + 21 : pos + size]).to_bytes(4, "big")
    return bytes(out)


def random_rows(n: int, seed: int, *, headers: bool = True, value_max: int = 300) -> dict:
    rng = np.random.default_rng(seed)

    def blob(max_len: int, null_p: float = 0.1):
        if rng.random() < null_p:
            return None
        return rng.bytes(int(rng.integers(0, max_len + 1)))

    rows = {
        "key": [blob(20) for _ in range(n)],
        "value": [blob(value_max) for _ in range(n)],
        "timestamp": [
            None if rng.random() < 0.1 else NOW_MS + int(rng.integers(-(10**6), 10**6))
            for _ in range(n)
        ],
    }
    if headers:
        rows["headers"] = [
            None
            if rng.random() < 0.3
            else [(f"h{j}", blob(6, 0.2)) for j in range(int(rng.integers(0, 4)))]
            for _ in range(n)
        ]
    return rows


def arrow_of(rows: dict) -> pa.RecordBatch:
    columns = {
        "key": pa.array(rows["key"], pa.binary()),
        "value": pa.array(rows["value"], pa.binary()),
        "timestamp": pa.array(rows["timestamp"], pa.int64()),
    }
    if "headers" in rows:
        columns["headers"] = pa.array(
            [
                None if h is None else [{"key": k, "value": v} for k, v in h]
                for h in rows["headers"]
            ],
            HEADERS_TYPE,
        )
    return pa.RecordBatch.from_pydict(columns)


def expected_rows(rows: dict, now_ms: int = NOW_MS) -> list:
    n = len(rows["value"])
    headers = rows.get("headers", [None] * n)
    return [
        (k, v, i, now_ms if t is None else t, 0, tuple(h or ()))
        for i, (k, v, t, h) in enumerate(
            zip(rows["key"], rows["value"], rows["timestamp"], headers, strict=True)
        )
    ]


# ------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@pytest.mark.parametrize("max_batch_bytes", [80, 4096, 1 << 20])
def test_round_trip_all_codecs(codec: CompressionType, max_batch_bytes: int) -> None:
    rows = random_rows(1500, seed=int(codec) * 7 + max_batch_bytes)
    batches = build_batches(
        arrow_of(rows), now_ms=NOW_MS, compression=codec, max_batch_bytes=max_batch_bytes
    )
    buf = with_offsets(batches)
    decoded = decode_batches(buf, include_headers=True)
    assert rows_of(decoded) == expected_rows(rows)
    assert reference(buf) == expected_rows(rows)
    for raw in batches:
        header = read_header(raw)
        assert header.compression == codec
        assert header.base_offset == 0


def test_batches_respect_max_batch_bytes() -> None:
    rows = random_rows(3000, seed=3, value_max=900)
    for limit in (200, 1000, 10_000):
        batches = build_batches(arrow_of(rows), now_ms=NOW_MS, max_batch_bytes=limit)
        for raw in batches:
            header = read_header(raw)
            assert header.size_in_bytes <= limit or header.records_count == 1
        # and a batch is only closed when the next record does not fit (records < 1000 bytes)
        sizes = [read_header(raw).size_in_bytes for raw in batches[:-1]]
        assert min(sizes) > limit - 1000


def test_batch_header_fields() -> None:
    rows = random_rows(500, seed=5, headers=False)
    batches = build_batches(
        arrow_of(rows),
        now_ms=NOW_MS,
        max_batch_bytes=2000,
        base_sequence=2**31 - 40,
        producer_id=77,
        producer_epoch=3,
        is_transactional=True,
        partition_leader_epoch=9,
    )
    assert len(batches) > 5
    first = 0
    for raw in batches:
        h = read_header(raw)
        n = h.records_count
        ts = [NOW_MS if t is None else t for t in rows["timestamp"][first : first + n]]
        assert (h.producer_id, h.producer_epoch, h.partition_leader_epoch) == (77, 3, 9)
        assert h.is_transactional and not h.is_control
        assert h.base_sequence == (2**31 - 40 + first) % 2**31  # wraps like Kafka
        assert h.last_offset_delta == n - 1
        assert h.base_timestamp == ts[0] and h.max_timestamp == max(ts)
        first += n
    assert first == 500


def test_no_sequence_without_base_sequence() -> None:
    batches = build_batches(arrow_of(random_rows(50, seed=1)), now_ms=NOW_MS, max_batch_bytes=300)
    assert {read_header(raw).base_sequence for raw in batches} == {-1}


def test_same_bytes_as_the_per_record_builder() -> None:
    rows = random_rows(300, seed=11)
    records = [
        SimpleRecord(v, key=k, timestamp=t, headers=tuple(h or ()))
        for k, v, t, h in zip(
            rows["key"], rows["value"], rows["timestamp"], rows["headers"], strict=True
        )
    ]
    for codec in (CompressionType.NONE, CompressionType.GZIP):
        expected = build_batch(records, now_ms=NOW_MS, compression=codec, producer_id=5)
        (ours,) = build_batches(
            arrow_of(rows), now_ms=NOW_MS, compression=codec, producer_id=5, max_batch_bytes=1 << 24
        )
        assert ours == expected


def test_encode_records_section_matches_builder() -> None:
    keys = pa.array([b"a", None, b""], pa.binary())
    values = pa.array([b"x" * 100, b"", None], pa.binary())
    timestamps = np.array([5, 3, 9], dtype=np.int64)
    section = encode_records_section(keys, values, timestamps, None, base_timestamp=4)
    expected = b"".join(
        encode_record(i, int(t) - 4, k, v)
        for i, (k, v, t) in enumerate(
            zip(keys.to_pylist(), values.to_pylist(), timestamps, strict=True)
        )
    )
    assert section.data == expected
    assert (section.records_count, section.max_timestamp) == (3, 9)


def test_nulls_and_empty_values_are_distinct() -> None:
    rows = {"key": [None, b"", b"k"], "value": [b"", None, b"v"], "timestamp": [1, 2, 3]}
    (raw,) = build_batches(arrow_of(rows), now_ms=NOW_MS)
    out = decode_batches(raw)
    assert out.column("key").to_pylist() == [None, b"", b"k"]
    assert out.column("value").to_pylist() == [b"", None, b"v"]
    assert out.column("key").null_count == 1


def test_headers_null_values_empty_lists_and_spark_nulls() -> None:
    headers = [[("a", b"1"), ("b", None)], [], None, [("", b"")]]
    rows = {"key": [b"k"] * 4, "value": [b"v"] * 4, "timestamp": [1] * 4, "headers": headers}
    (raw,) = build_batches(arrow_of(rows), now_ms=NOW_MS)
    out = decode_batches(raw, include_headers=True)
    # Like Spark's Kafka source: a record without headers has a null `headers`.
    assert out.column("headers").to_pylist() == [
        [{"key": "a", "value": b"1"}, {"key": "b", "value": None}],
        None,
        None,
        [{"key": "", "value": b""}],
    ]
    assert "headers" not in decode_batches(raw).schema.names


def test_input_column_types() -> None:
    table = pa.table(
        {
            "key": pa.chunked_array([pa.array(["a", None]), pa.array(["ccc"])]),
            "value": pa.chunked_array(
                [pa.array(["x", "yy"], pa.large_string()), pa.array(["z"], pa.large_string())]
            ),
            "timestamp": pa.array([1_000, None, 2_500_999], pa.timestamp("us")),
        }
    )
    out = decode_batches(b"".join(build_batches(table, now_ms=77)))
    assert out.column("key").to_pylist() == [b"a", None, b"ccc"]
    assert out.column("value").to_pylist() == [b"x", b"yy", b"z"]
    assert out.column("timestamp").to_pylist() == [1, 77, 2500]
    only_values = pa.table({"value": [b"1", b"2"]})
    out = decode_batches(b"".join(build_batches(only_values, now_ms=5)))
    assert out.column("key").null_count == 2 and out.column("timestamp").to_pylist() == [5, 5]


def test_bad_producer_columns_name_the_problem() -> None:
    with pytest.raises(ValueError, match="'value' column"):
        build_batches(pa.table({"key": [b"k"]}), now_ms=0)
    with pytest.raises(ValueError, match="binary or string"):
        build_batches(pa.table({"value": [1, 2]}), now_ms=0)
    bad_headers = pa.table(
        {"value": [b"v"], "headers": pa.array([[{"key": None, "value": b"x"}]], HEADERS_TYPE)}
    )
    with pytest.raises(ValueError, match="header keys must not be null"):
        build_batches(bad_headers, now_ms=0)
    assert build_batches(pa.table({"value": pa.array([], pa.binary())}), now_ms=0) == []


def test_big_records_and_long_varints() -> None:
    rng = np.random.default_rng(2)
    values = [rng.bytes(n) for n in (70, 9000, 300_000, 1_200_000, 5)]
    rows = {"key": [b"k"] * 5, "value": values, "timestamp": [NOW_MS, 0, -5, 2**40, NOW_MS]}
    for codec in (CompressionType.NONE, CompressionType.LZ4):
        batches = build_batches(
            arrow_of(rows), now_ms=NOW_MS, compression=codec, max_batch_bytes=1 << 20
        )
        assert read_header(batches[-2]).records_count == 1  # bigger than the limit: alone
        buf = with_offsets(batches)
        assert rows_of(decode_batches(buf)) == [r[:5] + ((),) for r in reference(buf)]
        assert decode_batches(buf).column("value").to_pylist() == values


def test_many_tiny_batches_in_one_buffer() -> None:
    rows = random_rows(3000, seed=8)
    batches = build_batches(arrow_of(rows), now_ms=NOW_MS, max_batch_bytes=60)
    assert len(batches) > 1500
    buf = with_offsets(batches, first_offset=10**12)
    decoded = decode_batches(buf, include_headers=True)
    assert rows_of(decoded) == reference(buf)
    assert decoded.column("offset").to_pylist() == list(range(10**12, 10**12 + 3000))


def test_mixed_codecs_in_one_buffer() -> None:
    parts = [
        build_batches(
            arrow_of(random_rows(200, seed=s)), now_ms=NOW_MS, compression=c, max_batch_bytes=3000
        )
        for s, c in enumerate(CODECS)
    ]
    buf = with_offsets([raw for part in parts for raw in part])
    assert rows_of(decode_batches(buf, include_headers=True)) == reference(buf)


def test_log_append_time_and_per_record_built_batches() -> None:
    records = [SimpleRecord(b"v%d" % i, key=b"k", timestamp=100 + i) for i in range(5)]
    log_append = build_batch(
        records, base_offset=40, now_ms=555, timestamp_type=TimestampType.LOG_APPEND_TIME
    )
    compacted = build_batch(records[:3], base_offset=50, offset_deltas=[0, 4, 9])
    horizon = build_batch(records[:2], base_offset=60, delete_horizon_ms=7)
    buf = log_append + compacted + horizon
    out = decode_batches(buf)
    assert rows_of(out) == reference(buf)
    assert out.column("timestampType").to_pylist()[:5] == [1] * 5
    assert out.column("timestamp").to_pylist()[:5] == [555] * 5  # the batch's maxTimestamp
    assert out.column("offset").to_pylist()[5:8] == [50, 54, 59]
    rows = random_rows(200, seed=9)
    ours = build_batches(
        arrow_of(rows),
        now_ms=777,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        max_batch_bytes=2000,
    )
    decoded = decode_batches(with_offsets(ours))
    assert set(decoded.column("timestamp").to_pylist()) == {777}
    assert set(decoded.column("timestampType").to_pylist()) == {1}


def test_empty_input_and_read_batches_positions() -> None:
    empty = decode_batches(b"")
    assert empty.num_rows == 0 and empty.schema == RECORDS_SCHEMA
    batches = build_batches(arrow_of(random_rows(100, seed=4)), now_ms=NOW_MS, max_batch_bytes=900)
    buf = with_offsets(batches, first_offset=500)
    result = read_batches(buf + buf[:30])  # a partial batch at the end, as in a Fetch
    assert result.valid_bytes == len(buf)
    assert result.next_offset == 600
    assert result.records.num_rows == 100
    assert read_batches(b"\x00" * 5).next_offset == -1


def test_records_count_zero_batch() -> None:
    empty = assemble_batch(
        b"", records_count=0, last_offset_delta=0, base_offset=3, base_timestamp=1, max_timestamp=1
    )
    one = build_batch([SimpleRecord(b"x")], base_offset=4)
    assert rows_of(decode_batches(empty + one)) == reference(empty + one)
    bad = assemble_batch(
        b"\x02\x00",
        records_count=0,
        last_offset_delta=0,
        base_offset=3,
        base_timestamp=1,
        max_timestamp=1,
    )
    with pytest.raises(CorruptRecordError):
        decode_batches(bad)


# ---------------------------------------------------------------------- control and aborted


def marker(kind: ControlRecordType, producer_id: int, offset: int) -> bytes:
    return build_end_txn_marker_batch(
        EndTransactionMarker(kind, 0),
        producer_id=producer_id,
        producer_epoch=0,
        timestamp_ms=NOW_MS,
        base_offset=offset,
    )


def txn_batch(producer_id: int, offset: int, value: bytes) -> bytes:
    return build_batch(
        [SimpleRecord(value)],
        base_offset=offset,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )


def test_control_batches_skipped_unless_asked() -> None:
    buf = txn_batch(1, 0, b"a") + marker(ControlRecordType.COMMIT, 1, 1) + txn_batch(1, 2, b"b")
    assert decode_batches(buf).column("value").to_pylist() == [b"a", b"b"]
    everything = decode_batches(buf, skip_control=False)
    assert everything.column("offset").to_pylist() == [0, 1, 2]
    assert rows_of(everything) == reference(buf, skip_control=False)


def test_read_committed_drops_aborted_transactions() -> None:
    buf = (
        txn_batch(1, 0, b"p1-aborted")
        + txn_batch(2, 1, b"p2-committed")
        + marker(ControlRecordType.ABORT, 1, 2)
        + marker(ControlRecordType.COMMIT, 2, 3)
        + txn_batch(1, 4, b"p1-next-txn")
        + build_batch([SimpleRecord(b"plain")], base_offset=5)
    )
    committed = decode_batches(buf, aborted=[(1, 0)])
    assert committed.column("value").to_pylist() == [b"p2-committed", b"p1-next-txn", b"plain"]
    assert decode_batches(buf).num_rows == 4  # read_uncommitted: everything but markers


# ------------------------------------------------------------------------- corrupt input


def small_buffer() -> bytes:
    rows = {
        "key": [b"k1", None, b"key-3"],
        "value": [b"v" * 70, b"", None],
        "timestamp": [NOW_MS, NOW_MS + 9, NOW_MS - 3],
        "headers": [[("h", b"x")], None, [("a", None), ("b", b"yy")]],
    }
    first = build_batches(arrow_of(rows), now_ms=NOW_MS)
    second = build_batches(arrow_of(rows), now_ms=NOW_MS, compression=CompressionType.GZIP)
    return with_offsets(first + second)


@pytest.mark.parametrize("flip", [0x01, 0x80, 0xFF])
def test_flipped_bytes_never_yield_wrong_records(flip: int) -> None:
    buf = small_buffer()
    second = read_header(buf).size_in_bytes
    for pos in range(len(buf)):
        damaged = bytearray(buf)
        damaged[pos] ^= flip
        if pos % 2 and pos >= 21 and not second <= pos < second + 21:
            # CRC recomputed so the structural checks are reached (the others hit the CRC)
            damaged = recrc(damaged, 0 if pos < second else second)
        assert_like_reference(bytes(damaged))


def test_flipped_record_bytes_without_crc_check() -> None:
    buf = small_buffer()
    for pos in range(HEADER_SIZE, read_header(buf).size_in_bytes):
        for flip in (0x01, 0x02, 0x40, 0x80):
            damaged = bytearray(buf)
            damaged[pos] ^= flip
            assert_like_reference(bytes(damaged), check_crcs=False)


def test_truncated_at_every_position() -> None:
    buf = small_buffer()
    ends = {0}
    for batch in iter_batches(buf):
        ends.add(batch.position + batch.header.size_in_bytes)
    for cut in range(len(buf) + 1):
        part = buf[:cut]
        assert rows_of(decode_batches(part, include_headers=True)) == reference(part)
        if cut in ends:
            assert rows_of(
                decode_batches(part, include_headers=True, allow_partial_tail=False)
            ) == (reference(part, allow_partial_tail=False))
        else:
            with pytest.raises(CorruptRecordError, match="truncated"):
                decode_batches(part, allow_partial_tail=False)


def test_bad_crc_is_reported_and_can_be_skipped() -> None:
    buf = bytearray(small_buffer())
    buf[HEADER_SIZE + 5] ^= 0x10
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_batches(bytes(buf))


def test_wrong_records_count_and_trailing_bytes() -> None:
    one = build_batch([SimpleRecord(b"a"), SimpleRecord(b"b")])
    for count in (1, 3, 0):
        damaged = bytearray(one)
        struct.pack_into(">i", damaged, 57, count)
        with pytest.raises(CorruptRecordError):
            decode_batches(recrc(damaged))


def test_absurd_records_count_is_refused_cheaply() -> None:
    rows = {"key": [b"k"] * 3, "value": [b"v"] * 3, "timestamp": [1, 2, 3]}
    for codec in (CompressionType.NONE, CompressionType.ZSTD):
        damaged = bytearray(build_batches(arrow_of(rows), now_ms=0, compression=codec)[0])
        struct.pack_into(">i", damaged, 57, 2**31 - 1)  # outputs must not be sized by it
        with pytest.raises(CorruptRecordError):
            decode_batches(recrc(damaged))


def test_compressed_batch_with_very_many_records() -> None:
    n = 70_000  # more than a compressed batch is assumed to hold before decompressing
    rows = {"key": [None] * n, "value": [b""] * n, "timestamp": list(range(n))}
    (raw,) = build_batches(arrow_of(rows), now_ms=0, compression=CompressionType.LZ4)
    out = decode_batches(raw)
    assert out.column("timestamp").to_pylist() == list(range(n))
    assert out.column("value").to_pylist() == [b""] * n


# ------------------------------------------------------------------- legal but unusual bytes


def test_values_that_embed_records() -> None:
    inner = encode_record(0, 0, b"key", b"value")  # a valid record inside each value
    rows = {
        "key": [inner, None] * 50,
        "value": [inner * 3, b"\x00" + inner] * 50,
        "timestamp": [NOW_MS] * 100,
    }
    for codec in (CompressionType.NONE, CompressionType.ZSTD):
        buf = with_offsets(build_batches(arrow_of(rows), now_ms=NOW_MS, compression=codec))
        assert rows_of(decode_batches(buf)) == expected_rows(rows)


def test_zero_heavy_values() -> None:
    rng = np.random.default_rng(6)
    values = [
        b"\x00" * 64,
        bytes(rng.integers(0, 4, 300, dtype=np.uint8)),
        "utf-16 text".encode("utf-16-le"),
        np.arange(40, dtype="<i4").tobytes(),
        b"\x0c\x00" * 50,  # 0x0c before a zero reads as a 6-byte record length
    ] * 40
    rows = {"key": [b"\x00\x00"] * 200, "value": values, "timestamp": [NOW_MS] * 200}
    for codec in (CompressionType.NONE, CompressionType.LZ4):
        buf = with_offsets(
            build_batches(arrow_of(rows), now_ms=NOW_MS, compression=codec, max_batch_bytes=5000)
        )
        assert rows_of(decode_batches(buf)) == expected_rows(rows)


def test_nonzero_record_attributes_and_many_headers() -> None:
    odd = bytearray(encode_record(0, 0, b"k", b"v"))
    odd[1] = 0x7F  # attributes are unused in v2; a reader ignores them
    many = encode_record(1, 0, None, b"w", [(f"h{i}", b"x") for i in range(200)])
    section = bytes(odd) + many
    buf = assemble_batch(
        section,
        records_count=2,
        last_offset_delta=1,
        base_offset=7,
        base_timestamp=5,
        max_timestamp=5,
    )
    buf = buf + build_batch([SimpleRecord(b"after")], base_offset=9)
    assert rows_of(decode_batches(buf, include_headers=True)) == reference(buf)


def test_non_canonical_length_varint() -> None:
    body = encode_record(0, 0, b"k", b"v")[1:]  # drop the 1-byte length
    padded = bytes([(len(body) * 2) | 0x80, 0x00]) + body  # the same length in 2 bytes
    buf = assemble_batch(
        padded,
        records_count=1,
        last_offset_delta=0,
        base_offset=0,
        base_timestamp=1,
        max_timestamp=1,
    )
    assert rows_of(decode_batches(buf)) == reference(buf)


def test_invalid_utf8_header_key_replaced_like_the_record_decoder() -> None:
    record = bytearray(encode_record(0, 0, b"k", b"v", [("ab", b"x")]))
    record[record.index(b"ab")] = 0xFF
    buf = assemble_batch(
        bytes(record),
        records_count=1,
        last_offset_delta=0,
        base_offset=0,
        base_timestamp=1,
        max_timestamp=1,
    )
    assert rows_of(decode_batches(buf, include_headers=True)) == reference(buf)


# ------------------------------------------------------------------------------ properties

BLOB = st.none() | st.binary(max_size=150)
RECORD = st.tuples(
    BLOB,
    BLOB,
    st.none() | st.integers(0, 2**45),
    st.none() | st.lists(st.tuples(st.text(max_size=5), BLOB), max_size=3),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(RECORD, max_size=40),
    st.sampled_from(CODECS),
    st.integers(30, 3000),
)
def test_property_round_trip(records: list, codec: CompressionType, max_batch_bytes: int) -> None:
    rows = {
        "key": [r[0] for r in records],
        "value": [r[1] for r in records],
        "timestamp": [r[2] for r in records],
        "headers": [r[3] for r in records],
    }
    batches = build_batches(
        arrow_of(rows), now_ms=NOW_MS, compression=codec, max_batch_bytes=max_batch_bytes
    )
    buf = with_offsets(batches)
    assert rows_of(decode_batches(buf, include_headers=True)) == expected_rows(rows)
    assert reference(buf) == expected_rows(rows)
