"""Brokers in child processes of their own (`EmbeddedCluster(broker_processes=True)`, what
`serve --master none --broker-processes` runs): replication, a killed broker's partitions
failing over, and the broker coming back on its data dir to rejoin the ISR."""

from __future__ import annotations

import os
import time
import uuid

from sparklog.client import AdminClient, KafkaConsumer, KafkaProducer, NewTopic, TopicPartition
from sparklog.cluster.embedded import EmbeddedCluster

from .conftest import REPLICATION_CONFIG


def _running(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_brokers_in_processes_replicate_fail_over_and_come_back(tmp_path):
    topic = f"apart-{uuid.uuid4().hex[:8]}"
    with EmbeddedCluster(
        brokers=2, data_dir=tmp_path, config=REPLICATION_CONFIG, broker_processes=True
    ) as cluster:
        pids = [b.pid for b in cluster.brokers]
        assert len(set(pids)) == 2 and os.getpid() not in pids
        with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            admin.create_topics([NewTopic(topic, 1, 2)])
        assert len(cluster.wait_for_isr(topic, size=2)) == 2
        config = {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}
        with KafkaProducer(config) as producer:
            sent = [producer.send(topic, b"before-%d" % i, partition=0) for i in range(10)]
            producer.flush()
            assert [f.result(30).offset for f in sent] == list(range(0, 10))

        leader = cluster.leader_of(topic)
        index = cluster.broker_index(leader)
        killed_pid = cluster.brokers[index].pid
        cluster.kill_broker(index)
        assert not _running(killed_pid)
        deadline = time.monotonic() + 30
        while cluster.leader_of(topic) in (leader, -1):
            assert time.monotonic() < deadline, "no new leader after the kill"
            time.sleep(0.05)
        config["bootstrap.servers"] = cluster.bootstrap_servers  # the survivor only
        with KafkaProducer(config) as producer:
            sent = [producer.send(topic, b"after-%d" % i, partition=0) for i in range(10)]
            producer.flush()
            assert [f.result(30).offset for f in sent] == list(range(10, 20))

        cluster.restart_broker(index)
        assert len(cluster.wait_for_isr(topic, size=2)) == 2
        consumer = KafkaConsumer({"bootstrap.servers": cluster.bootstrap_servers})
        try:
            consumer.assign([TopicPartition(topic, 0)])
            consumer.seek(TopicPartition(topic, 0), 0)
            values: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(values) < 20 and time.monotonic() < deadline:
                values += [r.value for r in consumer.poll(500)]
        finally:
            consumer.close()
        pids = [b.pid for b in cluster.brokers]
    assert values == [b"before-%d" % i for i in range(10)] + [b"after-%d" % i for i in range(10)]
    assert not any(_running(pid) for pid in pids)  # stop() ended every child
