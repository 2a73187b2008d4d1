"""How a leader assigns offsets, its epoch and LogAppendTime to client batches before they
are written (part of Kafka's `LogValidator`), without re-encoding: baseOffset, batchLength and
partitionLeaderEpoch lie outside the CRC, so a batch's body is written from the request's own
buffer behind a fresh 16-byte prefix. The timestamp type and maxTimestamp are the topic's, as
Kafka's validator sets them (`setMaxTimestamp(timestampType, ...)`): LogAppendTime topics stamp
the append time; on CreateTime topics a producer's LogAppendTime flag is cleared (maxTimestamp
kept: it is the time every record of such a batch read when it was validated), and a
maxTimestamp that is not the records' latest is replaced by it (the validator's header; e.g.
librdkafka writes 0 when every record's timestamp is -1). Only these rewrite CRC-covered bytes
(attributes and maxTimestamp, header fields only: the records are never touched), so only
those batches are copied, and their CRC is computed again, as Kafka's in-place assignment does.
"""

from __future__ import annotations

import struct

from sparklog.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    stamp,
)
from sparklog.records.crc import crc32c

_STAMPED_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_OFFSET = 35


def stamped_pieces(
    buf: memoryview,
    stamped: list[tuple[int, BatchHeader]],
    leader_epoch: int,
    append_time: int,
) -> list[bytes | bytearray | memoryview]:
    """The bytes to write, without copying batch bodies: per batch a fresh 16-byte prefix
    (baseOffset, batchLength, partitionLeaderEpoch, which the CRC does not cover) and a view of
    the rest. A timestamp type or maxTimestamp to set (the stamped header's differ from the
    client's) changes CRC-covered bytes, so those batches are copied."""
    pieces: list[bytes | bytearray | memoryview] = []
    for pos, header in stamped:
        end = pos + header.size_in_bytes
        flagged = buf[pos + ATTRIBUTES_OFFSET + 1] & TIMESTAMP_TYPE_MASK  # as the client sent it
        (sent_max,) = _MAX_TIMESTAMP.unpack_from(buf, pos + _MAX_TIMESTAMP_OFFSET)
        if append_time >= 0 or flagged or sent_max != header.max_timestamp:
            chunk = bytearray(buf[pos:end])
            stamp(chunk, 0, header.base_offset, leader_epoch)
            if append_time >= 0:
                set_log_append_time(chunk, 0, append_time)
            else:
                set_create_time(chunk, 0, header.max_timestamp)
            pieces.append(chunk)
        else:
            prefix = _STAMPED_PREFIX.pack(header.base_offset, header.batch_length, leader_epoch)
            pieces.append(prefix)
            pieces.append(buf[pos + _STAMPED_PREFIX.size : end])
    return pieces


def set_log_append_time(buf: bytearray, pos: int, append_time: int) -> None:
    """Set the timestamp-type bit and maxTimestamp, and recompute the CRC."""
    _MAX_TIMESTAMP.pack_into(buf, pos + _MAX_TIMESTAMP_OFFSET, append_time)
    _set_timestamp_type_bit(buf, pos, True)


def set_create_time(buf: bytearray, pos: int, max_timestamp: int) -> None:
    """Clear the timestamp-type bit, set maxTimestamp (the validator's: the records' latest, or
    the one a LogAppendTime-flagged batch carried), and recompute the CRC."""
    _MAX_TIMESTAMP.pack_into(buf, pos + _MAX_TIMESTAMP_OFFSET, max_timestamp)
    _set_timestamp_type_bit(buf, pos, False)


def _set_timestamp_type_bit(buf: bytearray, pos: int, log_append_time: bool) -> None:
    attributes = int.from_bytes(buf[pos + ATTRIBUTES_OFFSET : pos + ATTRIBUTES_OFFSET + 2], "big")
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
    else:
        attributes &= ~TIMESTAMP_TYPE_MASK
    buf[pos + ATTRIBUTES_OFFSET : pos + ATTRIBUTES_OFFSET + 2] = attributes.to_bytes(2, "big")
    size = 12 + int.from_bytes(buf[pos + 8 : pos + 12], "big")
    crc = crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size])
    buf[pos + CRC_OFFSET : pos + CRC_OFFSET + 4] = crc.to_bytes(4, "big")


def restamped(
    header: BatchHeader, base_offset: int, leader_epoch: int, append_time: int
) -> BatchHeader:
    if append_time >= 0:
        return header._replace(
            base_offset=base_offset,
            partition_leader_epoch=leader_epoch,
            max_timestamp=append_time,
            attributes=header.attributes | TIMESTAMP_TYPE_MASK,
        )
    return header._replace(
        base_offset=base_offset,
        partition_leader_epoch=leader_epoch,
        attributes=header.attributes & ~TIMESTAMP_TYPE_MASK,
    )
