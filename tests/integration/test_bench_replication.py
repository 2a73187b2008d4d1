"""jobs/bench_replication.py runs end to end with tiny sizes and writes its figures."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "jobs" / "bench_replication.py"

pytestmark = pytest.mark.slow


def test_quick_bench_writes_positive_figures(tmp_path):
    out = tmp_path / "figures.json"
    run = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", str(out)],
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    figures = json.loads(out.read_text())
    for key in (
        "rf3_vs_rf1",
        "rf1_mb_s",
        "rf3_mb_s",
        "acks_all_p50_ms",
        "acks_all_p99_ms",
        "failover_median_s",
        "fenced_median_s",
        "leader_seen_median_s",
        "rejoin_median_s",
    ):
        value = figures[key]
        assert isinstance(value, float) and math.isfinite(value) and value > 0, (key, value)
    assert figures["replication_factor"] == 3
    assert len(figures["sparklog_failover_s"]) == figures["failover_rounds"] == 1
