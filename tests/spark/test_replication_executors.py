"""Replication across executors on local-cluster[3,1,1024]: an RF=3 topic keeps every
acknowledged record through two executor kills (D5, D6, §3 Replication and Election).

A driver-side idempotent producer (acks=all) sends numbered keyed records the whole time. The
executor JVM hosting partition 0's leader gets SIGKILL; the controller fences that broker and
elects a new leader from the ISR; Spark relaunches the executor, the broker task comes back on
it, adopts its identity from its disk, truncates, catches up and rejoins the ISR. Then a
different broker's executor gets the same. At the end every acknowledged record is read back
exactly once, in order per key, and the three replicas of each partition hold the same bytes
up to the high watermark.
"""

from __future__ import annotations

import os
import signal
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sparklog.client import AdminClient, KafkaConsumer, KafkaProducer, NewTopic
from sparklog.records.batch import read_header
from sparklog.spark.cluster import SparkLogCluster, start

from .kafka_helpers import executor_pid, wait_for

SPARK_MASTER = "local-cluster[3,1,1024]"
pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: tests/integration/conftest.py's leases; followers drop out of the ISR after 3 s behind
CLUSTER_CONFIG = {
    "broker.heartbeat.interval.ms": 100,
    "broker.session.timeout.ms": 1500,
    "replica.lag.time.max.ms": 3000,
    "log.flush.offset.checkpoint.interval.ms": 200,
}
PARTITIONS = 3
REPLICATION_FACTOR = 3
KEYS = 12


@pytest.fixture(scope="module")
def cluster(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("replication")
    config = {**CLUSTER_CONFIG, "log.dirs": str(root / "brokers")}
    running = start(spark, brokers=3, config=config, data_dir=root)
    yield running
    running.stop()


def create_replicated_topic(bootstrap: str, topic: str) -> None:
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        configs = {"min.insync.replicas": str(min(2, REPLICATION_FACTOR))}
        admin.create_topics([NewTopic(topic, PARTITIONS, REPLICATION_FACTOR, configs)])


def partitions_of(cluster: SparkLogCluster, topic: str) -> list[dict[str, Any]]:
    """The controller's view of `topic`'s partitions (leader, ISR, epochs)."""
    return next(t["partitions"] for t in cluster.describe()["topics"] if t["name"] == topic)


def fully_replicated(cluster: SparkLogCluster, topic: str) -> bool:
    return all(
        p["leader"] >= 0 and len(p["isr"]) == REPLICATION_FACTOR
        for p in partitions_of(cluster, topic)
    )


def broker(cluster: SparkLogCluster, broker_id: int) -> dict[str, Any]:
    return next(b for b in cluster.describe()["brokers"] if b["broker_id"] == broker_id)


class NumberedProducer:
    """A driver-side sparklog producer (idempotent, acks=all) sending records `seq` with key
    `k<seq % KEYS>` from a background thread; remembers where each acknowledged one went."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = KafkaProducer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "delivery.timeout.ms": 120_000,
            }
        )
        self.acked: dict[tuple[bytes, int], tuple[int, int]] = {}
        self.failed: list[tuple[int, BaseException]] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="numbered-producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            for _ in range(5):  # ~250 records/s
                seq, key = self.sent, b"k%d" % (self.sent % KEYS)
                self.producer.send(
                    self.topic,
                    value=b"%d" % seq,
                    key=key,
                    on_delivery=lambda m, e, k=key, s=seq: self._on_delivery(k, s, m, e),
                )
                self.sent += 1

    def _on_delivery(self, key: bytes, seq: int, metadata: Any, error: Any) -> None:
        if error is not None:
            self.failed.append((seq, error))
        else:
            self.acked[(key, seq)] = (metadata.partition, metadata.offset)

    def wait_for_progress(self, more: int, timeout_s: float, what: str) -> None:
        """Until `more` records beyond the ones acknowledged now are acknowledged."""
        target = len(self.acked) + more
        wait_for(lambda: len(self.acked) >= target, timeout_s, f"{more} acks {what}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.producer.flush(120_000)
        self.producer.close()


def kill_executor_of(cluster: SparkLogCluster, broker_id: int) -> dict[str, Any]:
    """SIGKILL the executor JVM hosting `broker_id`; returns the broker as it was."""
    victim = broker(cluster, broker_id)
    assert victim["executor_id"] not in ("driver", "unknown"), victim
    app_id = cluster.sc.applicationId  # never another application's executor
    os.kill(executor_pid(victim["executor_id"], app_id), signal.SIGKILL)
    return victim


def wait_for_recovery(cluster: SparkLogCluster, victim: dict[str, Any], topic: str) -> None:
    """Fenced, back on a relaunched executor with its own data dir, and in every ISR again."""
    bid = victim["broker_id"]
    wait_for(lambda: broker(cluster, bid)["fenced"], 30, f"broker {bid} to be fenced")

    def relaunched() -> dict[str, Any] | None:
        now = broker(cluster, bid)
        return now if now["executor_id"] != victim["executor_id"] and not now["fenced"] else None

    back = wait_for(relaunched, 120, f"broker {bid} to come back on a relaunched executor")
    assert back["data_dir"] == victim["data_dir"]  # the identity came from its disk (D6)
    wait_for(lambda: fully_replicated(cluster, topic), 60, f"{topic}'s ISRs to hold 3 again")


def read_back(bootstrap: str, topic: str) -> dict[int, list[Any]]:
    """Every record below the high watermark, per partition, in offset order."""
    tps = [(topic, p) for p in range(PARTITIONS)]
    with KafkaConsumer({"bootstrap.servers": bootstrap, "max.poll.records": 10_000}) as consumer:
        ends = {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        got: dict[int, list[Any]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 60
        while any(len(got[p]) < ends[p] for p in got) and time.monotonic() < deadline:
            for record in consumer.poll(500):
                got[record.partition].append(record)
    for p, records in got.items():
        assert [r.offset for r in records] == list(range(ends[p])), f"partition {p}: gaps"
    return got


def batches_below(partition_dir: Path, high_watermark: int) -> list[tuple[int, bytes]]:
    """(partition leader epoch, bytes) of every batch below `high_watermark`, across the
    partition's segments in offset order."""
    out = []
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        pos = 0
        while pos + 12 <= len(data):
            base_offset, length = struct.unpack_from(">qi", data, pos)
            header = read_header(data, pos)
            if base_offset + header.last_offset_delta >= high_watermark:
                return out
            out.append((header.partition_leader_epoch, data[pos : pos + 12 + length]))
            pos += 12 + length
    return out


def assert_replicas_identical(
    cluster: SparkLogCluster, topic: str, ends: dict[int, int]
) -> dict[int, set[int]]:
    """Every replica holds the same bytes below the HW; returns each partition's leader
    epochs found there."""
    dirs = {b["broker_id"]: Path(b["data_dir"]) for b in cluster.describe()["brokers"]}
    epochs = {}
    for partition in partitions_of(cluster, topic):
        p, high_watermark = partition["partition"], ends[partition["partition"]]
        data_dirs = [dirs[r] for r in partition["replicas"]]
        assert len(data_dirs) == REPLICATION_FACTOR
        copies = [batches_below(d / f"{topic}-{p}", high_watermark) for d in data_dirs]
        assert copies[0], f"partition {p}: no data below HW {high_watermark}"
        for d, copy in zip(data_dirs[1:], copies[1:], strict=True):
            assert copy == copies[0], f"partition {p}: {d} differs from {data_dirs[0]} below HW"
        epochs[p] = {epoch for epoch, _ in copies[0]}
    return epochs


def test_rf3_topic_has_replicas_on_three_executors(cluster):
    brokers = cluster.describe()["brokers"]
    assert len({b["executor_id"] for b in brokers}) == 3, brokers
    create_replicated_topic(cluster.bootstrap_servers, "placed")
    wait_for(lambda: fully_replicated(cluster, "placed"), 30, "ISR of 3")
    for p in partitions_of(cluster, "placed"):
        assert sorted(p["replicas"]) == sorted(b["broker_id"] for b in brokers)


def test_two_executor_kills_lose_no_acknowledged_record(cluster):
    topic = "numbered"
    create_replicated_topic(cluster.bootstrap_servers, topic)
    wait_for(lambda: fully_replicated(cluster, topic), 30, "ISR of 3")
    producer = NumberedProducer(cluster.bootstrap_servers, topic)
    try:
        producer.wait_for_progress(200, 30, "before the first kill")
        before = partitions_of(cluster, topic)[0]
        first = kill_executor_of(cluster, before["leader"])
        started = time.monotonic()
        wait_for_recovery(cluster, first, topic)
        recovery_s = [time.monotonic() - started]
        assert partitions_of(cluster, topic)[0]["leader_epoch"] > before["leader_epoch"]
        producer.wait_for_progress(200, 60, "after the first recovery")

        leaders = [p["leader"] for p in partitions_of(cluster, topic)]
        others = [b for b in leaders if b != first["broker_id"]]
        second = kill_executor_of(cluster, others[0])
        started = time.monotonic()
        wait_for_recovery(cluster, second, topic)
        recovery_s.append(time.monotonic() - started)
        producer.wait_for_progress(200, 60, "after the second recovery")
    finally:
        producer.stop()
    assert not producer.failed, f"{len(producer.failed)} records failed: {producer.failed[:3]}"
    assert len(producer.acked) == producer.sent

    wait_for(lambda: fully_replicated(cluster, topic), 60, "every replica in the ISR")
    records = read_back(cluster.bootstrap_servers, topic)  # below the HW: on every replica
    where: dict[tuple[bytes, int], list[tuple[int, int]]] = {}
    for p, rs in records.items():
        for r in rs:
            where.setdefault((r.key, int(r.value)), []).append((p, r.offset))
        for key in {r.key for r in rs}:
            seqs = [int(r.value) for r in rs if r.key == key]
            assert seqs == sorted(seqs), f"partition {p}, key {key!r}: out of order"
    doubled = {k: v for k, v in where.items() if len(v) > 1}
    assert not doubled, f"records written twice: {list(doubled.items())[:5]}"
    lost = {k: v for k, v in producer.acked.items() if where.get(k) != [v]}
    assert not lost, f"acknowledged records missing or moved: {list(lost.items())[:5]}"

    ends = {p: len(rs) for p, rs in records.items()}
    epochs = assert_replicas_identical(cluster, topic, ends)
    assert len(epochs[0]) >= 2, f"partition 0 holds batches of leader epochs {epochs[0]} only"
    print(
        f"\n{len(producer.acked)} records acknowledged and read back; killed brokers "
        f"{first['broker_id']} and {second['broker_id']}, back in every ISR after "
        f"{recovery_s[0]:.1f} s and {recovery_s[1]:.1f} s; leader epochs below the HW: {epochs}"
    )
