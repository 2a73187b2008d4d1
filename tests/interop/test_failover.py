"""confluent-kafka (librdkafka) through a sparklog leader kill: no loss, no duplicates.

Three brokers on loopback, a topic with replication factor 3 and min.insync.replicas=2. An
idempotent acks=all confluent producer sends numbered records with keys spread over the
partitions while the leader of one partition is killed (and, in the second test, restarted on
a new port); a confluent consumer with `assign` and explicit start offsets (sparklog has no
consumer groups yet) polls through it. Every delivered record must be read back exactly once,
in order per key, by that consumer and by a fresh sparklog consumer.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Callable

import pytest

from sparklog.client import AdminClient, KafkaConsumer, NewTopic, TopicPartition
from sparklog.client.broker_connection import now_ms
from sparklog.cluster.embedded import EmbeddedCluster
from tests.collector import PollingCollector

pytestmark = pytest.mark.interop

confluent_kafka = pytest.importorskip("confluent_kafka")

#: Brokers listen on 127.0.0.1 only: keep librdkafka to IPv4.
LIBRDKAFKA = {"broker.address.family": "v4"}
#: Fast liveness so the controller moves leaders within a couple of seconds of a kill.
CLUSTER_CONFIG = {
    "broker.heartbeat.interval.ms": "100",
    "broker.session.timeout.ms": "1500",
    "log.flush.offset.checkpoint.interval.ms": "200",
}
PARTITIONS = 3
KEYS = 12
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(
        brokers=3, data_dir=tmp_path_factory.mktemp("failover"), config=CLUSTER_CONFIG
    ) as running:
        yield running


@pytest.fixture(autouse=True)
def all_brokers_back(cluster):
    yield
    for i, broker in enumerate(cluster.brokers):
        if broker.state.value == "not running":
            cluster.restart_broker(i)


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll a cluster condition until it holds or DEADLINE_S passes."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def describe(cluster: EmbeddedCluster, topic: str) -> dict:
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        return {p.partition: p for p in admin.describe_topics([topic])[topic].partitions}


def new_topic(cluster: EmbeddedCluster) -> str:
    topic = f"failover-{uuid.uuid4().hex[:8]}"
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})])
    wait_until(
        lambda: all(len(p.isr) == 3 for p in describe(cluster, topic).values()),
        f"every replica of {topic} in sync",
    )
    return topic


class ConfluentCollector(PollingCollector):
    """A confluent consumer (assign from offset 0, no group) polling on its own thread."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(DEADLINE_S)  # records: (partition, offset, key, value)
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                **LIBRDKAFKA,
                "group.id": f"failover-{uuid.uuid4().hex[:6]}",  # required; never joined
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self.consumer.assign(
            [confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)]
        )

    def poll_once(self) -> list[tuple[int, int, bytes, int]]:
        got = []
        for m in self.consumer.consume(num_messages=100, timeout=0.1):
            error = m.error()
            if error is None:
                got.append((m.partition(), m.offset(), m.key(), int(m.value())))
            elif error.fatal():
                self.fail(error)
        return got

    def close(self) -> None:
        self.consumer.close()


class ConfluentNumberedProducer:
    """An idempotent acks=all confluent producer of record i: key `k{i % KEYS}`, value i."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.delivered: dict[int, tuple[int, int]] = {}  # value -> (partition, offset)
        self.errors: list[object] = []
        self.producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                **LIBRDKAFKA,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "batch.size": 2_000,  # many small batches: several in flight at the kill
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )

    def _on_delivery(self, error, message) -> None:
        if error is not None:
            self.errors.append(error)
        else:
            self.delivered[int(message.value())] = (message.partition(), message.offset())

    def send(self, start: int, stop: int) -> None:
        for i in range(start, stop):
            self.producer.produce(
                self.topic,
                value=str(i).encode(),
                key=f"k{i % KEYS}".encode(),
                on_delivery=self._on_delivery,
            )
            self.producer.poll(0)

    def flush(self) -> list[int]:
        assert self.producer.flush(DEADLINE_S) == 0, "records still undelivered"
        assert not self.errors, f"{len(self.errors)} delivery errors, e.g. {self.errors[0]}"
        return sorted(self.delivered)


def check_exactly_once_in_key_order(
    records: list[tuple[int, int, bytes, int]], delivered: list[int]
) -> None:
    values = [v for _, _, _, v in records]
    assert len(values) == len(set(values)), f"{len(values) - len(set(values))} read twice"
    assert sorted(values) == delivered, f"missing: {sorted(set(delivered) - set(values))[:10]}"
    by_key: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for _p, offset, key, value in records:
        by_key[key].append((offset, value))
    for key, pairs in by_key.items():
        in_offset_order = [v for _, v in sorted(pairs)]
        assert in_offset_order == sorted(in_offset_order), f"key {key!r} out of order"
        assert [v for _, v in pairs] == in_offset_order, f"key {key!r} consumed out of order"


def read_back(cluster: EmbeddedCluster, topic: str) -> list[tuple[int, int, bytes, int]]:
    """The whole topic as a fresh sparklog consumer reads it (log duplicates show here)."""
    with KafkaConsumer({"bootstrap.servers": cluster.bootstrap_servers}) as c:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning()
        end = c.end_offsets(tps)
        got: list = []
        deadline = now_ms() + int(DEADLINE_S * 1000)
        while any(c.position(tp) < end[tp] for tp in tps):
            assert now_ms() < deadline, "could not read the topic back"
            got += c.poll(200)
    return [(r.partition, r.offset, r.key, int(r.value)) for r in got]


def ride_through(cluster: EmbeddedCluster, fault: Callable[[int], None]) -> None:
    topic = new_topic(cluster)
    bootstrap = cluster.bootstrap_servers
    collector = ConfluentCollector(bootstrap, topic)
    collector.start()
    producer = ConfluentNumberedProducer(bootstrap, topic)
    try:
        producer.send(0, 300)
        producer.flush()
        collector.wait_for(300)
        partition = producer.delivered[0][0]
        leader = describe(cluster, topic)[partition].leader
        victim = next(i for i, b in enumerate(cluster.brokers) if b.node_id == leader)
        producer.send(300, 600)  # queued and in flight while the leader dies
        fault(victim)
        producer.send(600, 900)
        delivered = producer.flush()
        collector.wait_for(len(delivered))
    finally:
        records = collector.stop()
    check_exactly_once_in_key_order(records, delivered)
    check_exactly_once_in_key_order(read_back(cluster, topic), delivered)
    after = describe(cluster, topic)[partition]
    assert after.leader_epoch > 0, "the fault did not change the leader"


def test_confluent_clients_ride_through_a_leader_kill(cluster):
    ride_through(cluster, cluster.kill_broker)


def test_confluent_clients_ride_through_a_leader_kill_and_restart(cluster):
    def kill_and_restart(victim: int) -> None:
        cluster.kill_broker(victim)
        cluster.restart_broker(victim)

    ride_through(cluster, kill_and_restart)
