"""Authorized operations asked of Apache Kafka and of sparklog, neither with an authorizer:
the same bit fields for the cluster, topics (known and unknown) and groups, and the omitted
value (INT32_MIN) when the client does not ask (issue 29 item 4)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from sparklog.protocol.api_versions import ApiKey

from .wire import NAMES, Pair, run

pytestmark = pytest.mark.oracle

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")

OMITTED = -(2**31)


def metadata(topics: list[str], *, include: bool) -> dict:
    return {
        "topics": [{"name": t, "topic_id": None} for t in topics],
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": include,  # v8-v10
        "include_topic_authorized_operations": include,
    }


def topic_operations(answer: dict) -> dict[str, tuple[int, int]]:
    return {
        t["name"]: (t["error_code"], t["topic_authorized_operations"]) for t in answer["topics"]
    }


def test_cluster_and_topic_operations_match_kafka(brokers):
    topic, unknown = f"ops-{uuid.uuid4().hex[:8]}", f"ops-missing-{uuid.uuid4().hex[:8]}"

    async def go():
        async with Pair(brokers) as pair:
            created = await pair.ask(
                ApiKey.CREATE_TOPICS,
                {
                    "topics": [
                        {
                            "name": topic,
                            "num_partitions": 1,
                            "replication_factor": 1,
                            "assignments": [],
                            "configs": [],
                        }
                    ],
                    "timeout": 10_000,
                    "validate_only": False,
                },
            )
            assert all(a["topics"][0]["error_code"] == 0 for a in created.values())
            # CreateTopics answers before every broker's metadata has the topic (Kafka's too,
            # on a loaded machine): wait until both list it
            for _ in range(100):
                seen = await pair.ask(ApiKey.METADATA, metadata([topic], include=False), 10)
                if all(a["topics"][0]["error_code"] == 0 for a in seen.values()):
                    break
                await asyncio.sleep(0.05)
            answers = {}
            for version in (10, pair.version(ApiKey.METADATA)):
                for include in (True, False):
                    answers[version, include] = await pair.ask(
                        ApiKey.METADATA, metadata([topic, unknown], include=include), version
                    )
            for include in (True, False):
                answers["cluster", include] = await pair.ask(
                    ApiKey.DESCRIBE_CLUSTER,
                    {"include_cluster_authorized_operations": include, "endpoint_type": 1},
                )
            return answers

    answers = run(go())
    for (version, include), answer in answers.items():
        kafka, ours = (answer[n] for n in NAMES)
        if version == "cluster":
            got = [a["cluster_authorized_operations"] for a in (kafka, ours)]
            assert got[1] == got[0], f"DescribeCluster include={include}: sparklog {got[1]}"
            assert (got[0] == OMITTED) is not include
            continue
        assert topic_operations(ours) == topic_operations(kafka), (version, include)
        if "cluster_authorized_operations" in kafka:
            got = [a["cluster_authorized_operations"] for a in (kafka, ours)]
            assert got[1] == got[0], f"Metadata v{version} include={include}: sparklog {got[1]}"
    assert topic_operations(answers[10, True][NAMES[0]])[topic][1] != OMITTED


def describe_group_operations(bootstrap: str, protocol: str) -> dict[str, set | None]:
    """A live group (one member) and a group that does not exist, described with their
    authorized operations, as confluent-kafka reports them."""
    topic, group = f"ops-{uuid.uuid4().hex[:8]}", f"ops-{protocol}-{uuid.uuid4().hex[:6]}"
    admin = confluent_admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([confluent_admin.NewTopic(topic, 1, 1)])[topic].result(30)
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol}
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.1)
        assert consumer.assignment(), f"no assignment from {bootstrap}"
        futures = admin.describe_consumer_groups([group], include_authorized_operations=True)
        described = futures[group].result(30)
        return {
            "live": set(described.authorized_operations or ()),
            "omitted": admin.describe_consumer_groups([group])[group]
            .result(30)
            .authorized_operations,
        }
    finally:
        consumer.close()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_operations_match_kafka(brokers, protocol):
    kafka, ours = (describe_group_operations(brokers[n], protocol) for n in NAMES)
    assert kafka["live"], "Kafka answered no group operations"
    assert ours == kafka
