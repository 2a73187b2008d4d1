"""A broker task stops when the JVM above it dies: an executor killed with SIGKILL leaves its
Python workers running, and the broker would live on as a zombie of an old task attempt. It
listens on its own executor's address, and the controller on the driver's, so brokers on other
hosts can reach both (the multi-host soak, `jobs/soak_net.py`, runs them in namespaces)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from sparklog.spark import broker_task


def test_the_stop_event_is_set_when_the_jvm_is_gone(monkeypatch):
    stand_in = subprocess.Popen(["sleep", "60"])  # plays the executor JVM
    cmdline = Path(f"/proc/{stand_in.pid}/cmdline")
    deadline = time.monotonic() + 5
    while not cmdline.read_bytes().startswith(b"sleep") and time.monotonic() < deadline:
        time.sleep(0.01)  # until the fork has exec'd: its command line is the one watched
    try:
        monkeypatch.setattr(broker_task, "_jvm_above", lambda: (stand_in.pid, "7", None))
        monkeypatch.setattr(broker_task, "_JVM_WATCH_INTERVAL_S", 0.05)
        stop = threading.Event()
        broker_task._stop_when_jvm_dies(stop)
        assert not stop.wait(0.3), "the JVM is alive: the broker runs on"
        stand_in.kill()
        stand_in.wait()
        assert stop.wait(5), "the JVM is gone: the broker is told to stop"
    finally:
        stand_in.kill()


def test_no_jvm_above_means_no_watch(monkeypatch):
    monkeypatch.setattr(broker_task, "_jvm_above", lambda: None)
    stop = threading.Event()
    broker_task._stop_when_jvm_dies(stop)
    time.sleep(0.1)
    assert not stop.is_set()


def test_a_broker_listens_on_the_hostname_spark_gave_its_executor(monkeypatch):
    """The JVM above the Python worker carries `--executor-id 3 --hostname 10.27.0.12`: that
    address, not the driver's SPARK_LOCAL_IP, is the broker's (on base, every broker of a
    standalone cluster tried to bind the driver's address)."""
    probe = "from sparklog.spark.broker_task import executor_host; print(executor_host())"
    # bash plays the executor JVM: its command line holds Spark's flags; `; true` keeps bash
    # alive above the probe instead of exec'ing it
    done = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -c "{probe}"; true', "java",
         "--executor-id", "3", "--hostname", "10.27.0.12"],
        capture_output=True, text=True, timeout=60, env={"SPARK_LOCAL_IP": "10.27.0.3"},
    )  # fmt: skip
    assert done.stdout.strip() == "10.27.0.12", done.stderr


def test_without_a_jvm_above_the_broker_host_is_spark_local_ip(monkeypatch):
    monkeypatch.setattr(broker_task, "_jvm_above", lambda: None)
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.27.0.11")
    assert broker_task.executor_host() == "10.27.0.11"
    monkeypatch.delenv("SPARK_LOCAL_IP")
    assert broker_task.executor_host() == "127.0.0.1"


class _Conf(dict):
    def get(self, key, default=None):
        return super().get(key, default)


class _Context:
    def __init__(self, master, **conf):
        self.master = master
        self._conf = _Conf(conf)

    def getConf(self):
        return self._conf


def test_the_controller_listens_where_executors_reach_the_driver(monkeypatch):
    from sparklog.spark.cluster import driver_host

    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    standalone = _Context("spark://10.27.0.2:7077", **{"spark.driver.host": "10.27.0.3"})
    assert driver_host(standalone) == "10.27.0.3"
    assert driver_host(_Context("local[4]", **{"spark.driver.host": "10.0.0.9"})) == "127.0.0.1"
    assert driver_host(_Context("local-cluster[3,1,1024]")) == "127.0.0.1"
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.27.0.4")
    assert driver_host(standalone) == "10.27.0.4"


class _StoppedController:
    """A controller that answers until it is stopped, then refuses, as ControllerServer does."""

    def __init__(self):
        self.running = True

    def describe_brokers(self):
        if not self.running:
            raise RuntimeError("the controller is not running")
        return [{"broker_id": 1, "fenced": False, "broker_epoch": 5}]

    live_brokers = describe_brokers


def test_brokers_that_never_register_are_named_in_the_start_error():
    """On base the message was built after stop() had stopped the controller, so the user got
    "the controller is not running" instead of the ClusterStartError and its fix."""
    import pytest

    from sparklog.spark.cluster import ClusterStartError, SparkLogCluster, _Slot

    cluster = SparkLogCluster.__new__(SparkLogCluster)
    cluster.controller = _StoppedController()
    cluster._first_offset = 0
    cluster._slots = [_Slot(2, last_error="ConnectionRefusedError: 127.0.0.1:42561")]
    cluster.stop = lambda timeout_s: setattr(cluster.controller, "running", False)
    with pytest.raises(ClusterStartError, match=r"only 1 of 3 brokers registered.*42561"):
        cluster._wait_for_brokers(3, timeout_s=0.2)
