"""AlterClientQuotas on the controller (`quota_control.py`): which alterations become records and
each entity's result, by Kafka 4.4's rules (the oracle test checks the same against Kafka)."""

from __future__ import annotations

import math

import pytest

from sparklog.controller.quota_control import QuotaAlteration, alter_client_quotas
from sparklog.metadata.image import MetadataImage
from sparklog.metadata.quotas import ClientQuotaEntity

P, C = "producer_byte_rate", "consumer_byte_rate"
ALICE = (("user", "alice"),)


def run(image: MetadataImage, *alterations: QuotaAlteration, validate_only: bool = False):
    results, records = alter_client_quotas(image, alterations, validate_only=validate_only)
    for record in records:
        image.apply(record)
    return [(str(e), r.code, r.message) for e, r in results], records


def test_set_change_and_remove_write_only_what_changes():
    image = MetadataImage()
    results, records = run(image, QuotaAlteration(ALICE, ((P, 1024.0), (C, None))))
    assert results == [("user=alice", 0, None)] and len(records) == 1  # C was not set
    _, records = run(image, QuotaAlteration(ALICE, ((P, 1024.0),)))
    assert records == []  # unchanged
    _, records = run(image, QuotaAlteration(ALICE, ((P, None),)))
    assert len(records) == 1 and len(image.quotas) == 0


def test_validate_only_answers_the_same_and_writes_nothing():
    image = MetadataImage()
    results, records = run(image, QuotaAlteration(ALICE, ((P, 1.0),)), validate_only=True)
    assert results == [("user=alice", 0, None)] and records == []
    results, _ = run(image, QuotaAlteration(ALICE, ((P, -1.0),)), validate_only=True)
    assert results[0][1] == 42


@pytest.mark.parametrize(
    "entity, ops, message",
    [
        (ALICE, ((P, -5.0),), "Quota producer_byte_rate must be greater than 0"),
        (ALICE, ((P, 0.0),), "Quota producer_byte_rate must be greater than 0"),
        (ALICE, ((P, math.nan),), "Quota producer_byte_rate must be a finite number"),
        (ALICE, (("request_percentage", math.inf),), "must be a finite number"),
        (ALICE, ((P, 1.5),), "producer_byte_rate cannot be a fractional value."),
        (ALICE, ((P, 1e300),), "Proposed value for producer_byte_rate is too large for a LONG."),
        ((("ip", "1.2.3.4"),), (("connection_creation_rate", 1e10),), "too large for an INT."),
        (ALICE, ((P, -1.0), ("bogus", 1.0)), "Invalid configuration key bogus"),
        ((("group", "g"),), ((P, 1.0),), "Unhandled client quota entity type: group"),
        ((), ((P, 1.0),), "Invalid empty client quota entity"),
        ((("user", ""),), ((P, 1.0),), "Empty user not supported"),
        ((("user", "u"), ("ip", None)), ((P, 1.0),), "IP entity shouldnot be combined"),
        ((("ip", "not a host!"),), (("connection_creation_rate", 1.0),), "not a valid IP"),
        ((("client-id-prefix", None),), ((P, 1.0),), "needs a name"),
        ((("topic", "t"),), (("request_percentage", 1.0),), "Invalid configuration key"),
        (ALICE, ((P, 1.0), (P, 2.0)), "Ignoring duplicate entity ClientQuotaEntity(entries={user=alice})"),
    ],
)  # fmt: skip
def test_a_bad_entity_key_or_value_fails_that_entity_and_writes_none_of_its_ops(
    entity, ops, message
):
    image = MetadataImage()
    results, records = run(
        image, QuotaAlteration(entity, ops), QuotaAlteration((("user", "ok"),), ((P, 5.0),))
    )
    (_, code, text), ok = results
    assert code == 42 and message in text, text
    assert ok[1] == 0 and len(records) == 1  # the other entity still applies


def test_an_entity_named_twice_applies_the_first_and_answers_one_error():
    image = MetadataImage()
    results, _ = run(
        image, QuotaAlteration(ALICE, ((P, 1.0),)), QuotaAlteration(ALICE, ((C, 2.0),))
    )
    assert results == [
        ("user=alice", 42, "Ignoring duplicate entity ClientQuotaEntity(entries={user=alice})")
    ]
    assert dict(image.quotas.quotas(ClientQuotaEntity(ALICE))) == {P: 1.0}  # as Kafka 4.4


def test_ip_host_names_must_resolve():
    from sparklog.controller.quota_control import host_names

    alterations = [
        QuotaAlteration((("ip", "db.example"),), (("connection_creation_rate", 5.0),)),
        QuotaAlteration((("ip", "10.0.0.1"),), (("connection_creation_rate", 5.0),)),
    ]
    assert host_names(alterations) == {"db.example"}  # addresses need no lookup
    results, records = alter_client_quotas(
        MetadataImage(), alterations, unresolvable={"db.example"}
    )
    assert [(str(e), r.code, r.message) for e, r in results] == [
        ("ip=db.example", 42, "db.example is not a valid IP or resolvable host."),
        ("ip=10.0.0.1", 0, None),
    ]
    assert len(records) == 1
