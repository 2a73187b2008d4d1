"""The whole application SIGKILLed mid-load (driver, controller, coordinators, executors and
brokers at once) and started again on the same data dirs (`jobs/soak_driver_kill.py`): every
acknowledged record is back at its offset exactly once, and the topic's configs with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_a_killed_application_restarts_on_its_dirs_with_every_acked_record(tmp_path):
    report_file = tmp_path / "report.json"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "soak_driver_kill.py"), "--load-seconds", "5",
         "--json", str(report_file)],
        capture_output=True, text=True, timeout=900, env=env, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(report_file.read_text())
    assert report["ok"], report
    assert report["records_acked_before_kill"] > 1_000, report
    assert report["lost"] == 0 and report["duplicated"] == 0
    assert report["topic_configs_back"], report["topic_configs"]
    assert report["records_in_log_after_restart"] >= report["records_acked_before_kill"]
