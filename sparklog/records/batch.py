"""A Kafka v2 record batch as a view over its bytes, and walking the batches of a buffer.

The header (layout, attributes, `read_header`, `stamp`) lives in `batch_header`; its names are
re-exported here, where most callers import them from.
"""

from __future__ import annotations

from collections.abc import Iterator

from sparklog.records.batch_header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    RECORDS_COUNT_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    TimestampType,
    attributes_for,
    batch_size_at,
    check_magic,
    pack_header,
    read_header,
    stamp,
)
from sparklog.records.compression import decompress
from sparklog.records.crc import crc32c
from sparklog.records.errors import CorruptRecordError, InvalidCrcError
from sparklog.records.record import Record, decode_records
from sparklog.structs import (
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
)

__all__ = [
    "ATTRIBUTES_OFFSET",
    "BatchHeader",
    "COMPRESSION_MASK",
    "CONTROL_MASK",
    "CRC_OFFSET",
    "DELETE_HORIZON_MASK",
    "HEADER_SIZE",
    "LAST_OFFSET_DELTA_OFFSET",
    "LENGTH_OFFSET",
    "LOG_OVERHEAD",
    "MAGIC",
    "MAGIC_OFFSET",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "RECORDS_COUNT_OFFSET",
    "RecordBatch",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_MASK",
    "TimestampType",
    "attributes_for",
    "batch_size_at",
    "check_magic",
    "iter_batches",
    "pack_header",
    "read_header",
    "stamp",
]


class RecordBatch:
    """One v2 batch as a view over its bytes; decoding of records is lazy.

    `data` holds exactly this batch (baseOffset through the last record byte).
    """

    __slots__ = ("data", "header", "position")

    def __init__(self, data: bytes | memoryview, position: int = 0) -> None:
        self.data = data
        self.position = position
        try:
            self.header = read_header(data, 0)
        except CorruptRecordError as e:
            raise CorruptRecordError(position + e.position, e.reason) from None
        if self.header.size_in_bytes != len(data):
            raise CorruptRecordError(
                position + LENGTH_OFFSET,
                f"batchLength says {self.header.size_in_bytes} bytes, buffer holds {len(data)}",
            )

    def compute_crc(self) -> int:
        return crc32c(memoryview(self.data)[ATTRIBUTES_OFFSET:])

    def is_valid(self) -> bool:
        return self.compute_crc() == self.header.crc

    def ensure_valid(self) -> None:
        """Raise CorruptRecordError if the stored CRC does not match the bytes."""
        actual = self.compute_crc()
        if actual != self.header.crc:
            raise InvalidCrcError(
                self.position + CRC_OFFSET,
                f"CRC-32C mismatch: stored {self.header.crc:#010x}, computed {actual:#010x}",
            )

    def records_bytes(self, max_bytes: int | None = None) -> bytes:
        """The (decompressed) records section; more than `max_bytes` of it (None: the readers'
        bound, `compression.DECOMPRESSED_MAX_BYTES`) raises DecompressedTooLargeError."""
        raw = memoryview(self.data)[HEADER_SIZE:]
        if not raw:
            return b""  # an empty batch (Kafka's `writeEmptyHeader`) has no codec stream at all
        return decompress(self.header.compression, raw, self.position + HEADER_SIZE, max_bytes)

    def records(self) -> list[Record]:
        """Decode every record (per-record API; the Arrow path is `arrow_codec`)."""
        return decode_records(self.header, self.records_bytes(), self.position + HEADER_SIZE)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def __repr__(self) -> str:
        h = self.header
        return (
            f"RecordBatch(offsets={h.base_offset}..{h.last_offset}, count={h.records_count}, "
            f"bytes={h.size_in_bytes}, {h.compression.name.lower()}, pid={h.producer_id})"
        )


def iter_batches(
    buf: bytes | bytearray | memoryview,
    start: int = 0,
    end: int | None = None,
    *,
    allow_partial_tail: bool = False,
) -> Iterator[RecordBatch]:
    """Yield each batch in `buf[start:end]`; shallow (headers checked, records not decoded).

    A trailing batch cut short raises CorruptRecordError, unless `allow_partial_tail` (a Fetch
    response may end in a partial batch that the consumer ignores, as Kafka's does).
    """
    view = memoryview(buf)
    end = len(view) if end is None else end
    pos = start
    while pos < end:
        size = batch_size_at(view[:end], pos)
        if size is None or pos + size > end:
            if allow_partial_tail:
                return
            have = end - pos
            raise CorruptRecordError(
                pos, f"truncated batch: {have} bytes left, batch needs {size or LOG_OVERHEAD}"
            )
        check_magic(view, pos, end)
        if size < HEADER_SIZE:
            raise CorruptRecordError(
                pos + LENGTH_OFFSET, f"batchLength {size - LOG_OVERHEAD} is smaller than the header"
            )
        yield RecordBatch(view[pos : pos + size], pos)
        pos += size
