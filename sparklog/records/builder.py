"""Build a v2 batch from records one by one (Kafka's `MemoryRecordsBuilder`, simple path).

Clients and tests use this; bulk producers use `arrow_codec.build_batches`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sparklog.records import native
from sparklog.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    BatchHeader,
    TimestampType,
    attributes_for,
    pack_header,
)
from sparklog.records.compression import CompressionType, compress
from sparklog.records.crc import crc32c
from sparklog.records.record import Headers, encode_record
from sparklog.records.varint import wrap_int64


@dataclass(frozen=True, slots=True)
class SimpleRecord:
    """What a producer supplies for one record; offsets come from the batch."""

    value: bytes | None
    key: bytes | None = None
    timestamp: int | None = None
    headers: Headers = ()


#: Batches of at least this many records (and no headers) are encoded by the native core.
_NATIVE_FROM_RECORDS = 4


def build_batch(
    records: Sequence[SimpleRecord] | Iterable[SimpleRecord],
    *,
    base_offset: int = 0,
    now_ms: int = 0,
    compression: CompressionType = CompressionType.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    delete_horizon_ms: int | None = None,
    offset_deltas: Sequence[int] | None = None,
) -> bytes:
    """Encode `records` as one batch; a record without a timestamp gets `now_ms`.

    With LOG_APPEND_TIME, `now_ms` is the log append time: it becomes maxTimestamp, which every
    record then reads as its timestamp (Kafka's `MemoryRecordsBuilder` with `logAppendTime`).
    `offset_deltas` keeps gaps (a compacted batch); by default deltas are 0..n-1.
    """
    records = list(records)
    if not records:
        raise ValueError("a record batch needs at least one record")
    timestamps = [now_ms if r.timestamp is None else r.timestamp for r in records]
    base_timestamp = timestamps[0] if delete_horizon_ms is None else delete_horizon_ms
    log_append = timestamp_type == TimestampType.LOG_APPEND_TIME
    max_timestamp = now_ms if log_append else max(timestamps)
    deltas = list(range(len(records))) if offset_deltas is None else list(offset_deltas)
    body = None
    if offset_deltas is None and len(records) >= _NATIVE_FROM_RECORDS:
        body = _native_body(records, timestamps, base_timestamp)
    if body is None:
        # Deltas wrap like Java longs, so any two int64 timestamps round-trip.
        body = b"".join(
            encode_record(d, wrap_int64(ts - base_timestamp), r.key, r.value, r.headers)
            for d, ts, r in zip(deltas, timestamps, records, strict=True)
        )
    return assemble_batch(
        body,
        records_count=len(records),
        last_offset_delta=deltas[-1],
        base_offset=base_offset,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        compression=compression,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
        partition_leader_epoch=partition_leader_epoch,
        has_delete_horizon=delete_horizon_ms is not None,
    )


def _native_body(
    records: list[SimpleRecord], timestamps: list[int], base_timestamp: int
) -> bytes | None:
    """The records section by the native core (the same bytes as `encode_record` writes), or
    None when it is not built or a record has headers (those go record by record)."""
    core = native.core()
    if core is None or any(r.headers for r in records):
        return None
    from sparklog.records.arrow_encode import int64_bytes, native_column, wire_lengths

    try:
        ts = np.array(timestamps, dtype=np.int64)
        values = pa.array([r.value for r in records], pa.binary())
        keys = pa.array([r.key for r in records], pa.binary())
    except (OverflowError, TypeError, pa.ArrowException):
        return None  # the record-by-record path raises what it raises for these
    with np.errstate(over="ignore"):
        ts_delta = ts - np.int64(base_timestamp)
    key = native_column(keys, wire_lengths(keys)) if keys.null_count < len(keys) else None
    body, _ends = core.encode_records(
        int64_bytes(ts_delta),
        int64_bytes(np.arange(len(records), dtype=np.int64)),
        native_column(values, wire_lengths(values)),
        key,
        None,
    )
    return body


def assemble_batch(
    records_section: bytes | memoryview,
    *,
    records_count: int,
    last_offset_delta: int,
    base_offset: int,
    base_timestamp: int,
    max_timestamp: int,
    compression: CompressionType = CompressionType.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    has_delete_horizon: bool = False,
) -> bytes:
    """Wrap an encoded (uncompressed) records section in a header, compressing and CRC'ing it."""
    payload = compress(compression, records_section)
    attributes = attributes_for(
        compression, timestamp_type, is_transactional, is_control, has_delete_horizon
    )
    header = BatchHeader(
        base_offset=base_offset,
        batch_length=HEADER_SIZE - LOG_OVERHEAD + len(payload),
        partition_leader_epoch=partition_leader_epoch,
        magic=MAGIC,
        crc=0,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=records_count,
    )
    raw = bytearray(pack_header(header))
    raw += payload
    crc = crc32c(memoryview(raw)[ATTRIBUTES_OFFSET:])
    raw[CRC_OFFSET:ATTRIBUTES_OFFSET] = crc.to_bytes(4, "big")
    return bytes(raw)
