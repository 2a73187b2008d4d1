"""Dynamic broker configs and group configs: Apache Kafka and sparklog answer
IncrementalAlterConfigs and DescribeConfigs on BROKER and GROUP resources alike (error codes,
values, sources, read-only flags and synonyms in Kafka's order).

The brokers are shared by the whole oracle session, so every cluster-wide change made here is
deleted again before the test ends."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from sparklog.protocol.api_versions import ApiKey

from .wire import NAMES, Pair, run

pytestmark = pytest.mark.oracle

BROKER, GROUP = 4, 32
SET, DELETE, APPEND = 0, 1, 2
#: Dynamic broker settings both implement (Kafka's defaults, none set by the oracle fixture).
BROKER_KEYS = [
    "log.cleaner.backoff.ms",
    "log.retention.ms",
    "log.segment.bytes",
    "message.max.bytes",
]
GROUP_KEYS = ["consumer.heartbeat.interval.ms", "consumer.session.timeout.ms"]


def alter_request(kind: int, name: str, ops: list[tuple[str, int, str | None]]) -> dict:
    return {
        "resources": [
            {
                "resource_type": kind,
                "resource_name": name,
                "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in ops],
            }
        ],
        "validate_only": False,
    }


def describe_request(kind: int, name: str, keys: list[str]) -> dict:
    return {
        "resources": [{"resource_type": kind, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": True,
        "include_documentation": False,
    }


def entries(answer: dict) -> dict[str, tuple]:
    (result,) = answer["results"]
    assert result["error_code"] == 0, result
    return {
        c["name"]: (
            c["value"],
            c["config_source"],
            c["read_only"],
            [(s["name"], s["value"], s["source"]) for s in c["synonyms"]],
        )
        for c in result["configs"]
    }


def alter_code(answer: dict) -> int:
    return answer["responses"][0]["error_code"]


def describe_code(answer: dict) -> int:
    return answer["results"][0]["error_code"]


async def describe_broker(pair: Pair, node_ids: dict[str, int]) -> dict:
    return await pair.ask_each(
        ApiKey.DESCRIBE_CONFIGS,
        {n: describe_request(BROKER, str(node_ids[n]), BROKER_KEYS) for n in NAMES},
    )


async def until_applied(pair: Pair, ask, check) -> dict:
    """Ask again (up to 5 s) until both brokers' images replayed the change: Kafka answers an
    alter once its controller committed it and describes from the broker's image."""
    for _ in range(50):
        answers = await ask()
        if all(check(answers[n]) for n in NAMES):
            return answers
        await asyncio.sleep(0.1)
    return answers


def test_dynamic_broker_configs_alike(brokers, apache_kafka):
    node_ids = {"kafka": 1, "sparklog": 0}

    async def go():
        steps: dict[str, dict] = {}
        async with Pair(brokers) as pair:
            steps["before"] = await describe_broker(pair, node_ids)
            ask = pair.ask
            try:
                steps["set default"] = await ask(
                    ApiKey.INCREMENTAL_ALTER_CONFIGS,
                    alter_request(
                        BROKER,
                        "",
                        [
                            ("log.retention.ms", SET, "7200000"),
                            ("message.max.bytes", SET, "2000000"),
                        ],
                    ),
                )
                steps["set broker"] = await pair.ask_each(
                    ApiKey.INCREMENTAL_ALTER_CONFIGS,
                    {
                        n: alter_request(
                            BROKER, str(node_ids[n]), [("log.cleaner.backoff.ms", SET, "20000")]
                        )
                        for n in NAMES
                    },
                )
                steps["after"] = await until_applied(
                    pair,
                    lambda: describe_broker(pair, node_ids),
                    lambda a: (
                        entries(a)["log.cleaner.backoff.ms"][0] == "20000"
                        and entries(a)["log.retention.ms"][0] == "7200000"
                    ),
                )
                steps["default"] = await until_applied(
                    pair,
                    lambda: ask(
                        ApiKey.DESCRIBE_CONFIGS,
                        describe_request(BROKER, "", ["log.retention.ms", "message.max.bytes"]),
                    ),
                    lambda a: len(entries(a)) == 2,
                )
                for label, ops in {
                    "static": [("num.partitions", SET, "3")],
                    "coarse spelling": [("log.retention.hours", SET, "3")],
                    "bad value": [("log.retention.ms", SET, "soon")],
                    "append to non-list": [("log.retention.ms", APPEND, "1")],
                    "duplicate": [("log.retention.ms", SET, "1"), ("log.retention.ms", SET, "2")],
                }.items():
                    steps[label] = await ask(
                        ApiKey.INCREMENTAL_ALTER_CONFIGS, alter_request(BROKER, "", ops)
                    )
                steps["bad name"] = await ask(
                    ApiKey.INCREMENTAL_ALTER_CONFIGS,
                    alter_request(BROKER, "abc", [("log.retention.ms", SET, "1")]),
                )
            finally:
                await ask(
                    ApiKey.INCREMENTAL_ALTER_CONFIGS,
                    alter_request(
                        BROKER,
                        "",
                        [("log.retention.ms", DELETE, None), ("message.max.bytes", DELETE, None)],
                    ),
                )
                await pair.ask_each(
                    ApiKey.INCREMENTAL_ALTER_CONFIGS,
                    {
                        n: alter_request(
                            BROKER, str(node_ids[n]), [("log.cleaner.backoff.ms", DELETE, None)]
                        )
                        for n in NAMES
                    },
                )
        return steps

    steps = run(go())
    before = {n: entries(steps["before"][n]) for n in NAMES}
    assert before["kafka"]["message.max.bytes"] == before["sparklog"]["message.max.bytes"]
    assert before["sparklog"]["message.max.bytes"][1:3] == (5, False)  # DEFAULT_CONFIG, dynamic
    assert (
        alter_code(steps["set default"]["kafka"])
        == alter_code(steps["set default"]["sparklog"])
        == 0
    )
    assert [alter_code(steps["set broker"][n]) for n in NAMES] == [0, 0]
    after = {n: entries(steps["after"][n]) for n in NAMES}
    assert after["kafka"] == after["sparklog"], after
    assert after["sparklog"]["log.retention.ms"] == (
        "7200000",
        3,  # DYNAMIC_DEFAULT_BROKER_CONFIG
        False,
        [("log.retention.ms", "7200000", 3), ("log.retention.hours", "168", 5)],
    )
    assert after["sparklog"]["log.cleaner.backoff.ms"][3] == [
        ("log.cleaner.backoff.ms", "20000", 2),  # DYNAMIC_BROKER_CONFIG
        ("log.cleaner.backoff.ms", "15000", 5),
    ]
    default = {n: entries(steps["default"][n]) for n in NAMES}
    assert default["kafka"] == default["sparklog"], default
    for label in (
        "static",
        "coarse spelling",
        "bad value",
        "append to non-list",
        "duplicate",
        "bad name",
    ):
        codes = [alter_code(steps[label][n]) for n in NAMES]
        assert codes[0] == codes[1], (label, steps[label])
    assert alter_code(steps["static"]["sparklog"]) == 42  # INVALID_REQUEST
    messages = [steps["static"][n]["responses"][0]["error_message"] for n in NAMES]
    assert messages[0] == messages[1] == "Cannot update these configs dynamically: [num.partitions]"
    assert alter_code(steps["append to non-list"]["sparklog"]) == 40  # INVALID_CONFIG


def test_group_configs_alike(brokers):
    group = f"oracle-group-{uuid.uuid4().hex[:8]}"

    async def go():
        steps: dict[str, dict] = {}
        async with Pair(brokers) as pair:
            ask = pair.ask
            steps["before"] = await ask(
                ApiKey.DESCRIBE_CONFIGS, describe_request(GROUP, group, GROUP_KEYS)
            )
            steps["set"] = await ask(
                ApiKey.INCREMENTAL_ALTER_CONFIGS,
                alter_request(GROUP, group, [("consumer.session.timeout.ms", SET, "50000")]),
            )
            steps["after"] = await until_applied(
                pair,
                lambda: ask(ApiKey.DESCRIBE_CONFIGS, describe_request(GROUP, group, GROUP_KEYS)),
                lambda a: entries(a)["consumer.session.timeout.ms"][0] == "50000",
            )
            for label, ops in {
                "below bound": [("consumer.session.timeout.ms", SET, "1000")],
                "above bound": [("consumer.heartbeat.interval.ms", SET, "99000")],
                "unknown": [("no.such.config", SET, "1")],
                "not a number": [("consumer.session.timeout.ms", SET, "soon")],
            }.items():
                steps[label] = await ask(
                    ApiKey.INCREMENTAL_ALTER_CONFIGS, alter_request(GROUP, group, ops)
                )
            steps["default resource"] = await ask(
                ApiKey.INCREMENTAL_ALTER_CONFIGS,
                alter_request(GROUP, "", [("consumer.session.timeout.ms", SET, "50000")]),
            )
            steps["describe empty"] = await ask(
                ApiKey.DESCRIBE_CONFIGS, describe_request(GROUP, "", GROUP_KEYS)
            )
        return steps

    steps = run(go())
    for step in ("before", "after"):
        kafka, ours = (entries(steps[step][n]) for n in NAMES)
        assert kafka == ours, (step, kafka, ours)
    assert entries(steps["after"]["sparklog"])["consumer.session.timeout.ms"][1:] == (
        8,  # GROUP_CONFIG
        False,
        [
            ("consumer.session.timeout.ms", "50000", 8),
            ("group.consumer.session.timeout.ms", "45000", 5),
        ],
    )
    for label, code in {
        "set": 0,
        "below bound": 40,
        "above bound": 40,
        "unknown": 40,
        "not a number": 40,
        "default resource": 42,
    }.items():
        assert [alter_code(steps[label][n]) for n in NAMES] == [code, code], steps[label]
    for label in ("below bound", "above bound", "unknown", "not a number"):
        messages = {steps[label][n]["responses"][0]["error_message"] for n in NAMES}
        assert len(messages) == 1, messages
    assert [describe_code(steps["describe empty"][n]) for n in NAMES] == [42, 42]
