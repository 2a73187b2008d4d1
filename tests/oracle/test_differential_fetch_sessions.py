"""Incremental fetch sessions (KIP-227) step by step against Apache Kafka: the same requests on a
session each broker handed out, compared by error, whether a session id came back and which
partitions were answered with what."""

from __future__ import annotations

import pytest

from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.fetch_session_handler import forgotten_topics
from sparklog.records import SimpleRecord, build_batch
from tests.integration.broker_wire import records_of

from .test_differential_log import create, fetch_body, produce_body, unique
from .wire import NAMES, Pair, run

pytestmark = pytest.mark.oracle

FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH = 70, 71


def session_fetch(
    session_id: int,
    epoch: int,
    offsets: dict[str, int],
    forget: tuple[str, ...] = (),
) -> dict:
    """test_differential_log's one-partition Fetch, for several topics, on a session."""
    body = fetch_body("", 0, 1 << 20, 1 << 20)
    body["topics"] = [fetch_body(t, o, 1 << 20, 1 << 20)["topics"][0] for t, o in offsets.items()]
    body.update(
        session_id=session_id,
        session_epoch=epoch,
        forgotten_topics_data=forgotten_topics((t, 0) for t in forget),
    )
    return body


def summary(response: dict, names: dict[str, str]) -> tuple:
    """(error, has a session id, [(topic, partition, error, high watermark, record count)])."""
    answered = sorted(
        (
            names[t["topic"]],
            p["partition_index"],
            p["error_code"],
            p["high_watermark"],
            len(records_of(p["records"] or b"")),
        )
        for t in response["responses"]
        for p in t["partitions"]
    )
    return response["error_code"], response["session_id"] != 0, answered


def test_a_fetch_session_runs_as_on_kafka(brokers):
    a, b, c = (unique(f"session-{x}") for x in "abc")
    names = {a: "a", b: "b", c: "c"}
    batch = build_batch([SimpleRecord(b"v", b"k", 1_700_000_000_000)])

    async def go():
        steps: list[dict[str, tuple]] = []
        async with Pair(brokers) as pair:
            for topic in (a, b, c):
                await create(pair, topic)
            await pair.ask(ApiKey.PRODUCE, produce_body(a, batch))

            async def step(bodies: dict[str, dict]) -> dict[str, dict]:
                answers = await pair.ask_each(ApiKey.FETCH, bodies)
                steps.append({n: summary(answers[n], names) for n in NAMES})
                return answers

            everyone = {a: 0, b: 0, c: 0}
            opened = await step({n: session_fetch(0, 0, everyone) for n in NAMES})
            ids = {n: opened[n]["session_id"] for n in NAMES}
            # a moved to 1: nothing new anywhere, so nothing is answered
            await step({n: session_fetch(ids[n], 1, {a: 1}) for n in NAMES})
            await pair.ask(ApiKey.PRODUCE, produce_body(b, batch))
            await step({n: session_fetch(ids[n], 2, {}) for n in NAMES})  # b, with its record
            await step({n: session_fetch(ids[n], 2, {}) for n in NAMES})  # a replayed epoch
            await step({n: session_fetch(ids[n] ^ 0x5A5A, 1, {}) for n in NAMES})  # unknown id
            await step({n: session_fetch(ids[n], 3, {}, forget=(b, c)) for n in NAMES})
            await pair.ask(ApiKey.PRODUCE, produce_body(c, batch))
            await step({n: session_fetch(ids[n], 4, {}) for n in NAMES})  # c is no longer watched
            await step({n: session_fetch(ids[n], -1, {a: 0}) for n in NAMES})  # closed: sessionless
            await step({n: session_fetch(ids[n], 5, {}) for n in NAMES})  # ... and gone
        return steps

    steps = run(go())
    for number, answers in enumerate(steps):
        assert answers["sparklog"] == answers["kafka"], f"step {number}: {answers}"
    # The sequence exercised what it means to: news only, and both session errors.
    assert steps[1]["kafka"][2] == [] and [x[0] for x in steps[2]["kafka"][2]] == ["b"]
    assert steps[3]["kafka"][0] == INVALID_FETCH_SESSION_EPOCH
    assert steps[4]["kafka"][0] == FETCH_SESSION_ID_NOT_FOUND
    assert steps[-1]["kafka"][0] == FETCH_SESSION_ID_NOT_FOUND
