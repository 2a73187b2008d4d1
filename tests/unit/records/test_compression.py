"""Record-section codecs: round trips, Kafka's wire formats, and bad input."""

from __future__ import annotations

import gzip
import io
import os
import struct
import sys
import threading
import tracemalloc
import zlib

import cramjam
import lz4.block
import lz4.frame
import pytest
import zstandard

from sparklog.errors import MessageTooLargeError
from sparklog.records import native
from sparklog.records.batch import RecordBatch
from sparklog.records.builder import SimpleRecord, build_batch
from sparklog.records.compression import (
    CompressionType,
    SnappyNotInstalledError,
    compress,
    decompress,
)
from sparklog.records.errors import CorruptRecordError, DecompressedTooLargeError

ALL_CODECS = list(CompressionType)
COMPRESSING = [c for c in CompressionType if c != CompressionType.NONE]

SAMPLES = {
    "empty": b"",
    "one byte": b"\x00",
    "text": b"the quick brown fox jumps over the lazy dog " * 50,
    "random": os.urandom(3000),
    # crosses lz4's 64 KiB block and snappy's 32 KiB xerial block boundaries
    "large mixed": (os.urandom(20_000) + b"a" * 100_000) * 2 + os.urandom(7),
}


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("name", list(SAMPLES))
def test_round_trip(codec: CompressionType, name: str) -> None:
    data = SAMPLES[name]
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name)
def test_accepts_memoryview(codec: CompressionType) -> None:
    data = SAMPLES["text"]
    packed = compress(codec, memoryview(data))
    assert decompress(codec, memoryview(packed)) == data


def test_compressing_codecs_shrink_repetitive_data() -> None:
    data = SAMPLES["text"]
    for codec in COMPRESSING:
        assert len(compress(codec, data)) < len(data) // 4, codec


@pytest.mark.parametrize(
    ("name", "codec"),
    [
        ("none", CompressionType.NONE),
        ("gzip", CompressionType.GZIP),
        ("snappy", CompressionType.SNAPPY),
        ("lz4", CompressionType.LZ4),
        ("zstd", CompressionType.ZSTD),
        (" ZSTD ", CompressionType.ZSTD),
    ],
)
def test_from_name(name: str, codec: CompressionType) -> None:
    assert CompressionType.from_name(name) is codec


def test_from_name_rejects_unknown_and_lists_the_choices() -> None:
    with pytest.raises(ValueError, match="none, gzip, snappy, lz4, zstd"):
        CompressionType.from_name("brotli")


def test_attribute_ids_are_kafkas() -> None:
    assert [int(c) for c in CompressionType] == [0, 1, 2, 3, 4]


# --- gzip -------------------------------------------------------------------------------


def test_gzip_is_rfc1952() -> None:
    packed = compress(CompressionType.GZIP, SAMPLES["text"])
    assert packed[:3] == b"\x1f\x8b\x08"
    assert gzip.decompress(packed) == SAMPLES["text"]


def test_gzip_reads_concatenated_members_like_javas_gzipinputstream() -> None:
    packed = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decompress(CompressionType.GZIP, packed) == b"first second"


def test_gzip_from_other_writers_decodes() -> None:
    # e.g. Python's gzip module with a file name and mtime in the header
    buf = io.BytesIO()
    with gzip.GzipFile(filename="records", mode="wb", fileobj=buf, mtime=1234) as f:
        f.write(SAMPLES["random"])
    assert decompress(CompressionType.GZIP, buf.getvalue()) == SAMPLES["random"]


# --- lz4 --------------------------------------------------------------------------------


def _lz4_blocks(frame: bytes) -> tuple[bytes, list[tuple[bool, bytes]], bytes]:
    """Split an LZ4 frame into (descriptor, [(compressed?, block)], rest after the end mark)."""
    assert frame[:4] == b"\x04\x22\x4d\x18"  # magic 0x184D2204, little-endian
    descriptor = frame[4:7]
    pos = 7
    blocks = []
    while True:
        (size,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if size == 0:
            return descriptor, blocks, frame[pos:]
        compressed = not size & 0x80000000
        size &= 0x7FFFFFFF
        blocks.append((compressed, frame[pos : pos + size]))
        pos += size


def test_lz4_frame_descriptor_is_what_kafkas_lz4blockinputstream_reads() -> None:
    frame = compress(CompressionType.LZ4, SAMPLES["large mixed"])
    flg, bd, hc = frame[4:7]
    assert flg >> 6 == 0b01, "version 01"
    assert flg & 0x20, "block independence (Kafka refuses linked blocks)"
    assert not flg & 0x10, "no block checksum"
    assert not flg & 0x08, "no content size"
    assert not flg & 0x04, "no content checksum"
    assert flg & 0x03 == 0, "reserved bits"
    assert (bd >> 4) & 0x07 == 4, "64 KiB maximum block size"
    assert bd & 0x8F == 0, "BD reserved bits"
    # HC = second byte of xxh32(FLG, BD): 0x82 for (0x60, 0x40), the header Kafka's own
    # Lz4BlockOutputStream writes.
    assert frame[4:7] == b"\x60\x40\x82"
    assert hc == 0x82


def test_lz4_blocks_are_independent_and_at_most_64_kib() -> None:
    data = SAMPLES["large mixed"]
    _descriptor, blocks, rest = _lz4_blocks(compress(CompressionType.LZ4, data))
    assert rest == b"", "no content checksum after the end mark"
    assert len(blocks) >= 4
    out = []
    for compressed, block in blocks:
        assert len(block) <= 64 * 1024
        # Each block decodes alone, without the previous blocks as dictionary.
        out.append(
            lz4.block.decompress(block, uncompressed_size=64 * 1024) if compressed else block
        )
        assert len(out[-1]) <= 64 * 1024
    assert b"".join(out) == data


# --- zstd -------------------------------------------------------------------------------


def test_zstd_frames_without_content_size_decode() -> None:
    data = SAMPLES["large mixed"]
    buf = io.BytesIO()
    with zstandard.ZstdCompressor(level=1).stream_writer(buf, closefd=False) as writer:
        writer.write(data[:50_000])
        writer.write(data[50_000:])
    frame = buf.getvalue()
    assert zstandard.frame_content_size(frame) == -1  # unknown: streaming compressors omit it
    assert decompress(CompressionType.ZSTD, frame) == data


def test_zstd_concatenated_frames_are_one_stream() -> None:
    c = zstandard.ZstdCompressor()
    assert decompress(CompressionType.ZSTD, c.compress(b"ab") + c.compress(b"cd")) == b"abcd"


def test_zstd_contexts_are_safe_across_threads() -> None:
    payloads = [os.urandom(500) + bytes([i]) * 20_000 for i in range(4)]
    failures: list[str] = []

    def work(data: bytes) -> None:
        for _ in range(30):
            if decompress(CompressionType.ZSTD, compress(CompressionType.ZSTD, data)) != data:
                failures.append("mismatch")

    threads = [threading.Thread(target=work, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


# --- snappy -----------------------------------------------------------------------------


def test_snappy_writes_xerial_framing_in_32_kib_blocks() -> None:
    data = SAMPLES["large mixed"]
    packed = compress(CompressionType.SNAPPY, data)
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, out = 16, []
    while pos < len(packed):
        (size,) = struct.unpack_from(">i", packed, pos)
        block = bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + size]))
        assert len(block) <= 32 * 1024
        out.append(block)
        pos += 4 + size
    assert b"".join(out) == data


def test_snappy_reads_raw_blocks_as_librdkafka_writes_them() -> None:
    data = SAMPLES["text"]
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(CompressionType.SNAPPY, raw) == data


@pytest.fixture
def no_cramjam(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cramjam", None)  # `import cramjam` now fails


@pytest.mark.usefixtures("no_cramjam")
def test_snappy_without_cramjam_says_so_on_compress() -> None:
    with pytest.raises(SnappyNotInstalledError, match="snappy not installed") as info:
        compress(CompressionType.SNAPPY, b"data")
    assert "pip install 'sparklog[snappy]'" in str(info.value)


def test_snappy_without_cramjam_says_so_on_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = build_batch([SimpleRecord(b"v")], compression=CompressionType.SNAPPY)
    monkeypatch.setitem(sys.modules, "cramjam", None)
    with pytest.raises(SnappyNotInstalledError, match="snappy not installed"):
        RecordBatch(batch).records()
    with pytest.raises(SnappyNotInstalledError, match="snappy not installed"):
        build_batch([SimpleRecord(b"v")], compression=CompressionType.SNAPPY)


@pytest.mark.usefixtures("no_cramjam")
def test_other_codecs_work_without_cramjam() -> None:
    for codec in (CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4):
        assert decompress(codec, compress(codec, b"abc" * 100)) == b"abc" * 100
    assert decompress(CompressionType.ZSTD, compress(CompressionType.ZSTD, b"x")) == b"x"


# --- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize("codec", COMPRESSING, ids=lambda c: c.name)
def test_every_truncation_is_corrupt_never_a_shorter_result(codec: CompressionType) -> None:
    data = SAMPLES["text"] + os.urandom(200)
    packed = compress(codec, data)
    for cut in range(len(packed)):
        try:
            out = decompress(codec, packed[:cut], position=61)
        except CorruptRecordError as e:
            assert e.position >= 61
            continue
        # Only a cut on a snappy (xerial) block boundary is still a well-formed stream.
        assert codec == CompressionType.SNAPPY, (codec, cut)
        assert data.startswith(out)


@pytest.mark.parametrize(
    ("codec", "reason"),
    [
        (CompressionType.GZIP, "gzip"),
        (CompressionType.LZ4, "lz4"),
        (CompressionType.ZSTD, "zstd"),
    ],
)
def test_stray_bytes_after_the_stream_are_corrupt(codec: CompressionType, reason: str) -> None:
    packed = compress(codec, SAMPLES["text"]) + b"\x00junk"
    with pytest.raises(CorruptRecordError, match=reason) as info:
        decompress(codec, packed, position=100)
    assert info.value.position >= 100


@pytest.mark.parametrize("codec", COMPRESSING, ids=lambda c: c.name)
def test_garbage_is_corrupt_and_names_the_codec(codec: CompressionType) -> None:
    with pytest.raises(CorruptRecordError) as info:
        decompress(codec, b"\x82SNAPPY\x00garbage that is not compressed" * 3, position=61)
    assert info.value.position >= 61
    assert codec.name.lower() in info.value.reason


def test_snappy_xerial_block_overrunning_the_input_is_corrupt() -> None:
    packed = compress(CompressionType.SNAPPY, SAMPLES["text"])
    bad = packed[:16] + struct.pack(">i", 10_000) + packed[20:]
    with pytest.raises(CorruptRecordError, match="overruns") as info:
        decompress(CompressionType.SNAPPY, bad, position=61)
    assert info.value.position == 61 + 20


def test_snappy_xerial_header_cut_short_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="header truncated"):
        decompress(CompressionType.SNAPPY, b"\x82SNAPPY\x00\x00\x00")


def test_unknown_codec_is_refused_when_compressing() -> None:
    with pytest.raises(ValueError, match="unknown compression codec"):
        compress(7, b"x")  # type: ignore[arg-type]


# --- compression bombs (issue 27) ----------------------------------------------------------


def zeros_compressed(codec: CompressionType, size: int) -> bytes:
    """`size` zero bytes in `codec`'s wire format, compressed in 1 MiB steps (never held whole),
    at the codec's best ratio: what a compression bomb looks like."""
    steps = [bytes(min(1 << 20, size - at)) for at in range(0, size, 1 << 20)]
    if codec == CompressionType.GZIP:
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        return b"".join(c.compress(s) for s in steps) + c.flush()
    if codec == CompressionType.ZSTD:
        z = zstandard.ZstdCompressor().compressobj()
        return b"".join(z.compress(s) for s in steps) + z.flush()
    if codec == CompressionType.LZ4:
        f = lz4.frame.LZ4FrameCompressor(
            block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False, content_checksum=False
        )
        return f.begin() + b"".join(f.compress(s) for s in steps) + f.flush()
    return compress(codec, b"".join(steps))  # snappy: 21:1 at best, so a bomb is no worse


@pytest.fixture(params=[True, False], ids=["native", "reference"])
def native_or_not(request):
    """LZ4 has a native decoder; every bound must hold with and without it."""
    if request.param and native.core() is None:
        pytest.skip("the native core is not built")
    native.set_enabled(request.param)
    yield
    native.set_enabled(True)


@pytest.mark.parametrize("codec", COMPRESSING, ids=lambda c: c.name)
def test_a_section_exactly_at_the_bound_decompresses_one_byte_more_does_not(
    codec: CompressionType, native_or_not
) -> None:
    data = SAMPLES["large mixed"]
    packed = compress(codec, data)
    assert decompress(codec, packed, 61, max_bytes=len(data)) == data
    with pytest.raises(DecompressedTooLargeError) as info:
        decompress(codec, packed, 61, max_bytes=len(data) - 1)
    assert info.value.code == MessageTooLargeError.code == 10  # RECORD_TOO_LARGE
    assert (info.value.position, info.value.max_bytes) == (61, len(data) - 1)
    assert f"{codec.name.lower()} records section at byte 61" in str(info.value)


@pytest.mark.parametrize("codec", COMPRESSING, ids=lambda c: c.name)
def test_a_bomb_is_refused_holding_little_more_than_the_bound(
    codec: CompressionType, native_or_not
) -> None:
    """64 MiB of zeros (a few KB on the wire) under a 1 MiB bound: refused, and the
    decompression never held much more than the bound (Python-level allocations, which
    include every codec's output buffers)."""
    size = 20 << 20 if codec == CompressionType.SNAPPY else 64 << 20
    bomb = zeros_compressed(codec, size)
    assert len(bomb) < size // 20
    tracemalloc.start()
    try:
        with pytest.raises(DecompressedTooLargeError):
            decompress(codec, bomb, max_bytes=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < len(bomb) + (6 << 20), f"held {peak >> 20} MiB under a 1 MiB bound"


def test_zstd_bombs_in_concatenated_frames_are_counted_together() -> None:
    frame = zeros_compressed(CompressionType.ZSTD, 3 << 20)
    assert len(decompress(CompressionType.ZSTD, frame + frame, max_bytes=6 << 20)) == 6 << 20
    with pytest.raises(DecompressedTooLargeError):
        decompress(CompressionType.ZSTD, frame + frame + frame, max_bytes=8 << 20)


def test_gzip_bombs_in_concatenated_members_are_counted_together() -> None:
    member = zeros_compressed(CompressionType.GZIP, 3 << 20)
    assert len(decompress(CompressionType.GZIP, member * 2, max_bytes=6 << 20)) == 6 << 20
    with pytest.raises(DecompressedTooLargeError):
        decompress(CompressionType.GZIP, member * 3, max_bytes=8 << 20)


def test_a_snappy_block_declaring_more_than_the_bound_is_refused_before_unpacking() -> None:
    block = bytes(cramjam.snappy.compress_raw(bytes(4 << 20)))
    xerial = b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, len(block)) + block
    for packed in (block, xerial):
        with pytest.raises(DecompressedTooLargeError):
            decompress(CompressionType.SNAPPY, packed, max_bytes=(4 << 20) - 1)


def test_a_bomb_in_a_batch_is_refused_by_every_reader(native_or_not) -> None:
    """Consumers (the per-record and the Arrow readers) bound what they unpack too, so a
    malicious broker cannot make them hold more than the bound either; the Arrow readers hand
    such a batch to the per-record reader, so it fails in batch order, as a corrupt one does."""
    from sparklog.records.arrow_decode import native_sections
    from sparklog.records.record_walk import _spans

    batch = build_batch([SimpleRecord(bytes(3 << 20))], compression=CompressionType.ZSTD)
    with pytest.raises(DecompressedTooLargeError):
        RecordBatch(batch).records_bytes(max_bytes=1 << 20)
    assert len(RecordBatch(batch).records()) == 1  # under the default bound (2 GiB - 1)
    spans = _spans(memoryview(batch), [(0, RecordBatch(batch).header)])
    assert [g[:3] for g in spans.groups(1 << 20)] == [(0, 1, None)]
    assert native_sections(spans, 1 << 20) == [b"\xff"]
    assert len(native_sections(spans, 4 << 20)[0]) > 3 << 20
