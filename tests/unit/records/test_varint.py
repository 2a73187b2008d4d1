"""Zigzag varints/varlongs against Kafka's published vectors (`ByteUtilsTest`)."""

from __future__ import annotations

import pytest

from sparklog.records.errors import CorruptRecordError
from sparklog.records.varint import (
    decode_varint,
    encode_varint,
    size_of_varint,
    unzigzag,
    wrap_int64,
    zigzag,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# ByteUtilsTest.testVarintSerde
VARINT_VECTORS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (8191, "fe7f"),
    (-8192, "ff7f"),
    (8192, "808001"),
    (-8193, "818001"),
    (1048575, "feff7f"),
    (-1048576, "ffff7f"),
    (1048576, "80808001"),
    (-1048577, "81808001"),
    (134217727, "feffff7f"),
    (-134217728, "ffffff7f"),
    (134217728, "8080808001"),
    (-134217729, "8180808001"),
    (INT32_MAX, "feffffff0f"),
    (INT32_MIN, "ffffffff0f"),
]

# ByteUtilsTest.testVarlongSerde, beyond the int32 range
VARLONG_VECTORS = [
    (17179869183, "feffffff7f"),
    (-17179869184, "ffffffff7f"),
    (17179869184, "808080808001"),
    (-17179869185, "818080808001"),
    (2199023255551, "feffffffff7f"),
    (-2199023255552, "ffffffffff7f"),
    (2199023255552, "80808080808001"),
    (-2199023255553, "81808080808001"),
    (281474976710655, "feffffffffff7f"),
    (-281474976710656, "ffffffffffff7f"),
    (281474976710656, "8080808080808001"),
    (-281474976710657, "8180808080808001"),
    (36028797018963967, "feffffffffffff7f"),
    (-36028797018963968, "ffffffffffffff7f"),
    (36028797018963968, "808080808080808001"),
    (-36028797018963969, "818080808080808001"),
    (4611686018427387903, "feffffffffffffff7f"),
    (-4611686018427387904, "ffffffffffffffff7f"),
    (4611686018427387904, "80808080808080808001"),
    (-4611686018427387905, "81808080808080808001"),
    (INT64_MAX, "feffffffffffffffff01"),
    (INT64_MIN, "ffffffffffffffffff01"),
]


@pytest.mark.parametrize(("value", "hex_bytes"), VARINT_VECTORS)
def test_varint_matches_kafka_vectors(value: int, hex_bytes: str) -> None:
    raw = bytes.fromhex(hex_bytes)
    assert encode_varint(value) == raw
    assert size_of_varint(value) == len(raw)
    assert decode_varint(raw, 0) == (value, len(raw))
    assert decode_varint(raw, 0, long=True) == (value, len(raw))


@pytest.mark.parametrize(("value", "hex_bytes"), VARLONG_VECTORS)
def test_varlong_matches_kafka_vectors(value: int, hex_bytes: str) -> None:
    raw = bytes.fromhex(hex_bytes)
    assert encode_varint(value) == raw
    assert size_of_varint(value) == len(raw)
    assert decode_varint(raw, 0, long=True) == (value, len(raw))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0),
        (-1, 1),
        (1, 2),
        (-2, 3),
        (INT32_MAX, 2**32 - 2),
        (INT32_MIN, 2**32 - 1),
        (INT64_MAX, 2**64 - 2),
        (INT64_MIN, 2**64 - 1),
    ],
)
def test_zigzag_edges(value: int, expected: int) -> None:
    assert zigzag(value) & 0xFFFFFFFFFFFFFFFF == expected
    assert unzigzag(expected) == value


def test_decode_reads_from_the_given_position_and_stops_after_the_varint() -> None:
    buf = b"\xaa\xbb" + bytes.fromhex("8180808001") + b"\x7e"
    value, pos = decode_varint(buf, 2)
    assert (value, pos) == (-134217729, 7)
    assert decode_varint(buf, pos) == (63, 8)


def test_decode_accepts_memoryview_and_bytearray() -> None:
    raw = bytes.fromhex("feffffff0f")
    assert decode_varint(memoryview(raw), 0) == (INT32_MAX, 5)
    assert decode_varint(bytearray(raw), 0) == (INT32_MAX, 5)


def test_varint_of_six_bytes_is_corrupt() -> None:
    # ByteUtilsTest.testInvalidVarint: one overflow byte
    buf = b"\x00\x00" + bytes.fromhex("ffffffffff01")
    with pytest.raises(CorruptRecordError) as info:
        decode_varint(buf, 2)
    assert info.value.position == 2
    assert "longer than 5 bytes" in info.value.reason
    assert "byte 2" in str(info.value)


def test_varlong_of_eleven_bytes_is_corrupt() -> None:
    # ByteUtilsTest.testInvalidVarlong
    buf = bytes.fromhex("ffffffffffffffffffff01")
    with pytest.raises(CorruptRecordError) as info:
        decode_varint(buf, 0, long=True)
    assert info.value.position == 0
    assert "longer than 10 bytes" in info.value.reason


def test_a_ten_byte_varlong_is_not_a_valid_varint() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 5 bytes"):
        decode_varint(bytes.fromhex("ffffffffffffffffff01"), 0)


def test_five_byte_varint_keeps_the_low_32_bits_like_java() -> None:
    # Java's readVarint shifts the fifth byte into an int: bits above 32 fall off.
    assert decode_varint(bytes.fromhex("feffffff7f"), 0) == (INT32_MAX, 5)


@pytest.mark.parametrize("raw", [b"", b"\x80", b"\xff\xff", b"\x80\x80\x80\x80"])
def test_buffer_ending_inside_a_varint_is_corrupt(raw: bytes) -> None:
    buf = b"\x01" + raw
    with pytest.raises(CorruptRecordError) as info:
        decode_varint(buf, 1)
    assert info.value.position == 1
    assert "ends inside a varint" in info.value.reason


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1, 2**70])
def test_encoding_outside_int64_is_refused_not_masked(value: int) -> None:
    with pytest.raises(ValueError, match="int64"):
        encode_varint(value)


@pytest.mark.parametrize(
    ("value", "wrapped"),
    [
        (0, 0),
        (-5, -5),
        (INT64_MAX, INT64_MAX),
        (INT64_MAX + 1, INT64_MIN),
        (INT64_MIN - 1, INT64_MAX),
        (2**64 + 3, 3),
    ],
)
def test_wrap_int64_is_java_long_arithmetic(value: int, wrapped: int) -> None:
    assert wrap_int64(value) == wrapped
