"""CRC-32C (Castagnoli), the checksum of v2 batches."""

from __future__ import annotations

import zlib

import pytest

from sparklog.records.crc import crc32c


def test_kafka_vector() -> None:
    # Kafka's Crc32CTest
    assert crc32c(b"Some String") == 608512271


def test_standard_check_value() -> None:
    # The CRC catalogue's check value for CRC-32C (iSCSI): crc of "123456789".
    assert crc32c(b"123456789") == 0xE3069283


def test_empty_input_is_zero() -> None:
    assert crc32c(b"") == 0


def test_is_castagnoli_not_zlib_crc32() -> None:
    assert crc32c(b"Some String") != zlib.crc32(b"Some String")


def test_continues_from_a_previous_value() -> None:
    data = b"attributes..end of a record batch" * 10
    assert crc32c(data[17:], crc32c(data[:17])) == crc32c(data)


def test_accepts_bytes_like_inputs() -> None:
    data = b"Some String"
    assert crc32c(bytearray(data)) == 608512271
    assert crc32c(memoryview(b"xx" + data)[2:]) == 608512271


def test_result_is_unsigned_32_bit() -> None:
    for i in range(256):
        value = crc32c(bytes([i]) * 7)
        assert 0 <= value < 2**32


def test_the_native_core_and_the_package_agree() -> None:
    import random

    import crc32c as package

    from sparklog.records import native

    core = native.core()
    if core is None:
        pytest.skip("native core not built")
    rng = random.Random(7)
    for size in (0, 1, 7, 8, 63, 64, 1000, 65_537):
        data = rng.randbytes(size)
        seed = rng.getrandbits(32)
        assert core.crc32c(data, seed) == package.crc32c(data, seed)
        assert core.crc32c(memoryview(bytearray(data))[1:]) == package.crc32c(data[1:])
