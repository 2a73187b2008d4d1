"""sparklog's clients ride through a leader change: three brokers on loopback, a topic with
replication factor 3 and min.insync.replicas=2 whose leader is killed mid-stream (and, with
replication factor 1, a leader that is killed and restarted). An idempotent acks=all producer
keeps sending numbered records with keys spread over the partitions, and a consumer polls
throughout: every acknowledged record must come back exactly once, in order per key. The
DataFrame paths' task bodies (a write task, a range read) get the same fault, without Spark.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections import defaultdict
from collections.abc import Callable

import pyarrow as pa
import pytest

from sparklog.client import AdminClient, KafkaConsumer, KafkaProducer, NewTopic, TopicPartition
from sparklog.client.broker_connection import now_ms
from sparklog.client.config import producer_config
from sparklog.client.network import NetworkClient
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.errors import NetworkExceptionError
from sparklog.protocol.api_versions import ApiKey
from tests.collector import PollingCollector

PARTITIONS = 3
KEYS = 12
DEADLINE_S = 60.0


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = DEADLINE_S) -> None:
    """Poll `condition` (a cluster state, not a timing guess) until true or fail naming it."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def describe(cluster: EmbeddedCluster, topic: str) -> dict[int, object]:
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        return {p.partition: p for p in admin.describe_topics([topic])[topic].partitions}


def new_topic(cluster: EmbeddedCluster, replication_factor: int) -> str:
    topic = f"failover-{uuid.uuid4().hex[:8]}"
    configs = {"min.insync.replicas": "2"} if replication_factor == 3 else {}
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(topic, PARTITIONS, replication_factor, configs)])
    wait_for_full_isr(cluster, topic, replication_factor)
    return topic


def wait_for_full_isr(cluster: EmbeddedCluster, topic: str, replication_factor: int) -> None:
    def full() -> bool:
        parts = describe(cluster, topic)
        return len(parts) == PARTITIONS and all(
            p.leader >= 0 and len(p.isr) == replication_factor for p in parts.values()
        )

    wait_until(full, f"every replica of {topic} in sync")


def broker_index(cluster: EmbeddedCluster, node_id: int) -> int:
    return next(i for i, b in enumerate(cluster.brokers) if b.node_id == node_id)


@pytest.fixture(autouse=True)
def all_brokers_back(cluster3):
    """A test that kills a broker leaves the module's cluster whole for the next one."""
    yield
    for i, broker in enumerate(cluster3.brokers):
        if broker.state.value == "not running":
            cluster3.restart_broker(i)


class Collector(PollingCollector):
    """A KafkaConsumer polling all partitions of a topic on its own thread, keeping every
    record; started before the fault, so it must poll through it."""

    def __init__(self, cluster: EmbeddedCluster, topic: str) -> None:
        super().__init__(DEADLINE_S)
        self.consumer = KafkaConsumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "auto.offset.reset": "earliest",
                "max.poll.records": 50,  # many small polls: some land mid-failover
            }
        )
        self.consumer.assign([(topic, p) for p in range(PARTITIONS)])

    def poll_once(self) -> list:
        return self.consumer.poll(100)

    def close(self) -> None:
        self.consumer.close()


class NumberedProducer:
    """Sends record i with key `k{i % KEYS}` and value `i`; remembers every future."""

    def __init__(self, cluster: EmbeddedCluster, topic: str) -> None:
        self.topic = topic
        self.producer = KafkaProducer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                "batch.size": 2_000,  # many small batches: several in flight at the kill
            }
        )
        self.futures: dict[int, object] = {}

    def send(self, start: int, stop: int) -> None:
        for i in range(start, stop):
            key = f"k{i % KEYS}".encode()
            self.futures[i] = self.producer.send(self.topic, str(i).encode(), key=key)

    def acked(self) -> list[int]:
        self.producer.flush(timeout_ms=int(DEADLINE_S * 1000))
        failed = {i: f.exception() for i, f in self.futures.items() if f.exception() is not None}
        assert not failed, f"{len(failed)} records failed, e.g. {next(iter(failed.items()))}"
        return sorted(self.futures)


def check_exactly_once_in_key_order(records: list, acked: list[int]) -> None:
    """Every acknowledged record exactly once, and per key in send order (offset order)."""
    values = [int(r.value) for r in records]
    duplicates = len(values) - len(set(values))
    assert duplicates == 0, f"{duplicates} records read twice"
    assert sorted(values) == acked, f"missing: {sorted(set(acked) - set(values))[:10]}"
    by_key: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for r in records:
        by_key[r.key].append((r.offset, int(r.value)))
    for key, pairs in by_key.items():
        in_offset_order = [v for _, v in sorted(pairs)]
        assert in_offset_order == sorted(in_offset_order), f"key {key!r} out of order"
        assert [v for _, v in pairs] == in_offset_order, f"key {key!r} polled out of order"


def read_back(cluster: EmbeddedCluster, topic: str) -> list:
    """Everything in the topic, by a fresh consumer (duplicates in the log show up here)."""
    with KafkaConsumer({"bootstrap.servers": cluster.bootstrap_servers}) as c:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning()
        end = c.end_offsets(tps)
        records: list = []
        deadline = now_ms() + int(DEADLINE_S * 1000)
        while any(c.position(tp) < end[tp] for tp in tps):
            assert now_ms() < deadline, "could not read the topic back"
            records += c.poll(200)
        return records


def ride_through(cluster: EmbeddedCluster, topic: str, fault: Callable[[int], None]) -> None:
    """Produce and consume numbered records while `fault(victim index)` hits the leader of
    the partition the first key goes to; check exactly-once, in key order."""
    collector = Collector(cluster, topic)
    collector.start()
    producer = NumberedProducer(cluster, topic)
    try:
        producer.send(0, 300)
        producer.acked()
        collector.wait_for(300)  # the consumer is mid-stream, fetches in flight
        first = producer.futures[0].result()
        victim = broker_index(cluster, describe(cluster, topic)[first.partition].leader)
        producer.send(300, 600)  # queued and in flight while the leader dies
        fault(victim)
        producer.send(600, 900)
        acked = producer.acked()
        collector.wait_for(len(acked))
    finally:
        producer.producer.close()
        records = collector.stop()
    check_exactly_once_in_key_order(records, acked)
    assert {r.partition for r in records if int(r.value) >= 600} == set(range(PARTITIONS))
    check_exactly_once_in_key_order(read_back(cluster, topic), acked)


# ---------------------------------------------------------------------------------- tests


def test_a_leader_kill_loses_and_repeats_nothing(cluster3):
    topic = new_topic(cluster3, replication_factor=3)
    old = describe(cluster3, topic)
    ride_through(cluster3, topic, cluster3.kill_broker)
    new = describe(cluster3, topic)
    moved = [p for p in range(PARTITIONS) if new[p].leader != old[p].leader]
    assert moved and all(new[p].leader_epoch > old[p].leader_epoch for p in moved)


def test_a_killed_leader_comes_back_as_follower_and_clients_go_on(cluster3):
    topic = new_topic(cluster3, replication_factor=3)

    def kill_and_restart(victim: int) -> None:
        cluster3.kill_broker(victim)
        cluster3.restart_broker(victim)

    ride_through(cluster3, topic, kill_and_restart)
    wait_for_full_isr(cluster3, topic, 3)


def test_without_replicas_a_restarted_leader_is_waited_for(cluster3):
    # Replication factor 1: the partition is offline until its only broker is back (on a new
    # port); the producer retries within delivery.timeout.ms and the consumer waits.
    topic = new_topic(cluster3, replication_factor=1)

    def kill_and_restart(victim: int) -> None:
        cluster3.kill_broker(victim)
        cluster3.restart_broker(victim)

    ride_through(cluster3, topic, kill_and_restart)


def test_a_dead_node_fails_fast_and_is_avoided_for_its_backoff(cluster3):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    config = producer_config({"bootstrap.servers": "127.0.0.1:1", "reconnect.backoff.ms": 60_000})
    client = NetworkClient(config)
    try:
        client.set_address(7, "127.0.0.1", dead_port)
        fields = {
            "topics": [],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }
        refused = client.send(7, ApiKey.METADATA, fields).exception(timeout=10)
        assert isinstance(refused, NetworkExceptionError)
        assert client.is_unavailable(7) and client.connection_delay_ms(7) > 50_000
        assert not client.ready(7)
        started = now_ms()
        again = client.send(7, ApiKey.METADATA, fields).exception(timeout=10)
        assert isinstance(again, NetworkExceptionError) and "reconnect.backoff.ms" in str(again)
        assert now_ms() - started < 1_000  # no connect attempt, no waiting out the backoff
        # The broker came back elsewhere (a restart takes a new port): try it at once.
        host, _sep, port = cluster3.brokers[0].bootstrap.rpartition(":")
        client.set_address(7, host, int(port))
        assert client.connection_delay_ms(7) == 0
        assert client.send(7, ApiKey.METADATA, fields).result(timeout=10).brokers
    finally:
        client.close()


# ------------------------------------------------------------------- DataFrame task bodies


def test_a_write_task_rides_through_a_leader_kill(cluster3, monkeypatch):
    from sparklog.spark import writer
    from sparklog.spark.client_pool import PRODUCERS
    from sparklog.spark.options import SinkOptions
    from sparklog.spark.writer import write_task

    monkeypatch.setattr(writer, "COALESCE_BYTES", 1)  # send each batch as it comes

    topic = new_topic(cluster3, replication_factor=3)
    options = SinkOptions(cluster3.bootstrap_servers, topic, {"batch.size": "2000"})
    keys = [f"k{i % KEYS}".encode() for i in range(3_000)]
    victim_node = describe(cluster3, topic)[0].leader

    def batches():
        for start in range(0, 3_000, 500):
            if start == 1_500:  # half the task's rows are sent: the leader of t-0 dies
                cluster3.kill_broker(broker_index(cluster3, victim_node))
            yield pa.record_batch(
                {
                    "key": pa.array(keys[start : start + 500], pa.binary()),
                    "value": pa.array(
                        [str(i).encode() for i in range(start, start + 500)], pa.binary()
                    ),
                }
            )

    try:
        message = write_task(options, ("key", "value"), batches())
    finally:
        PRODUCERS.close_all()
    assert message.records == 3_000
    check_exactly_once_in_key_order(read_back(cluster3, topic), list(range(3_000)))


def test_a_range_read_rides_through_a_leader_kill(cluster3):
    from sparklog.spark.client_pool import CONSUMERS
    from sparklog.spark.offsets import OffsetRange
    from sparklog.spark.options import Assign, EarliestOffsets, SourceOptions
    from sparklog.spark.partition_reader import read_range

    topic = new_topic(cluster3, replication_factor=3)
    with KafkaProducer({"bootstrap.servers": cluster3.bootstrap_servers}) as p:
        for i in range(2_000):
            p.send(topic, str(i).encode(), partition=0)
    options = SourceOptions(
        cluster3.bootstrap_servers,
        Assign(((topic, 0),)),
        EarliestOffsets(),
        None,
        kafka={"max.poll.records": "100", "max.partition.fetch.bytes": "4096"},
    )
    victim = broker_index(cluster3, describe(cluster3, topic)[0].leader)
    offsets: list[int] = []
    try:
        for batch in read_range(OffsetRange(topic, 0, 0, 2_000), options):
            offsets += batch.column("offset").to_pylist()
            if len(offsets) >= 500 and cluster3.brokers[victim].state.value == "running":
                cluster3.kill_broker(victim)
    finally:
        CONSUMERS.close_all()
    assert offsets == list(range(2_000))
