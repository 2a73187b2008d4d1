"""One record of a v2 batch, per-record encode/decode (Kafka's `DefaultRecord`).

Record layout: length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
keyLength varint | key | valueLength varint | value | headerCount varint | headers, each
headerKeyLength varint | key (UTF-8) | headerValueLength varint | value. Length -1 means null.

This is the simple API for clients and tests; the hot paths use `arrow_codec`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparklog.records.batch_header import BatchHeader, TimestampType
from sparklog.records.compression import CompressionType
from sparklog.records.errors import CorruptRecordError
from sparklog.records.varint import decode_varint, encode_varint, wrap_int64

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class Record:
    """A decoded record with its absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp_type: TimestampType = TimestampType.CREATE_TIME


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Headers | list = (),
) -> bytes:
    """Bytes of one record, its length prefix included."""
    body = bytearray(b"\x00")
    body += encode_varint(timestamp_delta)
    body += encode_varint(offset_delta)
    if key is None:
        body += encode_varint(-1)
    else:
        body += encode_varint(len(key))
        body += key
    if value is None:
        body += encode_varint(-1)
    else:
        body += encode_varint(len(value))
        body += value
    body += encode_varint(len(headers))
    for h_key, h_value in headers:
        raw_key = h_key.encode("utf-8")
        body += encode_varint(len(raw_key))
        body += raw_key
        if h_value is None:
            body += encode_varint(-1)
        else:
            body += encode_varint(len(h_value))
            body += h_value
    return encode_varint(len(body)) + bytes(body)


def _read_bytes(buf: bytes, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    at = pos
    length, pos = decode_varint(buf, pos)
    if length < 0:
        if length != -1:
            raise CorruptRecordError(at, f"{what} length {length} is negative")
        return None, pos
    if pos + length > end:
        raise CorruptRecordError(at, f"{what} of {length} bytes overruns its record")
    return bytes(buf[pos : pos + length]), pos + length


def decode_records(header: BatchHeader, data: bytes, position: int = 0) -> list[Record]:
    """Decode all records of a (decompressed) records section.

    Checks what Kafka's `DefaultRecord.readFrom` checks: every record's declared length matches
    what its fields use, the count matches `recordsCount`, and no bytes are left over.
    `position` is where the records section starts in the original buffer: errors name the
    absolute byte, or for a compressed batch the section and the byte within its decompressed form.
    """
    try:
        return _decode_records(header, data)
    except CorruptRecordError as e:
        if header.compression == CompressionType.NONE:
            raise CorruptRecordError(position + e.position, e.reason) from None
        raise CorruptRecordError(
            position, f"{e.reason} (byte {e.position} of the decompressed records)"
        ) from None


def _decode_records(header: BatchHeader, data: bytes) -> list[Record]:
    """`decode_records` with error positions relative to `data`."""
    log_append = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    ts_type = header.timestamp_type
    records: list[Record] = []
    pos = 0
    n = len(data)
    for index in range(header.records_count):
        start = pos
        if pos >= n:
            raise CorruptRecordError(
                pos, f"records end after {index} of the {header.records_count} the header declares"
            )
        size, pos = decode_varint(data, pos)
        body = pos
        end = pos + size
        if size < 0 or end > n:
            raise CorruptRecordError(start, f"record length {size} overruns the batch")
        if pos >= end:
            raise CorruptRecordError(start, "record shorter than its attributes")
        pos += 1  # attributes: unused in v2
        ts_delta, pos = decode_varint(data, pos, long=True)
        offset_delta, pos = decode_varint(data, pos)
        key, pos = _read_bytes(data, pos, end, "key")
        value, pos = _read_bytes(data, pos, end, "value")
        at = pos
        count, pos = decode_varint(data, pos)
        if count < 0:
            raise CorruptRecordError(at, f"negative header count {count}")
        headers = []
        for _h in range(count):
            at = pos
            raw_key, pos = _read_bytes(data, pos, end, "header key")
            if raw_key is None:
                raise CorruptRecordError(at, "null header key")
            h_value, pos = _read_bytes(data, pos, end, "header value")
            # Like Java's `new String(bytes, UTF_8)`, malformed UTF-8 becomes U+FFFD.
            headers.append((raw_key.decode("utf-8", errors="replace"), h_value))
        if pos != end:
            raise CorruptRecordError(
                start, f"record length says {size} bytes but its fields use {pos - body}"
            )
        # Java long arithmetic: a delta written with wrap-around reads back the same way.
        timestamp = (
            header.max_timestamp if log_append else wrap_int64(header.base_timestamp + ts_delta)
        )
        records.append(
            Record(
                header.base_offset + offset_delta, timestamp, key, value, tuple(headers), ts_type
            )
        )
    if pos != n:
        raise CorruptRecordError(
            pos,
            f"{n - pos} bytes left after the {header.records_count} records the header declares",
        )
    return records
