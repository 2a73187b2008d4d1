"""Authorized operations through real clients (issue 29 item 4): without an authorizer Kafka
answers every operation a resource type supports (`AclEntry.supportedOperations`); sparklog
answered INT32_MIN (omitted), which confluent-kafka reports as None."""

from __future__ import annotations

import time
import uuid

import pytest

from sparklog.cluster.embedded import EmbeddedCluster

pytestmark = pytest.mark.interop

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")
AclOperation = confluent_kafka.admin.AclOperation

LIBRDKAFKA = {"broker.address.family": "v4"}
TIMEOUT_S = 30

#: Kafka 4.x's answers without an authorizer
TOPIC_OPERATIONS = {
    AclOperation.READ,
    AclOperation.WRITE,
    AclOperation.CREATE,
    AclOperation.DELETE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
}
CLUSTER_OPERATIONS = {
    AclOperation.ALTER,
    AclOperation.ALTER_CONFIGS,
    AclOperation.CLUSTER_ACTION,
    AclOperation.CREATE,
    AclOperation.DESCRIBE,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE,
}
GROUP_OPERATIONS = {
    AclOperation.READ,
    AclOperation.DESCRIBE,
    AclOperation.DELETE,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(
        brokers=1,
        data_dir=tmp_path_factory.mktemp("authorized-operations"),
        config={"group.initial.rebalance.delay.ms": "0"},
    ) as running:
        yield running


@pytest.fixture(scope="module")
def admin(cluster):
    return confluent_admin.AdminClient(
        {"bootstrap.servers": cluster.bootstrap_servers, **LIBRDKAFKA}
    )


def test_describe_cluster_and_topics_answer_every_supported_operation(cluster, admin):
    described = admin.describe_cluster(include_authorized_operations=True).result(TIMEOUT_S)
    assert set(described.authorized_operations or ()) == CLUSTER_OPERATIONS
    assert admin.describe_cluster().result(TIMEOUT_S).authorized_operations is None

    topic = f"ops-{uuid.uuid4().hex[:8]}"
    admin.create_topics([confluent_admin.NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S)
    topics = confluent_kafka.TopicCollection([topic])
    futures = admin.describe_topics(topics, include_authorized_operations=True)
    assert set(futures[topic].result(TIMEOUT_S).authorized_operations or ()) == TOPIC_OPERATIONS
    plain = admin.describe_topics(topics)[topic].result(TIMEOUT_S)
    assert plain.authorized_operations is None


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_describe_consumer_groups_answers_every_supported_operation(cluster, admin, protocol):
    topic, group = f"ops-{uuid.uuid4().hex[:8]}", f"ops-{protocol}-{uuid.uuid4().hex[:6]}"
    admin.create_topics([confluent_admin.NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S)
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "group.protocol": protocol,
            **LIBRDKAFKA,
        }
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT_S
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.1)
        assert consumer.assignment(), "the consumer never joined its group"
        futures = admin.describe_consumer_groups([group], include_authorized_operations=True)
        described = futures[group].result(TIMEOUT_S)
        assert set(described.authorized_operations or ()) == GROUP_OPERATIONS
        plain = admin.describe_consumer_groups([group])[group].result(TIMEOUT_S)
        assert plain.authorized_operations is None
    finally:
        consumer.close()
