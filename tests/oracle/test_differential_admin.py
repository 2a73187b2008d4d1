"""Topic admin sent to Apache Kafka and to sparklog: the same error codes, field by field."""

from __future__ import annotations

import uuid

import pytest

from sparklog.protocol.api_versions import ApiKey

from .wire import NAMES, Pair, run

pytestmark = pytest.mark.oracle


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_topic(name: str, partitions: int = 1, rf: int = 1, configs=None) -> dict:
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": rf,
        "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
    }


def codes_by_name(response: dict, items: str = "topics") -> dict[str, int]:
    return {t["name"]: t["error_code"] for t in response[items]}


def both_equal(answers: dict, key=codes_by_name) -> dict:
    kafka, ours = (key(answers[n]) for n in NAMES)
    assert ours == kafka, f"sparklog {ours} != Kafka {kafka}"
    return kafka


def test_create_topics_validation(brokers):
    base = unique("create")
    cases = [
        new_topic(f"{base}-ok", 2),
        new_topic(f"{base}/bad"),
        new_topic("x" * 250),
        new_topic(".."),
        new_topic("."),
        new_topic(f"{base}-rf", rf=3),
        new_topic(f"{base}-p0", partitions=0),
        new_topic(f"{base}-defaults", partitions=-1, rf=-1),
        new_topic(f"{base}-badcfg", configs={"cleanup.policy": "foo"}),
        new_topic(f"{base}-badnum", configs={"retention.ms": "soon"}),
        new_topic(f"{base}-unknowncfg", configs={"no.such.config": "1"}),
        new_topic(f"{base}-goodcfg", configs={"cleanup.policy": "compact", "retention.ms": "1000"}),
    ]

    async def go():
        async with Pair(brokers) as pair:
            first = await pair.ask(
                ApiKey.CREATE_TOPICS, {"topics": cases, "timeout": 10_000, "validate_only": False}
            )
            again = await pair.ask(
                ApiKey.CREATE_TOPICS,
                {"topics": [new_topic(f"{base}-ok")], "timeout": 10_000, "validate_only": False},
            )
            dry = await pair.ask(
                ApiKey.CREATE_TOPICS,
                {"topics": [new_topic(f"{base}-dry")], "timeout": 10_000, "validate_only": True},
            )
            meta = await pair.ask(
                ApiKey.METADATA,
                {
                    "topics": [
                        {"name": f"{base}-dry", "topic_id": None},
                        {"name": f"{base}-defaults", "topic_id": None},
                    ],
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
            )
            return first, again, dry, meta

    first, again, dry, meta = run(go())
    codes = both_equal(first)
    assert codes[f"{base}-ok"] == 0 and codes[f"{base}/bad"] == 17 and codes[f"{base}-rf"] == 38
    assert both_equal(again) == {f"{base}-ok": 36}  # TOPIC_ALREADY_EXISTS
    assert both_equal(dry) == {f"{base}-dry": 0}
    # validate_only created nothing; -1/-1 took the broker defaults (num.partitions=1)
    assert both_equal(meta) == {f"{base}-dry": 3, f"{base}-defaults": 0}
    for name in NAMES:
        (created,) = [t for t in meta[name]["topics"] if t["name"] == f"{base}-defaults"]
        assert len(created["partitions"]) == 1


def test_create_topics_that_collide_on_dot_and_underscore(brokers):
    base = unique("collide").replace("-", "_")

    async def go():
        async with Pair(brokers) as pair:
            body = {"topics": [new_topic(f"{base}.a")], "timeout": 10_000, "validate_only": False}
            await pair.ask(ApiKey.CREATE_TOPICS, body)
            body["topics"] = [new_topic(f"{base}_a")]
            return await pair.ask(ApiKey.CREATE_TOPICS, body)

    assert both_equal(run(go())) == {f"{base}_a": 17}  # INVALID_TOPIC_EXCEPTION


def test_a_request_over_the_controller_record_budget_is_a_policy_violation(brokers):
    """12,000 partitions in one CreateTopics: more than the 10,000 records one controller write
    may hold (KAFKA-14996 / KAFKA-17870), refused by both with POLICY_VIOLATION."""
    base = unique("budget")
    topics = [new_topic(f"{base}-{i}", 6_000) for i in range(2)]

    async def go():
        async with Pair(brokers) as pair:
            return await pair.ask(
                ApiKey.CREATE_TOPICS, {"topics": topics, "timeout": 10_000, "validate_only": True}
            )

    assert both_equal(run(go())) == {f"{base}-0": 44, f"{base}-1": 44}


def test_create_partitions_and_delete_topics(brokers):
    topic, missing = unique("grow"), unique("missing")

    async def go():
        async with Pair(brokers) as pair:
            await pair.ask(
                ApiKey.CREATE_TOPICS,
                {"topics": [new_topic(topic, 2)], "timeout": 10_000, "validate_only": False},
            )
            answers = []
            for count, name in ((4, topic), (4, topic), (3, topic), (2, missing)):
                answers.append(
                    await pair.ask(
                        ApiKey.CREATE_PARTITIONS,
                        {
                            "topics": [{"name": name, "count": count, "assignments": None}],
                            "timeout": 10_000,
                            "validate_only": False,
                        },
                    )
                )
            deleted = await pair.ask(
                ApiKey.DELETE_TOPICS,
                {"topic_names": [topic, missing], "timeout": 10_000},
            )
            return answers, deleted

    answers, deleted = run(go())
    codes = [both_equal(a, lambda r: codes_by_name(r, "results")) for a in answers]
    assert codes == [{topic: 0}, {topic: 37}, {topic: 37}, {missing: 3}]
    assert both_equal(deleted, lambda r: codes_by_name(r, "responses")) == {topic: 0, missing: 3}
