"""The driver's metrics move as a real client run says (read through the servers'
registries): controller gauges and event times, group counts, offset commits, the offsets
table's Delta commit time, transaction commits and aborts, and consumer lag falling to 0."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.coordinator.lag import ConsumerLagPoller
from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Metrics
from sparklog.structs import TopicPartition as SparklogTopicPartition

from .conftest import TEST_CONFIG

DEADLINE_S = 30.0
MESSAGES = 40


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    config = {**TEST_CONFIG, "sparklog.metrics.lag.poll.interval.ms": "100"}
    with EmbeddedCluster(
        brokers=1, data_dir=tmp_path_factory.mktemp("driver-metrics"), config=config
    ) as running:
        yield running


def wait_until(what: str, condition: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {DEADLINE_S}s: {what}")


def value(metrics: Metrics, domain: str, type_: str, name: str, **tags: str) -> float:
    metric = metrics.metric(MetricName.of(domain, type_, name, tags))
    assert metric is not None, (domain, type_, name, tags)
    return metric.value()


def controller(cluster, name: str) -> float:
    return value(cluster.controller.metrics, "kafka.controller", "KafkaController", name)


def coordinator(cluster, type_: str, name: str, **tags: str) -> float:
    return value(cluster.coordinator.metrics, "kafka.server", type_, name, **tags)


def group_lag(cluster, group: str) -> float | None:
    metric = cluster.coordinator.metrics.metric(
        MetricName.of("kafka", "consumergroup", "group_sum_lag", {"group": group})
    )
    return None if metric is None else metric.value()


def create_topic(cluster, partitions: int) -> str:
    name = f"dm-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def produce(cluster, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=i % 2)
    assert producer.flush(30) == 0


def consume(consumer: Consumer, count: int) -> None:
    got = 0
    deadline = time.monotonic() + DEADLINE_S
    while got < count:
        assert time.monotonic() < deadline, f"consumed {got} of {count}"
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got += 1


def test_controller_counts_topics_partitions_brokers_and_times_its_writes(cluster):
    before_topics = controller(cluster, "GlobalTopicCount")
    before_partitions = controller(cluster, "GlobalPartitionCount")
    create_topic(cluster, 3)
    assert controller(cluster, "GlobalTopicCount") == before_topics + 1
    assert controller(cluster, "GlobalPartitionCount") == before_partitions + 3
    assert controller(cluster, "ActiveBrokerCount") == 1
    assert controller(cluster, "FencedBrokerCount") == 0
    assert controller(cluster, "OfflinePartitionsCount") == 0
    assert controller(cluster, "ActiveControllerCount") == 1
    metrics = cluster.controller.metrics
    events = metrics.histogram(
        MetricName.of("kafka.controller", "ControllerEventManager", "EventQueueProcessingTimeMs")
    )
    assert events.count > 0 and events.sum >= 0
    commit_max = value(metrics, "kafka.server", "raft-metrics", "commit-latency-max")
    assert commit_max >= 0


def test_a_groups_commits_and_lag_move_and_lag_falls_to_zero(cluster):
    topic = create_topic(cluster, 2)
    produce(cluster, topic, MESSAGES)
    group = f"g-{uuid.uuid4().hex[:6]}"
    commits_before = coordinator(cluster, "group-coordinator-metrics", "offset-commit-count")
    flushes_before = cluster.coordinator.coordinator_metrics.batch_flush_time_ms.count
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        # a committed position behind the end first: lag is the rest of the log
        consumer.commit(
            offsets=[TopicPartition(topic, 0, 1), TopicPartition(topic, 1, 1)], asynchronous=False
        )
        wait_until(
            "lag of the committed positions", lambda: group_lag(cluster, group) == MESSAGES - 2
        )
        consumer.subscribe([topic])
        consume(consumer, MESSAGES - 2)  # from the committed positions
        assert (
            value(
                cluster.coordinator.metrics,
                "kafka.coordinator.group",
                "GroupMetadataManager",
                "NumGroupsStable",
            )
            >= 1
        )
        consumer.commit(asynchronous=False)
        wait_until("lag back to 0", lambda: group_lag(cluster, group) == 0)
    finally:
        consumer.close()
    assert coordinator(cluster, "group-coordinator-metrics", "offset-commit-count") == (
        commits_before + 4  # two partitions, twice
    )
    assert cluster.coordinator.coordinator_metrics.batch_flush_time_ms.count > flushes_before
    assert (
        value(
            cluster.coordinator.metrics,
            "kafka.coordinator.group",
            "GroupMetadataManager",
            "NumOffsets",
        )
        >= 2
    )


def test_transaction_commits_and_aborts_are_counted(cluster):
    topic = create_topic(cluster, 2)
    commits = coordinator(cluster, "transaction-coordinator-metrics", "transaction-commit-count")
    aborts = coordinator(cluster, "transaction-coordinator-metrics", "transaction-abort-count")
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": uuid.uuid4().hex}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"kept", partition=0)
    producer.produce(topic, value=b"kept", partition=1)
    producer.flush(30)
    assert coordinator(cluster, "transaction-coordinator-metrics", "active-transaction-count") == 1
    assert coordinator(cluster, "transaction-coordinator-metrics", "partitions-in-transaction") == 2
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"dropped", partition=0)
    producer.flush(30)  # the partition joins the transaction: there is something to abort
    producer.abort_transaction(30)
    wait_until(
        "one commit and one abort",
        lambda: (
            coordinator(cluster, "transaction-coordinator-metrics", "transaction-commit-count")
            == commits + 1
            and coordinator(cluster, "transaction-coordinator-metrics", "transaction-abort-count")
            == aborts + 1
        ),
    )
    assert coordinator(cluster, "transaction-coordinator-metrics", "active-transaction-count") == 0
    assert (
        coordinator(
            cluster, "transaction-coordinator-metrics", "transaction-count", state="CompleteAbort"
        )
        == 1
    )


def test_a_leader_that_does_not_answer_costs_only_its_own_partitions_series(cluster):
    topic = create_topic(cluster, 2)
    produce(cluster, topic, MESSAGES)
    broker = cluster.brokers[0]
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]

    def leader_of(t: str, partition: int) -> tuple[int, str, int]:
        return (
            (broker.node_id, "127.0.0.1", broker.port)
            if partition == 0
            else (99, "127.0.0.1", dead_port)
        )

    metrics = Metrics()
    poller = ConsumerLagPoller(
        metrics,
        lambda: {
            ("g", SparklogTopicPartition(topic, 0)): 0,
            ("g", SparklogTopicPartition(topic, 1)): 0,
        },
        leader_of,
        interval_ms=1000,
        max_partitions=10,
    )

    async def poll() -> None:
        try:
            await poller.poll()
        finally:
            await poller.close()

    asyncio.run(poll())
    lags = {m.name.tag("partition"): m.value() for m in metrics if m.name.name == "group_lag"}
    assert lags == {"0": MESSAGES // 2}
