"""A driver restarted on another host recovers the cluster (issue 27 item 4; DESIGN D7/D8).

The controller's metadata log (`metadata.log.dir`) and the coordinators' Delta table (by
default beside it) live on shared storage: a real S3-compatible server (S3Proxy, `s3proxy`
fixture) or a shared directory (the stand-in for a shared filesystem). With confluent-kafka:
topics are created, records produced with acks=all, group offsets committed, one transaction
committed and one left open; then the driver side (controller + coordinator) is killed and
started again on a NEW, empty local directory. The brokers re-register; topics, replicas,
leaders, ISRs, committed offsets and the open transaction come back, and every acknowledged
record is still there.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from sparklog.cluster.embedded import EmbeddedCluster

from .conftest import REPLICATION_CONFIG

pytestmark = pytest.mark.interop

PARTITIONS = 3
RECORDS = 300
CONFIG = {
    **REPLICATION_CONFIG,
    "replica.lag.time.max.ms": "5000",
    "min.insync.replicas": "2",
    # small, so the run writes several snapshots and segment objects before the restart
    "metadata.log.snapshot.records": "10",
}


def _wait(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def _produce(bootstrap: str, topic: str) -> dict[tuple[int, int], bytes]:
    """RECORDS records with acks=all; (partition, offset) -> value of each one acknowledged."""
    acked: dict[tuple[int, int], bytes] = {}

    def on_delivery(err, msg):
        assert err is None, err
        acked[(msg.partition(), msg.offset())] = msg.value()

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(topic, b"v%d" % i, key=b"k%d" % i, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert len(acked) == RECORDS
    return acked


def _transactions(bootstrap: str, topic: str) -> Producer:
    """One transaction committed (10 records), one left open (5 records); returns the open
    transaction's producer."""
    done = Producer({"bootstrap.servers": bootstrap, "transactional.id": "txn-committed"})
    done.init_transactions(30)
    done.begin_transaction()
    for i in range(10):
        done.produce(topic, b"committed-%d" % i, partition=0)
    done.commit_transaction(30)
    pending = Producer({"bootstrap.servers": bootstrap, "transactional.id": "txn-open"})
    pending.init_transactions(30)
    pending.begin_transaction()
    for i in range(5):
        pending.produce(topic, b"open-%d" % i, partition=0)
    assert pending.flush(30) == 0
    return pending


def _read_all(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[tuple]:
    """(partition, offset, value) of every record up to each partition's end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
        for p in range(partitions)
    }
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: list[tuple] = []
    done: set[int] = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + 30
    while len(done) < partitions and time.monotonic() < deadline:
        for m in consumer.consume(500, 0.2):
            assert m.error() is None, m.error()
            seen.append((m.partition(), m.offset(), m.value()))
        for p in set(ends) - done:
            position = consumer.position([TopicPartition(topic, p)])[0].offset
            if position >= ends[p]:
                done.add(p)
    consumer.close()
    return seen


def _last_stable_offset(bootstrap: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 0)
    result = admin.list_offsets(
        {tp: OffsetSpec.latest()}, isolation_level=IsolationLevel.READ_COMMITTED
    )
    return result[tp].result(30).offset


def _partitions(cluster: EmbeddedCluster) -> dict[tuple[str, int], tuple]:
    image = cluster.controller.metadata_image()
    out = {}
    for name in image.topic_names():
        topic = image.topic(name)
        for index, p in topic.partitions.items():
            out[(name, index)] = (
                topic.topic_id,
                tuple(p.replicas),
                p.leader,
                tuple(sorted(p.isr)),
                p.leader_epoch,
            )
    return out


def _restart_on_another_host(
    tmp_path, shared_settings: dict[str, str], *, new_application: bool = False
) -> None:
    """With `new_application`, the brokers restart too, as a new Spark application's broker
    tasks would on the same workers: they adopt their identities (cluster id included) from
    their disks and register with the new controller."""
    config = {**CONFIG, **shared_settings}
    with EmbeddedCluster(brokers=3, data_dir=tmp_path / "cluster", config=config) as cluster:
        bootstrap = cluster.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics(
            [NewTopic("orders", PARTITIONS, 3), NewTopic("payments", 1, 3)]
        )
        for future in futures.values():
            future.result(30)
        acked = _produce(bootstrap, "orders")
        committed = [TopicPartition("orders", p, 40 + p) for p in range(PARTITIONS)]
        group = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing"})
        group.commit(offsets=committed, asynchronous=False)
        group.close()
        pending = _transactions(bootstrap, "payments")
        lso = _last_stable_offset(bootstrap, "payments")
        assert lso == 11  # 10 committed records + their COMMIT marker; then the open ones
        before = _partitions(cluster)
        cluster_id = cluster.controller.cluster_id
        old_dir = cluster.controller_dir

        # -- the driver's host is lost: a new driver on an empty local dir -----------------
        new_dir = tmp_path / "another-host" / "controller"
        cluster.restart_driver(new_dir)
        assert cluster.controller.cluster_id == cluster_id
        if new_application:
            for index in range(3):
                cluster.restart_broker(index)
            bootstrap = cluster.bootstrap_servers  # the new tasks listen on new ports
        assert not (new_dir / "meta.properties").exists()  # the cluster id is on shared storage

        # every broker re-registers and every partition is led by its old leader again, with
        # its full ISR, under an epoch no lower than before
        def recovered():
            after = _partitions(cluster)
            live = {b["broker_id"] for b in cluster.controller.live_brokers()}
            return (
                after if live == {0, 1, 2} and all(len(a[3]) == 3 for a in after.values()) else None
            )

        after = _wait(recovered, 30, "brokers to re-register and ISRs to fill")
        assert after.keys() == before.keys()
        for key, (topic_id, replicas, _leader, _isr, epoch) in before.items():
            assert after[key][0] == topic_id and after[key][1] == replicas
            assert after[key][4] >= epoch

        # committed offsets come back from the shared Delta table
        group = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing"})
        found = group.committed([TopicPartition("orders", p) for p in range(PARTITIONS)], 30)
        group.close()
        assert [(tp.partition, tp.offset) for tp in found] == [
            (tp.partition, tp.offset) for tp in committed
        ]

        # the open transaction is still open (LSO held); its producer can commit it, or (in a
        # new application, whose producers are new too) the next one with its transactional.id
        # aborts it, which only a coordinator that knows it can do
        assert _last_stable_offset(bootstrap, "payments") == lso
        committed_values = [b"committed-%d" % i for i in range(10)]
        if new_application:
            successor = Producer({"bootstrap.servers": bootstrap, "transactional.id": "txn-open"})
            successor.init_transactions(30)
            expected = committed_values
        else:
            pending.commit_transaction(30)
            expected = committed_values + [b"open-%d" % i for i in range(5)]
        values = [v for _p, _o, v in _read_all(bootstrap, "payments", 1, "read_committed")]
        assert values == expected

        # nothing acknowledged is lost
        seen = {
            (p, o): v for p, o, v in _read_all(bootstrap, "orders", PARTITIONS, "read_uncommitted")
        }
        assert seen == acked
        assert old_dir != cluster.controller_dir


def test_driver_restart_on_another_host_with_state_on_s3(s3proxy, tmp_path):
    bucket = s3proxy.create_bucket(f"driver-{uuid.uuid4().hex[:8]}")
    _restart_on_another_host(
        tmp_path, {"metadata.log.dir": f"s3://{bucket}/cluster", **s3proxy.settings()}
    )
    objects = {
        p.relative_to(s3proxy.data_dir / bucket).parts[:2]
        for p in (s3proxy.data_dir / bucket).rglob("*")
        if p.is_file()
    }
    assert ("cluster", "__consumer_offsets") in objects and (
        "cluster",
        "meta.properties",
    ) in objects


def test_a_new_application_on_another_host_with_state_on_a_shared_directory(tmp_path):
    shared = tmp_path / "shared-filesystem" / "sparklog"
    _restart_on_another_host(tmp_path, {"metadata.log.dir": str(shared)}, new_application=True)
    assert (shared / "meta.properties").exists() and (shared / "__consumer_offsets").is_dir()
