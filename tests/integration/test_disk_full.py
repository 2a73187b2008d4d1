"""A broker whose log dir fills up answers KAFKA_STORAGE_ERROR (not UNKNOWN_SERVER_ERROR), logs
no tracebacks, and loses none of the records it acknowledged before. Needs a real full disk: a
small tmpfs, which needs root (skipped otherwise)."""

from __future__ import annotations

import logging
import os
import subprocess
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from sparklog.broker.embedded import EmbeddedCluster

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="mounting a small tmpfs as the broker's log dir needs root"
)


@pytest.fixture
def full_disk(tmp_path):
    mount = tmp_path / "broker-0"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield tmp_path
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_answers_kafka_storage_error_and_loses_nothing(full_disk, caplog):
    config = {"segment.index.bytes": "65536", "log.segment.bytes": "1048576"}
    topic = f"full-{uuid.uuid4().hex[:6]}"
    with (
        caplog.at_level(logging.INFO),
        EmbeddedCluster(brokers=1, data_dir=full_disk, config=config) as cluster,
    ):
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "acks": "1",
                "retries": 0,
                "linger.ms": 5,
                "message.timeout.ms": 10_000,
            }  # fmt: skip
        )
        acked, errors = [], set()

        def report(err, msg):
            if err is None:
                acked.append(msg.offset())
            else:
                errors.add(err.code())

        for i in range(12_000):
            producer.produce(topic, value=os.urandom(1000), partition=0, on_delivery=report)
            if i % 500 == 0:
                producer.flush(30)
            if errors:
                break
        producer.flush(30)
        assert KafkaError.KAFKA_STORAGE_ERROR in errors, errors
        assert KafkaError.UNKNOWN not in errors
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": "disk-full",
                "enable.auto.commit": False,
            }  # fmt: skip
        )
        consumer.assign([TopicPartition(topic, 0, 0)])
        read = set()
        while len(read) < len(acked):
            m = consumer.poll(5)
            if m is None:
                break
            assert m.error() is None, m.error()
            read.add(m.offset())
        consumer.close()
        assert set(acked) <= read and acked  # every acknowledged record is there
    assert not [r for r in caplog.records if r.exc_info], "no tracebacks for a full disk"
