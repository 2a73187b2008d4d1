"""controller_mutation_rate (KIP-599): Apache Kafka and sparklog answer the same over-quota
CreateTopics v6 with the same per-topic errors (THROTTLING_QUOTA_EXCEEDED for the topics that
arrive once the token bucket is below zero, the same message) and a throttle time."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from sparklog.protocol import codec, kio_build
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.async_client import AsyncKafkaConnection
from tests.integration.broker_wire import host_port
from tests.support.quota_records import set_client_quota

from .wire import NAMES, plain, run

pytestmark = pytest.mark.oracle

#: AlterClientQuotas (Kafka's api key 49)
ALTER_CLIENT_QUOTAS = 49
RATE = 1.0  # partitions/s: a bucket of 11 (11 windows of 1 s, both sides' defaults)


async def _ask(bootstrap: str, client_id: str, api_key: int, version: int, data: dict) -> Any:
    host, port = host_port(bootstrap)
    conn = await AsyncKafkaConnection(host, port, client_id=client_id).connect()
    try:
        body = kio_build.build(codec.request_schema(api_key, version), data)
        return plain(await conn.request(body))
    finally:
        await conn.close()


def _quota_on_kafka(bootstrap: str, client_id: str) -> None:
    entry = {
        "entity": [{"entity_type": "client-id", "entity_name": client_id}],
        "ops": [{"key": "controller_mutation_rate", "value": RATE, "remove": False}],
    }
    answer = run(
        _ask(
            bootstrap,
            "oracle",
            ALTER_CLIENT_QUOTAS,
            1,
            {"entries": [entry], "validate_only": False},
        )
    )
    assert answer["entries"][0]["error_code"] == 0, answer
    # Kafka's controller applies the record from its log a moment after answering: wait until
    # DescribeClientQuotas shows it (the broker's image) and a little for the controller's
    deadline = time.monotonic() + 30
    while True:
        described = run(
            _ask(
                bootstrap,
                "oracle",
                ApiKey.DESCRIBE_CLIENT_QUOTAS,
                1,
                {
                    "components": [
                        {"entity_type": "client-id", "match_type": 0, "match": client_id}
                    ],
                    "strict": False,
                },
            )
        )
        if described["entries"]:
            break
        assert time.monotonic() < deadline, described
        time.sleep(0.05)


def _topic(name: str, partitions: int) -> dict[str, Any]:
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": 1,
        "assignments": [],
        "configs": [],
    }


def test_over_quota_create_topics_v6_gets_the_same_per_topic_errors(
    brokers: dict[str, str], sparklog_cluster: Any
) -> None:
    client_id = f"mutator-{uuid.uuid4().hex[:8]}"
    _quota_on_kafka(brokers["kafka"], client_id)
    set_client_quota(sparklog_cluster, {"client-id": client_id}, "controller_mutation_rate", RATE)
    prefix = uuid.uuid4().hex[:8]

    async def create(bootstrap: str, suffix: str) -> Any:
        topics = [_topic(f"{prefix}-{suffix}-{t}", n) for t, n in (("a", 8), ("b", 8), ("c", 1))]
        data = {"topics": topics, "timeout": 30_000, "validate_only": False}
        return await _ask(bootstrap, client_id, ApiKey.CREATE_TOPICS, 6, data)

    async def both() -> dict[str, Any]:
        answers = await asyncio.gather(*(create(brokers[n], n) for n in NAMES))
        return dict(zip(NAMES, answers, strict=True))

    answers = run(both())
    results = {
        n: [(t["error_code"], t["error_message"]) for t in a["topics"]] for n, a in answers.items()
    }
    assert results["kafka"] == results["sparklog"], answers
    assert [code for code, _ in results["kafka"]] == [0, 0, 89]
    assert all(a["throttle_time"] > 0 for a in answers.values()), answers

    # the bucket is below zero: CreatePartitions v3 and DeleteTopics v5 are refused alike
    async def mutate(bootstrap: str, suffix: str) -> tuple[Any, Any]:
        grown = await _ask(
            bootstrap,
            client_id,
            ApiKey.CREATE_PARTITIONS,
            3,
            {
                "topics": [{"name": f"{prefix}-{suffix}-a", "count": 9, "assignments": None}],
                "timeout": 30_000,
                "validate_only": False,
            },
        )
        deleted = await _ask(
            bootstrap,
            client_id,
            ApiKey.DELETE_TOPICS,
            5,
            {"topic_names": [f"{prefix}-{suffix}-b"], "timeout": 30_000},
        )
        return grown, deleted

    async def both_mutations() -> dict[str, Any]:
        answers = await asyncio.gather(*(mutate(brokers[n], n) for n in NAMES))
        return dict(zip(NAMES, answers, strict=True))

    mutations = run(both_mutations())
    refused = {
        n: (
            [(r["error_code"], r["error_message"]) for r in grown["results"]],
            [(r["error_code"], r["error_message"]) for r in deleted["responses"]],
        )
        for n, (grown, deleted) in mutations.items()
    }
    assert refused["kafka"] == refused["sparklog"], mutations
    assert refused["kafka"][0][0][0] == 89 and refused["kafka"][1][0][0] == 89
