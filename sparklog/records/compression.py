"""Record batch compression codecs with Kafka's on-wire formats.

none, gzip (RFC 1952), snappy (xerial framing on write, xerial or raw on read, as Kafka's
`SnappyOutputStream`/librdkafka), lz4 (LZ4 frame format with independent 64 KiB blocks, which
`KafkaLZ4BlockInputStream` requires) and zstd. Snappy needs the optional `cramjam` package.

Decompression is bounded: a few KB of zstd can unpack to gigabytes (a compression bomb), and
`max.message.bytes` bounds only the compressed size. Every codec streams its output and stops
as soon as it would pass `max_bytes`, raising `DecompressedTooLargeError` (RECORD_TOO_LARGE),
so memory never holds more than the bound (plus one codec step). The default bound,
`DECOMPRESSED_MAX_BYTES`, is the most any Kafka client could hold anyway; a broker validating
a Produce passes its tighter `sparklog.batch.decompressed.max.bytes`.
"""

from __future__ import annotations

import enum
import struct
import threading
import zlib

import lz4.frame as _lz4f
import zstandard as _zstd

from sparklog.records import native
from sparklog.records.errors import CorruptRecordError, DecompressedTooLargeError


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

#: The bound on one records section's decompressed bytes when the caller gives none (readers:
#: consumers, the cleaner, ListOffsets). 2 GiB - 1 is the largest byte array Java has (no
#: Kafka client could read a larger section) and the most an Arrow binary column with int32
#: offsets holds; it matches the native core's `READ_MAX_BYTES`.
DECOMPRESSED_MAX_BYTES = 2**31 - 1
#: zstd emits at most one 128 KiB block per 4 input bytes (a 3-byte block header and an RLE
#: byte), so input is fed in slices whose worst output stays near the room left.
_ZSTD_BLOCK_BYTES = 128 * 1024
_ZSTD_WORST_RATIO = _ZSTD_BLOCK_BYTES // 4
_ZSTD_SLICE_MIN = 64
#: Output per zlib or liblz4 step: small enough to stop a bomb near the bound.
_STEP_BYTES = 4 << 20


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


def decompress(
    codec: CompressionType,
    data: bytes | memoryview,
    position: int = 0,
    max_bytes: int | None = None,
) -> bytes:
    """Decompress a records section; bad input raises CorruptRecordError at `position`, a
    section unpacking to more than `max_bytes` (None: `DECOMPRESSED_MAX_BYTES`) raises
    DecompressedTooLargeError (having held at most about `max_bytes`).

    A stream cut short or followed by stray bytes is an error, never a silently shorter result.
    """
    max_bytes = max(reader_max_bytes() if max_bytes is None else max_bytes, 0)  # zlib: 0 = no limit
    try:
        if codec == CompressionType.NONE:
            return bytes(data)
        if codec == CompressionType.GZIP:
            return _gzip_decompress(data, max_bytes)
        if codec == CompressionType.LZ4:
            return _lz4_decompress(data, max_bytes)
        if codec == CompressionType.ZSTD:
            return _zstd_decompress(data, max_bytes)
        if codec == CompressionType.SNAPPY:
            return _snappy_decompress(bytes(data), max_bytes)
    except SnappyNotInstalledError:
        raise
    except _TooLarge:
        raise DecompressedTooLargeError(position, codec.name.lower(), max_bytes) from None
    except CorruptRecordError as e:
        raise CorruptRecordError(position + e.position, e.reason) from None
    except Exception as e:  # the codecs raise their own error types for bad input
        raise CorruptRecordError(position, f"cannot decompress {codec.name.lower()}: {e}") from e
    raise CorruptRecordError(position, f"unknown compression codec id {int(codec)}")


def reader_max_bytes() -> int:
    """The bound of readers that give none (read when called, so a test may lower it)."""
    return DECOMPRESSED_MAX_BYTES


class _TooLarge(Exception):
    """Inside this module: the output passed the bound (`decompress` names codec and place)."""


def _gzip_decompress(data: bytes | memoryview, max_bytes: int) -> bytes:
    # Concatenated gzip members are one stream, as Java's GZIPInputStream reads them. zlib
    # stops at max_length: steps of at most _STEP_BYTES, so a bomb is refused holding the
    # bound plus one step (one call up to the bound would hold it twice, its buffer and the
    # bytes made from it).
    out = []
    held = 0
    rest = data
    while True:
        d = zlib.decompressobj(_GZIP_WBITS)
        piece = d.decompress(rest, min(max_bytes - held + 1, _STEP_BYTES))
        while True:
            held += len(piece)
            if held > max_bytes:
                raise _TooLarge()
            out.append(piece)
            if d.eof or not (piece or d.unconsumed_tail):
                break
            piece = d.decompress(d.unconsumed_tail, min(max_bytes - held + 1, _STEP_BYTES))
        if not d.eof:  # no output and no input left
            raise CorruptRecordError(0, "gzip stream ends before its trailer")
        rest = d.unused_data
        if not rest:
            return out[0] if len(out) == 1 else b"".join(out)


def _lz4_decompress(data: bytes | memoryview, max_bytes: int) -> bytes:
    # One frame, as Kafka's Lz4BlockInputStream reads; anything after its end mark is rejected.
    # The native core decodes what producers write in one call; anything it does not accept
    # (None: other frame options, or more than max_bytes) goes through liblz4 below, which
    # decodes it or names the error.
    core = native.core()
    if core is not None:
        out = core.lz4_frame_decompress(data, max_bytes)
        if out is not None:
            return out
    d = _lz4f.LZ4FrameDecompressor()
    step = max(64 * 1024, 8 * len(data))
    pieces = []
    held = 0
    piece = d.decompress(bytes(data), max_length=min(max_bytes - held + 1, step))
    while True:
        held += len(piece)
        if held > max_bytes:
            raise _TooLarge()
        pieces.append(piece)
        if d.eof or d.needs_input:
            break
        piece = d.decompress(b"", max_length=min(max_bytes - held + 1, _STEP_BYTES))
    if not d.eof:
        raise CorruptRecordError(0, "lz4 frame ends before its end mark")
    if d.unused_data:
        raise CorruptRecordError(0, f"{len(d.unused_data)} stray bytes after the lz4 frame")
    return b"".join(pieces)


def _zstd_decompress(data: bytes | memoryview, max_bytes: int) -> bytes:
    # Frame by frame: frames without a content size decode, concatenated frames are one stream
    # (as zstd-jni's ZstdInputStream reads them), and a cut-off frame is an error. A frame that
    # declares its content size (librdkafka's and ours do) is decoded in one call when that
    # fits the room left: libzstd sizes its buffer by it and fails a frame that writes more.
    # Others (zstd-jni's streams) go in slices whose worst output (_ZSTD_WORST_RATIO) fits the
    # room left, so a bomb is stopped within one slice of the bound.
    out = []
    held = 0
    view = memoryview(data).cast("B")
    at = 0
    while True:
        d = _zstd_contexts.decompressor.decompressobj()
        declared = _zstd_content_size(view[at:])
        if declared > max_bytes - held:
            raise _TooLarge()
        while not d.eof and at < len(view):
            room = max_bytes - held
            step = (
                len(view) - at if declared >= 0 else max(_ZSTD_SLICE_MIN, room // _ZSTD_WORST_RATIO)
            )
            piece = d.decompress(view[at : at + step])
            at += step
            held += len(piece)
            if held > max_bytes:
                raise _TooLarge()
            out.append(piece)
        if not d.eof:
            raise CorruptRecordError(0, "zstd frame ends before its last block")
        at = min(at, len(view)) - len(d.unused_data)
        if at == len(view):
            return out[0] if len(out) == 1 else b"".join(out)


def _zstd_content_size(frame: memoryview) -> int:
    """The content size a zstd frame's header declares, -1 when it has none (or no header:
    the decoder then names the error)."""
    try:
        return _zstd.frame_content_size(frame)
    except _zstd.ZstdError:
        return -1


def _snappy_decompress(data: bytes, max_bytes: int) -> bytes:
    # Each raw snappy block starts with its decompressed length: checked before unpacking.
    snappy = _snappy()
    if not data.startswith(_XERIAL_MAGIC):
        if snappy.decompress_raw_len(data) > max_bytes:
            raise _TooLarge()
        return bytes(snappy.decompress_raw(data))
    if len(data) < len(_XERIAL_HEADER):
        raise CorruptRecordError(0, "snappy (xerial) header truncated")
    pos = len(_XERIAL_HEADER)
    out = []
    held = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError(pos, "snappy (xerial) block length truncated")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CorruptRecordError(pos, f"snappy (xerial) block of {size} bytes overruns input")
        block = data[pos : pos + size]
        held += snappy.decompress_raw_len(block)
        if held > max_bytes:
            raise _TooLarge()
        out.append(bytes(snappy.decompress_raw(block)))
        pos += size
    return b"".join(out)
