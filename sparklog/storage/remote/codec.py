"""Kafka v2 batches <-> rows of the topic table (`schema.TABLE_SCHEMA`), vectorized.

Theory of operation. Upload: the batches are decoded once by the records package's Arrow
decoder (`arrow_decode.read_batches`, control batches kept, CRCs checked), their 61-byte headers
read all at once (`batch_spans.read_headers`) and repeated per record, so every row carries its
batch's columns without a loop per record. A LogAppendTime batch's records show the append time
(as a consumer sees them); their own timestamps, which the CRC covers, are decoded a second time
from a copy of those batches with the timestamp-type bit cleared (`create_timestamp`).

Rebuild: rows sorted by offset are cut where `batch_base_offset` changes; the records of all
batches are encoded at once (`arrow_encode.encode_records`) with their original offset and
timestamp deltas (so gaps inside a batch stay), each batch's section is compressed with the
batch's codec and its header filled in through the same numpy record dtype; the CRC-32C is
computed anew. A rebuilt batch is record-identical to the original: every header field and
every record field is the same; only the compressed bytes may differ (another compressor
build), as when Kafka recompresses.

Not kept: a batch without records (only compaction leaves those, and compacted topics are not
tiered) and the delete-horizon attribute (compaction only).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparklog.records.arrow_decode import read_batches
from sparklog.records.arrow_encode import HEADER_DTYPE, encode_records
from sparklog.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
)
from sparklog.records.batch_spans import read_headers, walk_batches
from sparklog.records.compression import CompressionType, compress
from sparklog.records.crc import crc32c
from sparklog.storage.remote.schema import HEADER_TYPE, TABLE_SCHEMA
from sparklog.storage.txn_index import AbortedTxn

__all__ = ["batch_bytes", "batches_to_rows", "rows_to_batches"]

_MS_PER_DAY = 86_400_000
_CRC_START = ATTRIBUTES_OFFSET
_CRC_OFFSET = 17


def batches_to_rows(
    records: bytes | bytearray | memoryview,
    partition: int,
    aborted: Sequence[AbortedTxn] = (),
) -> pa.Table:
    """One row per record of the complete v2 batches in `records` (control records included),
    in TABLE_SCHEMA; `aborted` (the transaction index entries overlapping the range) sets the
    `aborted` column of the transactional data records they cover. Bad bytes raise
    CorruptRecordError / InvalidCrcError as a reader would."""
    view = memoryview(records).cast("B")
    positions, _ = walk_batches(view, allow_partial_tail=False)
    if not positions:
        return TABLE_SCHEMA.empty_table()
    u8 = np.frombuffer(view, dtype=np.uint8)
    pos = np.asarray(positions, dtype=np.int64)
    headers = read_headers(view, u8, pos)
    decoded = read_batches(view, include_headers=True, skip_control=False, allow_partial_tail=False)
    rec = decoded.records
    counts = headers["records_count"].astype(np.int64)
    n = rec.num_rows
    if int(counts.sum()) != n:  # the decoder checked every batch: a bug, not bad input
        raise AssertionError(f"decoded {n} records where the batches count {int(counts.sum())}")
    owner = np.repeat(np.arange(len(pos)), counts)
    h = headers[owner] if n else headers[:0]
    attributes = h["attributes"].astype(np.int64)
    timestamp_ms = rec.column("timestamp").to_numpy()
    log_append = (attributes & TIMESTAMP_TYPE_MASK) != 0
    offset = rec.column("offset").to_numpy()
    producer_id = h["producer_id"].astype(np.int64)
    is_txn = (attributes & TRANSACTIONAL_MASK) != 0
    is_control = (attributes & CONTROL_MASK) != 0
    columns = {
        "partition": pa.array(np.full(n, partition, dtype=np.int32)),
        "date": pa.array((timestamp_ms // _MS_PER_DAY).astype(np.int32)).view(pa.date32()),
        "offset": rec.column("offset"),
        "timestamp": pa.array(timestamp_ms * 1000).view(pa.timestamp("us", tz="UTC")),
        "timestamp_type": rec.column("timestampType"),
        "key": rec.column("key"),
        "value": rec.column("value"),
        "headers": rec.column("headers").cast(HEADER_TYPE),
        "batch_base_offset": pa.array(h["base_offset"].astype(np.int64)),
        "batch_last_offset_delta": pa.array(h["last_offset_delta"].astype(np.int32)),
        "batch_max_timestamp": pa.array(h["max_timestamp"].astype(np.int64)),
        "leader_epoch": pa.array(h["partition_leader_epoch"].astype(np.int32)),
        "producer_id": pa.array(producer_id),
        "producer_epoch": pa.array(h["producer_epoch"].astype(np.int32)),
        "base_sequence": pa.array(h["base_sequence"].astype(np.int32)),
        "compression": pa.array((attributes & COMPRESSION_MASK).astype(np.int32)),
        "is_transactional": pa.array(is_txn),
        "is_control": pa.array(is_control),
        "aborted": pa.array(_aborted_rows(offset, producer_id, is_txn & ~is_control, aborted)),
        "batch_base_timestamp": pa.array(h["base_timestamp"].astype(np.int64)),
        "create_timestamp": _create_timestamps(view, pos, headers, log_append, n),
    }
    return pa.Table.from_pydict(columns, schema=TABLE_SCHEMA)


def _aborted_rows(
    offset: np.ndarray, producer_id: np.ndarray, txn_data: np.ndarray, aborted: Sequence[AbortedTxn]
) -> np.ndarray:
    out = np.zeros(len(offset), dtype=bool)
    for txn in aborted:
        out |= (
            txn_data
            & (producer_id == txn.producer_id)
            & (offset >= txn.first_offset)
            & (offset <= txn.last_offset)
        )
    return out


def _create_timestamps(
    view: memoryview, pos: np.ndarray, headers: np.ndarray, log_append: np.ndarray, n: int
) -> pa.Array:
    """Each record's own timestamp in LogAppendTime batches (null elsewhere): the batches
    decoded again from a copy with the timestamp-type bit cleared (no CRC check there)."""
    if not log_append.any():
        return pa.nulls(n, pa.int64())
    batch_log_append = (headers["attributes"] & TIMESTAMP_TYPE_MASK) != 0
    sizes = headers["batch_length"].astype(np.int64) + LOG_OVERHEAD
    parts = []
    for p, size in zip(
        pos[batch_log_append].tolist(), sizes[batch_log_append].tolist(), strict=True
    ):
        batch = bytearray(view[p : p + size])
        batch[ATTRIBUTES_OFFSET + 1] &= ~TIMESTAMP_TYPE_MASK & 0xFF  # attributes: big-endian
        parts.append(batch)
    raw = read_batches(b"".join(parts), skip_control=False, check_crcs=False)
    own = raw.records.column("timestamp").to_numpy()
    out = np.zeros(n, dtype=np.int64)
    out[log_append] = own
    return pa.array(out, mask=~log_append)


# ------------------------------------------------------------------------------- rebuild


def rows_to_batches(rows: pa.Table) -> bytes:
    """The v2 batches of `rows` (whole batches, in TABLE_SCHEMA or a superset; any order),
    record-identical to the batches they were decoded from, with fresh CRCs."""
    return b"".join(rows_to_batch_list(rows))


def rows_to_batch_list(rows: pa.Table) -> list[bytes]:
    """`rows_to_batches`, one bytes object per batch (in offset order)."""
    n = rows.num_rows
    if n == 0:
        return []
    offset = _np(rows, "offset")
    if n > 1 and not bool(np.all(offset[1:] > offset[:-1])):
        rows = rows.take(pa.array(np.argsort(offset, kind="stable")))
        offset = _np(rows, "offset")
    base = _np(rows, "batch_base_offset")
    first = np.flatnonzero(np.concatenate([[True], base[1:] != base[:-1]]))
    counts = np.diff(np.append(first, n))
    timestamp_ms = _np(rows, "timestamp").view(np.int64) // 1000
    log_append = _np(rows, "timestamp_type") != 0
    own = rows.column("create_timestamp")
    raw_ts = timestamp_ms
    if log_append.any():
        own_ms = pc.fill_null(own, 0).to_numpy() if own.null_count else own.to_numpy()
        raw_ts = np.where(log_append, own_ms, timestamp_ms)
    base_ts = _np(rows, "batch_base_timestamp")
    records = pa.table(
        {
            "key": rows.column("key"),
            "value": rows.column("value"),
            "timestamp": pa.array(raw_ts),
            "headers": rows.column("headers"),
        }
    )
    data, ends = encode_records(records, raw_ts - base_ts, offset - base)
    header = _headers(rows, first, counts, log_append)
    section_end = ends[first + counts - 1]
    section_start = np.concatenate([[0], section_end[:-1]])
    codecs = header["attributes"] & COMPRESSION_MASK
    view = memoryview(data)
    payloads = []
    for a, b, codec in zip(
        section_start.tolist(), section_end.tolist(), codecs.tolist(), strict=True
    ):
        section = view[a:b]
        payloads.append(section if codec == 0 else compress(CompressionType(codec), section))
    header["batch_length"] = np.fromiter((len(p) for p in payloads), np.int64, len(payloads)) + (
        HEADER_SIZE - LOG_OVERHEAD
    )
    raw = header.tobytes()
    return [
        _with_crc(raw[j * HEADER_SIZE : (j + 1) * HEADER_SIZE], payload)
        for j, payload in enumerate(payloads)
    ]


def _np(rows: pa.Table, name: str) -> np.ndarray:
    col = rows.column(name)
    if col.num_chunks == 1:
        return col.chunk(0).to_numpy(zero_copy_only=False)
    return col.to_numpy()


def _headers(
    rows: pa.Table, first: np.ndarray, counts: np.ndarray, log_append: np.ndarray
) -> np.ndarray:
    """The batch headers (batch_length and CRC still to fill in) from each batch's first row."""
    header = np.zeros(len(first), dtype=HEADER_DTYPE)

    def at(name: str) -> np.ndarray:
        return _np(rows, name)[first]

    attributes = at("compression").astype(np.int64)
    attributes |= np.where(log_append[first], TIMESTAMP_TYPE_MASK, 0)
    attributes |= np.where(at("is_transactional"), TRANSACTIONAL_MASK, 0)
    attributes |= np.where(at("is_control"), CONTROL_MASK, 0)
    header["base_offset"] = at("batch_base_offset")
    header["partition_leader_epoch"] = at("leader_epoch")
    header["magic"] = MAGIC
    header["attributes"] = attributes
    header["last_offset_delta"] = at("batch_last_offset_delta")
    header["base_timestamp"] = at("batch_base_timestamp")
    header["max_timestamp"] = at("batch_max_timestamp")
    header["producer_id"] = at("producer_id")
    header["producer_epoch"] = at("producer_epoch")
    header["base_sequence"] = at("base_sequence")
    header["records_count"] = counts
    return header


def _with_crc(header: bytes, payload: memoryview | bytes) -> bytes:
    crc = crc32c(memoryview(header)[_CRC_START:])
    crc = crc32c(payload, crc)
    return b"".join((header[:_CRC_OFFSET], crc.to_bytes(4, "big"), header[_CRC_START:], payload))


def batch_bytes(rows: pa.Table) -> int:
    """About how many bytes the batches of `rows` take uncompressed (keys and values plus a
    per-record and per-batch overhead): to size a read before rebuilding it."""
    if rows.num_rows == 0:
        return 0
    size = 0
    for name in ("key", "value"):
        col = rows.column(name)
        size += int(pc.sum(pc.binary_length(col)).as_py() or 0)
    return size + 20 * rows.num_rows
