"""jobs/bench_validation.py runs with tiny sizes and writes positive figures for every case."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "jobs" / "bench_validation.py"


def test_tiny_bench_writes_positive_figures(tmp_path):
    out = tmp_path / "figures.json"
    run = subprocess.run(
        [sys.executable, str(BENCH), "--mb", "0.2", "--json", str(out)],
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert set(figures) == {"1000B_none", "1000B_lz4", "100B_none", "100B_lz4"}
    for case in figures.values():
        for key, value in case.items():
            assert math.isfinite(value) and value > 0, (key, value)
