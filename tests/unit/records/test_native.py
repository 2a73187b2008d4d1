"""The native record core against the pure-Python reference codec: identical batches from the
same rows, identical records or identical errors from the same bytes, bad bytes included
(DESIGN D13). Every test runs both paths in this process (`native.set_enabled`)."""

from __future__ import annotations

import logging
import shutil
import sys

import lz4.frame
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.records import native
from sparklog.records.arrow_codec import HEADERS_TYPE, build_batches, read_batches
from sparklog.records.batch import TimestampType, iter_batches, stamp
from sparklog.records.builder import SimpleRecord, build_batch
from sparklog.records.compression import CompressionType, decompress
from sparklog.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from sparklog.records.errors import CorruptRecordError, DecompressedTooLargeError
from sparklog.records.murmur2 import murmur2, murmur2_array

core = native.set_enabled(True)
needs_core = pytest.mark.skipif(core is None, reason="the native core is not built")
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
BLOB = st.none() | st.binary(max_size=300)
HEADER_LIST = st.none() | st.lists(
    st.fixed_dictionaries({"key": st.text(max_size=8), "value": BLOB}), max_size=3
)
CODECS = [CompressionType.NONE, CompressionType.LZ4, CompressionType.ZSTD, CompressionType.GZIP]


@pytest.fixture(autouse=True)
def _native_back_on():
    yield
    native.set_enabled(True)


def both(fn):
    """fn() with the native core on, then off: (native result, reference result); an error is
    compared by its type, position and reason."""
    out = []
    for enabled in (True, False):
        native.set_enabled(enabled)
        try:
            out.append(fn())
        except CorruptRecordError as e:
            out.append(("CorruptRecordError", e.position, e.reason))
        except DecompressedTooLargeError as e:
            out.append(("DecompressedTooLargeError", e.position, e.max_bytes))
    native.set_enabled(True)
    return out


@st.composite
def rows(draw: st.DrawFn) -> pa.RecordBatch:
    n = draw(st.integers(1, 40))
    values = draw(st.lists(BLOB, min_size=n, max_size=n))
    columns = {
        "value": pa.array(values, pa.binary()),
        "timestamp": pa.array(
            draw(st.lists(st.none() | st.integers(0, 2**45), min_size=n, max_size=n)), pa.int64()
        ),
    }
    if draw(st.booleans()):
        columns["key"] = pa.array(draw(st.lists(BLOB, min_size=n, max_size=n)), pa.binary())
    if draw(st.booleans()):
        columns["headers"] = pa.array(
            draw(st.lists(HEADER_LIST, min_size=n, max_size=n)), HEADERS_TYPE
        )
    return pa.RecordBatch.from_pydict(columns)


def offsets_assigned(batches: list[bytes], first: int = 0) -> bytes:
    buf = bytearray(b"".join(batches))
    offset = first
    for batch in iter_batches(buf):
        stamp(memoryview(buf), batch.position, offset, 3)
        offset += batch.header.records_count
    return bytes(buf)


def same_records(a, b) -> None:
    if isinstance(b, tuple):
        assert a == b
    else:
        assert a.records.equals(b.records)
        assert (a.next_offset, a.valid_bytes) == (b.next_offset, b.valid_bytes)


@needs_core
@SETTINGS
@given(
    rows(),
    st.sampled_from(CODECS),
    st.integers(80, 4000),
    st.booleans(),
    st.sampled_from(list(TimestampType)),
)
def test_encoding_matches_the_reference(records, codec, max_bytes, idempotent, ts_type) -> None:
    kw = {"producer_id": 9, "producer_epoch": 2, "base_sequence": 2**31 - 5} if idempotent else {}

    def encode():
        return build_batches(
            records,
            now_ms=1_700_000_000_000,
            compression=codec,
            max_batch_bytes=max_bytes,
            timestamp_type=ts_type,
            **kw,
        )

    fast, reference = both(encode)
    if codec == CompressionType.LZ4:  # lz4_flex and liblz4 compress differently; same frames
        assert [len(b) for b in fast] != [] and len(fast) == len(reference)
        for f, r in zip(fast, reference, strict=True):
            assert f[:8] == r[:8] and f[12:17] == r[12:17]
            assert f[21:61] == r[21:61]  # every header field but length and CRC
            assert decompress(codec, f[61:]) == decompress(codec, r[61:])
    else:
        assert fast == reference
    buf = offsets_assigned(fast)
    for include_headers in (True, False):
        decoded = both(lambda ih=include_headers: read_batches(buf, include_headers=ih))
        same_records(*decoded)


@needs_core
@SETTINGS
@given(rows(), st.sampled_from(CODECS), st.data())
def test_damaged_bytes_decode_or_fail_alike(records, codec, data) -> None:
    buf = bytearray(offsets_assigned(build_batches(records, now_ms=5, compression=codec)))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(buf) - 1))
        buf[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    damaged = bytes(buf[:cut]) if data.draw(st.booleans()) else bytes(buf)
    for check_crcs in (False, True):
        for partial in (False, True):
            same_records(
                *both(
                    lambda c=check_crcs, p=partial: read_batches(
                        damaged,
                        include_headers=True,
                        check_crcs=c,
                        allow_partial_tail=p,
                        skip_control=False,
                    )
                )
            )


@needs_core
def test_oddities_only_the_reference_reads_are_handed_to_it() -> None:
    """Linked LZ4 blocks and header keys that are not UTF-8 decode as the reference decodes
    them (the native core hands those batches back to it)."""
    records = [SimpleRecord(b"v%d" % i * 50, key=b"k", timestamp=i) for i in range(2000)]
    plain = build_batch(records, compression=CompressionType.NONE)
    section = lz4.frame.compress(
        plain[61:], block_linked=True, block_size=lz4.frame.BLOCKSIZE_MAX64KB
    )
    assert section[4] & 0x20 == 0 and core.lz4_frame_decompress(section) is None
    linked = bytearray(plain[:61] + section)
    linked[21:23] = (int.from_bytes(linked[21:23], "big") | CompressionType.LZ4).to_bytes(2, "big")
    linked[8:12] = (len(linked) - 12).to_bytes(4, "big")
    bad_utf8 = build_batch([SimpleRecord(b"v", headers=(("k", b"x"),))])
    bad_utf8 = bad_utf8.replace(b"\x02k", b"\x02\xff")  # header key length 1, then 0xff
    batches = [bytes(linked), build_batch(records, compression=CompressionType.LZ4), bad_utf8]
    buf = offsets_assigned(batches)
    fast, reference = both(lambda: read_batches(buf, include_headers=True, check_crcs=False))
    same_records(fast, reference)
    assert fast.records.num_rows == 4001
    assert fast.records.column("headers")[4000].as_py() == [{"key": "\ufffd", "value": b"x"}]


@needs_core
def test_control_and_aborted_batches_are_filtered_alike() -> None:
    data = [SimpleRecord(b"v%d" % i, timestamp=i) for i in range(5)]
    txn = {"producer_id": 4, "producer_epoch": 0, "is_transactional": True}
    batches = [
        build_batch(data, base_sequence=0, **txn),
        build_end_txn_marker_batch(
            EndTransactionMarker(ControlRecordType.ABORT, 0),
            producer_id=4,
            producer_epoch=0,
            timestamp_ms=9,
        ),
        build_batch(data, compression=CompressionType.LZ4),
    ]
    buf = offsets_assigned(batches)
    for kwargs in ({}, {"skip_control": False}, {"aborted": [(4, 0)]}):
        fast, reference = both(lambda kw=kwargs: read_batches(buf, **kw))
        same_records(fast, reference)
    assert fast.records.num_rows == 5  # read_committed: the aborted five are gone


@needs_core
@SETTINGS
@given(st.binary(max_size=5000), st.sampled_from([True, False]), st.booleans())
def test_lz4_frames_liblz4_writes_are_read_alike(data, checksums, store_size) -> None:
    frame = lz4.frame.compress(
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=checksums,
        block_checksum=checksums,
        store_size=store_size,
    )
    assert bytes(core.lz4_frame_decompress(frame)) == data
    for cut in (len(frame) - 1, len(frame) // 2):
        assert core.lz4_frame_decompress(frame[:cut]) is None
    assert core.lz4_frame_decompress(frame + b"\x00") is None


@needs_core
@SETTINGS
@given(st.lists(st.none() | st.binary(max_size=40), min_size=1, max_size=60))
def test_murmur2_matches_kafka(keys) -> None:
    arr = pa.array(keys, pa.binary())
    (fast, fast_valid), (reference, ref_valid) = both(lambda: murmur2_array(arr))
    assert np.array_equal(fast[ref_valid], reference[ref_valid])
    assert np.array_equal(fast_valid, ref_valid)
    expected = [murmur2(k) for k in keys if k is not None]
    assert fast[fast_valid].tolist() == expected


@needs_core
def test_crc32c_is_castagnoli() -> None:
    assert core.crc32c(b"123456789") == 0xE3069283
    assert core.crc32c(b"6789", core.crc32c(b"12345")) == 0xE3069283


@needs_core
def test_bad_arguments_are_refused_with_a_reason() -> None:
    ts = np.zeros(2, dtype=np.int64).view(np.uint8)
    value = (b"ab", np.array([0, 1], dtype=np.int64).view(np.uint8), np.array([1, 5], "<i8"))
    with pytest.raises((ValueError, BufferError)):
        core.encode_batches(ts, np.array([0, 2], "<i8"), value, None, None, 0, -1, -1, -1, -1,
                            None, False)  # fmt: skip
    good = (b"ab", np.array([0, 1], "<i8").view(np.uint8), np.array([1, 1], "<i8").view(np.uint8))
    with pytest.raises(ValueError, match="outside"):
        core.encode_batches(ts, np.array([0, 2], "<i8").view(np.uint8),
                            (b"ab", good[1], np.array([1, 5], "<i8").view(np.uint8)),
                            None, None, 0, -1, -1, -1, -1, None, False)  # fmt: skip
    with pytest.raises(ValueError, match="starts"):
        core.encode_batches(ts, np.array([0, 3], "<i8").view(np.uint8), good, None, None,
                            0, -1, -1, -1, -1, None, False)  # fmt: skip


def test_switched_off_by_environment(monkeypatch) -> None:
    monkeypatch.setenv("SPARKLOG_NATIVE", "0")
    assert native.set_enabled(True) is None


def test_a_missing_module_is_logged_once_and_the_reference_runs(monkeypatch, caplog) -> None:
    monkeypatch.setitem(sys.modules, "sparklog_native", None)  # import fails
    monkeypatch.setattr(native, "_loaded", False)
    monkeypatch.setattr(native, "_warned", False)
    monkeypatch.setattr(native, "_module", native._module)  # restored for the other tests
    with caplog.at_level(logging.WARNING, logger="sparklog.records.native"):
        assert native.core() is None
        assert native.core() is None
        # switched off and on again (tests, a second cluster in the process): still said once
        assert native.set_enabled(True) is None
        assert native.set_enabled(True) is None
    assert len(caplog.records) == 1, [r.getMessage() for r in caplog.records]
    message = caplog.records[0].getMessage()
    assert "pip install ./native" in message and "make venv" in message
    batches = build_batches(pa.RecordBatch.from_pydict({"value": [b"x"]}), now_ms=1)
    assert read_batches(batches[0]).records.column("value").to_pylist() == [b"x"]


def test_the_core_is_built_wherever_cargo_is() -> None:
    """`make` builds the extension when a Rust toolchain exists; a silent build failure would
    otherwise leave every other test here skipped."""
    if shutil.which("cargo") is None:
        pytest.skip("no Rust toolchain here")
    assert core is not None, "cargo is installed but sparklog_native is not: run `make venv`"


@needs_core
@SETTINGS
@given(rows(), st.sampled_from(CODECS), st.data())
def test_a_leaders_record_walk_matches_the_reference(records, codec, data) -> None:
    """What `walk_records` finds (per record: offset delta, timestamp, null key) or the error
    it raises is the same with and without the native core, damaged batches included."""
    from sparklog.errors import InvalidRecordError
    from sparklog.records.record_walk import walk_records

    buf = bytearray(b"".join(build_batches(records, now_ms=5, compression=codec)))
    if data.draw(st.booleans()):
        at = data.draw(st.integers(61, len(buf) - 1))
        buf[at] = data.draw(st.integers(0, 255))
    batches = [(b.position, b.header) for b in iter_batches(buf)]
    sizes = [len(read_section(buf, pos, h)) for pos, h in batches]
    max_bytes = data.draw(st.sampled_from([2**31 - 1, max(max(sizes) - 1, 0), max(sizes)]))

    def walk():
        try:
            return [
                (
                    list(f.offset_deltas),
                    [int(t) for t in f.timestamps],
                    [bool(k) for k in f.key_nulls],
                )
                for f in walk_records(bytes(buf), batches, max_bytes)
            ]
        except InvalidRecordError as e:
            return ("InvalidRecordError", str(e))

    fast, reference = both(walk)
    assert fast == reference


def test_a_zstd_header_damaged_to_declare_gigabytes_is_refused_alike() -> None:
    """The example Hypothesis found: one null record, zstd, byte 65 (the frame's content
    size) set to 208, so the frame declares more than 2 GiB; both walks refuse it alike."""
    from sparklog.records.record_walk import walk_records

    records = pa.RecordBatch.from_pydict(
        {"value": pa.array([None], pa.binary()), "timestamp": pa.array([None], pa.int64())}
    )
    buf = bytearray(b"".join(build_batches(records, now_ms=5, compression=CompressionType.ZSTD)))
    buf[65] = 208
    batches = [(b.position, b.header) for b in iter_batches(buf)]
    assert [read_section(buf, pos, h) for pos, h in batches] == [b""]
    fast, reference = both(lambda: walk_records(bytes(buf), batches, 2**31 - 1))
    assert fast == reference
    assert reference[0] == "DecompressedTooLargeError"


@needs_core
@SETTINGS
@given(rows(), st.sampled_from(CODECS), st.data())
def test_a_leaders_one_pass_check_gives_the_references_verdict(records, codec, data) -> None:
    """Validation with the native `leader_check` first accepts and refuses exactly what the
    reference walk does, with its message, and leaves the same headers: damaged records, a
    lying maxTimestamp (accepted, the header set to the records' latest, as Kafka's
    LogValidator does), keyless records on a compacted topic, timestamps out of bounds.
    Batches the reference accepts pass the check itself (else it would save nothing)."""
    from sparklog.storage.config import LogConfig
    from sparklog.storage.log_validator import validate_client_records

    buf = bytearray(b"".join(build_batches(records, now_ms=5, compression=codec)))
    damage = data.draw(st.sampled_from([None, "max_timestamp", "records"]))
    if damage == "max_timestamp":  # of the first batch
        buf[data.draw(st.integers(35, 42))] = data.draw(st.integers(0, 255))
    elif damage == "records":
        buf[data.draw(st.integers(61, len(buf) - 1))] = data.draw(st.integers(0, 255))
    config = LogConfig.from_properties(
        {
            "cleanup.policy": data.draw(st.sampled_from(["delete", "compact"])),
            "message.timestamp.type": data.draw(st.sampled_from(["CreateTime", "LogAppendTime"])),
            "message.timestamp.before.max.ms": data.draw(st.integers(0, 2**46)),
            "message.timestamp.after.max.ms": data.draw(st.integers(0, 2**46)),
            "max.message.bytes": data.draw(st.sampled_from([1048588, 0])),
        }
    )
    now = data.draw(st.integers(0, 2**45))
    batches = [(b.position, b.header) for b in iter_batches(buf)]
    sizes = [len(read_section(buf, pos, h)) for pos, h in batches]
    bound = data.draw(st.sampled_from([104857600, max(max(sizes) - 1, 0), max(sizes)]))

    def verdict():
        try:
            headers = validate_client_records(bytes(buf), batches, config, now, "t-0", bound)
        except Exception as e:  # noqa: BLE001 - compared by type and message
            return (type(e).__name__, str(e))
        return ("accepted", headers)

    fast, reference = both(verdict)
    assert fast == reference
    if codec != CompressionType.NONE and max(sizes) > max(bound, config.max_message_bytes):
        assert reference[0] == "MessageTooLargeError"  # refused before any record is walked
    if reference[0] == "accepted" and damage is None:
        low = max(now - config.message_timestamp_before_max_ms, -(2**63))
        high = min(now + config.message_timestamp_after_max_ms, 2**63 - 1)
        rules = (config.compact, not config.log_append_time)
        for pos, h in batches:
            section = None
            if codec not in (CompressionType.NONE, CompressionType.LZ4):
                section = decompress(codec, bytes(buf[pos + 61 : pos + h.size_in_bytes]))
            assert core.leader_check(bytes(buf), pos, h.size_in_bytes, section, low, high, *rules)


@needs_core
@SETTINGS
@given(
    st.lists(
        st.builds(
            SimpleRecord,
            value=BLOB,
            key=BLOB,
            timestamp=st.none() | st.integers(-(2**63), 2**63 - 1),
        ),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from(CODECS),
)
def test_build_batch_writes_the_reference_bytes(records, codec) -> None:
    """The producer's per-record batches (`build_batch`) are byte for byte the same."""
    fast, reference = both(lambda: build_batch(records, now_ms=7, compression=CompressionType.NONE))
    assert fast == reference
    if codec != CompressionType.NONE:
        fast, reference = both(lambda: build_batch(records, now_ms=7, compression=codec))
        assert decompress(codec, fast[61:]) == decompress(codec, reference[61:])


HEADER_PAIRS = st.lists(st.tuples(st.text(max_size=8), BLOB), max_size=3).map(tuple)


@needs_core
@SETTINGS
@given(
    st.lists(
        st.tuples(st.integers(-(2**63), 2**63 - 1), BLOB, BLOB, HEADER_PAIRS),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from([*CODECS, CompressionType.SNAPPY]),
    st.booleans(),
)
def test_the_producers_records_builder_writes_the_reference_bytes(records, codec, txn) -> None:
    """send()'s batches: records appended one by one to the native builder seal into the
    bytes the reference builder (and `build_batch`) writes."""
    from sparklog.records.records_builder import RecordsBuilder, seal_records

    stamp_ = {"producer_id": 7, "producer_epoch": 1, "base_sequence": 40, "is_transactional": txn}
    builders = (core.RecordsBuilder(), RecordsBuilder())
    for builder in builders:
        for ts, key, value, headers in records:
            builder.append(ts, key, value, headers)
    fast, reference = (seal_records(b, codec, **stamp_) for b in builders)
    assert builders[0].timestamps() == builders[1].timestamps() == [r[0] for r in records]
    simple = [SimpleRecord(v, k, ts, h) for ts, k, v, h in records]
    expected = build_batch(simple, compression=CompressionType.NONE, **stamp_)
    if codec in (CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY):
        assert fast == reference  # gzip, snappy: the same library compresses both
    if codec == CompressionType.NONE:
        assert fast == expected
    (f,), (r,) = iter_batches(fast), iter_batches(reference)
    assert f.header == r.header._replace(crc=f.header.crc, batch_length=f.header.batch_length)
    assert [(x.key, x.value, x.timestamp, x.headers) for x in f.records()] == [
        (k, v, ts, h) for ts, k, v, h in records
    ]


def test_the_records_builder_refuses_bad_headers_and_empty_batches_alike() -> None:
    from sparklog.records.records_builder import RecordsBuilder, seal_records

    builders = [RecordsBuilder()] + ([core.RecordsBuilder()] if core is not None else [])
    for builder in builders:
        with pytest.raises(ValueError, match="at least one record"):
            seal_records(
                builder,
                CompressionType.NONE,
                producer_id=-1,
                producer_epoch=-1,
                base_sequence=-1,
                is_transactional=False,
            )
    if core is not None:
        for bad in ((("k", "not bytes"),), (("k",),), ((1, b"v"),), ("kv",)):
            with pytest.raises(ValueError, match="header"):
                core.RecordsBuilder().append(1, None, b"v", bad)


def read_section(buf, pos: int, h) -> bytes:
    """Batch `pos`'s records section decompressed under the default bound (b"" when it does
    not decompress, or when a damaged header declares more than the bound holds)."""
    try:
        return decompress(h.compression, bytes(buf[pos + 61 : pos + h.size_in_bytes]))
    except (CorruptRecordError, DecompressedTooLargeError):
        return b""


@needs_core
@SETTINGS
@given(st.binary(max_size=200_000), st.booleans(), st.booleans(), st.data())
def test_lz4_frames_are_bounded_alike(data, checksums, store_size, draw) -> None:
    """A frame unpacking to more than `max_bytes` is refused alike: the native decoder hands
    it back (None), and the reference raises DecompressedTooLargeError; at or under the bound
    both decode it. The leader's one-pass check and the Arrow decoder leave it to the
    reference too."""
    frame = lz4.frame.compress(
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=checksums,
        block_checksum=checksums,
        store_size=store_size,
    )
    max_bytes = draw.draw(st.integers(0, len(data) + 2))
    native_out = core.lz4_frame_decompress(frame, max_bytes)
    assert native_out == (data if len(data) <= max_bytes else None)
    fast, reference = both(lambda: decompress(CompressionType.LZ4, frame, 61, max_bytes))
    assert fast == reference
    if len(data) > max_bytes:
        assert reference == ("DecompressedTooLargeError", 61, max_bytes)
    else:
        assert reference == data


@needs_core
def test_the_native_checks_leave_an_lz4_bomb_to_the_reference() -> None:
    from sparklog.records.batch_spans import le64

    batch = build_batch([SimpleRecord(bytes(3 << 20))], compression=CompressionType.LZ4)
    h = next(iter_batches(batch)).header
    args = (batch, 0, len(batch), None, 0, 2**62, False, True)
    assert core.leader_check(*args)
    assert not core.leader_check(*args, 1 << 20)
    positions, sizes = le64(np.array([0])), le64(np.array([len(batch)]))
    out = core.decode_sections(batch, positions, sizes, [None], False, False, 1 << 20)
    assert out[-1] == [0] and h.records_count == 1  # handed back: the reference refuses it
    with pytest.raises(DecompressedTooLargeError):
        decompress(CompressionType.LZ4, batch[61:], 61, 1 << 20)
