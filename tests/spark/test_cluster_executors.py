"""sparklog.start on local-cluster[3,1,1024]: one broker per executor JVM, and a killed
executor's broker comes back through the launcher with its data (RF=1)."""

from __future__ import annotations

import os
import signal

import pytest

from sparklog.spark.cluster import start

from .kafka_helpers import consume_all, create_topic, executor_pid, produce, wait_for

SPARK_MASTER = "local-cluster[3,1,1024]"
pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_brokers_on_executors_survive_executor_kill(spark, tmp_path):
    cluster = start(
        spark,
        brokers=3,
        data_dir=tmp_path,
        broker_heartbeat_interval_ms=500,
        broker_session_timeout_ms=3000,
    )
    try:
        brokers = cluster.describe()["brokers"]
        executors = {b["executor_id"] for b in brokers}
        assert len(executors) == 3 and "driver" not in executors, brokers
        bootstrap = cluster.bootstrap_servers
        create_topic(bootstrap, "events", partitions=3)
        first = [(b"k%d" % i, b"before-%d" % i) for i in range(300)]
        produce(bootstrap, "events", first)

        victim = brokers[0]
        app_id = spark.sparkContext.applicationId  # never another application's executor
        os.kill(executor_pid(victim["executor_id"], app_id), signal.SIGKILL)
        wait_for(
            lambda: any(
                b["broker_id"] == victim["broker_id"] and b["fenced"]
                for b in cluster.describe()["brokers"]
            ),
            30,
            "the killed broker to be fenced",
        )
        back = wait_for(
            lambda: next(
                (
                    b
                    for b in cluster.describe()["brokers"]
                    if b["broker_id"] == victim["broker_id"]
                    and not b["fenced"]
                    and b["executor_id"] != victim["executor_id"]
                ),
                None,
            ),
            120,
            "the broker to come back on a relaunched executor",
        )
        assert back["data_dir"] == victim["data_dir"]  # identity adopted from its disk
        bootstrap = cluster.bootstrap_servers
        second = [(b"k%d" % i, b"after-%d" % i) for i in range(300)]
        produce(bootstrap, "events", second)
        got = consume_all(bootstrap, "events", len(first) + len(second), timeout_s=90)
        assert sorted((k, v) for _, _, k, v in got) == sorted(first + second)
    finally:
        cluster.stop()
    assert spark.sparkContext.statusTracker().getActiveJobsIds() == []
