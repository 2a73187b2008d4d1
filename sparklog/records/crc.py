"""CRC-32C (Castagnoli) as Kafka's v2 batches use it, via the hardware-accelerated `crc32c` package."""

from __future__ import annotations

import crc32c as _crc32c


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32C of `data` (continuing from `value`), as an unsigned 32-bit int."""
    return _crc32c.crc32c(data, value)
