"""How a leader assigns offsets, its epoch and LogAppendTime to client batches before they
are written (part of Kafka's `LogValidator`), without re-encoding: baseOffset, batchLength and
partitionLeaderEpoch lie outside the CRC, so a batch's body is written from the request's own
buffer behind a fresh 16-byte prefix. Only LogAppendTime topics rewrite CRC-covered bytes.
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


def stamped_pieces(
    buf: memoryview,
    stamped: list[tuple[int, BatchHeader]],
    leader_epoch: int,
    append_time: int,
) -> list[bytes | bytearray | memoryview]:
    """The bytes to write, without copying batch bodies: per batch a fresh 16-byte prefix
    (baseOffset, batchLength, partitionLeaderEpoch, which the CRC does not cover) and a view of
    the rest. LogAppendTime changes CRC-covered bytes, so those batches are copied."""
    pieces: list[bytes | bytearray | memoryview] = []
    for pos, header in stamped:
        end = pos + header.size_in_bytes
        if append_time >= 0:
            chunk = bytearray(buf[pos:end])
            stamp(chunk, 0, header.base_offset, leader_epoch)
            set_log_append_time(chunk, 0, append_time)
            pieces.append(chunk)
        else:
            prefix = _STAMPED_PREFIX.pack(header.base_offset, header.batch_length, leader_epoch)
            pieces.append(prefix)
            pieces.append(buf[pos + _STAMPED_PREFIX.size : end])
    return pieces


def set_log_append_time(buf: bytearray, pos: int, append_time: int) -> None:
    """Rewrite maxTimestamp and the timestamp-type bit; the CRC must then be recomputed."""
    attributes = int.from_bytes(buf[pos + ATTRIBUTES_OFFSET : pos + ATTRIBUTES_OFFSET + 2], "big")
    attributes |= TIMESTAMP_TYPE_MASK
    buf[pos + ATTRIBUTES_OFFSET : pos + ATTRIBUTES_OFFSET + 2] = attributes.to_bytes(2, "big")
    buf[pos + 35 : pos + 43] = append_time.to_bytes(8, "big", signed=True)
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
    return header._replace(base_offset=base_offset, partition_leader_epoch=leader_epoch)
