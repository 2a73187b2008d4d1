"""sparklog.start on local[4]: brokers run as Spark tasks in the driver's executor."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from sparklog.spark.cluster import ClusterStartError, start, task_slots

from .kafka_helpers import consume_all, create_topic, produce

SPARK_MASTER = "local[4]"
pytestmark = pytest.mark.spark


def test_task_slots_parse_masters():
    assert task_slots("local[4]", 4) == ("local", 1, 4)
    assert task_slots("local", 1) == ("local", 1, 1)
    assert task_slots("local-cluster[3,1,1024]", 3) == ("local-cluster", 3, 1)
    assert task_slots("spark://h:7077", 8)[0] == "cluster"


def test_refuses_to_take_every_task_slot(spark):
    with pytest.raises(ClusterStartError, match=r"local\[5\]"):
        start(spark, brokers=4)


SYSTEM_PYTHON = "/usr/bin/python3"


def _has_pyarrow(python: str) -> bool:
    import subprocess

    probe = subprocess.run([python, "-c", "import pyarrow"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(
    not os.path.exists(SYSTEM_PYTHON) or _has_pyarrow(SYSTEM_PYTHON),
    reason=f"needs a Python without pyarrow at {SYSTEM_PYTHON}",
)
def test_start_says_to_set_pyspark_python_when_workers_lack_sparklog(spark, tmp_path):
    sc = spark.sparkContext
    ours = sc.pythonExec
    sc.pythonExec = SYSTEM_PYTHON  # the interpreter new Python workers start with
    try:
        with pytest.raises(ClusterStartError) as caught:
            start(spark, brokers=1, data_dir=tmp_path)
    finally:
        sc.pythonExec = ours
    message = str(caught.value)
    assert "No module named" in message and SYSTEM_PYTHON in message
    assert f"PYSPARK_PYTHON={sys.executable}" in message


def test_two_brokers_round_trip_and_clean_stop(spark, tmp_path):
    threads_before = {t.name for t in threading.enumerate()}
    cluster = start(
        spark,
        brokers=2,
        data_dir=tmp_path,
        broker_heartbeat_interval_ms=500,
        broker_session_timeout_ms=3000,
    )
    try:
        info = cluster.describe()
        assert len(info["brokers"]) == 2
        assert {b["executor_id"] for b in info["brokers"]} == {"driver"}
        # every broker lives under the data_dir given (issue 35 §4), none in the temp default
        for b in info["brokers"]:
            assert (tmp_path / "brokers" / f"broker-{b['broker_id']}" / "meta.properties").is_file()
        assert not (Path(tempfile.gettempdir()) / "sparklog-data" / cluster.cluster_id).exists()
        assert all(not b["fenced"] for b in info["brokers"])
        bootstrap = cluster.bootstrap_servers
        assert len(bootstrap.split(",")) == 2 and all(
            h.startswith("127.0.0.1:") for h in bootstrap.split(",")
        )
        create_topic(bootstrap, "orders", partitions=4)
        records = [(b"k%d" % i, b"v%d" % i) for i in range(500)]
        produce(bootstrap, "orders", records)
        got = consume_all(bootstrap, "orders", len(records))
        assert sorted((k, v) for _, _, k, v in got) == sorted(records)
        leaders = {p["leader"] for t in cluster.describe()["topics"] for p in t["partitions"]}
        assert leaders == {0, 1}
    finally:
        cluster.stop()
    tracker = spark.sparkContext.statusTracker()
    assert tracker.getActiveJobsIds() == []
    leftover = {t.name for t in threading.enumerate()} - threads_before
    assert not [n for n in leftover if n.startswith("sparklog")], leftover


def test_broker_tasks_serve_every_listener_of_the_config(spark, tmp_path):
    cluster = start(
        spark,
        brokers=1,
        data_dir=tmp_path,
        config={
            "listeners": "CLIENT://:0,REPLICATION://:0",
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:PLAINTEXT",
            "inter.broker.listener.name": "REPLICATION",
        },
    )
    try:
        (broker,) = cluster.controller.metadata_image().unfenced_brokers()
        endpoints = {e.listener_name: (e.host, e.port) for e in broker.endpoints}
        assert set(endpoints) == {"CLIENT", "REPLICATION"}
        # no host named: the broker task binds the executor's (loopback in local mode)
        assert {host for host, _port in endpoints.values()} == {"127.0.0.1"}
        assert endpoints["CLIENT"][1] != endpoints["REPLICATION"][1]
        assert cluster.bootstrap_servers == f"127.0.0.1:{endpoints['CLIENT'][1]}"
        assert cluster.coordinator.listener_security.listener_name == "REPLICATION"
        create_topic(cluster.bootstrap_servers, "via-client", partitions=1)
        produce(cluster.bootstrap_servers, "via-client", [(b"k", b"v")])
        (got,) = consume_all(cluster.bootstrap_servers, "via-client", 1)
        assert got[3] == b"v"
    finally:
        cluster.stop()


_SPARK_STOPPED_FIRST = """
import sys, tempfile
from pyspark.sql import SparkSession
import sparklog
from sparklog.spark.session import with_reference_jars
spark = with_reference_jars(SparkSession.builder.master("local[2]")).getOrCreate()
spark.sparkContext.setLogLevel("OFF")
cluster = sparklog.start(spark, brokers=1, data_dir=tempfile.mkdtemp())
spark.stop()  # a notebook's usual order: the session first, the cluster never
import time
deadline = time.monotonic() + 30
while not cluster._stopping.is_set() and time.monotonic() < deadline:
    time.sleep(0.1)
print("stopping" if cluster._stopping.is_set() else "still running", flush=True)
"""


@pytest.mark.slow
def test_spark_stopped_before_the_cluster_ends_it_quietly(tmp_path):
    """spark.stop() before cluster.stop(): the broker jobs end with the SparkContext and are
    not relaunched; no traceback ('NoneType' object has no attribute 'setJobGroup') and no
    'relaunching' warnings, and the driver's servers stop."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", _SPARK_STOPPED_FIRST],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "stopping"
    assert "Traceback" not in done.stderr and "relaunching" not in done.stderr, done.stderr[-3000:]
