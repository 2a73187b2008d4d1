"""jobs/bench_groups.py runs with tiny sizes and writes every headline key with a sane value."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "jobs" / "bench_groups.py"
KEYS = (
    "commit_p50_ms",
    "commit_p99_ms",
    "offsets_committed_per_s",
    "durable_vs_memory",
    "rebalance_after_join_s",
    "rebalance_after_leave_s",
)


@pytest.mark.slow
def test_quick_bench_writes_the_headline_keys(tmp_path):
    out = tmp_path / "groups.json"
    run = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", str(out)],
        timeout=300,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    figures = json.loads(out.read_text())
    for key in KEYS:
        assert math.isfinite(figures[key]) and figures[key] > 0, (key, figures[key])
    assert figures["commit_p50_ms"] <= figures["commit_p99_ms"]
    assert figures["durable"]["delta_commits"] > 0 and figures["memory"]["delta_commits"] == 0
