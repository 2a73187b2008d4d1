"""AlterClientQuotas / DescribeClientQuotas sent to Apache Kafka and to sparklog: the same error
codes and messages per entity, the same quotas described (exact, default and any matches,
strict or not), validate-only writing nothing, bad keys and values (negative, zero, NaN,
infinite, fractional, too large), bad entities and filters.

The brokers are shared by the whole oracle session, so every quota set here is on entities of
this module's own (`qd-*` names) or removed again before the test ends; the defaults it sets
are removed in a `finally`. Entries of both answers are compared sorted (Kafka answers in hash
order), and each entity's entries sorted by type (Kafka lists them in hash order too)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from sparklog.protocol.api_versions import ApiKey

from .wire import Pair, run

pytestmark = pytest.mark.oracle

EXACT, DEFAULT, ANY = 0, 1, 2
P, C, R, M, CONN = (
    "producer_byte_rate",
    "consumer_byte_rate",
    "request_percentage",
    "controller_mutation_rate",
    "connection_creation_rate",
)


def entity(**names: str | None) -> list[dict[str, Any]]:
    """entity(user="u", client_id=None): keyword names with `_` for `-`."""
    return [{"entity_type": k.replace("_", "-"), "entity_name": v} for k, v in names.items()]


def alter(*entries: tuple[list, list[tuple[str, float | None]]], validate_only=False) -> dict:
    return {
        "entries": [
            {
                "entity": e,
                "ops": [
                    {"key": k, "value": 0.0 if v is None else v, "remove": v is None}
                    for k, v in ops
                ],
            }
            for e, ops in entries
        ],
        "validate_only": validate_only,
    }


def describe(*components: tuple[str, int, str | None], strict=False) -> dict:
    return {
        "components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
        "strict": strict,
    }


def _entity_key(e: list[dict]) -> list[tuple[str, str]]:
    return sorted((x["entity_type"], x["entity_name"] or "\0") for x in e)


def normalized(answer: dict) -> dict:
    """An answer with entities and entries in a stable order and throttle time dropped."""
    answer = {k: v for k, v in answer.items() if k != "throttle_time"}
    if answer.get("entries") is not None:
        entries = []
        for entry in answer["entries"]:
            entry = dict(entry)
            entry["entity"] = sorted(entry["entity"], key=lambda x: x["entity_type"])
            if "values" in entry:
                entry["values"] = sorted(entry["values"], key=lambda x: x["key"])
            entries.append(entry)
        answer["entries"] = sorted(entries, key=lambda x: _entity_key(x["entity"]))
    return answer


async def same(pair: Pair, api: ApiKey, data: dict, version: int | None = None) -> dict:
    answers = await pair.ask(api, data, version)
    kafka, ours = (normalized(answers[n]) for n in ("kafka", "sparklog"))
    assert ours == kafka, (data, kafka, ours)
    return ours


def only_ours(answer: dict) -> list:
    """A describe answer's entries restricted to this module's entities (the session's brokers
    may hold quotas of other tests)."""
    return [
        e
        for e in answer["entries"]
        if all((x["entity_name"] or "qd-").startswith("qd-") for x in e["entity"])
    ]


ALTERATIONS = [
    # accepted: each entity combination Kafka stores, removals, validate-only
    alter((entity(user="qd-alice"), [(P, 1024.0), (C, 2048.0)])),
    alter((entity(client_id="qd-app"), [(R, 12.5)])),
    alter((entity(user="qd-alice", client_id="qd-app"), [(M, 0.5)])),
    alter((entity(user="qd-bob", client_id=None), [(P, 4096.0)])),
    alter((entity(ip="127.0.0.9"), [(CONN, 20.0)])),
    alter((entity(user="qd-alice"), [(C, None)])),
    alter((entity(user="qd-nobody"), [(P, None)])),  # nothing to remove: success
    alter((entity(user="qd-erin"), [(P, 7.0)]), validate_only=True),
    alter((entity(user="qd-frank"), [(P, 7.0)]), (entity(user="qd-gina"), [("bogus", 1.0)])),
    alter((entity(user="qd-alice"), [(P, 9.2e18)])),
    alter((entity(user="qd-alice"), [(R, 1e300)])),
    alter((entity(user="qd-alice"), [("bogus", None)])),  # removals are not checked
    alter((entity(user="qd-alice"), [])),
    alter(),
    # bad values
    alter((entity(user="qd-v"), [(P, -5.0)])),
    alter((entity(user="qd-v"), [(P, 0.0)])),
    alter((entity(user="qd-v"), [(R, 0.0)])),
    alter((entity(user="qd-v"), [(P, math.nan)])),
    alter((entity(user="qd-v"), [(R, math.inf)])),
    alter((entity(user="qd-v"), [(P, 1.5)])),
    alter((entity(user="qd-v"), [(P, 1e300)])),
    alter((entity(ip="127.0.0.9"), [(CONN, 1e10)])),
    alter((entity(ip="127.0.0.9"), [(CONN, 2.5)])),
    # bad keys (checked before values, whatever the order)
    alter((entity(user="qd-v"), [("bogus", 1.0)])),
    alter((entity(user="qd-v"), [(P, -1.0), ("bogus", -1.0)])),
    alter((entity(user="qd-v"), [(CONN, 1.0)])),
    alter((entity(ip="127.0.0.9"), [(P, 1.0)])),
    # bad entities
    alter((entity(group="qd-g"), [(P, 1.0)])),
    alter(([], [(P, 1.0)])),
    alter((entity(user=""), [(P, 1.0)])),
    alter((entity(user="qd-v", client_id=""), [(P, 1.0)])),
    alter((entity(user="qd-v", ip="127.0.0.9"), [(P, 1.0)])),
    alter((entity(ip="not a host!"), [(CONN, 1.0)])),
    alter((entity(ip="no-such-host.invalid"), [(CONN, 1.0)])),  # does not resolve
    alter((entity(ip="localhost"), [(CONN, 1.0)]), validate_only=True),  # resolves
    # duplicates: a key twice, an entity twice (the first applies)
    alter((entity(user="qd-dup"), [(P, 1.0), (P, 2.0)])),
    alter((entity(user="qd-carol"), [(P, 1.0)]), (entity(user="qd-carol"), [(C, 2.0)])),
]

FILTERS = [
    describe(("user", EXACT, "qd-alice")),
    describe(("user", EXACT, "qd-alice"), strict=True),
    describe(("user", EXACT, "qd-alice"), ("client-id", ANY, None)),
    describe(("client-id", EXACT, "qd-app"), strict=True),
    describe(("user", EXACT, "qd-bob"), ("client-id", DEFAULT, None), strict=True),
    describe(("user", EXACT, "qd-carol")),
    describe(("user", EXACT, "qd-erin")),
    describe(("user", EXACT, "qd-frank")),
    describe(("user", EXACT, "qd-dup")),
    describe(("ip", EXACT, "127.0.0.9")),
    describe(("user", EXACT, "qd-nobody")),
    # bad filters
    describe(("", ANY, None)),
    describe(("group", ANY, None)),
    describe(("user", EXACT, None)),
    describe(("user", DEFAULT, "x")),
    describe(("user", ANY, "x")),
    describe(("user", 7, None)),
    describe(("user", ANY, None), ("user", ANY, None)),
    describe(("ip", ANY, None), ("user", ANY, None)),
]


def test_alter_and_describe_client_quotas_answer_as_kafka(brokers):
    async def scenario() -> None:
        async with Pair(brokers) as pair:
            for data in ALTERATIONS:
                await same(pair, ApiKey.ALTER_CLIENT_QUOTAS, data)
            for data in FILTERS:
                await same(pair, ApiKey.DESCRIBE_CLIENT_QUOTAS, data)
            # v0 (not flexible) answers alike too
            for data in (ALTERATIONS[0], ALTERATIONS[14], ALTERATIONS[-1]):
                await same(pair, ApiKey.ALTER_CLIENT_QUOTAS, data, version=0)
            for data in (FILTERS[0], FILTERS[-1]):
                await same(pair, ApiKey.DESCRIBE_CLIENT_QUOTAS, data, version=0)
            # both hold the same quotas of ours, over every entity type
            answers = await pair.ask(ApiKey.DESCRIBE_CLIENT_QUOTAS, describe())
            kafka, ours = (only_ours(normalized(answers[n])) for n in ("kafka", "sparklog"))
            assert ours == kafka and len(ours) >= 5

    run(scenario())


def test_sparklogs_own_entity_types_are_kafkas_unhandled_ones(brokers):
    """The one difference (docs/differences.md): sparklog stores `client-id-prefix` and `topic`
    quotas, which Kafka refuses as unhandled entity types."""

    async def scenario() -> None:
        async with Pair(brokers) as pair:
            for e in (entity(client_id_prefix="qd-"), entity(topic="qd-t")):
                answers = await pair.ask(ApiKey.ALTER_CLIENT_QUOTAS, alter((e, [(P, 1e12)])))
                (kafka,), (ours,) = (answers[n]["entries"] for n in ("kafka", "sparklog"))
                kind = e[0]["entity_type"]
                assert kafka["error_code"] == 42, kafka
                assert kafka["error_message"] == f"Unhandled client quota entity type: {kind}"
                assert ours["error_code"] == 0, ours
                found = await pair.ask(ApiKey.DESCRIBE_CLIENT_QUOTAS, describe((kind, ANY, None)))
                assert found["kafka"]["error_code"] == 35  # UNSUPPORTED_VERSION: unknown type
                assert [x["entity"] for x in found["sparklog"]["entries"]] == [e]
                await pair.ask(ApiKey.ALTER_CLIENT_QUOTAS, alter((e, [(P, None)])))

    run(scenario())


def test_defaults_and_strict_matching_answer_as_kafka(brokers):
    """`<default>` entities (null names) set, described by DEFAULT and ANY matches, strict or
    not, then removed: huge values, so nothing else in the session is held by them."""
    defaults = [
        entity(user=None),
        entity(client_id=None),
        entity(user=None, client_id=None),
        entity(user=None, client_id="qd-app2"),
        entity(ip=None),
    ]

    async def scenario() -> None:
        async with Pair(brokers) as pair:
            try:
                for e in defaults:
                    key = CONN if e[0]["entity_type"] == "ip" else P
                    await same(pair, ApiKey.ALTER_CLIENT_QUOTAS, alter((e, [(key, 1e12)])))
                for data in [
                    describe(("user", DEFAULT, None)),
                    describe(("user", DEFAULT, None), strict=True),
                    describe(("client-id", DEFAULT, None), strict=True),
                    describe(("user", DEFAULT, None), ("client-id", DEFAULT, None)),
                    describe(("user", DEFAULT, None), ("client-id", EXACT, "qd-app2")),
                    describe(("ip", DEFAULT, None)),
                    describe(strict=True),
                ]:
                    await same(pair, ApiKey.DESCRIBE_CLIENT_QUOTAS, data)
            finally:
                for e in defaults:
                    key = CONN if e[0]["entity_type"] == "ip" else P
                    await pair.ask(ApiKey.ALTER_CLIENT_QUOTAS, alter((e, [(key, None)])))
            gone = await same(
                pair, ApiKey.DESCRIBE_CLIENT_QUOTAS, describe(("user", DEFAULT, None))
            )
            assert gone["entries"] == []

    run(scenario())
