"""jobs/bench_metrics.py and jobs/bench_quotas.py run with tiny sizes and report every
headline figure with a sane value (the numbers themselves are the benchmarks' business)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

JOBS = Path(__file__).resolve().parents[2] / "jobs"

pytestmark = pytest.mark.slow


def _run(args: list[str]) -> subprocess.CompletedProcess:
    run = subprocess.run([sys.executable, *args], timeout=300, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    return run


def _positive(figures: dict, keys: tuple[str, ...]) -> None:
    for key in keys:
        assert math.isfinite(figures[key]) and figures[key] > 0, (key, figures[key])


def test_quick_bench_metrics_reports_on_versus_off(tmp_path):
    out = tmp_path / "metrics.json"
    _run([str(JOBS / "bench_metrics.py"), "--quick", "--json", str(out)])
    figures = json.loads(out.read_text())
    _positive(
        figures,
        (
            "metrics_on_vs_off_produce",
            "metrics_on_vs_off_consume",
            "metrics_on_vs_off_produce_cpu_efficiency",
            "metrics_on_vs_off_consume_cpu_efficiency",
        ),
    )


def test_quick_bench_quotas_reports_entities_and_neighbour():
    run = _run(
        [str(JOBS / "bench_quotas.py"), "--records", "2000", "--rounds", "1",
         "--paced-seconds", "1"]
    )  # fmt: skip
    figures = json.loads(run.stdout[run.stdout.index("{\n") :])
    _positive(
        figures,
        (
            "entities_1000_vs_none_produce",
            "entities_1000_vs_none_consume",
            "neighbour_p99_ratio",
        ),
    )
    stage = figures["stage_us_per_request"]
    assert stage["none"] > 0 and stage["entities_1000"] > 0
