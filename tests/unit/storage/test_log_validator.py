"""A leader walks every record before it appends (Kafka's LogValidator): batches whose CRC is
right but whose contents lie are refused and leave the log untouched."""

from __future__ import annotations

import random
import struct

import pytest

from sparklog.errors import CorruptMessageError, InvalidRecordError, InvalidTimestampError
from sparklog.records import SimpleRecord, build_batch, iter_batches
from sparklog.records.arrow_decode import decode_batches
from sparklog.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, LENGTH_OFFSET
from sparklog.records.compression import CompressionType
from sparklog.records.crc import crc32c
from sparklog.storage.config import LogConfig
from sparklog.storage.log import Log
from sparklog.storage.log_validator import InvalidRecordsError, InvalidTimestampsError

NOW = 1_700_000_000_000
CODECS = [c for c in CompressionType if c != CompressionType.NONE]


def recrc(data: bytearray) -> bytes:
    """Make the CRC right again, so only a deep check can catch what was changed."""
    struct.pack_into(">I", data, CRC_OFFSET, crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]))
    return bytes(data)


def open_log(tmp_path, **props) -> Log:
    return Log.open(tmp_path / "t-0", LogConfig.from_properties(props), now_ms=NOW)


def records(n: int, keyed: bool = True) -> list[SimpleRecord]:
    return [
        SimpleRecord(b"value-%d" % i * 5, b"key-%d" % i if keyed else None, NOW, (("h", b"v"),))
        for i in range(n)
    ]


def refused(log: Log, data: bytes, error: type[Exception] | tuple) -> Exception:
    before = log.log_end_offset
    with pytest.raises(error) as caught:
        log.append_as_leader(data, 0, NOW)
    assert log.log_end_offset == before, "a refused append must not touch the log"
    return caught.value


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_damaged_compressed_payload_with_a_right_crc_is_refused(tmp_path, codec):
    log = open_log(tmp_path)
    good = build_batch(records(50), now_ms=NOW, compression=codec)
    log.append_as_leader(good, 0, NOW)
    cut = bytearray(good[:-5])  # the stream ends early
    struct.pack_into(">i", cut, LENGTH_OFFSET, len(cut) - 12)
    bad_start = bytearray(good)  # the codec's own header (magic, frame descriptor, ...)
    bad_start[HEADER_SIZE] ^= 0xFF
    for bad in (cut, bad_start):
        error = refused(log, recrc(bad), (CorruptMessageError, InvalidRecordError))
        assert codec.name.lower() in str(error) or "record" in str(error)
    assert log.log_end_offset == 50


def test_a_lying_first_record_length_is_refused(tmp_path):
    log = open_log(tmp_path)
    bad = bytearray(build_batch(records(3), now_ms=NOW))
    bad[HEADER_SIZE] += 2  # the first record's length varint (one byte, zigzag)
    error = refused(log, recrc(bad), InvalidRecordError)
    assert "record" in str(error)


def test_trailing_bytes_after_the_last_record_are_refused(tmp_path):
    log = open_log(tmp_path)
    bad = bytearray(build_batch(records(2), now_ms=NOW)) + b"\x00\x00\x00"
    struct.pack_into(">i", bad, LENGTH_OFFSET, len(bad) - 12)
    refused(log, recrc(bad), InvalidRecordError)


def test_a_truncated_last_record_is_refused(tmp_path):
    log = open_log(tmp_path)
    bad = bytearray(build_batch(records(2), now_ms=NOW))[:-4]
    struct.pack_into(">i", bad, LENGTH_OFFSET, len(bad) - 12)
    refused(log, recrc(bad), InvalidRecordError)


def test_an_absurd_header_count_is_refused(tmp_path):
    log = open_log(tmp_path)
    good = build_batch([SimpleRecord(b"v", b"k", NOW, (("h", b"v"),))], now_ms=NOW)
    at = good.index(b"\x02h")  # header count (1 = 0x02) precedes the header key length
    bad = bytearray(good)
    bad[at - 1] = 0x7E  # 63 headers declared, one present
    refused(log, recrc(bad), InvalidRecordError)


def test_offset_deltas_out_of_sequence_are_refused_with_the_record_named(tmp_path):
    log = open_log(tmp_path)
    data = build_batch(records(3), now_ms=NOW, offset_deltas=[1, 0, 2])
    error = refused(log, data, InvalidRecordsError)
    assert error.code == InvalidRecordError.code
    assert [e.batch_index for e in error.record_errors] == [0, 1]


def test_keyless_records_on_a_compacted_topic_are_refused_per_record(tmp_path):
    log = open_log(tmp_path, **{"cleanup.policy": "compact"})
    mixed = [SimpleRecord(b"a", b"k", NOW), SimpleRecord(b"b", None, NOW)]
    mixed += [SimpleRecord(b"c", b"k2", NOW), SimpleRecord(b"d", None, NOW)]
    error = refused(log, build_batch(mixed, now_ms=NOW), InvalidRecordsError)
    assert error.code == InvalidRecordError.code
    assert [e.batch_index for e in error.record_errors] == [1, 3]
    assert "Compacted topic cannot accept message without key in topic partition t-0" in str(
        error.record_errors[0].message
    )
    log.append_as_leader(build_batch([mixed[0], mixed[2]], now_ms=NOW), 0, NOW)
    assert log.log_end_offset == 2


def test_keyless_records_are_fine_on_a_delete_topic(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(build_batch(records(3, keyed=False), now_ms=NOW), 0, NOW)
    assert log.log_end_offset == 3


def test_each_record_timestamp_is_checked_not_only_the_batch_header(tmp_path):
    log = open_log(tmp_path)
    late = NOW + 2 * 3600 * 1000
    data = build_batch(
        [SimpleRecord(b"a", b"k", NOW), SimpleRecord(b"b", b"k", late), SimpleRecord(b"c", None)],
        now_ms=NOW,
    )
    error = refused(log, data, InvalidTimestampsError)
    assert error.code == InvalidTimestampError.code
    assert [e.batch_index for e in error.record_errors] == [1]
    assert f"Timestamp {late} of message with offset 1 is out of range" in str(error)


def test_log_append_time_topics_do_not_check_producer_timestamps(tmp_path):
    log = open_log(tmp_path, **{"message.timestamp.type": "LogAppendTime"})
    log.append_as_leader(build_batch([SimpleRecord(b"a", b"k", 5)], now_ms=NOW), 0, NOW)
    assert log.log_end_offset == 1


def stored_batches(log: Log) -> list:
    read = log.read(0, 1 << 20)
    batches = list(iter_batches(read.records))
    for batch in batches:
        batch.ensure_valid()  # the CRC was computed again over the rewritten header
    return batches


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name.lower())
def test_a_max_timestamp_that_lies_is_rewritten_as_kafka_does(tmp_path, codec):
    """Issue 29: Kafka's LogValidator sets a CreateTime batch's maxTimestamp to its records'
    latest (`setMaxTimestamp`) instead of refusing the batch; so does sparklog, rewriting only
    the header (and its CRC)."""
    log = open_log(tmp_path)
    good = build_batch(records(2), now_ms=NOW, compression=codec)
    bad = bytearray(good)
    struct.pack_into(">q", bad, 35, NOW + 1000)  # maxTimestamp: records say NOW
    info = log.append_as_leader(recrc(bad), 0, NOW)
    assert info.max_timestamp == NOW
    (batch,) = stored_batches(log)
    assert batch.header.max_timestamp == NOW
    assert bytes(read_stored(log))[HEADER_SIZE:] == good[HEADER_SIZE:]  # records untouched


def read_stored(log: Log) -> bytes:
    records_ = log.read(0, 1 << 20).records
    return records_ if isinstance(records_, bytes) else records_.tobytes()


def librdkafka_style(timestamps: list[int], header_max: int, codec=CompressionType.NONE) -> bytes:
    """A batch as librdkafka writes one whose records carry no timestamp (-1): baseTimestamp is
    the first record's, deltas from it, and maxTimestamp `header_max` (librdkafka writes 0)."""
    rows = [SimpleRecord(b"v%d" % i, b"k%d" % i, ts) for i, ts in enumerate(timestamps)]
    data = bytearray(build_batch(rows, now_ms=NOW, compression=codec))
    struct.pack_into(">q", data, 35, header_max)
    return recrc(data)


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name.lower())
@pytest.mark.parametrize(
    ("timestamps", "expected_max"),
    [([-1, -1, -1], -1), ([-1, NOW - 5, -1, NOW - 9], NOW - 5), ([-7, -3], -1)],
    ids=["all-no-timestamp", "mixed", "below-no-timestamp"],
)
def test_batches_without_timestamps_are_accepted_with_kafkas_max_timestamp(
    tmp_path, codec, timestamps, expected_max
):
    """Issue 29: a batch whose records all have timestamp -1 (NO_TIMESTAMP) with maxTimestamp 0
    in its header, as librdkafka writes it, was refused with INVALID_RECORD; Kafka stores it
    with maxTimestamp -1 (its maxBatchTimestamp starts at -1), and the records read -1."""
    log = open_log(tmp_path)
    data = librdkafka_style(timestamps, 0, codec)
    info = log.append_as_leader(data, 0, NOW)
    assert info.max_timestamp == expected_max
    (batch,) = stored_batches(log)
    assert batch.header.max_timestamp == expected_max
    assert [r.timestamp for r in batch.records()] == timestamps
    assert bytes(read_stored(log))[HEADER_SIZE:] == data[HEADER_SIZE:]


def test_log_append_time_topics_stamp_batches_without_timestamps(tmp_path):
    log = open_log(tmp_path, **{"message.timestamp.type": "LogAppendTime"})
    log.append_as_leader(librdkafka_style([-1, -1], 0), 0, NOW + 7)
    (batch,) = stored_batches(log)
    assert batch.header.max_timestamp == NOW + 7
    assert [r.timestamp for r in batch.records()] == [NOW + 7, NOW + 7]


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name.lower())
def test_mutations_either_refused_or_fully_readable(tmp_path, codec):
    """Seeded fuzz: every mutated batch (CRC fixed) the log accepts decodes in both readers."""
    seed = 467 + int(codec)
    rng = random.Random(seed)
    log = open_log(tmp_path)
    good = build_batch(records(20), now_ms=NOW, compression=codec)
    accepted = 0
    for _ in range(150):
        bad = bytearray(good)
        for _ in range(rng.randint(1, 3)):
            bad[rng.randrange(ATTRIBUTES_OFFSET + 2, len(bad))] = rng.randrange(256)
        data = recrc(bad)
        try:
            log.append_as_leader(data, 0, NOW)
        except (CorruptMessageError, InvalidRecordError, InvalidTimestampError):
            continue
        accepted += 1
    stored = log.read(0, 1 << 30).records
    for b in iter_batches(stored):
        b.ensure_valid()
        assert len(b.records()) == b.header.records_count, f"seed {seed}"
    assert decode_batches(stored).num_rows == log.log_end_offset, f"seed {seed}"
    assert accepted < 150, f"seed {seed}: no mutation was refused"


def test_the_lean_walk_agrees_with_the_reference_decoder():
    """The fast per-record walk returns exactly the reference decoder's facts, or gives up."""
    from sparklog.records.record import decode_records
    from sparklog.records.record_walk import _lean_walk

    rng = random.Random(2024)
    gave_up = agreed = 0
    for trial in range(300):
        rows = [
            SimpleRecord(
                rng.choice([None, b"", rng.randbytes(rng.choice([1, 70, 300, 20_000]))]),
                rng.choice([None, b"k", rng.randbytes(rng.randint(0, 200))]),
                NOW + rng.choice([0, 5, 1000, -70_000, 2**40]),
                tuple(
                    (f"h{i}", rng.choice([None, b"v" * rng.randint(0, 90)]))
                    for i in range(rng.randint(0, 3))
                ),
            )
            for _ in range(rng.randint(1, 12))
        ]
        (batch,) = list(iter_batches(build_batch(rows, now_ms=NOW)))
        section = bytearray(batch.records_bytes())
        if trial % 2:  # a mutated section: the walk must give up or agree with the reference
            section[rng.randrange(len(section))] = rng.randrange(256)
        walked = _lean_walk(bytes(section), batch.header.records_count)
        try:
            records = decode_records(batch.header, bytes(section))
        except CorruptMessageError:
            assert walked is None, f"trial {trial}: the walk accepted what the reference refuses"
            continue
        if walked is None:
            gave_up += 1
            continue
        deltas, ts_deltas, nulls = walked
        assert deltas == [r.offset for r in records], trial
        base = batch.header.base_timestamp
        assert [base + d for d in ts_deltas] == [r.timestamp for r in records], trial
        assert nulls == [r.key is None for r in records], trial
        agreed += 1
    assert agreed > 150 and gave_up < 30, (agreed, gave_up)


# --- compression bombs (issue 27) -----------------------------------------------------------


@pytest.fixture(params=[True, False], ids=["native", "reference"])
def native_or_not(request):
    from sparklog.records import native

    if request.param and native.core() is None:
        pytest.skip("the native core is not built")
    native.set_enabled(request.param)
    yield
    native.set_enabled(True)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_a_batch_unpacking_past_the_bound_is_refused_as_record_too_large(
    tmp_path, codec, native_or_not
):
    """A few KB on the wire, 3 MiB unpacked, under a 2 MiB bound: RECORD_TOO_LARGE naming the
    setting and the fix, the log untouched; the same batch passes under a 4 MiB bound."""
    from sparklog.errors import MessageTooLargeError

    log = open_log(tmp_path)
    bomb = build_batch([SimpleRecord(bytes(3 << 20), b"k", NOW)], now_ms=NOW, compression=codec)
    assert len(bomb) < 1 << 20 and log.config.max_message_bytes < 2 << 20
    before = log.log_end_offset
    with pytest.raises(MessageTooLargeError) as caught:
        log.append_as_leader(bomb, 0, NOW, decompressed_max_bytes=2 << 20)
    assert log.log_end_offset == before
    assert caught.value.code == 10  # RECORD_TOO_LARGE, which Java producers answer by splitting
    message = str(caught.value)
    assert "t-0" in message and "sparklog.batch.decompressed.max.bytes" in message
    assert f"more than {2 << 20} bytes" in message and "send smaller batches" in message
    log.append_as_leader(bomb, 0, NOW, decompressed_max_bytes=4 << 20)
    assert log.log_end_offset == before + 1


def test_the_bound_is_never_below_max_message_bytes(tmp_path, native_or_not):
    """A compressed batch may always unpack to what an uncompressed one may hold; the default
    bound is socket.request.max.bytes (100 MiB)."""
    from sparklog.errors import MessageTooLargeError
    from sparklog.storage.log_validator import DEFAULT_DECOMPRESSED_MAX_BYTES

    assert DEFAULT_DECOMPRESSED_MAX_BYTES == 104_857_600
    log = open_log(tmp_path, **{"max.message.bytes": str(4 << 20)})
    big = build_batch([SimpleRecord(bytes(3 << 20), b"k", NOW)], now_ms=NOW, compression=CODECS[0])
    log.append_as_leader(big, 0, NOW, decompressed_max_bytes=0)
    bomb = build_batch([SimpleRecord(bytes(5 << 20), b"k", NOW)], now_ms=NOW, compression=CODECS[0])
    with pytest.raises(MessageTooLargeError):
        log.append_as_leader(bomb, 0, NOW, decompressed_max_bytes=0)
    assert log.log_end_offset == 1


# --- a producer's LogAppendTime flag (issue 27) -----------------------------------------------


def flagged(codec=CompressionType.NONE, max_timestamp: int = NOW, keyed: bool = True) -> bytes:
    """Three records stamped NOW - 10.. NOW - 8 in a batch flagged LogAppendTime by a client."""
    rows = [SimpleRecord(b"v%d" % i, b"k" if keyed else None, NOW - 10 + i) for i in range(3)]
    data = build_batch(rows, now_ms=NOW, compression=codec)
    out = bytearray(data)
    out[ATTRIBUTES_OFFSET + 1] |= 0x08
    struct.pack_into(">q", out, 35, max_timestamp)
    return recrc(out)


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD], ids=str)
def test_a_producers_log_append_time_flag_is_cleared_on_a_create_time_topic(
    tmp_path, codec, native_or_not
):
    """As Kafka's LogValidator: each record's time is the batch's maxTimestamp while it is
    validated (in range here), then the batch is stored as CreateTime with that maxTimestamp,
    so readers see the records' own CreateTimes; the CRC is right."""
    from sparklog.records.batch import TimestampType

    log = open_log(tmp_path)
    info = log.append_as_leader(flagged(codec), 0, NOW + 5)
    assert info.log_append_time_ms == -1 and info.max_timestamp == NOW
    (stored,) = list(iter_batches(log.read(0, 1 << 20).records))
    stored.ensure_valid()
    assert stored.header.timestamp_type == TimestampType.CREATE_TIME
    assert stored.header.max_timestamp == NOW
    assert [r.timestamp for r in stored.records()] == [NOW - 10, NOW - 9, NOW - 8]
    log.append_as_leader(build_batch(records(2), now_ms=NOW), 0, NOW)  # unflagged: as sent
    assert [b.header.timestamp_type for b in iter_batches(log.read(0, 1 << 20).records)] == [
        TimestampType.CREATE_TIME,
        TimestampType.CREATE_TIME,
    ]


def test_a_producers_log_append_time_flag_is_checked_as_kafka_checks_it(tmp_path, native_or_not):
    """INVALID_TIMESTAMP, naming every record, where Kafka's validateTimestamp refuses the flag:
    on a LogAppendTime topic, and with maxTimestamp -1 on a CreateTime one; a maxTimestamp out
    of range is out of range for every record. Keyless records on a compacted topic get the key
    error instead (Kafka checks keys first)."""
    create_time = open_log(tmp_path / "c", **{"message.timestamp.after.max.ms": "1000"})
    error = refused(create_time, flagged(max_timestamp=-1), InvalidTimestampsError)
    assert [e.batch_index for e in error.record_errors] == [0, 1, 2]
    assert "Producer should not set timestamp type to LogAppendTime" in str(error)
    error = refused(create_time, flagged(max_timestamp=NOW + 5000), InvalidTimestampsError)
    assert [e.batch_index for e in error.record_errors] == [0, 1, 2]
    assert f"Timestamp {NOW + 5000} of message with offset 0 is out of range" in str(error)
    log_append_time = open_log(tmp_path / "l", **{"message.timestamp.type": "LogAppendTime"})
    for codec in (CompressionType.NONE, CompressionType.LZ4):
        error = refused(log_append_time, flagged(codec), InvalidTimestampsError)
        assert [e.batch_index for e in error.record_errors] == [0, 1, 2]
    compacted = open_log(
        tmp_path / "k", **{"message.timestamp.type": "LogAppendTime", "cleanup.policy": "compact"}
    )
    error = refused(compacted, flagged(keyed=False), InvalidTimestampsError)
    assert "Compacted topic cannot accept message without key" in error.record_errors[0].message
    assert create_time.log_end_offset == log_append_time.log_end_offset == 0
