"""sparklog's v2 batches against kafka-python's and aiokafka's record codecs, both directions.

Uncompressed batches built from the same inputs must be identical bytes; compressed ones must
carry identical (decompressed) record sections and decode to the same records, since codec
settings (levels, gzip headers) legitimately differ.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any

import pytest

from sparklog.records import (
    CompressionType,
    ControlRecordType,
    EndTransactionMarker,
    RecordBatch,
    SimpleRecord,
    TimestampType,
    build_batch,
    build_end_txn_marker_batch,
    iter_batches,
    stamp,
)
from sparklog.records.control import decode_end_txn_marker
from sparklog.records.crc import crc32c

pytestmark = pytest.mark.interop

kafka_codec = pytest.importorskip("kafka.codec")
kafka_records = pytest.importorskip("kafka.record.default_records")
kafka_memory = pytest.importorskip("kafka.record.memory_records")
aiokafka_codec = pytest.importorskip("aiokafka.codec")
aiokafka_py = pytest.importorskip("aiokafka.record.default_records")
aiokafka_memory_py = pytest.importorskip("aiokafka.record.memory_records")
aiokafka_control = pytest.importorskip("aiokafka.record.control_record")


@dataclass(frozen=True)
class Impl:
    """One third-party record codec: builder, batch reader, multi-batch reader, codecs."""

    name: str
    builder: Any
    batch: Any
    memory_records: Any
    codecs: tuple[CompressionType, ...]
    leader_epoch: int  # what its builder writes into partitionLeaderEpoch


def _codecs(has: Any) -> tuple[CompressionType, ...]:
    out = [CompressionType.NONE]
    for codec, check in [
        (CompressionType.GZIP, has.has_gzip),
        (CompressionType.SNAPPY, has.has_snappy),
        (CompressionType.LZ4, has.has_lz4),
        (CompressionType.ZSTD, has.has_zstd),
    ]:
        if check():
            out.append(codec)
    return tuple(out)


def _impls() -> list[Impl]:
    impls = [
        Impl(
            "kafka-python",
            kafka_records.DefaultRecordBatchBuilder,
            kafka_records.DefaultRecordBatch,
            kafka_memory.MemoryRecords,
            _codecs(kafka_codec),
            0,
        ),
        Impl(
            "aiokafka-py",
            aiokafka_py._DefaultRecordBatchBuilderPy,
            aiokafka_py._DefaultRecordBatchPy,
            aiokafka_memory_py._MemoryRecordsPy,
            _codecs(aiokafka_codec),
            -1,
        ),
    ]
    try:
        from aiokafka.record import _crecords
    except ImportError:  # the C extension is optional
        return impls
    impls.append(
        Impl(
            "aiokafka-c",
            _crecords.DefaultRecordBatchBuilder,
            _crecords.DefaultRecordBatch,
            _crecords.MemoryRecords,
            _codecs(aiokafka_codec),
            -1,
        )
    )
    return impls


IMPLS = _impls()
CASES = [(impl, codec) for impl in IMPLS for codec in impl.codecs]
CASE_IDS = [f"{impl.name}-{codec.name.lower()}" for impl, codec in CASES]

T0 = 1_700_000_000_000
RECORDS = [
    SimpleRecord(
        b"value-" * 40, key=b"key-0", timestamp=T0, headers=(("trace", b"\x00\x01"), ("n", None))
    ),
    SimpleRecord(None, key=b"tombstone", timestamp=T0 + 7),
    SimpleRecord(b"", key=b"", timestamp=T0 - 3, headers=(("", b""),)),
    SimpleRecord(b"value-" * 40, key=None, timestamp=T0 + 2**33),
    SimpleRecord(None, key=None, timestamp=T0, headers=(("ключ", "значение".encode()),)),
    SimpleRecord(os.urandom(64) + b"z" * 3000, key=b"big", timestamp=T0 + 1),
]


def their_build(
    impl: Impl,
    records: list[SimpleRecord],
    codec: CompressionType = CompressionType.NONE,
    *,
    transactional: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    builder = impl.builder(
        magic=2,
        compression_type=int(codec),
        is_transactional=int(transactional),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 22,
    )
    for delta, r in enumerate(records):
        meta = builder.append(
            delta, timestamp=r.timestamp, key=r.key, value=r.value, headers=list(r.headers)
        )
        assert meta is not None
    return bytes(builder.build())


def their_records(impl: Impl, raw: bytes) -> list[tuple]:
    batch = impl.batch(raw)
    assert batch.validate_crc()
    return [
        (r.offset, r.timestamp, r.timestamp_type, r.key, r.value, [tuple(h) for h in r.headers])
        for r in batch
    ]


def our_records(raw: bytes) -> list[tuple]:
    (batch,) = iter_batches(raw)
    batch.ensure_valid()
    return [
        (
            r.offset,
            r.timestamp,
            int(r.timestamp_type),
            r.key,
            r.value,
            [tuple(h) for h in r.headers],
        )
        for r in batch.records()
    ]


def expected(records: list[SimpleRecord], base_offset: int = 0) -> list[tuple]:
    return [
        (base_offset + i, r.timestamp, 0, r.key, r.value, [tuple(h) for h in r.headers])
        for i, r in enumerate(records)
    ]


# --- byte for byte ----------------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)
def test_uncompressed_batches_are_identical_bytes(impl: Impl) -> None:
    theirs = their_build(impl, RECORDS)
    ours = build_batch(RECORDS, partition_leader_epoch=impl.leader_epoch)
    assert ours == theirs


@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)
def test_idempotent_and_transactional_batches_are_identical_bytes(impl: Impl) -> None:
    producer = {"producer_id": 123456789012, "producer_epoch": 4, "base_sequence": 2**31 - 3}
    for transactional in (False, True):
        theirs = their_build(impl, RECORDS, transactional=transactional, **producer)
        ours = build_batch(
            RECORDS,
            partition_leader_epoch=impl.leader_epoch,
            is_transactional=transactional,
            **producer,
        )
        assert ours == theirs, transactional


@pytest.mark.parametrize(("impl", "codec"), CASES, ids=CASE_IDS)
def test_compressed_batches_carry_identical_record_sections(
    impl: Impl, codec: CompressionType
) -> None:
    theirs = RecordBatch(their_build(impl, RECORDS, codec))
    ours = RecordBatch(
        build_batch(RECORDS, compression=codec, partition_leader_epoch=impl.leader_epoch)
    )
    assert theirs.header.compression is codec, "their builder compressed (the data compresses)"
    assert theirs.records_bytes() == ours.records_bytes()
    skip = {"crc", "batch_length"}
    assert {k: v for k, v in _fields(theirs.header).items() if k not in skip} == {
        k: v for k, v in _fields(ours.header).items() if k not in skip
    }


def _fields(header: Any) -> dict:
    return header._asdict()


# --- their batches decode with sparklog -------------------------------------------------


@pytest.mark.parametrize(("impl", "codec"), CASES, ids=CASE_IDS)
def test_their_batches_decode_with_sparklog(impl: Impl, codec: CompressionType) -> None:
    raw = their_build(impl, RECORDS, codec)
    assert our_records(raw) == expected(RECORDS)


@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)
def test_their_batches_stamped_by_a_sparklog_broker_stay_valid_for_them(impl: Impl) -> None:
    # Produce path: client batches (base offset 0) -> the leader assigns offsets and stamps its
    # epoch -> consumers with the client's own reader see the right offsets and a valid CRC.
    buf = bytearray()
    next_offset = 0
    for codec in impl.codecs:
        raw = bytearray(their_build(impl, RECORDS[:3], codec))
        stamp(raw, 0, next_offset, 9)
        next_offset += 3
        buf += raw
    for batch in iter_batches(buf):
        batch.ensure_valid()
        assert batch.header.partition_leader_epoch == 9
    mem = impl.memory_records(bytes(buf))
    offsets = []
    while mem.has_next():
        batch = mem.next_batch()
        assert batch.validate_crc()
        offsets += [r.offset for r in batch]
    assert offsets == list(range(next_offset))


# --- sparklog batches decode with theirs ------------------------------------------------


@pytest.mark.parametrize(("impl", "codec"), CASES, ids=CASE_IDS)
def test_sparklog_batches_decode_with_theirs(impl: Impl, codec: CompressionType) -> None:
    raw = build_batch(RECORDS, compression=codec, base_offset=500)
    assert their_records(impl, raw) == expected(RECORDS, base_offset=500)
    batch = impl.batch(raw)
    assert batch.compression_type == int(codec)
    assert (batch.base_offset, batch.last_offset_delta, batch.max_timestamp) == (
        500,
        len(RECORDS) - 1,
        max(r.timestamp for r in RECORDS),
    )


@pytest.mark.parametrize(("impl", "codec"), CASES, ids=CASE_IDS)
def test_sparklog_log_append_time_batches_decode_with_theirs(
    impl: Impl, codec: CompressionType
) -> None:
    raw = build_batch(
        RECORDS, compression=codec, timestamp_type=TimestampType.LOG_APPEND_TIME, now_ms=T0 + 99
    )
    got = their_records(impl, raw)
    assert [(ts, ts_type) for _o, ts, ts_type, *_ in got] == [(T0 + 99, 1)] * len(RECORDS)
    assert [g[3:] for g in got] == [e[3:] for e in expected(RECORDS)]


@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)
def test_sparklog_multi_batch_buffer_reads_with_their_memory_records(impl: Impl) -> None:
    parts = [
        build_batch(
            RECORDS, compression=codec, base_offset=i * len(RECORDS), partition_leader_epoch=i
        )
        for i, codec in enumerate(impl.codecs)
    ]
    mem = impl.memory_records(b"".join(parts))
    got = []
    while mem.has_next():
        batch = mem.next_batch()
        assert batch.validate_crc()
        got += [(r.offset, r.key, r.value) for r in batch]
    assert got == [(i, r.key, r.value) for i, r in enumerate(RECORDS * len(impl.codecs))]


@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)
def test_sparklog_transactional_batch_reads_with_theirs(impl: Impl) -> None:
    raw = build_batch(
        RECORDS, is_transactional=True, producer_id=77, producer_epoch=3, base_sequence=10
    )
    batch = impl.batch(raw)
    assert batch.is_transactional and not batch.is_control_batch
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 3, 10)
    assert their_records(impl, raw) == expected(RECORDS)


# --- control batches --------------------------------------------------------------------


def _their_marker_type(record: Any) -> ControlRecordType:
    if hasattr(record, "commit"):  # kafka-python decodes control records itself
        return ControlRecordType.COMMIT if record.commit else ControlRecordType.ABORT
    parsed = aiokafka_control.ControlRecord.parse(record.key)
    assert parsed in (aiokafka_control.ABORT_MARKER, aiokafka_control.COMMIT_MARKER)
    return (
        ControlRecordType.COMMIT
        if parsed == aiokafka_control.COMMIT_MARKER
        else ControlRecordType.ABORT
    )


def _their_marker_batch(
    impl: Impl, marker: EndTransactionMarker, producer_id: int, epoch: int, ts: int
) -> bytes:
    """Their builders cannot make control batches (only brokers do), so build the record with
    their API and set the control bit by hand, as a broker's marker writer would."""
    key = struct.pack(">hh", 0, int(marker.control_type))
    value = struct.pack(">hi", 0, marker.coordinator_epoch)
    raw = bytearray(
        their_build(
            impl,
            [SimpleRecord(value, key=key, timestamp=ts)],
            transactional=True,
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=-1,
        )
    )
    (attributes,) = struct.unpack_from(">h", raw, 21)
    struct.pack_into(">h", raw, 21, attributes | 0x20)
    struct.pack_into(">I", raw, 17, crc32c(memoryview(raw)[21:]))
    return bytes(raw)


@pytest.mark.parametrize("kind", list(ControlRecordType), ids=lambda k: k.name)
@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)
def test_sparklog_markers_read_as_markers_by_theirs(impl: Impl, kind: ControlRecordType) -> None:
    raw = build_end_txn_marker_batch(
        EndTransactionMarker(kind, coordinator_epoch=12),
        producer_id=555,
        producer_epoch=2,
        timestamp_ms=T0,
    )
    batch = impl.batch(raw)
    assert batch.validate_crc()
    assert batch.is_control_batch and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch) == (555, 2)
    (record,) = list(batch)
    assert _their_marker_type(record) is kind
    assert record.value == struct.pack(">hi", 0, 12)


@pytest.mark.parametrize("kind", list(ControlRecordType), ids=lambda k: k.name)
@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)
def test_hand_built_markers_match_sparklog_bytes_and_decode(
    impl: Impl, kind: ControlRecordType
) -> None:
    marker = EndTransactionMarker(kind, coordinator_epoch=2**31 - 1)
    theirs = _their_marker_batch(impl, marker, producer_id=555, epoch=2, ts=T0)
    ours = build_end_txn_marker_batch(
        marker,
        producer_id=555,
        producer_epoch=2,
        timestamp_ms=T0,
        partition_leader_epoch=impl.leader_epoch,
    )
    assert ours == theirs
    (batch,) = iter_batches(theirs)
    batch.ensure_valid()
    (record,) = batch.records()
    assert decode_end_txn_marker(batch.header, record.key, record.value) == marker
