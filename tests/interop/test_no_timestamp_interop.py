"""librdkafka's batches of records without a timestamp, produced by confluent-kafka.

A record produced with timestamp -1 keeps it (librdkafka only fills in the time for 0), and
librdkafka writes its batch with maxTimestamp 0. Kafka's LogValidator stores such a batch with
maxTimestamp -1 (the records' latest); sparklog refused it with INVALID_RECORD (issue 29).
"""

from __future__ import annotations

import uuid

import pytest

from sparklog.client import AdminClient, NewTopic
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.records import iter_batches

pytestmark = pytest.mark.interop

confluent_kafka = pytest.importorskip("confluent_kafka")

LIBRDKAFKA = {"broker.address.family": "v4"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(brokers=1, data_dir=tmp_path_factory.mktemp("no-timestamp")) as running:
        yield running


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_confluent_kafka_records_without_a_timestamp_are_stored_as_kafka_stores_them(
    cluster, codec
):
    topic = f"no-timestamp-{uuid.uuid4().hex[:8]}"
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
    producer = confluent_kafka.Producer(
        {
            **LIBRDKAFKA,
            "bootstrap.servers": cluster.bootstrap_servers,
            "compression.type": codec,
            "linger.ms": 50,  # the three records in one batch
        }
    )
    errors = []

    def delivered(err, _msg):
        errors.append(err)

    for i in range(3):
        producer.produce(
            topic, b"v%d" % i, b"k%d" % i, partition=0, timestamp=-1, on_delivery=delivered
        )
    assert producer.flush(30) == 0
    assert errors == [None, None, None], [str(e) for e in errors]

    consumer = confluent_kafka.Consumer(
        {
            **LIBRDKAFKA,
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        got = []
        while len(got) < 3:
            msg = consumer.poll(30)
            assert msg is not None and msg.error() is None
            got.append((msg.value(), msg.timestamp()))
    finally:
        consumer.close()
    no_timestamp = (confluent_kafka.TIMESTAMP_CREATE_TIME, -1)  # as Kafka answers them
    assert got == [(b"v%d" % i, no_timestamp) for i in range(3)]

    segment = cluster.broker_dir(cluster.leader_of(topic)) / f"{topic}-0" / f"{0:020d}.log"
    headers = [b.header for b in iter_batches(segment.read_bytes())]
    assert [h.max_timestamp for h in headers] == [-1] * len(headers)  # librdkafka wrote 0
