"""The tier verifier under faults (issue 32 §4): three brokers, a three-partition topic with
replication factor 3 and the tier on (small segments, `local.retention.ms` 1, and
`remote.table.freshness.ms` so the active segment is copied too), an idempotent producer and
a transactional one (committing and aborting in turn) writing throughout, while

- the leaders are SIGKILLed during uploads (brokers in child processes) and restarted,
- leaders change by controlled shutdown and restart,
- the driver (controller + coordinator) is lost and restarted on an empty local dir.

Afterwards the producers stop, every partition's tier catches up with its end, and the
verifier finds the table equal to the log offset by offset (no gap, no duplicate, no offset
with two values: the app transactions made every retried or re-led upload a no-op), aborted
data flagged and absent from the committed view, and every acknowledged record in both.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from tests.support.tier_cluster import LIBRDKAFKA, Tier, tier_settings, wait_until
from tests.support.tier_verifier import verify_topic

from .conftest import REPLICATION_CONFIG

pytestmark = pytest.mark.slow

PARTITIONS = 3
CONFIG = {
    **REPLICATION_CONFIG,
    "replica.lag.time.max.ms": "5000",
    "min.insync.replicas": "2",
}
TOPIC_CONFIGS = {
    "remote.storage.enable": "true",
    "segment.bytes": "4096",
    "local.retention.ms": "1",
    "remote.table.freshness.ms": "200",
}


class Workload:
    """An idempotent producer and a transactional one on their own threads until `stop()`;
    `acked` holds (partition, offset, value) of every idempotent record acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.acked: list[tuple[int, int, bytes]] = []
        self.transactions = {"committed": 0, "aborted": 0, "failed": 0}
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._idempotent, name="tier-idempotent"),
            threading.Thread(target=self._transactional, name="tier-transactional"),
        ]

    def start(self) -> Workload:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(120)

    def _idempotent(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {
                **LIBRDKAFKA,
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 60_000,
            }
        )

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                self.acked.append((msg.partition(), msg.offset(), msg.value()))

        i = 0
        while not self._stop.is_set():
            try:
                producer.produce(self.topic, b"i-%d" % i, key=b"%d" % i, on_delivery=delivered)
                i += 1
            except BufferError:
                pass
            producer.poll(0.002)
        producer.flush(90)

    def _transactional(self) -> None:
        from confluent_kafka import KafkaException, Producer

        producer = None
        n = 0
        while not self._stop.is_set():
            try:
                if producer is None:
                    producer = Producer(
                        {
                            **LIBRDKAFKA,
                            "bootstrap.servers": self.bootstrap,
                            "transactional.id": "tier-chaos-txn",
                            "transaction.timeout.ms": 30_000,
                        }
                    )
                    producer.init_transactions(30)
                producer.begin_transaction()
                for p in range(PARTITIONS):
                    for j in range(3):
                        producer.produce(self.topic, b"t-%d-%d" % (n, j), partition=p)
                if n % 2 == 0:
                    producer.commit_transaction(30)
                    self.transactions["committed"] += 1
                else:
                    # sent first: librdkafka purges unsent records on abort, and the tier
                    # must see aborted data in the log, flagged
                    producer.flush(30)
                    producer.abort_transaction(30)
                    self.transactions["aborted"] += 1
                n += 1
            except KafkaException as e:
                self.transactions["failed"] += 1
                error = e.args[0]
                if error.txn_requires_abort():
                    try:
                        producer.abort_transaction(30)
                    except KafkaException:
                        producer = None
                elif not error.retriable():
                    producer = None  # fatal or fenced: a new producer (same transactional.id)
                time.sleep(0.2)
            time.sleep(0.05)


def _run(cluster: EmbeddedCluster, root, faults) -> None:
    tier = Tier(cluster, root)
    try:
        topic = f"chaos-{uuid.uuid4().hex[:6]}"
        tier.create_topic(topic, PARTITIONS, 3, configs=TOPIC_CONFIGS)
        workload = Workload(tier.bootstrap, topic).start()
        try:
            time.sleep(2.0)  # uploads under way before the first fault
            faults(cluster, topic)
            time.sleep(2.0)
        finally:
            workload.stop()
        for p in range(PARTITIONS):
            cluster.wait_for_isr(topic, p, timeout_s=60)
        ends = {p: tier.list_offset(topic, p, -1) for p in range(PARTITIONS)}
        # no transaction left open: the last stable offset is the end
        for p, end in ends.items():
            wait_until(
                lambda p=p, end=end: (
                    tier.admin.list_offsets({(topic, p): -1}, isolation_level="read_committed")
                    .popitem()[1]
                    .offset
                    == end
                ),
                f"{topic}-{p}: LSO at the end",
                timeout_s=60,
            )
        tier.wait_tiered(topic, ends, timeout_s=90)
        report = verify_topic(
            tier.bootstrap,
            topic,
            tier.location(topic),
            partitions=list(range(PARTITIONS)),
            topic_id=tier.topic_id(topic),
            timeout_s=120,
        ).assert_ok()
        print(report.summary(), f"acked {len(workload.acked)}", workload.transactions)
        assert workload.acked and workload.transactions["committed"] > 0
        assert sum(part.aborted_rows for part in report.partitions.values()) > 0
        logged = {(p, r.offset): r.value for p, rs in report.consumed.items() for r in rs}
        lost = [(p, o) for p, o, v in workload.acked if logged.get((p, o)) != v]
        assert not lost, f"{len(lost)} acknowledged records missing or changed: {lost[:10]}"
        for p, part in report.partitions.items():
            assert part.table_end_offset == ends[p], (p, part)
    finally:
        tier.close()


def _leader_index(cluster: EmbeddedCluster, topic: str, partition: int) -> int:
    return cluster.broker_index(cluster.wait_for_leader(topic, partition))


def test_sigkill_leaders_during_uploads(tmp_path):
    root = tmp_path / "tables"

    def faults(cluster: EmbeddedCluster, topic: str) -> None:
        for round_ in range(3):
            index = _leader_index(cluster, topic, round_ % PARTITIONS)
            cluster.kill_broker(index)  # SIGKILL: no flush, no goodbye, mid-upload
            cluster.wait_for_leader(topic, round_ % PARTITIONS, not_on=index)
            time.sleep(1.0)
            cluster.restart_broker(index)
            for p in range(PARTITIONS):
                cluster.wait_for_isr(topic, p, timeout_s=60)

    with EmbeddedCluster(
        brokers=3,
        data_dir=tmp_path / "cluster",
        config=tier_settings(root, CONFIG),
        broker_processes=True,
    ) as cluster:
        _run(cluster, root, faults)


def test_leader_changes(tmp_path):
    root = tmp_path / "tables"

    def faults(cluster: EmbeddedCluster, topic: str) -> None:
        for round_ in range(3):
            index = _leader_index(cluster, topic, round_ % PARTITIONS)
            cluster.stop_broker(index)  # controlled shutdown: leadership moves
            cluster.wait_for_leader(topic, round_ % PARTITIONS, not_on=index)
            time.sleep(0.5)
            cluster.restart_broker(index)
            for p in range(PARTITIONS):
                cluster.wait_for_isr(topic, p, timeout_s=60)

    with EmbeddedCluster(
        brokers=3, data_dir=tmp_path / "cluster", config=tier_settings(root, CONFIG)
    ) as cluster:
        _run(cluster, root, faults)


def test_driver_restart(tmp_path):
    root = tmp_path / "tables"
    shared = {"metadata.log.dir": str(tmp_path / "shared" / "sparklog")}

    def faults(cluster: EmbeddedCluster, topic: str) -> None:
        cluster.restart_driver(tmp_path / "another-host" / "controller")
        wait_until(
            lambda: {b["broker_id"] for b in cluster.controller.live_brokers()} == {0, 1, 2},
            "the brokers to re-register",
            timeout_s=60,
        )

    with EmbeddedCluster(
        brokers=3, data_dir=tmp_path / "cluster", config=tier_settings(root, {**CONFIG, **shared})
    ) as cluster:
        _run(cluster, root, faults)
