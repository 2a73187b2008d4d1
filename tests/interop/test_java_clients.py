"""Kafka's Java clients, the reference implementation, against a sparklog cluster:
KafkaProducer (idempotent, acks=all, every compression, headers), KafkaConsumer (assign, seek,
position, both isolation levels, no group) and Admin (topics, cluster, offsets, deleteRecords,
configs, log dirs). The program prints JSON lines; this test checks every value."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from sparklog.cluster.embedded import EmbeddedCluster

from .java_tools import compile_java

pytestmark = pytest.mark.interop

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PER_CODEC = 50
BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def run_class_path(tmp_path_factory):
    return compile_java("SparklogJavaClients.java", tmp_path_factory.mktemp("java-classes"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(
        brokers=1,
        data_dir=tmp_path_factory.mktemp("java-clients"),
        config={"broker.heartbeat.interval.ms": "200"},
    ) as running:
        yield running


def expected_records(start_of_partition_2: int = 5) -> list[list]:
    rows = []
    offsets = {0: 0, 1: 0, 2: 0}
    for n in range(len(CODECS) * PER_CODEC):
        codec = CODECS[n // PER_CODEC]
        p = n % 3
        key = None if n % 4 == 0 else f"key-{n}"
        row = [p, offsets[p], BASE_TS + n, key, f"{codec}-value-{n}", codec]
        offsets[p] += 1
        if p != 2 or row[1] >= start_of_partition_2:
            rows.append(row)
    return sorted(rows, key=lambda r: (r[0], r[1]))


def test_java_producer_consumer_and_admin(cluster, run_class_path):
    topic = f"java-{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        ["java", "-Dlog4j2.rootLogger.level=WARN", "-cp", run_class_path,
         "SparklogJavaClients", cluster.bootstrap_servers, topic],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    out = {next(iter(line)): next(iter(line.values())) for line in lines if "consumed" not in line}
    consumed = [line["consumed"] for line in lines if "consumed" in line]

    assert out["cluster"]["nodes"] == 1 and out["cluster"]["id"]
    assert out["topic"] == {"name": topic, "partitions": 3, "replicas": 1}
    assert out["produced"] == len(CODECS) * PER_CODEC
    want = expected_records()
    ends = [sum(1 for n in range(out["produced"]) if n % 3 == p) for p in range(3)]
    assert [c["isolation"] for c in consumed] == ["read_uncommitted", "read_committed"]
    for c in consumed:
        assert c["ends"] == ends and c["position_before"] == 0
        assert sorted(c["records"], key=lambda r: (r[0], r[1])) == want, c["isolation"]
    # partition 0 holds n = 0, 3, 6, ...: offset k has timestamp BASE_TS + 3k
    assert out["offsets"] == {
        "earliest": 0,
        "latest": ends[0],
        "max_timestamp": ends[0] - 1,
        "by_timestamp": 1,
        "earliest_after_delete": 10,
    }
    assert out["configs"] == {
        "retention.ms": "86400000",
        "cleanup.policy": "delete,compact",
        "retention.ms.source": "DYNAMIC_TOPIC_CONFIG",
    }
    on_disk = sum(
        f.stat().st_size
        for p in range(3)
        for f in (cluster.broker_dir(cluster.brokers[0].node_id) / f"{topic}-{p}").glob("*.log")
    )
    assert out["log_dirs"] == {"dirs": 1, "partitions": 3, "bytes": on_disk}


@pytest.fixture(scope="module")
def txn_class_path(tmp_path_factory):
    return compile_java("SparklogJavaTransactions.java", tmp_path_factory.mktemp("java-txn"))


def test_java_transactions_read_process_write_zombie_and_admin(cluster, txn_class_path):
    suffix = uuid.uuid4().hex[:8]
    done = subprocess.run(
        ["java", "-Dlog4j2.rootLogger.level=WARN", "-cp", txn_class_path,
         "SparklogJavaTransactions", cluster.bootstrap_servers,
         f"jin-{suffix}", f"jout-{suffix}", f"jz-{suffix}"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    out = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            out.update(json.loads(line))
    assert out["aborted_txns"] >= 1
    assert out["sink"] == {"count": 300, "distinct": 300, "aborted_seen": 0}, (
        "every input once, nothing from an aborted transaction"
    )
    assert out["zombie"] in ("ProducerFencedException", "InvalidProducerEpochException")
    assert out["fenced_topic"] == "successor"
    assert out["committed"] == 300, "the group's offsets moved with the transactions"
    assert out["listed"] == "CompleteCommit"
    assert out["described"] == {"state": "CompleteCommit", "partitions": 0, "timeout": 60000}
    assert out["producers_on_sink"] == 1, "one transactional producer wrote the sink"
    # Kafka 4.x's producer speaks transactions v2 with a cluster that finalized it (KIP-890
    # part 2): partitions and the group added without AddPartitionsToTxn / AddOffsetsToTxn,
    # and every end bumped the epoch
    eos = cluster.coordinator.txn.transactions["java-eos-tx"]
    assert eos.transaction_version == 2
    assert eos.producer_epoch > out["aborted_txns"] >= 1
