"""Produce over a real socket: batches with a right CRC but lying contents are refused the way
Kafka refuses them (KIP-467 record errors included), nothing reaches the log, and a real
consumer reads every record before and after."""

from __future__ import annotations

import random
import struct
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from sparklog.records import CompressionType, SimpleRecord, build_batch
from sparklog.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, LENGTH_OFFSET
from sparklog.records.crc import crc32c

from .broker_wire import connect, create_topic, list_offset, now_ms, produce, run

CORRUPT_MESSAGE, INVALID_TIMESTAMP, INVALID_RECORD = 2, 32, 87


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def recrc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, CRC_OFFSET, crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]))
    return bytes(data)


def keyed(n: int, codec: CompressionType = CompressionType.NONE, start: int = 0) -> bytes:
    rows = [SimpleRecord(b"v%d" % i * 20, b"k%d" % i, now_ms()) for i in range(start, start + n)]
    return build_batch(rows, now_ms=now_ms(), compression=codec)


def consume_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        for _ in range(200):
            for m in consumer.consume(500, timeout=0.2):
                assert m.error() is None, f"consumer stopped at {m.offset()}: {m.error()}"
                got.append(m.value())
            if len(got) >= expected:
                break
    finally:
        consumer.close()
    return got


def test_wire_refusals_name_the_records_and_leave_the_log_readable(cluster):
    topic, compacted = unique("deep"), unique("compacted")

    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            await create_topic(conn, topic)
            await create_topic(conn, compacted, configs={"cleanup.policy": "compact"})
            answers = {"first": await produce(conn, topic, keyed(10, CompressionType.LZ4))}
            cut = bytearray(keyed(10, CompressionType.LZ4))[:-6]
            struct.pack_into(">i", cut, LENGTH_OFFSET, len(cut) - 12)
            answers["cut lz4"] = await produce(conn, topic, recrc(cut))
            lying = bytearray(keyed(3))
            lying[HEADER_SIZE] += 4  # the first record's length varint
            answers["lying length"] = await produce(conn, topic, recrc(lying))
            mixed = [SimpleRecord(b"a", b"k", now_ms()), SimpleRecord(b"b", None, now_ms())]
            batch = build_batch(mixed, now_ms=now_ms())
            answers["keyless"] = await produce(conn, compacted, batch)
            late = build_batch(
                [SimpleRecord(b"ok", b"k", now_ms()), SimpleRecord(b"x", b"k", now_ms() + 7200_000)]
            )
            answers["late"] = await produce(conn, topic, late)
            answers["last"] = await produce(conn, topic, keyed(5, start=10))
            ends = (await list_offset(conn, topic, -1), await list_offset(conn, compacted, -1))
            return answers, ends
        finally:
            await conn.close()

    answers, (end, compacted_end) = run(go())
    assert answers["first"].error_code == 0
    assert answers["cut lz4"].error_code == CORRUPT_MESSAGE
    assert answers["lying length"].error_code == INVALID_RECORD
    keyless = answers["keyless"]
    assert keyless.error_code == INVALID_RECORD
    assert [e.batch_index for e in keyless.record_errors] == [1]
    assert "Compacted topic cannot accept message without key" in (
        keyless.record_errors[0].batch_index_error_message
    )
    assert "1 record errors" in keyless.error_message
    late = answers["late"]
    assert late.error_code == INVALID_TIMESTAMP
    assert [e.batch_index for e in late.record_errors] == [1]
    assert answers["last"].error_code == 0 and answers["last"].base_offset == 10
    assert (end.offset, compacted_end.offset) == (15, 0)
    values = consume_all(cluster.bootstrap_servers, topic, 15)
    assert values == [b"v%d" % i * 20 for i in range(15)]


@pytest.mark.parametrize("codec", [c for c in CompressionType if c != CompressionType.NONE])
def test_mutated_compressed_produce_never_poisons_the_partition(cluster, codec):
    """Seeded mutations of valid compressed Produce batches (CRC fixed): every batch the broker
    accepts is read by confluent-kafka without an error; none stops the consumer."""
    seed = 1500 + int(codec)
    rng = random.Random(seed)
    topic = unique(f"fuzz-{codec.name.lower()}")

    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            await create_topic(conn, topic)
            good = keyed(30, codec)
            codes = []
            for _ in range(60):
                bad = bytearray(good)
                for _ in range(rng.randint(1, 3)):
                    bad[rng.randrange(HEADER_SIZE, len(bad))] = rng.randrange(256)
                codes.append((await produce(conn, topic, recrc(bad))).error_code)
            return codes, await list_offset(conn, topic, -1)
        finally:
            await conn.close()

    codes, end = run(go())
    assert set(codes) <= {0, CORRUPT_MESSAGE, INVALID_RECORD}, f"seed {seed}: {codes}"
    assert codes.count(0) * 30 == end.offset
    assert any(codes), f"seed {seed}: every mutation was accepted"
    assert len(consume_all(cluster.bootstrap_servers, topic, end.offset)) == end.offset


def test_confluent_producer_gets_invalid_record_for_a_keyless_record_on_a_compacted_topic(
    cluster,
):
    topic = unique("compacted-cf")

    async def setup():
        conn = await connect(cluster.bootstrap_servers)
        try:
            await create_topic(conn, topic, configs={"cleanup.policy": "compact"})
        finally:
            await conn.close()

    run(setup())
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 200, "retries": 0}
    )
    reports: dict[bytes, KafkaError | None] = {}

    def delivered(err, msg):
        reports[msg.value()] = err

    def send(batch: list[tuple[bytes, bytes | None]]) -> None:
        for value, key in batch:
            producer.produce(topic, value, key, partition=0, on_delivery=delivered)
        assert producer.flush(30) == 0

    # KIP-467: with two refused records, librdkafka fails just those with INVALID_RECORD and the
    # rest of the batch with _INVALID_DIFFERENT_RECORD.
    send([(b"keyed-1", b"k1"), (b"no-key-1", None), (b"keyed-2", b"k2"), (b"no-key-2", None)])
    assert reports[b"no-key-1"].code() == KafkaError.INVALID_RECORD
    assert reports[b"no-key-2"].code() == KafkaError.INVALID_RECORD
    assert reports[b"keyed-1"].code() == KafkaError._INVALID_DIFFERENT_RECORD
    assert reports[b"keyed-2"].code() == KafkaError._INVALID_DIFFERENT_RECORD
    # With one, librdkafka gives the partition's error to the whole batch (its
    # rd_kafka_dr_msgq0 forces it when record_errors has a single entry).
    send([(b"keyed-3", b"k3"), (b"no-key-3", None)])
    assert reports[b"no-key-3"].code() == KafkaError.INVALID_RECORD
    assert reports[b"keyed-3"].code() == KafkaError.INVALID_RECORD
    send([(b"alone", b"k4")])
    assert reports[b"alone"] is None


def test_a_compression_bomb_is_refused_with_record_too_large_and_the_broker_serves_on(
    tmp_path,
):
    """Issue 27: a zstd batch of a few KB holding 3 MiB of zeros, against a broker whose
    `sparklog.batch.decompressed.max.bytes` is 2 MiB: RECORD_TOO_LARGE over the wire (raw
    frames and librdkafka alike), nothing appended, and the next good batch lands at offset 0."""
    from sparklog.cluster.embedded import EmbeddedCluster

    from .conftest import TEST_CONFIG

    config = {**TEST_CONFIG, "sparklog.batch.decompressed.max.bytes": str(2 << 20)}
    topic = unique("bombs")
    bomb = build_batch(
        [SimpleRecord(bytes(3 << 20), None, now_ms())],
        now_ms=now_ms(),
        compression=CompressionType.ZSTD,
    )
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=config) as cluster:

        async def go():
            conn = await connect(cluster.bootstrap_servers)
            try:
                await create_topic(conn, topic)
                refused = await produce(conn, topic, bomb)
                fine = await produce(conn, topic, keyed(3, CompressionType.ZSTD))
                return refused, fine
            finally:
                await conn.close()

        refused, fine = run(go())
        assert refused.error_code == 10  # RECORD_TOO_LARGE (MESSAGE_TOO_LARGE)
        assert "sparklog.batch.decompressed.max.bytes" in refused.error_message
        assert (fine.error_code, fine.base_offset) == (0, 0)
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "compression.type": "zstd",
                "message.max.bytes": 10_000_000,  # librdkafka checks the size before compressing
                "retries": 0,
            }
        )
        reports = []
        producer.produce(
            topic, bytes(3 << 20), partition=0, on_delivery=lambda e, m: reports.append(e)
        )
        producer.produce(topic, b"small", partition=0, on_delivery=lambda e, m: reports.append(e))
        assert producer.flush(30) == 0
        assert [e.code() if e else None for e in reports] == [KafkaError.MSG_SIZE_TOO_LARGE, None]
        assert consume_all(cluster.bootstrap_servers, topic, 4)[-1] == b"small"
