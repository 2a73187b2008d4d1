"""Control records: transaction markers (Kafka's `ControlRecordType`, `EndTransactionMarker`).

Key = int16 version (0) + int16 type (ABORT=0, COMMIT=1); value = int16 version (0) + int32
coordinator epoch. A control batch holds exactly one such record and has the control and
transactional attribute bits set.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from sparklog.records.batch import NO_PARTITION_LEADER_EPOCH, BatchHeader, RecordBatch
from sparklog.records.builder import SimpleRecord, build_batch
from sparklog.records.errors import CorruptRecordError

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
CONTROL_RECORD_VERSION = 0


class ControlRecordType(enum.IntEnum):
    """The int16 type in a control record's key."""

    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """A COMMIT or ABORT marker written by the transaction coordinator."""

    control_type: ControlRecordType
    coordinator_epoch: int


def build_end_txn_marker_batch(
    marker: EndTransactionMarker,
    *,
    producer_id: int,
    producer_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """One control batch holding `marker`."""
    key = _KEY.pack(CONTROL_RECORD_VERSION, int(marker.control_type))
    value = _VALUE.pack(CONTROL_RECORD_VERSION, marker.coordinator_epoch)
    return build_batch(
        [SimpleRecord(value=value, key=key, timestamp=timestamp_ms)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def control_type_of(key: bytes | None, position: int = 0) -> ControlRecordType:
    """The control type named by a control record's key (Kafka's `ControlRecordType.parse`).

    `position` is where the record sits in the buffer, for the error message.
    """
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError(position, "control record key shorter than 4 bytes")
    version, kind = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(position, f"negative control record key version {version}")
    try:
        return ControlRecordType(kind)
    except ValueError:
        raise CorruptRecordError(position, f"unknown control record type {kind}") from None


def decode_end_txn_marker(
    header: BatchHeader, key: bytes | None, value: bytes | None, position: int = 0
) -> EndTransactionMarker:
    """Parse the marker of a control batch's record (Kafka's `EndTransactionMarker.deserialize`).

    A newer value version is read as version 0, as Kafka does; a negative one is corruption.
    """
    if not header.is_control:
        raise ValueError("not a control batch: only control batches hold end-transaction markers")
    kind = control_type_of(key, position)
    if value is None or len(value) < _VALUE.size:
        raise CorruptRecordError(position, "end-transaction marker value shorter than 6 bytes")
    version, coordinator_epoch = _VALUE.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(position, f"negative end-transaction marker version {version}")
    return EndTransactionMarker(kind, coordinator_epoch)


def end_txn_marker_at(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader
) -> EndTransactionMarker:
    """The COMMIT/ABORT marker held by the control batch at `pos` of `buf` (one record)."""
    raw = memoryview(buf)[pos : pos + header.size_in_bytes]
    records = RecordBatch(raw, pos).records()
    if len(records) != 1:
        raise CorruptRecordError(pos, f"a control batch holds one record, this one {len(records)}")
    return decode_end_txn_marker(header, records[0].key, records[0].value)
