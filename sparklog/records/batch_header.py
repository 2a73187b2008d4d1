"""The 61-byte header of a Kafka v2 record batch: layout, attributes, reading and stamping.

Layout (Kafka's `DefaultRecordBatch`), big-endian, 61-byte header::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 | crc uint32
    attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64
    producerId int64 | producerEpoch int16 | baseSequence int32 | recordsCount int32 | records

The CRC-32C covers attributes..end (byte 21 on), so a broker may rewrite baseOffset and
partitionLeaderEpoch without recomputing it; that is what `stamp()` does.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from sparklog.records.compression import CompressionType
from sparklog.records.errors import CorruptRecordError
from sparklog.structs import NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP

MAGIC = 2
HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes batchLength does not count
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
RECORDS_COUNT_OFFSET = 57

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_INT8 = struct.Struct(">b")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class TimestampType(enum.IntEnum):
    """Attribute bit 3; Spark's Kafka source exposes it as the `timestampType` column."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class BatchHeader(NamedTuple):
    """The decoded 61-byte header of one v2 batch. A named tuple: brokers decode one or more
    per batch they append, and a frozen dataclass took ten times as long to build; change
    fields with `_replace`."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> CompressionType:
        return CompressionType(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(1 if self.attributes & TIMESTAMP_TYPE_MASK else 0)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (wraps at int32 max like Kafka), or -1 without one."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    @property
    def delete_horizon_ms(self) -> int:
        """KIP-534: when the bit is set, baseTimestamp holds the tombstone delete horizon."""
        return self.base_timestamp if self.has_delete_horizon else NO_TIMESTAMP


_make_header = BatchHeader._make


def attributes_for(
    compression: CompressionType = CompressionType.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    is_transactional: bool = False,
    is_control: bool = False,
    has_delete_horizon: bool = False,
) -> int:
    """Compose the int16 attributes field."""
    attributes = int(compression) & COMPRESSION_MASK
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if has_delete_horizon:
        attributes |= DELETE_HORIZON_MASK
    return attributes


def pack_header(header: BatchHeader) -> bytes:
    """The 61 header bytes of `header` (records count included, records not)."""
    return _HEADER.pack(
        header.base_offset,
        header.batch_length,
        header.partition_leader_epoch,
        header.magic,
        header.crc,
        header.attributes,
        header.last_offset_delta,
        header.base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.records_count,
    )


def check_magic(buf: bytes | bytearray | memoryview, pos: int, end: int) -> None:
    # Checked before any length: an old v0/v1 message set is shorter than a v2 header.
    if end - pos > MAGIC_OFFSET:
        (magic,) = _INT8.unpack_from(buf, pos + MAGIC_OFFSET)
        if magic != MAGIC:
            raise CorruptRecordError(
                pos + MAGIC_OFFSET,
                f"magic {magic} is not supported (sparklog reads v2 batches, magic 2)",
            )


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the header at `pos`, checking magic, length fields and codec (not the CRC)."""
    have = len(buf) - pos
    check_magic(buf, pos, len(buf))
    if have < HEADER_SIZE:
        raise CorruptRecordError(pos, f"batch header needs {HEADER_SIZE} bytes, only {have} left")
    header = _make_header(_HEADER.unpack_from(buf, pos))
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(
            pos + LENGTH_OFFSET, f"batchLength {header.batch_length} is smaller than the header"
        )
    if header.last_offset_delta < 0:
        raise CorruptRecordError(
            pos + LAST_OFFSET_DELTA_OFFSET,
            f"negative lastOffsetDelta {header.last_offset_delta}",
        )
    if header.records_count < 0:
        raise CorruptRecordError(
            pos + RECORDS_COUNT_OFFSET, f"negative recordsCount {header.records_count}"
        )
    codec = header.attributes & COMPRESSION_MASK
    if codec > CompressionType.ZSTD:
        raise CorruptRecordError(
            pos + ATTRIBUTES_OFFSET, f"unknown compression codec id {codec} in attributes"
        )
    return header


def batch_size_at(buf: bytes | bytearray | memoryview, pos: int) -> int | None:
    """Total size of the batch starting at `pos`, or None when fewer than 12 bytes remain."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    (_, length) = _OFFSET_AND_LENGTH.unpack_from(buf, pos)
    return LOG_OVERHEAD + length


def stamp(buf: bytearray | memoryview, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Rewrite baseOffset and partitionLeaderEpoch in place; the CRC stays valid."""
    _INT64.pack_into(buf, pos, base_offset)
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
