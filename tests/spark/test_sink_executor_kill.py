"""The exactly-once sink through an executor crash: while a streaming query copies a topic
into sparklog on `local-cluster[2,1,1024]`, the executor JVM running a write task is killed
with SIGKILL in the middle of a micro-batch. Spark relaunches it and retries the task; the
retry re-registers the task's transactional id, which fences the dead attempt and aborts what
it wrote. A read_committed reader must see every input record exactly once. The cluster runs
in the test process, so killing an executor kills no broker."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

import sparklog
from sparklog.client import AdminClient
from sparklog.cluster.embedded import EmbeddedCluster

from .kafka_helpers import create_topic, produce
from .test_sink_driver_kill import read_committed, written

SPARK_MASTER = "local-cluster[2,1,1024]"
pytestmark = [pytest.mark.spark, pytest.mark.slow]
RECORDS = 4000


def executor_pids() -> list[int]:
    """The pids of this machine's executor JVMs (their command line carries --executor-id)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if b"--executor-id" in (proc / "cmdline").read_bytes().split(b"\0"):
                    pids.append(int(proc.name))
            except OSError:
                continue
    assert pids, "no executor JVM found"
    return pids


def test_an_executor_killed_mid_batch_loses_and_duplicates_nothing(spark, tmp_path):
    with EmbeddedCluster(brokers=1, data_dir=tmp_path / "cluster") as cluster:
        bs = cluster.bootstrap_servers
        create_topic(bs, "ex-in", 4)
        create_topic(bs, "ex-out", 3)
        produce(bs, "ex-in", [(b"k%d" % i, b"%d" % i) for i in range(RECORDS)])
        sparklog.register(spark)
        query = (
            spark.readStream.format("sparklog")
            .option("kafka.bootstrap.servers", bs)
            .option("subscribe", "ex-in")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "400")
            .load()
            .select("key", "value")
            .writeStream.format("sparklog")
            .option("kafka.bootstrap.servers", bs)
            .option("topic", "ex-out")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        admin = AdminClient({"bootstrap.servers": bs})
        try:
            deadline = time.monotonic() + 180
            while written(admin, "ex-out") < 800 and query.isActive:
                assert time.monotonic() < deadline, "the query made no progress"
                time.sleep(0.05)
            os.kill(min(executor_pids()), signal.SIGKILL)
            killed_at = written(admin, "ex-out")
            assert query.awaitTermination(300)
            assert query.exception() is None
        finally:
            admin.close()
        assert killed_at < 2 * RECORDS, "the executor died while the query was writing"
        values = read_committed(bs, "ex-out")
        assert sorted(int(v) for v in values) == list(range(RECORDS)), (
            f"{len(values)} read, {len(set(values))} distinct, of {RECORDS}"
        )
