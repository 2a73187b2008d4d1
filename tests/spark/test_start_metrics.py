"""`sparklog.start(spark, config={"metrics.prometheus.port": ...})`: the driver serves the
controller's and coordinators' metrics, each broker task its own process's, and the driver's
`/sd` lists every endpoint (the EmbeddedCluster variants are
tests/integration/test_metrics_endpoint.py)."""

from __future__ import annotations

import json
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

import sparklog
from sparklog.client import AdminClient

pytestmark = pytest.mark.slow


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()


def test_sparklog_start_serves_metrics_where_the_drivers_sd_says(spark, tmp_path):
    cluster = sparklog.start(
        spark, brokers=1, data_dir=tmp_path, config={"metrics.prometheus.port": "-1"}
    )
    try:
        driver, *brokers = cluster.metrics_endpoints()
        assert driver == f"127.0.0.1:{cluster.metrics_port}"
        assert len(brokers) == 1  # the broker task runs in a Python worker: its own endpoint
        groups = json.loads(_get(f"http://{driver}/sd"))
        assert [g["targets"] for g in groups] == [[driver], brokers]
        with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            admin.list_topics()
        families = list(text_string_to_metric_families(_get(f"http://{brokers[0]}/metrics")))
        metadata = sum(
            s.value
            for f in families
            for s in f.samples
            if s.name == "kafka_network_requestmetrics_requests_total"
            and s.labels.get("request") == "Metadata"
        )
        assert metadata >= 1
    finally:
        cluster.stop()
