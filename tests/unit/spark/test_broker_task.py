"""A broker task stops when the JVM above it dies: an executor killed with SIGKILL leaves its
Python workers running, and the broker would live on as a zombie of an old task attempt."""

from __future__ import annotations

import subprocess
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
        monkeypatch.setattr(broker_task, "_jvm_above", lambda: (stand_in.pid, "7"))
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
