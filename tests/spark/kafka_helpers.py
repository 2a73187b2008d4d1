"""Small confluent-kafka helpers for Spark-side tests (an independent client as the oracle)."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.spark.processes import executor_pid  # noqa: F401 - re-exported for the tests

BASE = {"broker.address.family": "v4", "socket.timeout.ms": 10000}


def create_topic(bootstrap: str, topic: str, partitions: int, rf: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **BASE})
    futures = admin.create_topics([NewTopic(topic, partitions, rf)], operation_timeout=30)
    futures[topic].result(timeout=60)


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], **conf) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **BASE, **conf})
    errors = []
    for key, value in records:
        producer.produce(
            topic, value=value, key=key, on_delivery=lambda e, m: e and errors.append(e)
        )
    assert producer.flush(60) == 0, "undelivered records"
    assert not errors, errors


def consume_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 60) -> list:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "oracle", "enable.auto.commit": False, **BASE}
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        got = []
        deadline = time.monotonic() + timeout_s
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        return got
    finally:
        consumer.close()


# -- executors and waiting (local-cluster fault tests) -----------------------------------------


def wait_for(predicate, timeout_s: float, what: str, interval_s: float = 0.25):
    """Poll `predicate` until it returns something truthy (returned); fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
