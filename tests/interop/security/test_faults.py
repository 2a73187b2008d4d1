"""Security state under faults, with real clients, against Apache Kafka and sparklog secured
the same way (conftest.py):

- an ACL removal takes effect on a connection that is already open, at its next request
  (Kafka authorizes every request against the current ACLs, not the ones at login);
- a restart of the controller keeps SCRAM users and ACLs (they are metadata records, replayed
  from the log or its snapshot): alice still authenticates and her grants still apply."""

from __future__ import annotations

import uuid

import confluent_kafka
import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.support.secure_clusters import SecureTarget

from .test_client_matrix import DEADLINE_S, authentication_error, eventually

pytestmark = [pytest.mark.interop, pytest.mark.oracle]

AUTHORIZATION_FAILED = confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED


def write_acl(topic: str, principal: str) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*",
        AclOperation.WRITE, AclPermissionType.ALLOW,
    )  # fmt: skip


def produce_one(producer: confluent_kafka.Producer, topic: str) -> int | None:
    """The error code of one produced record (None: written)."""
    outcome: list[confluent_kafka.KafkaError | None] = []
    producer.produce(topic, b"x", on_delivery=lambda err, _m: outcome.append(err))
    producer.flush(DEADLINE_S)
    assert outcome, "no delivery report"
    return None if outcome[0] is None else outcome[0].code()


def test_acl_removal_takes_effect_on_an_open_connection(target: SecureTarget) -> None:
    target.require("scram")
    admin = target.admin()
    topic = f"revoke-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=30)[topic].result()
    binding = write_acl(topic, "User:mallory")
    admin.create_acls([binding], request_timeout=30)[binding].result()

    # mallory's one producer (one connection to the one broker) writes while allowed ...
    mallory = confluent_kafka.Producer(
        target.librdkafka("scram", user="mallory") | {"retries": 0, "acks": "all"}
    )
    assert eventually(lambda: _expect(produce_one(mallory, topic), None)) is None

    # ... and is refused at its next request once the ACL is gone
    match = AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:mallory", None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    deleted = admin.delete_acls([match], request_timeout=30)[match].result()
    assert deleted == [binding]
    assert eventually(lambda: _expect(produce_one(mallory, topic), AUTHORIZATION_FAILED))
    admin.delete_topics([topic], request_timeout=30)[topic].result()


def _expect(got: int | None, want: int | None) -> int | None:
    if got != want:
        raise AssertionError(f"error {got}, want {want}")
    return got


@pytest.mark.slow  # a controller restart: ~20 s for Kafka (log recovery after a kill)
def test_controller_restart_keeps_scram_users_and_acls(target: SecureTarget) -> None:
    target.require("scram")
    admin = target.admin()
    topic = f"sec-restart-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=30)[topic].result()
    extra = write_acl(f"kept-{topic}", "User:mallory")
    admin.create_acls([extra], request_timeout=30)[extra].result()

    target.restart_controller()

    # SCRAM credentials survived: alice logs in (a wrong password still fails) ...
    alice = confluent_kafka.Producer(target.librdkafka("scram") | {"acks": "all"})
    assert eventually(lambda: _expect(produce_one(alice, topic), None), 60) is None
    assert authentication_error(target.librdkafka("scram", password="wrong"))
    # ... her PREFIXED grants still apply, and the extra ACL is still listed
    outside = f"other-{topic}"
    admin.create_topics([NewTopic(outside, 1, 1)], request_timeout=30)[outside].result()
    assert eventually(lambda: _expect(produce_one(alice, outside), AUTHORIZATION_FAILED))
    any_mallory = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, "User:mallory", None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    listed = admin.describe_acls(any_mallory, request_timeout=30).result()
    assert extra in listed
    admin.delete_acls([any_mallory], request_timeout=30)[any_mallory].result()
    for name in (topic, outside):
        admin.delete_topics([name], request_timeout=30)[name].result()
