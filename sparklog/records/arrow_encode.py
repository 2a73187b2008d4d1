"""Arrow columns -> Kafka v2 record batches, vectorized (the producer's and sink's hot path).

Theory of operation. A record is `length | attributes | tsDelta | offsetDelta | keyLen | key |
valueLen | value | headerCount | headers` (Kafka's `DefaultRecord`). Every part except key, value
and the header bytes is a small varint, so for all records at once numpy writes the varint bytes
into an (n, width) matrix and keeps the first `size` bytes of each row: a "prefix" (length ..
keyLen) and a "middle" (valueLen) binary array. One `binary_join_element_wise(prefix, key,
middle, value[, count, headers])` call then writes the records section: its data buffer is the
records, back to back. Without headers each record's header count (0) is written at the start
of the next record's prefix, and without keys prefix and middle are one part: fewer parts to
join. Batches are slices of the joined bytes; their headers are filled in for a whole group at
once through a big-endian numpy record dtype, and per batch only compression and the CRC-32C
run in Python.

Batches are cut so that a batch before compression (header and records) never exceeds
`max_batch_bytes`, unless it holds a single record: the split uses an upper bound of each
record's size that does not depend on where the batch starts, then the exact bytes are encoded
relative to each batch's first record. Work runs over groups of whole batches of about
`_WORK_BYTES` so temporaries stay in cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparklog.records import native
from sparklog.records.arrow_varints import (
    length_widths,
    lengths_field,
    ragged,
    uniform,
    varint_field,
    varint_widths,
    widths_part,
    zigzag,
)
from sparklog.records.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TimestampType,
    attributes_for,
)
from sparklog.records.compression import CompressionType, compress
from sparklog.records.crc import crc32c

_WORK_BYTES = 4 << 20
_MIN_RECORD_BYTES = 7  # length + attributes + tsDelta + offsetDelta + keyLen + valueLen + count
_CRC_OFFSET = 17
_CRC_START = 21
_INT32_MAX = 0x7FFFFFFF
# The 61-byte v2 batch header (Kafka's DefaultRecordBatch) as a big-endian numpy record.
HEADER_DTYPE = np.dtype(
    [
        ("base_offset", ">i8"),
        ("batch_length", ">i4"),
        ("partition_leader_epoch", ">i4"),
        ("magic", "i1"),
        ("crc", ">u4"),
        ("attributes", ">i2"),
        ("last_offset_delta", ">i4"),
        ("base_timestamp", ">i8"),
        ("max_timestamp", ">i8"),
        ("producer_id", ">i8"),
        ("producer_epoch", ">i2"),
        ("base_sequence", ">i4"),
        ("records_count", ">i4"),
    ]
)
assert HEADER_DTYPE.itemsize == HEADER_SIZE
_ZERO = (np.zeros(1, dtype=np.uint64), 1)  # a one-byte 0 varint in every row


class EncodedRecords(NamedTuple):
    """An uncompressed records section and what its batch header needs."""

    data: bytes
    records_count: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class _Columns:
    """The producer columns normalized for encoding.

    `key_len`/`value_len` are the on-wire lengths (-1 for null) and `*_widths` the sizes of
    their varints; `header_count` is None when no record has headers, else the count per
    record, with `header_blobs` each record's encoded headers. `tail_bytes` is the size of
    keyLen..headers of each record: no batch layout changes it.
    """

    keys: pa.Array | None  # None: every key is null
    values: pa.Array
    timestamps: np.ndarray
    key_len: np.ndarray
    key_widths: np.ndarray | int
    value_len: np.ndarray
    value_widths: np.ndarray | int
    header_count: np.ndarray | None
    header_blobs: pa.Array | None
    tail_bytes: np.ndarray

    def __len__(self) -> int:
        return len(self.values)


def build_batches(
    records: pa.RecordBatch | pa.Table,
    *,
    now_ms: int,
    compression: CompressionType | str = CompressionType.NONE,
    max_batch_bytes: int = 1 << 20,
    base_sequence: int = NO_SEQUENCE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    is_transactional: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
) -> list[bytes]:
    """Encode the rows of `records` (columns `value`, optional `key`, `timestamp`, `headers`)
    as v2 batches with base offset 0, each at most `max_batch_bytes` before compression
    (like Kafka's `batch.size`; 1 MiB stays under the broker's default `message.max.bytes`).

    A null timestamp becomes `now_ms`; with LOG_APPEND_TIME, `now_ms` is the append time and
    every batch's maxTimestamp. With `base_sequence >= 0` each batch continues the sequence
    where the previous one ended (wrapping at int32 max, as Kafka's
    `DefaultRecordBatch.incrementSequence`).
    """
    if max_batch_bytes <= 0:
        raise ValueError(f"max_batch_bytes must be positive, got {max_batch_bytes}")
    codec = CompressionType.from_name(compression) if isinstance(compression, str) else compression
    cols = _columns(records, now_ms)
    if len(cols) == 0:
        return []
    budget = max(max_batch_bytes - HEADER_SIZE, 0)  # records section bytes per batch
    bounds = _split(_record_size_bounds(cols, budget), budget)
    fixed = {
        "partition_leader_epoch": partition_leader_epoch,
        "magic": MAGIC,
        "attributes": attributes_for(codec, timestamp_type, is_transactional),
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
    }
    log_append_ms = now_ms if timestamp_type == TimestampType.LOG_APPEND_TIME else None
    out: list[bytes] = []
    for lo_batch, hi_batch in _work_groups(bounds, cols):
        starts = bounds[lo_batch : hi_batch + 1]
        out.extend(_encode_group(cols, starts, codec, fixed, base_sequence, log_append_ms))
    return out


def _encode_group(
    cols: _Columns,
    starts: np.ndarray,
    codec: CompressionType,
    fixed: dict,
    base_sequence: int,
    log_append_ms: int | None,
) -> list[bytes]:
    """The batches whose first records are starts[:-1] (the last one ends at starts[-1]).

    Headers are built for all batches at once; per batch only compression and the CRC run.
    """
    lo, hi = int(starts[0]), int(starts[-1])
    core = native.core()
    if core is not None and codec in (CompressionType.NONE, CompressionType.LZ4):
        key, value, headers = _native_columns(cols, lo, hi)
        return core.encode_batches(
            int64_bytes(cols.timestamps[lo:hi]),
            int64_bytes(starts - lo),
            value,
            key,
            headers,
            fixed["attributes"],
            fixed["partition_leader_epoch"],
            fixed["producer_id"],
            fixed["producer_epoch"],
            base_sequence + lo if base_sequence >= 0 else -1,
            log_append_ms,
            codec == CompressionType.LZ4,
        )
    counts = np.diff(starts)
    first = starts[:-1] - lo
    local_first = np.repeat(first, counts)
    ts = cols.timestamps[lo:hi]
    offset_delta = np.arange(hi - lo, dtype=np.int64) - local_first
    data, ends = _encode_records(cols, lo, hi, ts - ts.take(local_first), offset_delta)
    section_end = ends.take(first + counts - 1)
    section_start = np.concatenate([[0], section_end[:-1]])
    payloads = []
    for a, b in zip(section_start.tolist(), section_end.tolist(), strict=True):
        # The join leaves out the group's last byte, the last record's 0 header count.
        parts: tuple[memoryview | bytes, ...] = (
            (data[a:b],) if b <= len(data) else (data[a:], b"\x00")
        )
        if codec != CompressionType.NONE:
            parts = (compress(codec, parts[0] if len(parts) == 1 else b"".join(parts)),)
        payloads.append(parts)
    if codec == CompressionType.NONE:
        payload_bytes = section_end - section_start
    else:
        payload_bytes = np.fromiter((len(p[0]) for p in payloads), np.int64, len(payloads))
    header = np.zeros(len(counts), dtype=HEADER_DTYPE)
    for name, value in fixed.items():
        header[name] = value
    header["batch_length"] = payload_bytes + (HEADER_SIZE - LOG_OVERHEAD)
    header["last_offset_delta"] = counts - 1
    header["records_count"] = counts
    header["base_timestamp"] = ts.take(first)
    if log_append_ms is None:
        header["max_timestamp"] = np.maximum.reduceat(ts, first)
    else:
        header["max_timestamp"] = log_append_ms  # as Kafka's MemoryRecordsBuilder
    header["base_sequence"] = base_sequence
    if base_sequence >= 0:  # wraps at int32 max, as DefaultRecordBatch.incrementSequence
        header["base_sequence"] = (base_sequence + starts[:-1]) & _INT32_MAX
    raw = header.tobytes()
    return [
        _with_crc(raw[j * HEADER_SIZE : (j + 1) * HEADER_SIZE], parts)
        for j, parts in enumerate(payloads)
    ]


def encode_records_section(
    keys: pa.Array | None,
    values: pa.Array,
    timestamps: np.ndarray | pa.Array,
    headers: pa.Array | None,
    base_timestamp: int,
) -> EncodedRecords:
    """The uncompressed records section of one batch holding these records, offset deltas
    0..n-1 and timestamp deltas against `base_timestamp` (wrap it with `assemble_batch`).
    """
    columns = {"value": values, "timestamp": timestamps}
    if keys is not None:
        columns["key"] = keys
    if headers is not None:
        columns["headers"] = headers
    cols = _columns(pa.RecordBatch.from_pydict(columns), now_ms=None)
    n = len(cols)
    if n == 0:
        return EncodedRecords(b"", 0, base_timestamp)
    data, ends = _encode_records(
        cols, 0, n, cols.timestamps - base_timestamp, np.arange(n, dtype=np.int64)
    )
    section = bytes(data) + (b"\x00" if int(ends[-1]) > len(data) else b"")
    return EncodedRecords(section, n, int(cols.timestamps.max()))


def encode_records(
    records: pa.RecordBatch | pa.Table, ts_delta: np.ndarray, offset_delta: np.ndarray
) -> tuple[memoryview | bytes, np.ndarray]:
    """The records of `records` (columns `value`, `timestamp`, optional `key`, `headers`) back
    to back, each with the given timestamp and offset deltas (any batch layout: the caller
    cuts the bytes at record ends into batch sections), and the end of each record."""
    cols = _columns(records, now_ms=None)
    if len(cols) == 0:
        return b"", np.zeros(0, dtype=np.int64)
    data, ends = _encode_records(cols, 0, len(cols), ts_delta, offset_delta)
    if int(ends[-1]) > len(data):  # the last record's 0 header count (see _encode_records)
        return bytes(data) + b"\x00", ends
    return data, ends


def _with_crc(header: bytes, payload: tuple | list) -> bytes:
    """The batch bytes: `header` with its CRC-32C (attributes..end) filled in, then `payload`."""
    crc = crc32c(memoryview(header)[_CRC_START:])
    for part in payload:
        crc = crc32c(part, crc)
    return b"".join((header[:_CRC_OFFSET], crc.to_bytes(4, "big"), header[_CRC_START:], *payload))


# ---------------------------------------------------------------------------------- columns


def _columns(records: pa.RecordBatch | pa.Table, now_ms: int | None) -> _Columns:
    """Normalize the producer columns; bad schemas raise ValueError naming the fix."""
    names = records.schema.names
    if "value" not in names:
        raise ValueError(
            f"records need a 'value' column (binary or string); got columns {names}. "
            "key, timestamp and headers are optional"
        )
    n = records.num_rows
    values = _binary_column(records, "value")
    keys = _binary_column(records, "key") if "key" in names else None
    if keys is not None and keys.null_count == n:
        keys = None
    timestamps = _timestamps(records, n, now_ms)
    header_count = header_blobs = None
    if "headers" in names:
        header_count, header_blobs = _encode_headers(_column(records, "headers"))
        if header_blobs is None:  # no record has headers: the same bytes as no column
            header_count = None
    key_len = wire_lengths(keys) if keys is not None else np.full(n, -1, dtype=np.int64)
    value_len = wire_lengths(values)
    key_widths = length_widths(key_len)
    value_widths = length_widths(value_len)
    tail_bytes = np.maximum(key_len, 0) + np.maximum(value_len, 0) + key_widths + value_widths
    if header_count is None:
        tail_bytes += 1
    else:
        tail_bytes += length_widths(header_count) + np.diff(_offsets(header_blobs))
    return _Columns(
        keys=keys,
        values=values,
        timestamps=timestamps,
        key_len=key_len,
        key_widths=uniform(key_widths),
        value_len=value_len,
        value_widths=uniform(value_widths),
        header_count=header_count,
        header_blobs=header_blobs,
        tail_bytes=tail_bytes,
    )


def _column(records: pa.RecordBatch | pa.Table, name: str) -> pa.Array:
    col = records.column(name)
    if isinstance(col, pa.ChunkedArray):
        if col.num_chunks == 1:
            return col.chunk(0)
        return pa.concat_arrays(col.chunks) if col.num_chunks else pa.array([], col.type)
    return col


def _binary_column(records: pa.RecordBatch | pa.Table, name: str) -> pa.Array:
    col = _column(records, name)
    t = col.type
    if pa.types.is_binary(t):
        return col
    if (
        pa.types.is_string(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_large_string(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_string_view(t)
        or pa.types.is_null(t)
    ):
        return col.cast(pa.binary())
    raise ValueError(f"column {name!r} must be binary or string, got {t}")


def _timestamps(records: pa.RecordBatch | pa.Table, n: int, now_ms: int | None) -> np.ndarray:
    """Record timestamps as int64 epoch ms; nulls become `now_ms`."""
    if "timestamp" not in records.schema.names:
        if now_ms is None:
            raise ValueError("records need a 'timestamp' column here")
        return np.full(n, now_ms, dtype=np.int64)
    col = _column(records, "timestamp")
    t = col.type
    if not (pa.types.is_integer(t) or pa.types.is_timestamp(t)):
        raise ValueError(f"column 'timestamp' must be int64 epoch ms or a timestamp, got {t}")
    nulls = col.is_null().to_numpy(zero_copy_only=False) if col.null_count else None
    if nulls is not None and now_ms is None:
        raise ValueError("timestamps must not be null here")
    raw = col.cast(pa.int64()) if nulls is None else pc.fill_null(col.cast(pa.int64()), 0)
    ts = np.asarray(raw.to_numpy(zero_copy_only=False), dtype=np.int64)
    if pa.types.is_timestamp(t) and t.unit != "ms":
        ts = ts * 1000 if t.unit == "s" else ts // {"us": 1000, "ns": 1_000_000}[t.unit]
    if nulls is not None:
        assert now_ms is not None  # refused above
        ts = np.where(nulls, np.int64(now_ms), ts)
    return ts


def wire_lengths(arr: pa.Array) -> np.ndarray:
    """Length of each value as written on the wire: -1 for null (int64)."""
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[
        arr.offset : arr.offset + len(arr) + 1
    ]
    lengths = np.diff(offsets).astype(np.int64)
    if arr.null_count:
        lengths[arr.is_null().to_numpy(zero_copy_only=False)] = -1
    return lengths


def _encode_headers(headers: pa.Array) -> tuple[np.ndarray, pa.Array | None]:
    """Header count per record and each record's encoded header entries as a binary array."""
    t = headers.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_struct(
        t.value_type
    ):
        raise ValueError(
            f"column 'headers' must be list<struct<key: string, value: binary>>, got {t}"
        )
    if headers.null_count:
        headers = pc.if_else(headers.is_null(), pa.scalar([], type=t), headers)
    offsets = np.asarray(headers.offsets.to_numpy(), dtype=np.int64)
    count = np.diff(offsets)
    if not count.any():
        return count, None
    entries = headers.flatten()
    if entries.null_count:
        raise ValueError("a header entry is null; use an empty list for no headers")
    h_keys = _binary_field(entries, "key")
    h_values = _binary_field(entries, "value")
    if h_keys.null_count:
        raise ValueError("header keys must not be null (Kafka's RecordHeader requires a key)")
    key_len = wire_lengths(h_keys)
    value_len = wire_lengths(h_values)
    key_prefix = ragged([varint_field(key_len)])
    value_prefix = ragged([varint_field(value_len)])
    encoded = _join([key_prefix, h_keys, value_prefix, h_values], h_values.null_count > 0)
    entry_offsets = np.frombuffer(encoded.buffers()[1], dtype=np.int32)[: len(encoded) + 1]
    blob_offsets = entry_offsets[offsets - offsets[0]].astype(np.int32)
    blobs = pa.Array.from_buffers(
        pa.binary(), len(count), [None, pa.py_buffer(blob_offsets), encoded.buffers()[2]]
    )
    return count, blobs


def _binary_field(entries: pa.StructArray, name: str) -> pa.Array:
    try:
        child = entries.field(name)
    except KeyError:
        raise ValueError(f"header structs need a {name!r} field, got {entries.type}") from None
    if pa.types.is_binary(child.type):
        return child
    if pa.types.is_string(child.type) or pa.types.is_large_binary(child.type):
        return child.cast(pa.binary())
    if pa.types.is_large_string(child.type) or pa.types.is_null(child.type):
        return child.cast(pa.binary())
    raise ValueError(f"header {name} must be string or binary, got {child.type}")


# --------------------------------------------------------------------------------- splitting


def _record_size_bounds(cols: _Columns, max_batch_bytes: int) -> np.ndarray:
    """An upper bound of each record's encoded size, whatever batch it lands in."""
    ts = cols.timestamps
    # |tsDelta| <= max - min of all timestamps; offsetDelta < records per batch.
    max_records = min(len(cols), max_batch_bytes // _MIN_RECORD_BYTES + 1)
    reach = np.array([2 * (int(ts.max()) - int(ts.min())), 2 * max_records], dtype=np.uint64)
    body = cols.tail_bytes + (1 + int(varint_widths(reach).sum()))
    return body + varint_widths(zigzag(body))


def _split(bounds: np.ndarray, max_batch_bytes: int) -> np.ndarray:
    """Greedy batch boundaries: start indexes of each batch, then len(bounds)."""
    cumulative = np.cumsum(bounds)
    n = len(bounds)
    many = int(cumulative[-1]) > 1000 * max_batch_bytes
    if many:  # where a batch starting at each record would end, for all records at once
        reach = np.searchsorted(cumulative, cumulative - bounds + max_batch_bytes, side="right")
    starts = [0]
    start = 0
    while start < n:
        if many:
            end = int(reach[start])
        else:
            done = int(cumulative[start - 1]) if start else 0
            end = int(np.searchsorted(cumulative, done + max_batch_bytes, side="right"))
        start = max(end, start + 1)  # a record larger than the limit travels alone
        starts.append(start)
    return np.asarray(starts, dtype=np.int64)


def _work_groups(bounds: np.ndarray, cols: _Columns) -> list[tuple[int, int]]:
    """Runs of whole batches (first, last+1 batch index) of about `_WORK_BYTES` of values."""
    weight = _offsets(cols.values).take(bounds) + 16 * bounds
    if cols.keys is not None:
        weight += _offsets(cols.keys).take(bounds)
    groups = []
    j = 0
    nb = len(bounds) - 1
    while j < nb:
        k = int(np.searchsorted(weight, weight[j] + _WORK_BYTES, side="right")) - 1
        k = min(max(k, j + 1), nb)
        groups.append((j, k))
        j = k
    return groups


# ---------------------------------------------------------------------------------- records


def _encode_records(
    cols: _Columns, lo: int, hi: int, ts_delta: np.ndarray, offset_delta: np.ndarray
) -> tuple[memoryview, np.ndarray]:
    """Records lo..hi-1 back to back: (bytes, end offset of each record).

    Without headers the bytes miss the very last one (the last record's header count, 0):
    each record's count is written at the start of the next record's prefix instead, which
    saves a part in the join.
    """
    core = native.core()
    if core is not None:
        return _encode_records_native(core, cols, lo, hi, ts_delta, offset_delta)
    n = hi - lo
    ts_field = varint_field(ts_delta)
    offset_field = varint_field(offset_delta)
    body = cols.tail_bytes[lo:hi] + ts_field[1] + offset_field[1] + 1
    length_field = varint_field(body)
    key_field = lengths_field(cols.key_len[lo:hi], widths_part(cols.key_widths, lo, hi))
    value_field = lengths_field(cols.value_len[lo:hi], widths_part(cols.value_widths, lo, hi))
    fields = [length_field, _ZERO, ts_field, offset_field, key_field]
    if cols.header_count is None or cols.header_blobs is None:  # None together
        fields, skip, suffix = [_ZERO, *fields], 1, []  # previous record's count, then this
    else:
        count = cols.header_count[lo:hi]
        count_field = lengths_field(count, uniform(length_widths(count)))
        skip, suffix = 0, [ragged([count_field]), cols.header_blobs.slice(lo, n)]
    values = cols.values.slice(lo, n)
    if cols.keys is None:  # keyLen -1 and no key bytes: prefix and valueLen are one part
        parts = [ragged([*fields, value_field], skip), values, *suffix]
        nulls = values.null_count
    else:
        keys = cols.keys.slice(lo, n)
        parts = [ragged(fields, skip), keys, ragged([value_field]), values, *suffix]
        nulls = keys.null_count + values.null_count
    joined = _join(parts, nulls > 0)
    return memoryview(joined.buffers()[2]), np.cumsum(body + length_field[1])


def _encode_records_native(
    core, cols: _Columns, lo: int, hi: int, ts_delta: np.ndarray, offset_delta: np.ndarray
) -> tuple[memoryview, np.ndarray]:
    """`_encode_records` by the native core: the same bytes, the last header count included."""
    key, value, headers = _native_columns(cols, lo, hi)
    data, ends = core.encode_records(
        int64_bytes(ts_delta),
        int64_bytes(offset_delta),
        value,
        key,
        headers,
    )
    return memoryview(data), np.frombuffer(ends, dtype=np.int64)


def _native_columns(cols: _Columns, lo: int, hi: int) -> tuple:
    """(key or None, value, headers or None) of records lo..hi-1 as the native core takes them."""
    n = hi - lo
    value = native_column(cols.values.slice(lo, n), cols.value_len[lo:hi])
    key = None
    if cols.keys is not None:
        key = native_column(cols.keys.slice(lo, n), cols.key_len[lo:hi])
    headers = None
    if cols.header_count is not None and cols.header_blobs is not None:  # None together
        blobs = cols.header_blobs.slice(lo, n)
        blob_column = native_column(blobs, np.diff(_offsets(blobs)))
        headers = (int64_bytes(cols.header_count[lo:hi]), blob_column)
    return key, value, headers


def native_column(arr: pa.Array, lengths: np.ndarray) -> tuple:
    """(data buffer, int64 starts, int64 lengths with -1 for null) of a binary array."""
    data = arr.buffers()[2]
    starts = _offsets(arr)[:-1]
    return (data if data is not None else b"", int64_bytes(starts), int64_bytes(lengths))


def int64_bytes(values: np.ndarray) -> np.ndarray:
    """int64 values as a flat byte view (the native core reads buffers of bytes)."""
    return np.ascontiguousarray(values, dtype=np.int64).view(np.uint8)


def _join(parts: list[pa.Array], has_nulls: bool) -> pa.Array:
    """Element-wise concatenation; a null part contributes no bytes."""
    if has_nulls:
        return pc.binary_join_element_wise(
            *parts, b"", null_handling="replace", null_replacement=""
        )
    return pc.binary_join_element_wise(*parts, b"")


def _offsets(arr: pa.Array) -> np.ndarray:
    """The n+1 int32 offsets of a binary array (as int64)."""
    return np.frombuffer(arr.buffers()[1], dtype=np.int32)[
        arr.offset : arr.offset + len(arr) + 1
    ].astype(np.int64)
