"""Shared by the Java-client and Kafka-tool tests: a compiled Java program and a sparklog
cluster, with clear skips when no JDK is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sparklog.jars import JarsMissing, kafka_classpath

JAVA_DIR = Path(__file__).parent / "java"


def classpath_or_fail() -> str:
    if shutil.which("java") is None or shutil.which("javac") is None:
        pytest.skip("java/javac are not installed: Kafka's Java clients need a JDK >= 17")
    try:
        return kafka_classpath()
    except JarsMissing as e:
        pytest.fail(str(e))


def compile_java(source: str, out_dir: Path) -> str:
    """Compile `tests/interop/java/<source>` against kafka-clients; returns the run class path."""
    classpath = classpath_or_fail()
    done = subprocess.run(
        ["javac", "-cp", classpath, "-d", str(out_dir), str(JAVA_DIR / source)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return f"{out_dir}:{classpath}"
