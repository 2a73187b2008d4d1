"""jobs/bench_vs_kafka.py runs end to end with tiny sizes against the session's Apache Kafka and
writes every headline ratio as a positive finite number."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "jobs" / "bench_vs_kafka.py"
HEADLINE = (
    "produce_mb_s_vs_kafka",
    "consume_mb_s_vs_kafka",
    "e2e_p99_vs_kafka",
    "cpu_per_gb_vs_kafka",
    "spark_read_vs_kafka_connector",
    "spark_write_vs_kafka_connector",
    "kafka_connector_on_sparklog_vs_kafka",
    "spark_first_use_s_vs_kafka_connector",
)

pytestmark = [pytest.mark.oracle, pytest.mark.slow]


def test_quick_bench_writes_every_headline_ratio(apache_kafka, tmp_path):
    out = tmp_path / "figures.json"
    run = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", str(out),
         "--kafka-bootstrap", apache_kafka.bootstrap_servers,
         "--kafka-pids", ",".join(map(str, apache_kafka.pids))],
        timeout=600, capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    figures = json.loads(out.read_text())
    for key in HEADLINE:
        value = figures[key]
        assert isinstance(value, float) and math.isfinite(value) and value > 0, (key, value)
        assert key in figures["definitions"]
    assert figures["sparklog.confluent_produce.1KB_p6_rf1"]["broker_cpu_s_per_gb"] >= 0
