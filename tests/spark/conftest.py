"""Spark fixtures: one SparkSession per module, bound to loopback.

A module picks its master with a module-level `SPARK_MASTER` (default local[4]), and asks for
Delta's session extension with `SPARK_DELTA = True`.
"""

from __future__ import annotations

import os
import sys

import pytest

from tests.s3proxy import s3proxy  # noqa: F401 - the session's S3-compatible server fixture

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def build_session(master: str, app_name: str, delta: bool = False):
    """A session with the pinned JARs on `spark.jars` (and Delta's extension when `delta`)."""
    from pyspark.sql import SparkSession

    from sparklog.spark.session import with_delta, with_reference_jars

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    add_jars = with_delta if delta else with_reference_jars
    return (
        add_jars(SparkSession.builder.master(master))
        .appName(app_name)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.speculation", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.executor.memory", "1g")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )


@pytest.fixture(scope="module")
def spark(request):
    master = getattr(request.module, "SPARK_MASTER", "local[4]")
    delta = getattr(request.module, "SPARK_DELTA", False)
    session = build_session(master, request.module.__name__, delta)
    yield session
    session.stop()
