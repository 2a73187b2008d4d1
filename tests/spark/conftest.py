"""Spark fixtures: SparkSessions bound to loopback, shared between the modules that can.

A module picks its master with a module-level `SPARK_MASTER` (default local[4]), and asks for
Delta's session extension with `SPARK_DELTA = True`. Modules on a `local[N]` master with the same
settings share one session (its JVM threads, Python workers and warmed-up planner), and the
tier's modules run grouped by those settings (alphabetically within a group), so the tier builds
one `local[4]` session, one with Delta, and a session of its own for each `local-cluster`
module: those kill executors, and their tests count on a fresh application's executors. The
modules whose Spark runs in child processes (soaks, driver kills) go first, with no session
open in the test process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

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


def session_settings(module) -> tuple[str, bool]:
    """(master, delta) a module's `spark` fixture is built with."""
    return getattr(module, "SPARK_MASTER", "local[4]"), getattr(module, "SPARK_DELTA", False)


def shareable(settings: tuple[str, bool]) -> bool:
    return settings[0].startswith("local[")


def pytest_collection_modifyitems(session, config, items):
    """This tier's modules grouped by their session settings, each group's modules in
    their usual order; other tiers' items stay where they are."""
    here = Path(__file__).parent
    positions = [i for i, item in enumerate(items) if here in Path(item.path).parents]
    if not positions:
        return
    mine = [items[i] for i in positions]
    modules = list(dict.fromkeys(item.module for item in mine))
    with_spark = {item.module for item in mine if "spark" in getattr(item, "fixturenames", ())}

    def group(module) -> tuple[int, str, bool]:
        """Modules without a session (their Spark runs in child processes) first."""
        if module not in with_spark:
            return (0, "", False)
        settings = session_settings(module)
        return (1 if shareable(settings) else 2, *settings)

    order = {m: (group(m), n) for n, m in enumerate(modules)}
    mine.sort(key=lambda item: order[item.module])
    for i, item in zip(positions, mine, strict=True):
        items[i] = item


_shared: dict[str, Any] = {}


@pytest.fixture(scope="session")
def _shared_spark():
    """Stops the shared session once the test session ends."""
    yield _shared
    if (session := _shared.pop("session", None)) is not None:
        session.stop()


@pytest.fixture(scope="module")
def spark(request, _shared_spark):
    settings = session_settings(request.module)
    if not shareable(settings):
        if (shared := _shared_spark.pop("session", None)) is not None:
            shared.stop()
        session = build_session(settings[0], request.module.__name__, settings[1])
        yield session
        session.stop()
        return
    session = _shared_spark.get("session")
    alive = session is not None and session.sparkContext._jsc is not None
    if not alive or _shared_spark.get("settings") != settings:
        session = build_session(settings[0], "sparklog-tests", settings[1])
        _shared_spark.update(session=session, settings=settings)
    yield session
