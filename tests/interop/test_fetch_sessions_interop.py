"""Incremental fetch sessions (KIP-227) with a client that uses them: kafka-python's consumer
reads two waves of records through one session and gets every record, in order."""

from __future__ import annotations

import time

import kafka
import pytest

from sparklog.cluster.embedded import EmbeddedCluster

from .test_clients_interop import (
    CLUSTER_CONFIG,
    PARTITIONS,
    Rec,
    expected,
    make_records,
    new_topic,
    produce_sparklog,
)

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(
        brokers=1, data_dir=tmp_path_factory.mktemp("fetch-sessions"), config=CLUSTER_CONFIG
    ) as running:
        yield running


def test_kafka_python_reads_through_an_incremental_session(cluster):
    topic = new_topic(cluster)
    first = make_records(300, same_headers=True, timestamps=True)
    second = make_records(300, same_headers=False, timestamps=True)
    apis = cluster.brokers[0].apis
    before = apis.incremental_fetches
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers, group_id=None, enable_auto_commit=False
    )
    tps = [kafka.TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    got: list[Rec] = []

    def poll_until(count: int) -> None:
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            for tp, messages in consumer.poll(timeout_ms=500).items():
                for m in messages:
                    headers = tuple((k, v) for k, v in m.headers)
                    got.append(Rec(tp.partition, m.key, m.value, headers, m.timestamp, m.offset))

    try:
        produce_sparklog(cluster.bootstrap_servers, topic, first, "lz4")
        poll_until(len(first))
        consumer.poll(timeout_ms=1_000)  # caught up: long polls on the session, nothing new
        produce_sparklog(cluster.bootstrap_servers, topic, second, "none")
        poll_until(len(first) + len(second))
    finally:
        consumer.close()
    key = lambda r: (r.partition, r.offset)  # noqa: E731
    assert sorted(got, key=key) == expected(first + second)
    assert apis.incremental_fetches - before >= 3  # the waves and the idle polls in between
