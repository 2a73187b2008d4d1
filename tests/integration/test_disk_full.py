"""A broker whose log dir fills up takes the dir offline, as Kafka does: producers get
KAFKA_STORAGE_ERROR (never UNKNOWN_SERVER_ERROR), the log holds one line and no traceback, the
broker keeps running but asks the controller to fence it, so its leaderships move to replicas
on healthy disks; nothing acknowledged is lost, and once space returns a restart brings its
replicas back into the ISR. Needs a real full disk: a small tmpfs, which needs root."""

from __future__ import annotations

import logging
import os
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from sparklog.client import AdminClient, NewTopic
from sparklog.cluster.embedded import EmbeddedCluster

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="mounting a small tmpfs as the broker's log dir needs root"
)

CONFIG = {
    "segment.index.bytes": "65536",
    "log.segment.bytes": "1048576",
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "3000",
}


@pytest.fixture
def full_disk(tmp_path):
    """tmp_path, with broker 0's log dir on a 6 MB tmpfs; yields (tmp_path, grow) where
    `grow()` gives the tmpfs 64 MB (space returns)."""
    mount = tmp_path / "broker-0"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")

    def grow() -> None:
        subprocess.run(["mount", "-o", "remount,size=64m", str(mount)], check=True)

    try:
        yield tmp_path, grow
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(bootstrap: str, topic: str, *, stop_on_error: bool, **extra) -> tuple[list, set]:
    """Produce 1 KB records to partition 0 until the 6 MB disk is long full; returns
    (acknowledged (offset, value) pairs, error codes)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **extra})
    acked, errors = [], set()

    def report(err, msg):
        if err is None:
            acked.append((msg.offset(), msg.value()))
        else:
            errors.add(err.code())

    for i in range(12_000):
        producer.produce(topic, value=f"{i:06d}".encode() + os.urandom(994), partition=0,
                         on_delivery=report)  # fmt: skip
        if i % 500 == 0:
            producer.flush(30)
        if errors and stop_on_error:
            break
    producer.flush(60)
    return acked, errors


def read_all(bootstrap: str, topic: str, want: int) -> dict[int, bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    read: dict[int, bytes] = {}
    deadline = time.monotonic() + 60
    while len(read) < want and time.monotonic() < deadline:
        m = consumer.poll(1)
        if m is None:
            continue
        assert m.error() is None, m.error()
        read[m.offset()] = m.value()
    consumer.close()
    return read


def wait_until(condition, timeout_s: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_full_disk_takes_the_dir_offline_and_a_restart_brings_it_back(full_disk, caplog):
    data_dir, grow = full_disk
    topic = f"full-{uuid.uuid4().hex[:6]}"
    with (
        caplog.at_level(logging.INFO),
        EmbeddedCluster(brokers=1, data_dir=data_dir, config=CONFIG) as cluster,
    ):
        acked, errors = fill(
            cluster.bootstrap_servers, topic, stop_on_error=True, acks="1", retries=0,
            **{"message.timeout.ms": 10_000},
        )  # fmt: skip
        assert KafkaError.KAFKA_STORAGE_ERROR in errors, errors
        assert KafkaError.UNKNOWN not in errors
        broker = cluster.brokers[0]
        assert broker.state.value == "running", "the broker process survives"
        assert broker.log_manager.dir_failures.offline
        wait_until(lambda: cluster.leader_of(topic) == -1, what="the controller to fence it")
        offline_lines = [r for r in caplog.records if "is offline after an I/O error" in r.message]
        assert len(offline_lines) == 1 and "restart the broker" in offline_lines[0].message

        grow()
        cluster.restart_broker(0)
        wait_until(lambda: cluster.leader_of(topic) == 0, what="broker 0 to lead again")
        more, errors_after = fill(
            cluster.bootstrap_servers, topic, stop_on_error=False, acks="1",
            **{"message.timeout.ms": 20_000},
        )  # fmt: skip
        assert not errors_after and len(more) == 12_000, "the restarted broker serves again"
        read = read_all(cluster.bootstrap_servers, topic, len(acked) + len(more))
        for offset, value in acked + more:
            assert read.get(offset) == value, f"acknowledged record at {offset} lost"
    assert not [r for r in caplog.records if r.exc_info], "no tracebacks for a full disk"


def test_leadership_moves_off_a_broker_whose_disk_is_full(full_disk, caplog):
    data_dir, grow = full_disk
    topic = f"move-{uuid.uuid4().hex[:6]}"
    with (
        caplog.at_level(logging.INFO),
        EmbeddedCluster(brokers=2, data_dir=data_dir, config=CONFIG) as cluster,
    ):
        with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            admin.create_topics([NewTopic(topic, replica_assignment={0: [0, 1]})])
        cluster.wait_for_isr(topic, 0)
        assert cluster.leader_of(topic) == 0

        acked, errors = fill(
            cluster.bootstrap_servers, topic, stop_on_error=False, acks="all",
            **{"enable.idempotence": True, "message.timeout.ms": 60_000},
        )  # fmt: skip
        assert not errors, f"retriable KAFKA_STORAGE_ERROR, then the new leader: {errors}"
        assert len(acked) == 12_000
        assert cluster.brokers[0].log_manager.dir_failures.offline
        assert cluster.leader_of(topic) == 1 and cluster.isr_of(topic) == (1,)
        read = read_all(cluster.bootstrap_servers, topic, len(acked))
        assert sorted(read.values()) == sorted(v for _, v in acked), "each record exactly once"

        grow()
        cluster.restart_broker(0)
        cluster.wait_for_isr(topic, 0, timeout_s=60)
        assert set(cluster.isr_of(topic)) == {0, 1}, "the replica caught up and rejoined"
    assert not [r for r in caplog.records if r.exc_info], "no tracebacks for a full disk"
