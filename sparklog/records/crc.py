"""CRC-32C (Castagnoli) as Kafka's v2 batches use it: the native core's (hardware instructions
through the `crc32c` crate) when it is loaded, else the hardware-accelerated `crc32c` package.

The package is imported only without the native core: its import scans every distribution on
`sys.path` for its version, which in a Spark worker (pyspark.zip on the path) is a noticeable
part of the first read or write.
"""

from __future__ import annotations

from collections.abc import Callable

from sparklog.records import native


def _implementation() -> Callable[[bytes | bytearray | memoryview, int], int]:
    core = native.core()
    if core is not None:
        return core.crc32c
    import crc32c as package

    return package.crc32c


_crc32c = _implementation()


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32C of `data` (continuing from `value`), as an unsigned 32-bit int."""
    return _crc32c(data, value)
