"""Kafka v2 record batches -> Arrow columns, vectorized (the consumer's and source's hot path).

Theory of operation. Batches are walked one by one (a 12-byte peek each); their 61-byte headers
are then read all at once through a big-endian numpy record dtype, CRCs checked, control and
aborted batches dropped. The records of the remaining batches are found and parsed by
`arrow_scan` over the work groups of whole batches `batch_spans.BatchSpans` cuts (sections
decompressed group by group, so they are still in cache when scanned), without a loop per record, and
written into per-record output arrays allocated once for the whole buffer.

Keys and values are cut out of the data by one `take` per column over binary arrays whose
offsets interleave [key_start, key_end, next_key_start, ...]: every other element is a key.
A batch `arrow_scan` cannot resolve goes through the per-record decoder, which raises the
CorruptRecordError a sequential reader would (or decodes a legal oddity); results equal
`RecordBatch.records()` exactly, and bad bytes never yield partial data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sparklog.records import native
from sparklog.records.arrow_scan import Fields, Marks, scan_group, walk_headers
from sparklog.records.batch import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    RecordBatch,
)
from sparklog.records.batch_spans import (
    BatchSpans,
    le64,
    read_headers,
    select_batches,
    verify_crcs,
    walk_batches,
)
from sparklog.records.compression import CompressionType, decompress, reader_max_bytes
from sparklog.records.errors import CorruptRecordError, DecompressedTooLargeError

HEADERS_TYPE = pa.list_(
    pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])
)
RECORDS_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("timestampType", pa.int32(), nullable=False),
    ]
)
RECORDS_WITH_HEADERS_SCHEMA = RECORDS_SCHEMA.append(pa.field("headers", HEADERS_TYPE))

_LZ4 = int(CompressionType.LZ4)


@dataclass(frozen=True, slots=True)
class DecodedBatches:
    """What `read_batches` found: the records, and where the caller's next read starts.

    `next_offset` is the offset after the last complete batch (control and aborted batches
    included), or -1 when there was none; `valid_bytes` the size of the complete batches (a
    partial batch at the end, as a Fetch may return, is not counted).
    """

    records: pa.RecordBatch
    next_offset: int
    valid_bytes: int


def decode_batches(
    buf: bytes | bytearray | memoryview,
    *,
    include_headers: bool = False,
    skip_control: bool = True,
    allow_partial_tail: bool = True,
    check_crcs: bool = True,
    aborted: list[tuple[int, int]] | None = None,
) -> pa.RecordBatch:
    """Records of all batches in `buf` as Arrow columns `key, value, offset, timestamp,
    timestampType` (+ `headers` when asked; null for a record without headers, like Spark).

    `aborted` switches on read_committed filtering: the (producer_id, first_offset) pairs of a
    Fetch response's aborted transactions; their data batches are dropped as Kafka's consumer
    does. Bad bytes raise CorruptRecordError; see `read_batches` for the flags.
    """
    return read_batches(
        buf,
        include_headers=include_headers,
        skip_control=skip_control,
        allow_partial_tail=allow_partial_tail,
        check_crcs=check_crcs,
        aborted=aborted,
    ).records


def read_batches(
    buf: bytes | bytearray | memoryview,
    *,
    include_headers: bool = False,
    skip_control: bool = True,
    allow_partial_tail: bool = True,
    check_crcs: bool = True,
    aborted: list[tuple[int, int]] | None = None,
) -> DecodedBatches:
    """`decode_batches` plus the next offset to fetch and the bytes used.

    `allow_partial_tail` ignores a batch cut short at the end (else it raises); `check_crcs`
    verifies each batch's CRC-32C (Kafka's `check.crcs`); control batches are dropped unless
    `skip_control` is False.
    """
    view = memoryview(buf).cast("B")
    schema = RECORDS_WITH_HEADERS_SCHEMA if include_headers else RECORDS_SCHEMA
    positions, valid_bytes = walk_batches(view, allow_partial_tail)
    if not positions:
        return DecodedBatches(_empty(schema), -1, 0)
    u8 = np.frombuffer(view, dtype=np.uint8)
    pos = np.asarray(positions, dtype=np.int64)
    headers = read_headers(view, u8, pos)
    sizes = headers["batch_length"].astype(np.int64) + LOG_OVERHEAD
    core = native.core()
    if check_crcs:
        verify_crcs(view, pos, sizes, headers["crc"], core)
    last = headers[-1]
    next_offset = int(last["base_offset"]) + int(last["last_offset_delta"]) + 1
    keep = select_batches(view, pos, sizes, headers, skip_control, aborted)
    if keep is not None:
        headers, pos, sizes = headers[keep], pos[keep], sizes[keep]
    codecs = headers["attributes"] & COMPRESSION_MASK
    batches = BatchSpans(view, u8, pos, sizes, headers, codecs)
    records = _decode_native(core, batches, include_headers, schema) if core else None
    if records is None:
        records = _decode(batches, include_headers, schema)
    return DecodedBatches(records, next_offset, valid_bytes)


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


# ----------------------------------------------------------------------------------- native


def native_sections(
    batches: BatchSpans,
    max_bytes: int | None = None,
    given: list[bytes | None] | None = None,
) -> list[bytes | None]:
    """Per batch, what the native core reads: `given[b]` when the caller decompressed it
    already, None where the core reads the section itself (uncompressed, LZ4 with independent
    blocks, which it unpacks under `max_bytes`), else the section decompressed here by the
    reference codec, or one byte that cannot parse when it does not decompress or unpacks to
    more than `max_bytes` (the batch then goes to the per-record decoder, which names the
    error in batch order)."""
    sections: list[bytes | None] = []
    for b, codec in enumerate(batches.codecs.tolist()):
        if given is not None and given[b] is not None:
            sections.append(given[b])
            continue
        p, size = int(batches.positions[b]), int(batches.sizes[b])
        raw = batches.view[p + HEADER_SIZE : p + size]
        if codec == 0 or not raw or (codec == _LZ4 and len(raw) > 4 and raw[4] & 0x20):
            sections.append(None)
            continue
        try:
            sections.append(decompress(CompressionType(codec), raw, p + HEADER_SIZE, max_bytes))
        except (CorruptRecordError, DecompressedTooLargeError):
            sections.append(b"\xff")
    return sections


def _decode_native(
    core, batches: BatchSpans, include_headers: bool, schema: pa.Schema
) -> pa.RecordBatch | None:
    """`_decode` by the native core (None: the columns would pass 2 GiB; decode as before).

    LZ4 sections with independent blocks are decompressed natively, other codecs here by the
    reference codec; a batch the core does not take on comes back in `slow` and goes through
    the per-record decoder, as in `_decode`.
    """
    if len(batches) == 0:
        return _empty(schema)
    out = core.decode_sections(
        batches.view,
        le64(batches.positions),
        le64(batches.sizes),
        native_sections(batches),
        include_headers,
        True,
        reader_max_bytes(),
    )
    if out is None:
        return None
    n, keys, values, offsets, timestamps, types, headers, slow = out
    columns = [
        _native_binary(pa.binary(), n, keys),
        _native_binary(pa.binary(), n, values),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets)]),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(timestamps)]),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(types)]),
    ]
    if include_headers:
        columns.append(_native_headers(n, headers))
    records = pa.RecordBatch.from_arrays(columns, schema=schema)
    if slow:
        counts = batches.headers["records_count"].astype(np.int64)
        records = _merge_slow(batches, records, counts, slow, include_headers, schema)
    return records


def _native_binary(kind: pa.DataType, n: int, column: tuple) -> pa.Array:
    validity, offsets, data = column
    buffers = [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets)]
    return pa.Array.from_buffers(kind, n, [*buffers, pa.py_buffer(data)])


def _native_headers(n: int, headers: tuple | None) -> pa.Array:
    if headers is None:
        return pa.nulls(n, HEADERS_TYPE)
    validity, list_offsets, keys, values = headers
    entries = int(np.frombuffer(list_offsets, dtype="<i4")[-1])
    struct = pa.StructArray.from_arrays(
        [_native_binary(pa.string(), entries, keys), _native_binary(pa.binary(), entries, values)],
        fields=list(HEADERS_TYPE.value_type),
    )
    buffers = [None if validity is None else pa.py_buffer(validity), pa.py_buffer(list_offsets)]
    return pa.Array.from_buffers(HEADERS_TYPE, n, buffers, children=[struct])


# ------------------------------------------------------------------------------------ arrow


class _Columns:
    """Per-record outputs, filled group by group in batch order: offsets, timestamps, and
    key/value bounds interleaved as [start, end, start, ...] within the data of their group
    (see `_cut`). Capacity grows with the records found, never with what headers claim."""

    _NAMES = ("offset", "timestamp", "timestamp_type", "key_null", "value_null")

    def __init__(
        self,
        capacity: int,
        include_headers: bool,
        shared: np.ndarray,
        bound: np.dtype | type = np.int32,
    ) -> None:
        self.shared = shared  # the input buffer: its records are cut once, at the end
        self.cut: dict[int, tuple[pa.Array, pa.Array]] = {}  # first record -> (keys, values)
        self.offset = np.empty(capacity, dtype=np.int64)
        self.timestamp = np.empty(capacity, dtype=np.int64)
        self.timestamp_type = np.empty(capacity, dtype=np.int32)
        self.key_null = np.empty(capacity, dtype=bool)
        self.value_null = np.empty(capacity, dtype=bool)
        self.key_bounds: np.ndarray = np.empty(2 * capacity, dtype=bound)
        self.value_bounds: np.ndarray = np.empty(2 * capacity, dtype=bound)
        self.header_count = np.empty(capacity, dtype=np.int64) if include_headers else None
        self.headers_start = np.empty(capacity, dtype=np.int64) if include_headers else None
        self.chunks: list[tuple[np.ndarray, int, int]] = []  # (data, first, end record)
        self.n = 0

    def _grow(self, need: int, bound: np.dtype | type) -> None:
        capacity = max(need, 2 * len(self.offset))
        for name in (*self._NAMES, "header_count", "headers_start"):
            old = getattr(self, name)
            if old is not None:
                setattr(self, name, np.resize(old, capacity))
        for name in ("key_bounds", "value_bounds"):
            setattr(self, name, np.resize(getattr(self, name).astype(bound), 2 * capacity))

    def add(self, headers: np.ndarray, data: np.ndarray, f: Fields, owner: np.ndarray) -> None:
        a, b = self.n, self.n + len(f)
        bound = self.key_bounds.dtype
        if len(data) > np.iinfo(bound).max:  # a section over 2 GiB: int64 bounds
            bound = np.dtype(np.int64)
        if b > len(self.offset) or bound != self.key_bounds.dtype:
            self._grow(b, bound)
        self.offset[a:b] = headers["base_offset"].take(owner) + f.offset_delta
        ts = headers["base_timestamp"].take(owner) + f.ts_delta
        log_append = (headers["attributes"].take(owner) & TIMESTAMP_TYPE_MASK) != 0
        self.timestamp[a:b] = np.where(log_append, headers["max_timestamp"].take(owner), ts)
        self.timestamp_type[a:b] = log_append
        self.key_bounds[2 * a : 2 * b : 2] = f.key_start
        self.key_bounds[2 * a + 1 : 2 * b : 2] = f.key_start + np.maximum(f.key_len, 0)
        self.value_bounds[2 * a : 2 * b : 2] = f.value_start
        self.value_bounds[2 * a + 1 : 2 * b : 2] = f.value_start + np.maximum(f.value_len, 0)
        self.key_null[a:b] = f.key_len < 0
        self.value_null[a:b] = f.value_len < 0
        if self.header_count is not None and self.headers_start is not None:  # include_headers
            self.header_count[a:b] = f.header_count
            self.headers_start[a:b] = f.headers_start
        if self.chunks and self.chunks[-1][0] is data:
            self.chunks[-1] = (data, self.chunks[-1][1], b)
        else:
            self.chunks.append((data, a, b))
        self.n = b
        if data is not self.shared:  # decompressed: cut its keys and values while in cache
            chunk = [(data, a, b)]
            self.cut[a] = (
                _cut(chunk, self.key_bounds, self.key_null[a:b]),
                _cut(chunk, self.value_bounds, self.value_null[a:b]),
            )


def _decode(batches: BatchSpans, include_headers: bool, schema: pa.Schema) -> pa.RecordBatch:
    """All records of `batches` as one Arrow record batch."""
    if len(batches) == 0:
        return _empty(schema)
    counts = batches.headers["records_count"].astype(np.int64)
    bound = np.int32 if len(batches.u8) <= np.iinfo(np.int32).max else np.int64
    # A record takes >= 7 bytes: a corrupt recordsCount must not size the outputs.
    plausible = np.minimum(counts, np.where(batches.codecs == 0, batches.sizes // 7, 1 << 16))
    out = _Columns(int(plausible.sum()), include_headers, batches.u8, bound)
    marks = Marks(0)  # sized by the first group
    slow: list[int] = []
    for lo, hi, data, starts, ends in batches.groups():
        if data is None:
            slow.append(lo)
            continue
        marks.ensure(int(ends[-1] - starts[0]) + 1)
        fields, owner, slow_here = scan_group(data, starts, ends, counts[lo:hi], marks)
        out.add(batches.headers, data, fields, owner + lo)
        slow.extend(lo + b for b in slow_here)
    records = _to_arrow(out, schema)
    if slow:
        records = _merge_slow(batches, records, counts, slow, include_headers, schema)
    return records


def _to_arrow(out: _Columns, schema: pa.Schema) -> pa.RecordBatch:
    n = out.n
    keys, values = [], []
    for data, first, end in out.chunks:
        if first in out.cut and end - first == len(out.cut[first][0]):
            k, v = out.cut[first]
        else:
            chunk = [(data, first, end)]
            k = _cut(chunk, out.key_bounds, out.key_null[first:end])
            v = _cut(chunk, out.value_bounds, out.value_null[first:end])
        keys.append(k)
        values.append(v)
    if not out.chunks:  # every batch went to the per-record decoder
        return _empty(schema)
    columns = [
        keys[0] if len(keys) == 1 else pa.concat_arrays(keys),
        values[0] if len(values) == 1 else pa.concat_arrays(values),
        pa.array(out.offset[:n]),
        pa.array(out.timestamp[:n]),
        pa.array(out.timestamp_type[:n]),
    ]
    if out.header_count is not None:
        columns.append(_headers_column(out))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _cut(chunks: list, bounds: np.ndarray, nulls: np.ndarray) -> pa.Array:
    """Binary array of record i's slice data[bounds[2i]:bounds[2i+1]] (null where `nulls`),
    `data` being the data of the chunk (data, first, end record) holding record i.

    Bounds are monotonic within a chunk, so element 2i of a binary array over the chunk's data
    with them as offsets is slice i, and one `take` of the even elements copies them out.
    """
    n = len(nulls)
    chunks = [c for c in chunks if c[2] > c[1]]
    if n == 0:
        return pa.array([], pa.binary())
    kind = pa.binary() if bounds.dtype == np.int32 else pa.large_binary()
    spans = [
        pa.Array.from_buffers(
            kind,
            2 * (end - first) - 1,
            [None, pa.py_buffer(bounds[2 * first : 2 * end]), pa.py_buffer(data)],
        )
        for data, first, end in chunks
    ]
    if len(spans) == 1:
        out = spans[0].take(_even(n))
    else:  # chunk c's record i is element 2 * i - c of the chunked spans
        sizes = [end - first for _, first, end in chunks]
        index = np.arange(0, 2 * n, 2, dtype=np.int64)
        index -= np.repeat(np.arange(len(chunks), dtype=np.int64), sizes)
        out = pa.chunked_array(spans).take(pa.array(index)).combine_chunks()
    if kind != pa.binary():
        out = out.cast(pa.binary())
    null_count = int(np.count_nonzero(nulls))
    if null_count:
        validity = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
        out = pa.Array.from_buffers(pa.binary(), n, [validity, *out.buffers()[1:]], null_count)
    return out


def _even(n: int) -> pa.Array:
    """Arrow int64 0, 2, 4, ... (n of them), from a cached range grown on demand."""
    global _EVENS
    if len(_EVENS) < n:
        _EVENS = pa.array(np.arange(0, 2 * max(n, 2 * len(_EVENS)), 2, dtype=np.int64))
    return _EVENS.slice(0, n)


_EVENS = pa.array(np.arange(0, 1 << 17, 2, dtype=np.int64))


def _headers_column(out: _Columns) -> pa.Array:
    """`headers` as list<struct<key, value>>, null for records without headers (as Spark)."""
    assert out.header_count is not None and out.headers_start is not None  # include_headers
    n = out.n
    count = out.header_count[:n]
    has = count > 0
    if not has.any():
        return pa.nulls(n, HEADERS_TYPE)
    list_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(count, out=list_offsets[1:])
    total = int(list_offsets[-1])
    key_bounds = np.empty(2 * total, dtype=out.key_bounds.dtype)
    value_bounds = np.empty(2 * total, dtype=out.key_bounds.dtype)
    value_null = np.empty(total, dtype=bool)
    entry_chunks = []
    for data, first, end in out.chunks:
        f = Fields()
        f.header_count, f.headers_start = count[first:end], out.headers_start[first:end]
        f.end, f.ok = f.headers_start.copy(), np.ones(end - first, dtype=bool)
        rows = np.flatnonzero(f.header_count > 0)
        limit = np.full(len(rows), np.iinfo(np.int64).max)
        entry = list_offsets[first:end].astype(np.int64)
        for h, (at, k_start, k_len, v_start, v_len) in enumerate(
            walk_headers(data, f, rows, limit, max_rounds=int(count.max()))
        ):
            e = entry.take(at) + h
            key_bounds[2 * e], key_bounds[2 * e + 1] = k_start, k_start + k_len
            value_bounds[2 * e] = v_start
            value_bounds[2 * e + 1] = v_start + np.maximum(v_len, 0)
            value_null[e] = v_len < 0
        entry_chunks.append((data, int(list_offsets[first]), int(list_offsets[end])))
    keys = _cut(entry_chunks, key_bounds, np.zeros(total, dtype=bool))
    try:
        keys = keys.cast(pa.string())
    except pa.ArrowInvalid:  # the per-record decoder replaces bad UTF-8; so do we
        keys = pa.array([k.decode("utf-8", "replace") for k in keys.to_pylist()], pa.string())
    entries = pa.StructArray.from_arrays(
        [keys, _cut(entry_chunks, value_bounds, value_null)], fields=list(HEADERS_TYPE.value_type)
    )
    return pa.ListArray.from_arrays(
        pa.array(list_offsets), entries, HEADERS_TYPE, mask=pa.array(~has)
    )


def _merge_slow(
    batches: BatchSpans,
    records: pa.RecordBatch,
    counts: np.ndarray,
    slow: list[int],
    include_headers: bool,
    schema: pa.Schema,
) -> pa.RecordBatch:
    """Insert the batches decoded by the per-record decoder at their place."""
    fast = counts.copy()
    fast[slow] = 0
    before = np.concatenate([[0], np.cumsum(fast)])  # fast records ahead of each batch
    pieces = []
    done = 0
    for b in sorted(slow):
        cut = int(before[b])
        pieces.append(records.slice(done, cut - done))
        pieces.append(_decode_slowly(batches, b, include_headers, schema))
        done = cut
    pieces.append(records.slice(done))
    return pa.concat_batches(pieces)


def _decode_slowly(
    batches: BatchSpans, b: int, include_headers: bool, schema: pa.Schema
) -> pa.RecordBatch:
    """One batch through `RecordBatch.records()`: raises exactly what a sequential reader would."""
    pos, size = int(batches.positions[b]), int(batches.sizes[b])
    records = RecordBatch(batches.view[pos : pos + size], pos).records()
    columns = {
        "key": pa.array([r.key for r in records], pa.binary()),
        "value": pa.array([r.value for r in records], pa.binary()),
        "offset": pa.array([r.offset for r in records], pa.int64()),
        "timestamp": pa.array([r.timestamp for r in records], pa.int64()),
        "timestampType": pa.array([int(r.timestamp_type) for r in records], pa.int32()),
    }
    if include_headers:
        columns["headers"] = pa.array(
            [[{"key": k, "value": v} for k, v in r.headers] or None for r in records],
            HEADERS_TYPE,
        )
    return pa.RecordBatch.from_pydict(columns, schema=schema)
