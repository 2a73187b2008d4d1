"""The broker's data-path metrics (Kafka's BrokerTopicMetrics, ReplicaManager, Log) read from
each broker's registry while real clients produce and consume on a three-broker cluster: byte
counts equal the bytes of the batches on the leader's disk, replication is counted apart, ISR
shrinks and expands are counted when the leader's AlterPartition commits, gauges follow a
leader move, and a deleted topic's series go away."""

from __future__ import annotations

import time
import urllib.request
import uuid

import confluent_kafka
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparklog.broker.broker_metrics import (
    LOG_FLUSH,
    broker_topic_metric,
    log_metric,
    partition_metric,
    replica_manager_metric,
)
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.metrics.metric import MetricName
from sparklog.protocol.api_versions import ApiKey
from sparklog.records.batch_header import CRC_OFFSET

from .broker_wire import batch, call, connect, create_topic, produce, run
from .conftest import REPLICATION_CONFIG

NONE, CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_RECORD, NOT_LEADER = 0, 2, 10, 87, 6


@pytest.fixture(scope="module")
def mcluster(tmp_path_factory):
    """Three brokers whose followers leave the ISR a second after they stop fetching."""
    config = {**REPLICATION_CONFIG, "metrics.prometheus.port": "-1"}  # served on a free port
    with EmbeddedCluster(
        brokers=3, data_dir=tmp_path_factory.mktemp("metrics"), config=config
    ) as running:
        yield running


def node(cluster, node_id):
    return cluster.brokers[cluster.broker_index(node_id)]


def value(broker, name: MetricName) -> float:
    """The metric's value, read on the broker's loop (gauges walk loop-owned state); a metric
    that is not registered reads as None."""
    return broker.call_in_loop(
        lambda: None if broker.metrics.metric(name) is None else broker.metrics.metric(name).value()
    )


def scraped(cluster, family: str, **labels: str) -> float:
    """The sum over the process's servers of the samples `family` with `labels`, scraped over
    HTTP from the process's Prometheus endpoint and parsed by prometheus_client."""
    url = f"http://127.0.0.1:{cluster.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    samples = [
        sample
        for f in text_string_to_metric_families(text)
        for sample in f.samples
        if sample.name == family and all(sample.labels.get(k) == v for k, v in labels.items())
    ]
    assert samples, f"no {family}{labels} in the scrape"
    return sum(sample.value for sample in samples)


def topic_meter(broker, name: str, topic: str | None = None) -> float:
    return value(broker, broker_topic_metric(name, topic))


def make_topic(cluster, rf=3, **configs) -> str:
    topic = f"metrics-{uuid.uuid4().hex[:8]}"

    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            created = await create_topic(
                conn, topic, replication_factor=rf, configs={k: str(v) for k, v in configs.items()}
            )
            assert created.error_code == NONE, created
        finally:
            await conn.close()

    run(go())
    cluster.wait_for_isr(topic, 0, rf)
    return topic


def produce_raw(broker, topic, records, acks=1):
    async def go():
        conn = await connect(broker.bootstrap)
        try:
            return await produce(conn, topic, records, acks=acks)
        finally:
            await conn.close()

    return run(go())


def wait_until(condition, what: str, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def leader_log_bytes(leader, topic) -> int:
    """The bytes of every batch on the leader's disk (what its producers' batches were)."""
    log_ = leader.replica_manager.hosted(topic, 0).log
    return sum(s.size_bytes for s in log_.segments)


def test_bytes_and_messages_in_and_out_equal_the_batches_produced_and_consumed(mcluster):
    c = mcluster
    topic = make_topic(c)
    leader = node(c, c.leader_of(topic))
    followers = [b for b in c.brokers if b.node_id != leader.node_id]
    before = {
        b.node_id: {
            n: topic_meter(b, n)
            for n in ("ReplicationBytesInPerSec", "ReplicationBytesOutPerSec", "BytesInPerSec")
        }
        for b in c.brokers
    }
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": c.bootstrap_servers, "acks": "all", "linger.ms": 5}
    )
    count = 500
    for i in range(count):
        producer.produce(topic, value=b"v%05d" % i, key=b"k%d" % (i % 7), partition=0)
    assert producer.flush(30) == 0
    for f in followers:  # replicated: every follower holds what the leader holds
        wait_until(
            lambda f=f: f.replica_manager.hosted(topic, 0).log.log_end_offset == count,
            "followers caught up",
        )
    size_bytes = leader_log_bytes(leader, topic)
    assert size_bytes > 0
    assert topic_meter(leader, "BytesInPerSec", topic) == size_bytes
    assert topic_meter(leader, "MessagesInPerSec", topic) == count
    assert topic_meter(leader, "TotalProduceRequestsPerSec", topic) >= 1
    assert topic_meter(leader, "FailedProduceRequestsPerSec", topic) == 0
    assert topic_meter(leader, "BytesInPerSec") - before[leader.node_id]["BytesInPerSec"] == (
        size_bytes
    )
    assert value(leader, log_metric("Size", topic, 0)) == size_bytes
    assert value(leader, log_metric("LogEndOffset", topic, 0)) == count
    assert value(leader, log_metric("LogStartOffset", topic, 0)) == 0
    assert value(leader, log_metric("NumLogSegments", topic, 0)) == 1
    # followers fetch and append the leader's batches: replication, not bytes in or out
    for f in followers:
        assert topic_meter(f, "BytesInPerSec", topic) == 0
        assert (
            topic_meter(f, "ReplicationBytesInPerSec")
            - (before[f.node_id]["ReplicationBytesInPerSec"])
            == size_bytes
        )
        assert value(f, log_metric("Size", topic, 0)) == size_bytes
    assert (
        topic_meter(leader, "ReplicationBytesOutPerSec")
        - (before[leader.node_id]["ReplicationBytesOutPerSec"])
        == 2 * size_bytes
    )
    assert topic_meter(leader, "BytesOutPerSec", topic) == 0

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": c.bootstrap_servers,
            "group.id": f"metrics-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got = 0
    deadline = time.monotonic() + 30
    try:
        while got < count and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=count, timeout=0.5):
                assert m.error() is None, m.error()
                got += 1
    finally:
        consumer.close()
    assert got == count
    assert topic_meter(leader, "BytesOutPerSec", topic) == size_bytes
    # the same values, as a Prometheus server scrapes them (the JMX exporter's names)
    assert scraped(c, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) == size_bytes
    assert scraped(c, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) == size_bytes
    assert scraped(c, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == count
    assert scraped(c, "kafka_log_log_size", topic=topic, partition="0") == 3 * size_bytes
    assert scraped(c, "kafka_log_log_logendoffset", topic=topic, partition="0") == 3 * count
    assert scraped(c, "kafka_cluster_partition_underreplicated", topic=topic) == 0
    assert scraped(c, "kafka_server_replicamanager_leadercount") >= 1
    assert topic_meter(leader, "TotalFetchRequestsPerSec", topic) >= 1
    assert topic_meter(leader, "FailedFetchRequestsPerSec", topic) == 0


def test_refused_produces_count_as_kafka_counts_them(mcluster):
    c = mcluster
    topic = make_topic(c, **{"max.message.bytes": 2000})
    leader = node(c, c.leader_of(topic))
    follower = next(b for b in c.brokers if b.node_id != leader.node_id)
    crc_before = topic_meter(leader, "InvalidMessageCrcRecordsPerSec")

    too_large = batch([b"x" * 5000])
    assert produce_raw(leader, topic, too_large).error_code == MESSAGE_TOO_LARGE
    assert topic_meter(leader, "BytesRejectedPerSec", topic) == len(too_large)

    corrupt = bytearray(batch([b"a"]))
    corrupt[CRC_OFFSET] ^= 0xFF
    assert produce_raw(leader, topic, bytes(corrupt)).error_code == CORRUPT_MESSAGE
    assert topic_meter(leader, "InvalidMessageCrcRecordsPerSec") == crc_before + 1

    # a client's mistake (too large, corrupt) is not a failed produce in Kafka's sense ...
    assert topic_meter(leader, "FailedProduceRequestsPerSec", topic) == 0
    # ... nor is asking the wrong broker, which counts the request where it arrived
    assert produce_raw(follower, topic, batch([b"a"])).error_code == NOT_LEADER
    assert topic_meter(follower, "FailedProduceRequestsPerSec", topic) == 0
    assert topic_meter(follower, "TotalProduceRequestsPerSec", topic) == 1
    # an invalid record is (Kafka's RecordValidationException path)
    two_batches = batch([b"a"]) + batch([b"b"])
    assert produce_raw(leader, topic, two_batches).error_code == INVALID_RECORD
    assert topic_meter(leader, "FailedProduceRequestsPerSec", topic) == 1
    assert topic_meter(leader, "TotalProduceRequestsPerSec", topic) == 3
    assert topic_meter(leader, "BytesInPerSec", topic) == 0
    assert topic_meter(leader, "MessagesInPerSec", topic) == 0


def test_isr_shrink_and_expand_are_counted_on_the_leader(mcluster):
    c = mcluster
    topic = make_topic(c)
    tp = (topic, 0)
    leader = node(c, c.leader_of(topic))
    lagging = next(b for b in c.brokers if b.node_id != leader.node_id)
    shrinks = value(leader, replica_manager_metric("IsrShrinksPerSec"))
    expands = value(leader, replica_manager_metric("IsrExpandsPerSec"))
    under = value(leader, replica_manager_metric("UnderReplicatedPartitions"))
    assert value(leader, replica_manager_metric("UnderMinIsrPartitionCount")) == 0

    lagging.call_in_loop(lambda: lagging.fetchers.remove_partition(tp))
    produce_raw(leader, topic, batch([b"b"]))
    assert lagging.node_id not in c.wait_for_isr(topic, 0, 2)  # replica.lag.time.max.ms=1000
    wait_until(  # the controller's answer reaches the leader right after it commits
        lambda: value(leader, replica_manager_metric("IsrShrinksPerSec")) == shrinks + 1,
        "the shrink counted",
    )
    assert value(leader, replica_manager_metric("UnderReplicatedPartitions")) == under + 1
    assert value(leader, partition_metric("UnderReplicated", topic, 0)) == 1
    assert value(leader, partition_metric("InSyncReplicasCount", topic, 0)) == 2
    assert value(lagging, partition_metric("InSyncReplicasCount", topic, 0)) == 0  # a follower
    assert value(leader, replica_manager_metric("IsrExpandsPerSec")) == expands
    assert value(leader, replica_manager_metric("FailedIsrUpdatesPerSec")) == 0

    hosted = lagging.replica_manager.hosted(*tp)
    lagging.call_in_loop(
        lambda: lagging.fetchers.add_partition(
            tp, hosted.topic_id, hosted.partition.leader, hosted.partition.leader_epoch
        )
    )
    assert lagging.node_id in c.wait_for_isr(topic, 0, 3)
    wait_until(
        lambda: value(leader, replica_manager_metric("IsrExpandsPerSec")) == expands + 1,
        "the expand counted",
    )
    assert value(leader, replica_manager_metric("UnderReplicatedPartitions")) == under
    assert value(leader, partition_metric("UnderReplicated", topic, 0)) == 0
    assert value(leader, partition_metric("InSyncReplicasCount", topic, 0)) == 3


def test_log_flushes_are_timed(mcluster):
    """flush.messages=1: every append fsyncs, each counted in LogFlushRateAndTimeMs."""
    c = mcluster
    topic = make_topic(c, rf=1, **{"flush.messages": 1})
    leader = node(c, c.leader_of(topic))
    flushes = leader.call_in_loop(lambda: leader.metrics.metric(LOG_FLUSH).measurable)
    before = flushes.count
    for v in (b"a", b"b", b"c"):
        assert produce_raw(leader, topic, batch([v])).error_code == NONE
    wait_until(lambda: leader.call_in_loop(lambda: flushes.count) >= before + 3, "3 flushes")
    assert leader.call_in_loop(lambda: flushes.quantiles((0.5,))[0]) >= 0


def controller_leader_counts(cluster) -> dict[int, int]:
    counts = {b.node_id: 0 for b in cluster.brokers}
    image = cluster.controller.metadata_image()
    for topic in image.topics_by_id.values():
        for registration in topic.partitions.values():
            if registration.leader in counts:
                counts[registration.leader] += 1
    return counts


def gauges_agree_with_controller(cluster, running) -> bool:
    expected = controller_leader_counts(cluster)
    return all(
        value(b, replica_manager_metric("LeaderCount")) == expected[b.node_id] for b in running
    )


def test_leader_count_follows_a_leader_move_and_deleted_topics_lose_their_series(mcluster):
    c = mcluster
    topic = make_topic(c)
    produce_raw(node(c, c.leader_of(topic)), topic, batch([b"a"]))
    wait_until(lambda: gauges_agree_with_controller(c, c.brokers), "LeaderCount as the image")
    moved = c.leader_of(topic)
    assert value(node(c, moved), replica_manager_metric("PartitionCount")) >= 1

    c.stop_broker(c.broker_index(moved))  # controlled shutdown: its leaderships move at once
    try:
        new_leader = c.wait_for_leader(topic, not_on=moved)
        running = [b for b in c.brokers if b.node_id != moved]
        wait_until(lambda: gauges_agree_with_controller(c, running), "LeaderCount after the move")
        assert value(node(c, new_leader), replica_manager_metric("UnderReplicatedPartitions")) >= 1
    finally:
        c.restart_broker(c.broker_index(moved))
    c.wait_for_isr(topic, 0, 3)

    async def delete():
        conn = await connect(c.bootstrap_servers)
        try:
            await call(conn, ApiKey.DELETE_TOPICS, {"topic_names": [topic], "timeout": 30_000})
        finally:
            await conn.close()

    leader = node(c, c.leader_of(topic))
    assert topic_meter(leader, "BytesInPerSec", topic) is not None
    assert value(leader, log_metric("Size", topic, 0)) is not None
    run(delete())
    for b in c.brokers:
        wait_until(
            lambda b=b: topic_meter(b, "BytesInPerSec", topic) is None, "the topic's meters gone"
        )
        assert value(b, log_metric("Size", topic, 0)) is None
        assert value(b, log_metric("LogEndOffset", topic, 0)) is None
