"""Batches whose CRC is right but whose contents lie, sent to Apache Kafka and to sparklog: both
refuse them (the codes may differ where docs/differences.md says why), and both keep serving."""

from __future__ import annotations

import struct
import time
import uuid

import pytest

from sparklog.protocol.api_versions import ApiKey
from sparklog.records import CompressionType, SimpleRecord, build_batch
from sparklog.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, LENGTH_OFFSET
from sparklog.records.crc import crc32c

from .test_differential_log import create, partition_of, produce_body
from .wire import NAMES, Pair, run

pytestmark = pytest.mark.oracle

NONE, CORRUPT_MESSAGE, INVALID_RECORD, UNKNOWN_SERVER_ERROR = 0, 2, 87, -1


def recrc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, CRC_OFFSET, crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]))
    return bytes(data)


def records(n: int, codec=CompressionType.NONE, **kwargs) -> bytes:
    now = int(time.time() * 1000)
    rows = [SimpleRecord(b"value-%d" % i * 10, b"k%d" % i, now) for i in range(n)]
    return build_batch(rows, now_ms=now, compression=codec, **kwargs)


def cases() -> dict[str, bytes]:
    out = {}
    cut = bytearray(records(20, CompressionType.LZ4))[:-6]
    struct.pack_into(">i", cut, LENGTH_OFFSET, len(cut) - 12)
    out["lz4 stream cut short"] = recrc(cut)
    bad_gzip = bytearray(records(20, CompressionType.GZIP))
    bad_gzip[HEADER_SIZE] ^= 0xFF
    out["gzip magic damaged"] = recrc(bad_gzip)
    lying = bytearray(records(3))
    lying[HEADER_SIZE] += 4
    out["first record length lies"] = recrc(lying)
    trailing = bytearray(records(2)) + b"\x00\x00"
    struct.pack_into(">i", trailing, LENGTH_OFFSET, len(trailing) - 12)
    out["trailing bytes"] = recrc(trailing)
    out["two batches in one produce"] = records(2) + records(2)
    out["offset deltas out of order"] = records(3, offset_deltas=[1, 0, 2])
    return out


#: What each broker answers (Kafka's answer measured against Apache Kafka 4.4).
EXPECTED = {
    "lz4 stream cut short": {"kafka": UNKNOWN_SERVER_ERROR, "sparklog": CORRUPT_MESSAGE},
    "gzip magic damaged": {"kafka": UNKNOWN_SERVER_ERROR, "sparklog": CORRUPT_MESSAGE},
    "first record length lies": {"kafka": INVALID_RECORD, "sparklog": INVALID_RECORD},
    "trailing bytes": {"kafka": INVALID_RECORD, "sparklog": INVALID_RECORD},
    "two batches in one produce": {"kafka": INVALID_RECORD, "sparklog": INVALID_RECORD},
    "offset deltas out of order": {"kafka": NONE, "sparklog": INVALID_RECORD},
}


def test_lying_batches_are_refused_by_both(brokers):
    topic = f"oracle-validation-{uuid.uuid4().hex[:8]}"

    async def go():
        async with Pair(brokers) as pair:
            await create(pair, topic)
            got = {}
            for name, data in cases().items():
                answers = await pair.ask(ApiKey.PRODUCE, produce_body(topic, data))
                got[name] = {
                    n: partition_of(answers[n], "responses", "partition_responses")["error_code"]
                    for n in NAMES
                }
            fine = await pair.ask(ApiKey.PRODUCE, produce_body(topic, records(1)))
            return got, fine

    got, fine = run(go())
    assert got == EXPECTED
    assert [
        partition_of(fine[n], "responses", "partition_responses")["error_code"] for n in NAMES
    ] == [0, 0]


INVALID_TIMESTAMP, RECORD_TOO_LARGE = 32, 10


def flagged(max_timestamp: int, codec=CompressionType.NONE) -> bytes:
    """Three records (CreateTimes now - 30 s .. now - 28 s) in a batch a client flagged
    LogAppendTime, with `max_timestamp` in its header."""
    now = int(time.time() * 1000)
    rows = [SimpleRecord(b"v%d" % i, b"k", now - 30_000 + 1000 * i) for i in range(3)]
    data = bytearray(build_batch(rows, now_ms=now, compression=codec))
    data[ATTRIBUTES_OFFSET + 1] |= 0x08
    struct.pack_into(">q", data, 35, max_timestamp)
    return recrc(data)


def test_a_producers_log_append_time_flag_is_treated_alike(brokers):
    """Issue 27: Kafka's LogValidator sets a batch's timestamp type to the topic's. On a
    CreateTime topic a flagged batch whose maxTimestamp is in range is stored as CreateTime
    (maxTimestamp kept, records read their own CreateTimes); with maxTimestamp -1, or on a
    LogAppendTime topic, it is refused with INVALID_TIMESTAMP."""
    from sparklog.records import iter_batches

    from .test_differential_log import fetch_body

    create_time = f"oracle-flag-ct-{uuid.uuid4().hex[:8]}"
    log_append_time = f"oracle-flag-lat-{uuid.uuid4().hex[:8]}"
    now = int(time.time() * 1000)

    async def go():
        async with Pair(brokers) as pair:
            await create(pair, create_time)
            await create(pair, log_append_time, {"message.timestamp.type": "LogAppendTime"})
            sends = [
                (create_time, flagged(now)),
                (create_time, flagged(now, CompressionType.ZSTD)),
                (create_time, flagged(-1)),
                (log_append_time, flagged(now)),
                (log_append_time, flagged(now, CompressionType.LZ4)),
            ]
            codes = []
            for topic, data in sends:
                answers = await pair.ask(ApiKey.PRODUCE, produce_body(topic, data))
                codes.append(
                    {
                        n: partition_of(answers[n], "responses", "partition_responses")[
                            "error_code"
                        ]
                        for n in NAMES
                    }
                )
            fetched = await pair.ask(ApiKey.FETCH, fetch_body(create_time, 0, 1 << 20, 1 << 20))
            return codes, fetched

    codes, fetched = run(go())
    expected = [NONE, NONE, INVALID_TIMESTAMP, INVALID_TIMESTAMP, INVALID_TIMESTAMP]
    assert codes == [{"kafka": c, "sparklog": c} for c in expected]
    stored = {}
    for name in NAMES:
        raw = partition_of(fetched[name])["records"]
        stored[name] = []
        for batch in iter_batches(raw):
            batch.ensure_valid()
            h = batch.header
            times = [r.timestamp for r in batch.records()]
            stored[name].append((h.timestamp_type, h.max_timestamp, h.base_offset, times))
    assert stored["sparklog"] == stored["kafka"]
    assert [s[:2] for s in stored["kafka"]] == [(0, now), (0, now)]  # CreateTime, kept


def librdkafka_style(timestamps: list[int], header_max: int, codec=CompressionType.NONE) -> bytes:
    """A batch as librdkafka writes one for records with no timestamp (-1): baseTimestamp the
    first record's, deltas from it, and `header_max` as maxTimestamp (librdkafka writes 0)."""
    rows = [SimpleRecord(b"v%d" % i, b"k%d" % i, ts) for i, ts in enumerate(timestamps)]
    now = int(time.time() * 1000)
    data = bytearray(build_batch(rows, now_ms=now, compression=codec))
    struct.pack_into(">q", data, 35, header_max)
    return recrc(data)


def test_batches_kafka_accepts_with_a_rewritten_max_timestamp(brokers):
    """Issue 29: Kafka's LogValidator stores a CreateTime batch with maxTimestamp set to its
    records' latest timestamp (-1 when none is later), whatever the client wrote; sparklog
    refused these with INVALID_RECORD (librdkafka's batches of records without a timestamp
    among them). On a LogAppendTime topic both stamp the append time. Both brokers must store
    the same headers and record timestamps (the append time aside)."""
    from sparklog.records import iter_batches

    from .test_differential_log import fetch_body

    now = int(time.time() * 1000)
    sends = [
        librdkafka_style([-1, -1, -1], 0),
        librdkafka_style([-1, -1, -1], 0, CompressionType.ZSTD),
        librdkafka_style([-1, now - 5_000, -1, now - 9_000], 0),
        librdkafka_style([-1, now - 5_000], 0, CompressionType.LZ4),
        librdkafka_style([now - 2_000, now - 1_000], now + 60_000),  # a lying maxTimestamp
    ]
    create_time = f"oracle-nots-ct-{uuid.uuid4().hex[:8]}"
    log_append_time = f"oracle-nots-lat-{uuid.uuid4().hex[:8]}"

    async def go():
        async with Pair(brokers) as pair:
            await create(pair, create_time)
            await create(pair, log_append_time, {"message.timestamp.type": "LogAppendTime"})
            codes, fetched = [], {}
            for topic in (create_time, log_append_time):
                for data in sends:
                    answers = await pair.ask(ApiKey.PRODUCE, produce_body(topic, data))
                    codes.append(
                        {
                            n: partition_of(answers[n], "responses", "partition_responses")[
                                "error_code"
                            ]
                            for n in NAMES
                        }
                    )
                fetched[topic] = await pair.ask(
                    ApiKey.FETCH, fetch_body(topic, 0, 1 << 20, 1 << 20)
                )
            return codes, fetched

    codes, fetched = run(go())
    assert codes == [{"kafka": NONE, "sparklog": NONE}] * (2 * len(sends))
    stored: dict[str, dict[str, list]] = {}
    for topic, responses in fetched.items():
        for name in NAMES:
            rows = stored.setdefault(topic, {}).setdefault(name, [])
            for batch in iter_batches(partition_of(responses[name])["records"]):
                batch.ensure_valid()
                h = batch.header
                times = [r.timestamp for r in batch.records()]
                if h.timestamp_type == 1:  # the append time differs: every record reads it
                    assert times == [h.max_timestamp] * len(times) and h.max_timestamp >= now
                    times, max_timestamp = None, "append time"
                else:
                    max_timestamp = h.max_timestamp
                rows.append((h.timestamp_type, max_timestamp, h.base_offset, times))
    for topic in stored:
        assert stored[topic]["sparklog"] == stored[topic]["kafka"], topic
    assert [row[:2] for row in stored[create_time]["kafka"]] == [
        (0, -1),
        (0, -1),
        (0, now - 5_000),
        (0, now - 5_000),
        (0, now - 1_000),
    ]
    assert {row[:2] for row in stored[log_append_time]["kafka"]} == {(1, "append time")}


def test_a_compression_bomb_is_stored_by_kafka_and_refused_by_sparklog(brokers):
    """Issue 27, a kept difference: 101 MiB of zeros in a 4 KB zstd batch. Kafka's validator
    streams the records without keeping them and stores the batch (every reader then unpacks
    101 MiB); sparklog refuses it with RECORD_TOO_LARGE past its
    `sparklog.batch.decompressed.max.bytes` (100 MiB). Both serve the next batch."""
    import zstandard

    topic = f"oracle-bomb-{uuid.uuid4().hex[:8]}"
    size = 101 << 20
    now = int(time.time() * 1000)
    head = b"\x00\x00\x00\x01" + _varint(size)  # attributes, ts delta, offset delta, no key
    body_size = len(head) + size + 1
    z = zstandard.ZstdCompressor().compressobj()
    payload = z.compress(_varint(body_size) + head)
    for _ in range(size >> 20):
        payload += z.compress(bytes(1 << 20))
    payload += z.compress(bytes(size & ((1 << 20) - 1)) + b"\x00") + z.flush()
    bomb = bytearray(records(1, CompressionType.ZSTD)[:HEADER_SIZE]) + payload
    struct.pack_into(">i", bomb, LENGTH_OFFSET, len(bomb) - 12)
    struct.pack_into(">qq", bomb, 27, now, now)
    bomb = recrc(bomb)
    assert len(bomb) < 8192

    async def go():
        async with Pair(brokers) as pair:
            await create(pair, topic)
            answers = await pair.ask(ApiKey.PRODUCE, produce_body(topic, bomb))
            fine = await pair.ask(ApiKey.PRODUCE, produce_body(topic, records(1)))
            return answers, fine

    answers, fine = run(go())
    got = {n: partition_of(answers[n], "responses", "partition_responses") for n in NAMES}
    assert {n: got[n]["error_code"] for n in NAMES} == {
        "kafka": NONE,
        "sparklog": RECORD_TOO_LARGE,
    }
    assert "sparklog.batch.decompressed.max.bytes" in got["sparklog"]["error_message"]
    assert [
        partition_of(fine[n], "responses", "partition_responses")["error_code"] for n in NAMES
    ] == [0, 0]


def _varint(value: int) -> bytes:
    from sparklog.records.varint import encode_varint

    return encode_varint(value)
