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


RECORD_TOO_LARGE = 10


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
