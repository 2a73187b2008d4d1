"""Records appended one at a time into one batch (Kafka's `MemoryRecordsBuilder`).

The producer's `send()` appends each record to its partition's open builder, so a batch keeps
one growing records section instead of a Python object per record; the sender then seals it
into a v2 batch with one call. `new_records_builder()` gives the native core's builder when it
is built; `RecordsBuilder` here is the pure-Python reference with the same methods and bytes.
"""

from __future__ import annotations

from typing import Any

from sparklog.records import native
from sparklog.records.batch_header import attributes_for
from sparklog.records.builder import assemble_batch
from sparklog.records.compression import CompressionType
from sparklog.records.record import encode_record
from sparklog.records.varint import wrap_int64


class RecordsBuilder:
    """The reference builder: each record encoded as it is appended (offset delta = its
    index, timestamp delta from the first record's timestamp)."""

    __slots__ = ("_parts", "_timestamps", "_max_timestamp")

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._timestamps: list[int] = []
        self._max_timestamp = 0

    def append(
        self, timestamp: int, key: bytes | None, value: bytes | None, headers: tuple
    ) -> None:
        base = self._timestamps[0] if self._timestamps else timestamp
        self._parts.append(
            encode_record(len(self._timestamps), wrap_int64(timestamp - base), key, value, headers)
        )
        self._max_timestamp = max(self._max_timestamp, timestamp) if self._timestamps else timestamp
        self._timestamps.append(timestamp)

    @property
    def count(self) -> int:
        return len(self._timestamps)

    @property
    def base_timestamp(self) -> int | None:
        return self._timestamps[0] if self._timestamps else None

    @property
    def max_timestamp(self) -> int | None:
        return self._max_timestamp if self._timestamps else None

    def timestamps(self) -> list[int]:
        return list(self._timestamps)

    def section(self) -> bytes:
        return b"".join(self._parts)


def new_records_builder() -> Any:
    """The native builder when the core is built, else the reference one."""
    core = native.core()
    return RecordsBuilder() if core is None else core.RecordsBuilder()


def seal_records(
    builder: Any,
    compression: CompressionType,
    *,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    is_transactional: bool,
) -> bytes:
    """The builder's records as one v2 batch (base offset 0); native in one call for the
    codecs it writes (none, lz4), else through `assemble_batch`."""
    attributes = attributes_for(compression, is_transactional=is_transactional)
    if type(builder) is not RecordsBuilder and compression in _NATIVE_CODECS:
        return builder.build(
            attributes,
            producer_id,
            producer_epoch,
            base_sequence,
            compression == CompressionType.LZ4,
        )
    count = builder.count
    if count == 0:
        raise ValueError("a record batch needs at least one record")
    return assemble_batch(
        builder.section(),
        records_count=count,
        last_offset_delta=count - 1,
        base_offset=0,
        base_timestamp=builder.base_timestamp,
        max_timestamp=builder.max_timestamp,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
    )


_NATIVE_CODECS = (CompressionType.NONE, CompressionType.LZ4)
