"""Finding processes: the tree under a pid, and a clear error for an executor that is gone."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from sparklog.spark.processes import executor_pid, executors_of, process_tree


def test_the_tree_holds_children_and_grandchildren():
    child = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        for _ in range(100):
            tree = process_tree([child.pid])
            if len(tree) >= 2:
                break
            subprocess.run(["sleep", "0.02"])
        assert tree[0] == child.pid and len(tree) >= 2, "sh and its sleep"
        assert child.pid in process_tree([os.getpid()])
    finally:
        for pid in reversed(process_tree([child.pid])):
            os.kill(pid, 9)
        child.wait()


def test_an_executor_is_found_in_its_own_application_only():
    """Other Spark applications on the machine number their executors 0, 1, 2 too: a fault
    test must never SIGKILL theirs."""
    code = "import time; time.sleep(30)"
    fake = subprocess.Popen(
        [sys.executable, "-c", code, "--executor-id", "7", "--app-id", "app-ours"]
    )
    try:
        for _ in range(200):
            if fake.pid in executors_of("app-ours"):
                break
            time.sleep(0.01)
        assert executor_pid("7", "app-ours") == fake.pid
        with pytest.raises(LookupError, match="no executor JVM with id 7 in application app-x"):
            executor_pid("7", "app-x")
    finally:
        fake.kill()
        fake.wait()


def test_an_unknown_executor_is_named():
    with pytest.raises(LookupError, match="no executor JVM with id nowhere-42"):
        executor_pid("nowhere-42")
    assert executors_of("app-that-never-ran") == []
