"""Clients read offsets that only a topic's remote tier holds (KIP-405, issue 32 §1, §4).

A broker with a remote tier (a Delta table per topic under `remote.table.root`) copies a topic
with tiny segments to its table and deletes the copied segments locally
(`local.retention.bytes` 1), so most offsets exist only in the table. Kafka's Java consumer,
kafka-python, confluent-kafka and sparklog's consumer then read the topic from offset 0 through
the broker, which serves the tiered offsets from the table, record for record what was produced
(headers and timestamps included); the Java Admin client's ListOffsets -4/-5 (v8/v9) see the
two tiers. A wiped follower catches up from the leader's local start without the tiered part.
"""

from __future__ import annotations

import base64
import subprocess
import time
import uuid

import pytest

from sparklog.client import AdminClient, NewTopic
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.metrics.metric import MetricName

from .java_tools import compile_java
from .test_clients_interop import (
    CONSUMERS,
    PARTITIONS,
    Rec,
    expected,
    make_records,
    produce_sparklog,
)

pytestmark = [pytest.mark.interop, pytest.mark.slow]

COUNT = 3_000
TIERED_TOPIC = {
    "remote.storage.enable": "true",
    "retention.ms": "-1",  # the records' timestamps are from 2023
    "segment.bytes": "16384",
    "local.retention.bytes": "1",
}


def cluster_config(root: str) -> dict[str, str]:
    return {
        "broker.heartbeat.interval.ms": "200",
        "remote.log.storage.system.enable": "true",
        "remote.table.root": root,
        "remote.log.manager.task.interval.ms": "100",
        "log.retention.check.interval.ms": "100",
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("tables"))
    with EmbeddedCluster(
        brokers=1, data_dir=tmp_path_factory.mktemp("remote-fetch"), config=cluster_config(root)
    ) as running:
        yield running


def wait_until(condition, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def leader_log(cluster: EmbeddedCluster, topic: str, partition: int):
    node = cluster.leader_of(topic, partition)
    broker = cluster.brokers[cluster.broker_index(node)]
    return broker.replica_manager.hosted(topic, partition).log


def tiered_topic(cluster: EmbeddedCluster, replication: int = 1) -> tuple[str, list[Rec]]:
    """A topic of COUNT records whose first ones (at least half of each partition) exist only
    in the remote tier."""
    name = f"tiered-{uuid.uuid4().hex[:8]}"
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(name, PARTITIONS, replication, TIERED_TOPIC)])
    records = make_records(COUNT, same_headers=False, timestamps=True)
    produce_sparklog(cluster.bootstrap_servers, name, records, "none")
    per_partition = COUNT // PARTITIONS
    for p in range(PARTITIONS):
        wait_until(
            lambda p=p: leader_log(cluster, name, p).local_log_start_offset > per_partition // 2,
            f"{name}-{p}: local segments were not tiered and deleted",
        )
    return name, expected(records)


@pytest.fixture(scope="module")
def topic(cluster):
    return tiered_topic(cluster)


@pytest.mark.parametrize("consumer", ["confluent", "kafka-python", "sparklog"])
def test_clients_read_offsets_only_the_table_holds(cluster, topic, consumer):
    name, want = topic
    reader = cluster.brokers[0].replica_manager.remote_reader
    before = reader.reads
    got = CONSUMERS[consumer](cluster.bootstrap_servers, name, len(want))
    assert sorted(got, key=lambda r: (r.partition, r.offset)) == want
    assert reader.reads > before, "nothing was read from the table"
    assert reader.failed_reads == 0
    metrics = cluster.brokers[0].metrics
    fetched = metrics.meter(
        MetricName.of("kafka.server", "BrokerTopicMetrics", "RemoteFetchBytesPerSec")
    )
    assert fetched.count >= reader.bytes_read > 0
    for p in range(PARTITIONS):
        log_ = leader_log(cluster, name, p)
        assert log_.log_start_offset == 0 < log_.local_log_start_offset


def _java_records(stdout: str) -> tuple[list[Rec], list[int]]:
    def unb64(s: str) -> bytes | None:
        return None if s == "-" else base64.b64decode(s)

    records, offsets = [], []
    for line in stdout.splitlines():
        if line.startswith("OFFSETS"):
            offsets = [int(x) for x in line.split()[1:]]
            continue
        p, offset, ts, key, value, headers = line.split(" ")
        hs = (
            ()
            if headers == "-"
            else tuple((k, unb64(v)) for k, v in (h.split("=", 1) for h in headers.split(",")))
        )
        records.append(Rec(int(p), unb64(key), unb64(value), hs, int(ts), int(offset)))
    return records, offsets


def test_kafkas_java_consumer_and_admin_see_both_tiers(cluster, topic, tmp_path_factory):
    name, want = topic
    class_path = compile_java("TieredJavaReader.java", tmp_path_factory.mktemp("java-tiered"))
    done = subprocess.run(
        ["java", "-Dlog4j2.rootLogger.level=WARN", "-cp", class_path, "TieredJavaReader",
         cluster.bootstrap_servers, name, str(len(want))],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    got, offsets = _java_records(done.stdout)
    assert sorted(got, key=lambda r: (r.partition, r.offset)) == want
    log_ = leader_log(cluster, name, 0)
    earliest, earliest_local, latest_tiered, latest = offsets
    assert (earliest, latest) == (0, log_.log_end_offset)
    assert earliest_local == log_.local_log_start_offset > 0
    assert earliest_local - 1 <= latest_tiered == log_.highest_offset_in_remote_storage


@pytest.fixture
def cluster2(tmp_path):
    with EmbeddedCluster(
        brokers=2, data_dir=tmp_path / "data", config=cluster_config(str(tmp_path / "tables"))
    ) as running:
        yield running


def test_a_wiped_follower_catches_up_from_the_leaders_local_start(cluster2):
    """Kafka's TierStateMachine: a replica whose disk was wiped after the leader deleted its
    local copies of tiered segments gets OFFSET_MOVED_TO_TIERED_STORAGE, restarts its log at
    the leader's local start with the leader epochs and producer state from the table, and
    replicates the rest; it never copies the tiered part, and the leader serves none of it."""
    name, _want = tiered_topic(cluster2, replication=2)
    follower = next(b.node_id for b in cluster2.brokers if b.node_id != cluster2.leader_of(name, 0))
    followed = [p for p in range(PARTITIONS) if cluster2.leader_of(name, p) != follower]
    leaders = {p: leader_log(cluster2, name, p) for p in followed}
    local_starts = {p: log_.local_log_start_offset for p, log_ in leaders.items()}
    served = sum(b.replica_manager.remote_reader.reads for b in cluster2.brokers)
    restarted = cluster2.restart_broker(cluster2.broker_index(follower), wipe=True)
    for p in followed:
        cluster2.wait_for_isr(name, p, timeout_s=60)
        wait_until(
            lambda p=p: (
                restarted.replica_manager.hosted(name, p).log.log_end_offset
                == leaders[p].log_end_offset
            ),
            f"{name}-{p}: the follower did not catch up",
        )
    for p in followed:
        leader, copy = leaders[p], restarted.replica_manager.hosted(name, p).log
        assert copy.log_start_offset == leader.log_start_offset == 0
        # restarted at the leader's local start then (its local retention may have moved on)
        assert local_starts[p] <= copy.local_log_start_offset <= leader.local_log_start_offset
        assert copy.segments[0].base_offset == copy.local_log_start_offset  # nothing below
        assert copy.epoch_cache.entries() == leader.epoch_cache.entries()
        assert set(copy.producer_state.active_producers) == set(
            leader.producer_state.active_producers
        )
    reads = sum(b.replica_manager.remote_reader.reads for b in cluster2.brokers)
    assert reads == served, "the follower's catch-up read the tiered part"


def test_read_committed_consumers_skip_aborted_transactions_served_from_the_table(cluster):
    """Transactions whose records are only in the table: confluent-kafka and kafka-python in
    read_committed get the committed ones only (the aborted list comes from the table, as
    from a local transaction index); read_uncommitted sees them all."""
    import confluent_kafka
    import kafka

    name = f"tiered-txn-{uuid.uuid4().hex[:8]}"
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(name, 1, 1, TIERED_TOPIC)])
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "broker.address.family": "v4",
         "transactional.id": f"tiered-{uuid.uuid4().hex[:6]}"}
    )  # fmt: skip
    producer.init_transactions(30)
    committed: list[bytes] = []
    for t in range(24):
        producer.begin_transaction()
        values = [b"txn-%d-%d-" % (t, i) + b"x" * 200 for i in range(40)]
        for v in values:
            producer.produce(name, v, partition=0)
        producer.flush(30)  # written before the abort (which would purge what is unsent)
        if t % 3 == 1:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed += values
    wait_until(
        lambda: leader_log(cluster, name, 0).local_log_start_offset > 24 * 41 // 2,
        f"{name}: the transactions were not tiered",
    )

    def confluent_values(isolation: str, want: int) -> list[bytes]:
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": cluster.bootstrap_servers, "broker.address.family": "v4",
             "group.id": uuid.uuid4().hex, "enable.auto.commit": False,
             "isolation.level": isolation}
        )  # fmt: skip
        consumer.assign([confluent_kafka.TopicPartition(name, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < want and time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(500, 0.5) if m.error() is None]
        consumer.close()
        return got

    assert confluent_values("read_committed", len(committed)) == committed
    assert len(confluent_values("read_uncommitted", 24 * 40)) == 24 * 40
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        isolation_level="read_committed",
        enable_auto_commit=False,
        consumer_timeout_ms=5_000,
    )
    consumer.assign([kafka.TopicPartition(name, 0)])
    consumer.seek_to_beginning()
    got = [r.value for r in consumer]
    consumer.close()
    assert got == committed
