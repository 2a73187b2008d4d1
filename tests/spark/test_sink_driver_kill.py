"""The exactly-once sink through driver crashes: a streaming query copying a topic is killed
with SIGKILL (its Python driver and JVM together) in the middle of micro-batches, three times,
and restarted from its checkpoint each time; a read_committed reader must then see every input
record exactly once. Transactions a killed attempt left open are fenced and aborted by the
restarted tasks; a micro-batch decided just before a kill is recognised when Spark replays it.
The cluster runs in the test process so it outlives the drivers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparklog.client import AdminClient
from sparklog.cluster.embedded import EmbeddedCluster

from .kafka_helpers import create_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CHILD = Path(__file__).with_name("eos_driver_child.py")
RECORDS = 1800  # 12 micro-batches of 150: the three kills land in the first eight


def read_committed(bootstrap: str, topic: str) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "eos-oracle",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
        got: list[bytes] = []
        quiet_until = time.monotonic() + 3
        while time.monotonic() < quiet_until:
            for m in consumer.consume(500, 0.3):
                if m.error() is None:
                    got.append(m.value())
                    quiet_until = time.monotonic() + 3
        return got
    finally:
        consumer.close()


def written(admin: AdminClient, topic: str) -> int:
    """Records (and markers) in the sink's log, committed or not: the query's progress."""
    ends = admin.list_offsets({(topic, p): -1 for p in range(3)})
    return sum(r.offset for r in ends.values())


def test_driver_killed_mid_stream_three_times_loses_and_duplicates_nothing(tmp_path):
    with EmbeddedCluster(brokers=1, data_dir=tmp_path / "cluster") as cluster:
        bs = cluster.bootstrap_servers
        create_topic(bs, "kill-in", 3)
        create_topic(bs, "kill-out", 3)
        produce(bs, "kill-in", [(b"k%d" % i, b"%d" % i) for i in range(RECORDS)])
        checkpoint = str(tmp_path / "checkpoint")
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}

        def launch() -> subprocess.Popen:
            return subprocess.Popen(
                [sys.executable, str(CHILD), bs, "kill-in", "kill-out", checkpoint],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=env,
                start_new_session=True,
            )

        kills = 0
        admin = AdminClient({"bootstrap.servers": bs})
        for extra_batches in (2, 3, 2):
            child = launch()
            target = written(admin, "kill-out") + extra_batches * 150
            deadline = time.monotonic() + 180
            while written(admin, "kill-out") < target and child.poll() is None:
                assert time.monotonic() < deadline, "the query made no progress"
                time.sleep(0.05)
            time.sleep(0.3)  # into a later micro-batch: tasks writing, or a decision in flight
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
                kills += 1
            child.wait(30)
        admin.close()
        final = launch()
        out, _ = final.communicate(timeout=300)
        assert final.returncode == 0 and "DRAINED" in out, out[-2000:]
        assert kills == 3, "each run was killed before it drained the input"
        values = read_committed(bs, "kill-out")
        assert sorted(int(v) for v in values) == list(range(RECORDS)), (
            f"{len(values)} read, {len(set(values))} distinct, of {RECORDS}"
        )
