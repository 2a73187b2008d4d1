"""Finding processes: the tree under a pid, and a clear error for an executor that is gone."""

from __future__ import annotations

import os
import subprocess

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


def test_an_unknown_executor_is_named():
    with pytest.raises(LookupError, match="no executor JVM with id nowhere-42"):
        executor_pid("nowhere-42")
    assert executors_of("app-that-never-ran") == []
