"""Walk every record of the batches of one append, without cutting out keys and values.

This is what a leader needs before it appends a client's batches (Kafka's `LogValidator` walks
them the same way): each batch decompressed once, each record's length, varints, key, value and
headers checked to end exactly where the record says, the record count checked against the
header, and, per record, the facts the validation rules look at (offset delta, timestamp, null
key). The scan is `arrow_scan`'s vectorized one; a batch it cannot resolve goes through the
per-record decoder, which accepts the legal oddities no producer writes and raises on the rest.

Damaged compressed payloads raise `CorruptRecordError` (CORRUPT_MESSAGE), payloads unpacking
to more than the caller's bound `DecompressedTooLargeError` (RECORD_TOO_LARGE); records whose
structure lies raise `InvalidRecordError` (INVALID_RECORD), as Kafka's `DefaultRecord.readFrom`
does with `InvalidRecordException`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from sparklog.errors import InvalidRecordError
from sparklog.records import native
from sparklog.records.arrow_decode import native_sections
from sparklog.records.arrow_scan import Marks, scan_group
from sparklog.records.batch import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    BatchHeader,
    RecordBatch,
    TimestampType,
)
from sparklog.records.batch_spans import BatchSpans, le64, read_headers
from sparklog.records.compression import DECOMPRESSED_MAX_BYTES
from sparklog.records.errors import CorruptRecordError
from sparklog.records.record import decode_records
from sparklog.records.varint import decode_varint, wrap_int64

#: Appends with at most this many records are walked by the per-record decoder (about 4 us a
#: record), larger ones by the vectorized scan (about 300 us a call, little per record).
_SEQUENTIAL_RECORDS = 256
#: With the native core, appends of more records than this are walked by it.
_NATIVE_FROM_RECORDS = 16


@dataclass(frozen=True, slots=True)
class BatchFacts:
    """Per record of one batch, in order: offset delta, timestamp a reader will see, null key.

    Python lists for batches walked one by one, numpy arrays for the vectorized scan.
    """

    offset_deltas: Any
    timestamps: Any
    key_nulls: Any

    @property
    def vectorized(self) -> bool:
        return isinstance(self.offset_deltas, np.ndarray)


def walk_records(
    buf: bytes | bytearray | memoryview,
    batches: list[tuple[int, BatchHeader]],
    max_bytes: int = DECOMPRESSED_MAX_BYTES,
    sections: list[bytes | None] | None = None,
) -> list[BatchFacts]:
    """Facts about every record of `batches` ((position, header) in `buf`, headers and CRCs
    already checked), one entry per batch. `sections[i]`, when not None, is batch i's records
    section decompressed already (it is not decompressed again).

    Raises CorruptRecordError when a records section does not decompress,
    DecompressedTooLargeError when one unpacks to more than `max_bytes`, and InvalidRecordError
    when a record's bytes do not parse as the header says; nothing is returned partially.
    """
    view = memoryview(buf).cast("B")
    given: list[bytes | None] = sections if sections is not None else [None] * len(batches)
    records = sum(h.records_count for _, h in batches)
    core = native.core()
    if core is not None and records > _NATIVE_FROM_RECORDS:
        walked = _walk_native(core, view, batches, max_bytes, given)
        if walked is not None:
            return walked
    if records <= _SEQUENTIAL_RECORDS:
        return [
            _walk_one(view, pos, h, max_bytes, s)
            for (pos, h), s in zip(batches, given, strict=True)
        ]
    return _walk_vectorized(view, batches, max_bytes, given)


def _walk_native(
    core,
    view: memoryview,
    batches: list[tuple[int, BatchHeader]],
    max_bytes: int,
    given: list[bytes | None],
) -> list | None:
    """The native core parses every record (keys and values checked, not copied); batches it
    hands back go one by one, in order. None: too big for it, walk another way."""
    spans = _spans(view, batches)
    out = core.decode_sections(
        view,
        le64(spans.positions),
        le64(spans.sizes),
        native_sections(spans, max_bytes, given),
        False,
        False,
        max_bytes,
    )
    if out is None:
        return None
    n, keys, _values, offsets, timestamps, _types, _headers, slow = out
    offsets = np.frombuffer(offsets, dtype="<i8")
    timestamps = np.frombuffer(timestamps, dtype="<i8")
    validity = keys[0]
    if validity is None:
        key_nulls = np.zeros(n, dtype=bool)
    else:
        bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), count=n, bitorder="little")
        key_nulls = bits == 0
    handed_back = set(slow)
    walked: list[BatchFacts] = []
    at = 0
    for b, (pos, h) in enumerate(batches):
        if b in handed_back:
            walked.append(_walk_one(view, pos, h, max_bytes, given[b]))
            continue
        end = at + h.records_count
        deltas = offsets[at:end] - np.int64(h.base_offset)
        walked.append(BatchFacts(deltas, timestamps[at:end], key_nulls[at:end]))
        at = end
    return walked


def _spans(view: memoryview, batches: list[tuple[int, BatchHeader]]) -> BatchSpans:
    u8 = np.frombuffer(view, dtype=np.uint8)
    pos = np.asarray([p for p, _ in batches], dtype=np.int64)
    headers = read_headers(view, u8, pos)
    sizes = np.asarray([h.size_in_bytes for _, h in batches], dtype=np.int64)
    return BatchSpans(view, u8, pos, sizes, headers, headers["attributes"] & COMPRESSION_MASK)


def _walk_vectorized(
    view: memoryview,
    batches: list[tuple[int, BatchHeader]],
    max_bytes: int,
    given: list[bytes | None],
) -> list[BatchFacts]:
    """`arrow_scan` over work groups; batches it cannot resolve go one by one."""
    spans = _spans(view, batches)
    counts = spans.headers["records_count"].astype(np.int64)
    out: list[BatchFacts | None] = [None] * len(batches)
    marks = Marks(0)
    for lo, hi, data, starts, ends in spans.groups(max_bytes, given):
        if data is None:  # does not decompress: the reference raises CorruptRecordError
            out[lo] = _walk_one(view, *batches[lo], max_bytes, given[lo])
            continue
        marks.ensure(int(ends[-1] - starts[0]) + 1)
        fields, owner, slow = scan_group(data, starts, ends, counts[lo:hi], marks)
        bounds = np.searchsorted(owner, np.arange(hi - lo + 1)).tolist()
        nulls = fields.key_len < 0
        for b in range(lo, hi):
            if b - lo in slow:
                out[b] = _walk_one(view, *batches[b], max_bytes, given[b])
                continue
            a, z = bounds[b - lo], bounds[b - lo + 1]
            out[b] = _facts(
                batches[b][1], fields.offset_delta[a:z], fields.ts_delta[a:z], nulls[a:z]
            )
    return out  # type: ignore[return-value]


def _walk_one(
    view: memoryview, pos: int, h: BatchHeader, max_bytes: int, section: bytes | None = None
) -> BatchFacts:
    """One batch record by record (its `section` when decompressed already). The lean walk
    handles what producers write; anything else goes through the reference decoder, which
    raises the exact error or accepts a legal oddity. A section that does not decompress stays
    CORRUPT_MESSAGE."""
    if section is None:
        section = RecordBatch(view[pos : pos + h.size_in_bytes], pos).records_bytes(max_bytes)
    walked = _lean_walk(section, h.records_count)
    if walked is None:
        try:
            records = decode_records(h, section, pos + HEADER_SIZE)
        except CorruptRecordError as e:
            raise InvalidRecordError(f"invalid record structure: {e}") from None
        walked = (
            [r.offset - h.base_offset for r in records],
            [r.timestamp - h.base_timestamp for r in records],
            [r.key is None for r in records],
        )
    return _facts(h, *walked)


def _varint(data: bytes, p: int) -> tuple[int, int]:
    """A zigzag varint at `p`: one and two bytes inline (what records mostly hold)."""
    b = data[p]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), p + 1
    c = data[p + 1]
    if c < 0x80:
        v = (b & 0x7F) | (c << 7)
        return (v >> 1) ^ -(v & 1), p + 2
    return decode_varint(data, p)


def _lean_walk(data: bytes, count: int) -> tuple[list, list, list] | None:
    """(offset deltas, timestamp deltas, null keys) of `count` records filling `data`, or None
    when anything is irregular (the reference decoder then says what)."""
    deltas: list[int] = []
    stamps: list[int] = []
    nulls: list[bool] = []
    n = len(data)
    pos = 0
    try:
        for _ in range(count):
            size, pos = _varint(data, pos)
            end = pos + size
            if size < 1 or end > n:
                return None
            p = pos + 1  # after the attributes byte; the timestamp delta is a varlong
            b = data[p]
            ts, p = ((b >> 1) ^ -(b & 1), p + 1) if b < 0x80 else decode_varint(data, p, long=True)
            delta, p = _varint(data, p)
            key, p = _varint(data, p)
            p += key if key > 0 else 0
            value, p = _varint(data, p)
            p += value if value > 0 else 0
            headers, p = _varint(data, p)
            if key < -1 or value < -1 or headers < 0:
                return None
            for _header in range(headers):
                length, p = _varint(data, p)
                if length < 0:
                    return None
                length, p = _varint(data, p + length)
                if length < -1:
                    return None
                p += length if length > 0 else 0
            if p != end:
                return None
            deltas.append(delta)
            stamps.append(ts)
            nulls.append(key < 0)
            pos = end
    except (IndexError, CorruptRecordError):
        return None
    return (deltas, stamps, nulls) if pos == n else None


def _facts(h: BatchHeader, deltas: Any, ts_deltas: Any, nulls: Any) -> BatchFacts:
    """What readers will see: LogAppendTime batches read maxTimestamp for every record.
    Lists stay lists (small appends), numpy arrays stay arrays (int64 wraps like Java's long)."""
    stamps: list[int] | np.ndarray
    if h.timestamp_type == TimestampType.LOG_APPEND_TIME:
        stamps = [h.max_timestamp] * len(deltas)
    elif isinstance(ts_deltas, np.ndarray):
        with np.errstate(over="ignore"):
            stamps = ts_deltas + np.int64(h.base_timestamp)
    else:
        base = h.base_timestamp
        stamps = [wrap_int64(base + d) for d in ts_deltas]
    return BatchFacts(deltas, stamps, nulls)
