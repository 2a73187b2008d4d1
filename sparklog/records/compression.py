"""Record batch compression codecs with Kafka's on-wire formats.

none, gzip (RFC 1952), snappy (xerial framing on write, xerial or raw on read, as Kafka's
`SnappyOutputStream`/librdkafka), lz4 (LZ4 frame format with independent 64 KiB blocks, which
`KafkaLZ4BlockInputStream` requires) and zstd. Snappy needs the optional `cramjam` package.
"""

from __future__ import annotations

import enum
import struct
import threading
import zlib

import lz4.frame as _lz4f
import zstandard as _zstd

from sparklog.records import native
from sparklog.records.errors import CorruptRecordError


class CompressionType(enum.IntEnum):
    """Attribute bits 0-2 of a v2 batch; names as Kafka's `compression.type` values."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        """Parse a `compression.type` setting ("none", "gzip", "snappy", "lz4", "zstd")."""
        try:
            return cls[name.strip().upper()]
        except KeyError:
            raise ValueError(
                f"unknown compression.type {name!r}: use one of none, gzip, snappy, lz4, zstd"
            ) from None


class SnappyNotInstalledError(RuntimeError):
    """snappy was asked for but the optional codec is missing."""

    def __init__(self) -> None:
        super().__init__(
            "snappy not installed: `pip install 'sparklog[snappy]'` (adds cramjam), "
            "or use compression.type lz4 or zstd"
        )


_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_BYTES = 32 * 1024
_ZSTD_LEVEL = 3
_GZIP_LEVEL = 6
_GZIP_WBITS = 31  # gzip container only, as Kafka's GZIPInputStream


class _ZstdContexts(threading.local):
    """One zstd (de)compression context per thread: python-zstandard contexts are not thread-safe."""

    def __init__(self) -> None:
        self.compressor = _zstd.ZstdCompressor(level=_ZSTD_LEVEL)
        self.decompressor = _zstd.ZstdDecompressor()


_zstd_contexts = _ZstdContexts()


def _snappy():
    try:
        import cramjam
    except ImportError:
        raise SnappyNotInstalledError() from None
    return cramjam.snappy


def compress(codec: CompressionType, data: bytes | memoryview) -> bytes:
    """Compress a batch's records section with `codec`."""
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        c = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == CompressionType.LZ4:
        return _lz4f.compress(
            data,
            block_size=_lz4f.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == CompressionType.ZSTD:
        return _zstd_contexts.compressor.compress(data)
    if codec == CompressionType.SNAPPY:
        snappy = _snappy()
        view = memoryview(data)
        parts = [_XERIAL_HEADER]
        for i in range(0, len(view), _XERIAL_BLOCK_BYTES):
            block = bytes(snappy.compress_raw(view[i : i + _XERIAL_BLOCK_BYTES]))
            parts.append(struct.pack(">i", len(block)))
            parts.append(block)
        return b"".join(parts)
    raise ValueError(f"unknown compression codec {codec!r}")


def decompress(codec: CompressionType, data: bytes | memoryview, position: int = 0) -> bytes:
    """Decompress a records section; bad input raises CorruptRecordError at `position`.

    A stream cut short or followed by stray bytes is an error, never a silently shorter result.
    """
    try:
        if codec == CompressionType.NONE:
            return bytes(data)
        if codec == CompressionType.GZIP:
            return _gzip_decompress(data)
        if codec == CompressionType.LZ4:
            return _lz4_decompress(data)
        if codec == CompressionType.ZSTD:
            return _zstd_decompress(data)
        if codec == CompressionType.SNAPPY:
            return _snappy_decompress(bytes(data))
    except SnappyNotInstalledError:
        raise
    except CorruptRecordError as e:
        raise CorruptRecordError(position + e.position, e.reason) from None
    except Exception as e:  # the codecs raise their own error types for bad input
        raise CorruptRecordError(position, f"cannot decompress {codec.name.lower()}: {e}") from e
    raise CorruptRecordError(position, f"unknown compression codec id {int(codec)}")


def _gzip_decompress(data: bytes | memoryview) -> bytes:
    # Concatenated gzip members are one stream, as Java's GZIPInputStream reads them.
    out = []
    rest = bytes(data)
    while True:
        d = zlib.decompressobj(_GZIP_WBITS)
        out.append(d.decompress(rest))
        if not d.eof:
            raise CorruptRecordError(0, "gzip stream ends before its trailer")
        rest = d.unused_data
        if not rest:
            return b"".join(out)


def _lz4_decompress(data: bytes | memoryview) -> bytes:
    # One frame, as Kafka's Lz4BlockInputStream reads; anything after its end mark is rejected.
    # The native core decodes what producers write in one call; anything it does not accept
    # (None) goes through liblz4 below, which decodes it or names the error.
    core = native.core()
    if core is not None:
        out = core.lz4_frame_decompress(data)
        if out is not None:
            return out
    d = _lz4f.LZ4FrameDecompressor()
    out = d.decompress(bytes(data))
    if not d.eof:
        raise CorruptRecordError(0, "lz4 frame ends before its end mark")
    if d.unused_data:
        raise CorruptRecordError(0, f"{len(d.unused_data)} stray bytes after the lz4 frame")
    return out


def _zstd_decompress(data: bytes | memoryview) -> bytes:
    # Frame by frame: frames without a content size decode, concatenated frames are one stream
    # (as zstd-jni's ZstdInputStream reads them), and a cut-off frame is an error.
    out = []
    rest = bytes(data)
    while True:
        d = _zstd_contexts.decompressor.decompressobj()
        out.append(d.decompress(rest))
        if not d.eof:
            raise CorruptRecordError(0, "zstd frame ends before its last block")
        rest = d.unused_data
        if not rest:
            return b"".join(out)


def _snappy_decompress(data: bytes) -> bytes:
    snappy = _snappy()
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(snappy.decompress_raw(data))
    if len(data) < len(_XERIAL_HEADER):
        raise CorruptRecordError(0, "snappy (xerial) header truncated")
    pos = len(_XERIAL_HEADER)
    out = []
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError(pos, "snappy (xerial) block length truncated")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CorruptRecordError(pos, f"snappy (xerial) block of {size} bytes overruns input")
        out.append(bytes(snappy.decompress_raw(data[pos : pos + size])))
        pos += size
    return b"".join(out)
