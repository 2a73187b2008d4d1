"""Zigzag varints and varlongs (protobuf encoding, as Kafka's `ByteUtils`).

Scalar helpers for the per-record API; the Arrow paths use the vectorized versions in
`sparklog.records.arrow_codec`.
"""

from __future__ import annotations

from sparklog.records.errors import CorruptRecordError

_MAX_VARINT_BYTES = 5
_MAX_VARLONG_BYTES = 10
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def zigzag(value: int) -> int:
    """Map a signed 64-bit int onto an unsigned one so small magnitudes stay small."""
    return (value << 1) ^ (value >> 63)


def unzigzag(value: int) -> int:
    """Inverse of `zigzag`."""
    return (value >> 1) ^ -(value & 1)


def wrap_int64(value: int) -> int:
    """`value` modulo 2**64 as a signed int64: Java `long` arithmetic, for timestamp deltas."""
    return ((value - _INT64_MIN) & 0xFFFFFFFFFFFFFFFF) + _INT64_MIN


def encode_varint(value: int) -> bytes:
    """Zigzag varint bytes of a signed int (varint and varlong share the encoding).

    Raises ValueError outside int64: masking would silently encode a different number.
    """
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    return encode_unsigned_varint(zigzag(value) & 0xFFFFFFFFFFFFFFFF)


def encode_unsigned_varint(value: int) -> bytes:
    """Varint bytes of a non-negative int, without zigzag (the protocol's compact lengths)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def size_of_varint(value: int) -> int:
    """Number of bytes `encode_varint(value)` takes."""
    v = zigzag(value) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while v >= 0x80:
        v >>= 7
        size += 1
    return size


def decode_varint(buf: bytes | memoryview, pos: int, *, long: bool = False) -> tuple[int, int]:
    """Decode a zigzag varint at `pos`; returns (value, next position).

    Raises CorruptRecordError when the buffer ends mid-varint or the varint is longer than
    5 bytes (10 for a varlong), as Kafka's `ByteUtils.readVarint` does.
    """
    limit = _MAX_VARLONG_BYTES if long else _MAX_VARINT_BYTES
    result = 0
    shift = 0
    start = pos
    end = len(buf)
    while True:
        if pos >= end:
            raise CorruptRecordError(start, "buffer ends inside a varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if pos - start >= limit:
            raise CorruptRecordError(start, f"varint longer than {limit} bytes")
    if not long:
        result &= 0xFFFFFFFF
        value = unzigzag(result)
        return value, pos
    result &= 0xFFFFFFFFFFFFFFFF
    return unzigzag(result), pos
