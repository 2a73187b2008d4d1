"""jobs/bench_tiered.py runs with tiny sizes and reports every headline figure of issue 32
§5 with a sane value (the numbers themselves are the benchmark's business)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

JOBS = Path(__file__).resolve().parents[2] / "jobs"

pytestmark = pytest.mark.slow


def test_tiny_bench_tiered_reports_a_to_d(tmp_path):
    out = tmp_path / "tiered.json"
    args = ["--rows", "20000", "--rounds", "2", "--upload-mb", "2", "--freshness-ms", "500"]
    args += ["--rate-mb-s", "2", "--freshness-seconds", "3", "--json", str(out)]
    run = subprocess.run(
        [sys.executable, str(JOBS / "bench_tiered.py"), *args],
        timeout=600,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    figures = json.loads(out.read_text())
    for section, key in [
        ("historical_read", "table_vs_brokers"),
        ("historical_read", "table_vs_parquet"),
        ("upload", "copy_vs_produce"),
        ("tiered_fetch", "tiered_vs_local"),
    ]:
        value = figures[section][key]["median"]
        assert math.isfinite(value) and value > 0, (section, key, value)
    fresh = figures["freshness"]
    assert fresh["samples"] > 0 and fresh["reached_mb_s"] > 0
    assert math.isfinite(fresh["p99_vs_freshness"]) and fresh["p99_vs_freshness"] >= 0
