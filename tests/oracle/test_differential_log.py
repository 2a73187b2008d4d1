"""A seeded random sequence of Produce / Fetch / ListOffsets / DeleteRecords / OffsetForLeaderEpoch
sent to Apache Kafka and to sparklog; after every step both answers must agree field by field.

`SPARKLOG_ORACLE_SEED=<n>` replays a sequence; a failure names its seed and step.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from typing import Any

import pytest

from sparklog.protocol.api_versions import ApiKey
from sparklog.records import CompressionType, SimpleRecord, build_batch
from sparklog.records.batch import CRC_OFFSET
from tests.integration.broker_wire import records_of

from .wire import NAMES, Pair, run

pytestmark = pytest.mark.oracle

SEED = int(os.environ.get("SPARKLOG_ORACLE_SEED", "20261124"))
STEPS = 150
EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def random_batch(rng: random.Random, now_ms: int, **kwargs: Any) -> bytes:
    rows = []
    for _ in range(rng.choice([1, 1, 3, 10, 40])):
        value = rng.choice([None, b"", rng.randbytes(rng.choice([5, 100, 1500]))])
        key = rng.choice([None, b"k%d" % rng.randrange(5)])
        headers = tuple((f"h{i}", rng.choice([None, b"x" * i])) for i in range(rng.randrange(3)))
        rows.append(SimpleRecord(value, key, now_ms - rng.randrange(100_000), headers))
    codec = rng.choice(list(CompressionType))
    return build_batch(rows, now_ms=now_ms, compression=codec, **kwargs)


def produce_body(topic: str, records: bytes, acks: int = -1) -> dict:
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout": 10_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }


def fetch_body(topic: str, offset: int, partition_max_bytes: int, max_bytes: int) -> dict:
    return {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "log_start_offset": -1,
                        "partition_max_bytes": partition_max_bytes,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def partition_of(response: dict, key: str = "responses", parts: str = "partitions") -> dict:
    return response[key][0][parts][0]


def comparable_fetch(response: dict) -> dict:
    p = partition_of(response)
    records = [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in records_of(p["records"] or b"")
    ]
    return {
        "error_code": p["error_code"],
        "high_watermark": p["high_watermark"],
        "last_stable_offset": p["last_stable_offset"],
        "log_start_offset": p["log_start_offset"],
        "records": records,
    }


def agree(step: int, what: str, answers: dict, pick) -> Any:
    kafka, ours = (pick(answers[n]) for n in NAMES)
    assert ours == kafka, f"seed {SEED} step {step} {what}: sparklog {ours} != Kafka {kafka}"
    return kafka


def list_offsets_body(topic: str, timestamp: int) -> dict:
    """A one-partition ListOffsets request."""
    return {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}
                ],
            }
        ],
    }


async def create(pair: Pair, topic: str, configs: dict[str, str] | None = None):
    """Create `topic` on both brokers and wait until each names its leader and serves it: a
    loaded Kafka names the leader in Metadata before its replica manager leads the partition,
    and answers NOT_LEADER_OR_FOLLOWER to a Produce or Fetch sent in between."""
    created = await _create(pair, topic, configs)
    deadline = time.monotonic() + 30
    request = {
        "topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    while time.monotonic() < deadline:
        answers = await pair.ask(ApiKey.METADATA, request)
        if all(_has_leader(a) for a in answers.values()):
            served = await pair.ask(ApiKey.LIST_OFFSETS, list_offsets_body(topic, LATEST))
            if all(_served(a) for a in served.values()):
                break
        await asyncio.sleep(0.05)
    return created


def _served(list_offsets: dict) -> bool:
    return all(p["error_code"] == 0 for t in list_offsets["topics"] for p in t["partitions"])


def _has_leader(metadata: dict) -> bool:
    topics = metadata.get("topics") or []
    partitions = topics[0].get("partitions") or [] if topics else []
    return bool(partitions) and all(
        p["error_code"] == 0 and p["leader_id"] >= 0 for p in partitions
    )


def _create(pair: Pair, topic: str, configs: dict[str, str] | None = None):
    return pair.ask(
        ApiKey.CREATE_TOPICS,
        {
            "topics": [
                {
                    "name": topic,
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
                }
            ],
            "timeout": 10_000,
            "validate_only": False,
        },
    )


def test_seeded_sequence_agrees_step_by_step(brokers):
    rng = random.Random(SEED)
    topic = unique("oracle-seq")

    async def go():
        async with Pair(brokers) as pair:
            await create(pair, topic)
            log_start, end, stamps = 0, 0, []
            for step in range(STEPS):
                op = rng.choices(
                    ["produce", "fetch", "list_offsets", "delete_records", "epoch"],
                    weights=[5, 4, 3, 1, 1],
                )[0]
                if op == "produce" or end == 0:
                    now = int(time.time() * 1000)
                    batch = random_batch(rng, now)
                    stamps.extend(r.timestamp for r in records_of(batch))
                    answers = await pair.ask(
                        ApiKey.PRODUCE, produce_body(topic, batch, rng.choice([1, -1]))
                    )
                    got = agree(
                        step,
                        "produce",
                        answers,
                        lambda r: {
                            k: partition_of(r, "responses", "partition_responses")[k]
                            for k in ("error_code", "base_offset", "log_start_offset")
                        },
                    )
                    end = got["base_offset"] + len(records_of(batch))
                elif op == "fetch":
                    offset = rng.randint(max(0, log_start - 2), end + 2)
                    limit = rng.choice([1, 200, 5000, 1 << 20])
                    answers = await pair.ask(
                        ApiKey.FETCH, fetch_body(topic, offset, limit, rng.choice([limit, 1 << 24]))
                    )
                    agree(step, f"fetch at {offset} max {limit}", answers, comparable_fetch)
                elif op == "list_offsets":
                    ts = rng.choice([EARLIEST, LATEST, MAX_TIMESTAMP, *stamps[-20:], stamps[0] - 1])
                    answers = await pair.ask(ApiKey.LIST_OFFSETS, list_offsets_body(topic, ts))
                    agree(
                        step,
                        f"list offsets at {ts}",
                        answers,
                        lambda r: {
                            k: partition_of(r, "topics")[k]
                            for k in ("error_code", "offset", "timestamp")
                        },
                    )
                elif op == "delete_records":
                    offset = rng.choice([rng.randint(log_start, end), end + 5, -1])
                    answers = await pair.ask(
                        ApiKey.DELETE_RECORDS,
                        {
                            "topics": [
                                {
                                    "name": topic,
                                    "partitions": [{"partition_index": 0, "offset": offset}],
                                }
                            ],
                            "timeout": 10_000,
                        },
                    )
                    got = agree(
                        step,
                        f"delete records before {offset}",
                        answers,
                        lambda r: {
                            k: partition_of(r, "topics")[k] for k in ("error_code", "low_watermark")
                        },
                    )
                    if got["error_code"] == 0:
                        log_start = got["low_watermark"]
                else:
                    epoch = rng.choice([0, 0, 3])
                    answers = await pair.ask(
                        ApiKey.OFFSET_FOR_LEADER_EPOCH,
                        {
                            "replica_id": -2,
                            "topics": [
                                {
                                    "topic": topic,
                                    "partitions": [
                                        {
                                            "partition": 0,
                                            "current_leader_epoch": -1,
                                            "leader_epoch": epoch,
                                        }
                                    ],
                                }
                            ],
                        },
                    )
                    agree(
                        step,
                        f"offset for leader epoch {epoch}",
                        answers,
                        lambda r: {
                            k: partition_of(r, "topics")[k]
                            for k in ("error_code", "leader_epoch", "end_offset")
                        },
                    )
            return end

    assert run(go()) > 0


def test_produce_errors_agree(brokers):
    topic = unique("oracle-errors")
    rng = random.Random(SEED + 1)

    async def go():
        async with Pair(brokers) as pair:
            await create(pair, topic, {"max.message.bytes": "2000"})
            now = int(time.time() * 1000)
            big = build_batch([SimpleRecord(rng.randbytes(5000), b"k", now)], now_ms=now)
            corrupt = bytearray(build_batch([SimpleRecord(b"v", b"k", now)], now_ms=now))
            corrupt[CRC_OFFSET] ^= 0xFF
            future = build_batch([SimpleRecord(b"v", b"k", now + 7_200_000)], now_ms=now)
            answers = {}
            for what, records in (
                ("too large", big),
                ("bad crc", bytes(corrupt)),
                ("future", future),
            ):
                answers[what] = await pair.ask(ApiKey.PRODUCE, produce_body(topic, records))
            unknown = await pair.ask(
                ApiKey.PRODUCE, produce_body(unique("no-such-topic-" + "x"), future)
            )
            return answers, unknown

    answers, _unknown = run(go())
    codes = {
        what: agree(
            0, what, a, lambda r: partition_of(r, "responses", "partition_responses")["error_code"]
        )
        for what, a in answers.items()
    }
    assert codes == {"too large": 10, "bad crc": 2, "future": 32}


def test_idempotent_sequences_agree(brokers):
    """Each broker hands out its own producer id; the sequence checks answer alike."""
    topic = unique("oracle-idempotent")

    async def go():
        async with Pair(brokers) as pair:
            await create(pair, topic)
            for _attempt in range(100):  # Kafka's coordinator may still be loading (14)
                init = await pair.ask(
                    ApiKey.INIT_PRODUCER_ID,
                    {"transactional_id": None, "transaction_timeout": 60_000},
                )
                if init["kafka"]["error_code"] != 14:
                    break
                await asyncio.sleep(0.2)
            assert [init[n]["error_code"] for n in NAMES] == [0, 0], init
            pids = {n: (init[n]["producer_id"], init[n]["producer_epoch"]) for n in NAMES}
            now = int(time.time() * 1000)
            results = []
            for seq in (0, 0, 1, 5, 2):  # first, duplicate, next, gap, next
                bodies = {}
                for name, (pid, epoch) in pids.items():
                    batch = build_batch(
                        [SimpleRecord(b"v%d" % seq, b"k", now)],
                        now_ms=now,
                        producer_id=pid,
                        producer_epoch=epoch,
                        base_sequence=seq,
                    )
                    bodies[name] = produce_body(topic, batch)
                answers = await pair.ask_each(ApiKey.PRODUCE, bodies)
                results.append(
                    {
                        n: (p["error_code"], p["base_offset"])
                        for n, p in (
                            (n, partition_of(answers[n], "responses", "partition_responses"))
                            for n in NAMES
                        )
                    }
                )
            return results

    results = run(go())
    for seq, answers in zip((0, 0, 1, 5, 2), results, strict=True):
        assert answers["sparklog"] == answers["kafka"], f"sequence {seq}: {answers}"
    assert [a["kafka"] for a in results] == [(0, 0), (0, 0), (0, 1), (45, -1), (0, 2)]
