"""Cluster-wide quotas (`quota.scope=cluster`) over real brokers: each broker reports its quota
usage to the controller every quota window (sparklog's QuotaUsage) and gets its shares back;
the controller answers a report from any broker with shares adding up to one quota."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.protocol import kio_build
from sparklog.protocol.sparklog_apis import QuotaUsageRequest
from tests.integration.broker_wire import connect, run
from tests.integration.conftest import TEST_CONFIG

ALICE = [{"name": "user", "value": "alice"}, {"name": "client-id", "value": "app"}]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    config = {**TEST_CONFIG, "quota.scope": "cluster"}
    with EmbeddedCluster(
        brokers=2, data_dir=tmp_path_factory.mktemp("cluster-quotas"), config=config
    ) as running:
        yield running


def test_brokers_report_every_window(cluster: Any) -> None:
    deadline = time.monotonic() + 30
    while not all(
        b.cluster_quotas is not None and b.cluster_quotas.reports >= 2 for b in cluster.brokers
    ):
        assert time.monotonic() < deadline, "brokers did not report their quota usage"
        time.sleep(0.05)
    assert cluster.controller.apis.quotas.balancer.brokers == [0, 1]


def _report(cluster: Any, node_id: int, rate: float) -> Any:
    async def go() -> Any:
        conn = await connect(cluster.controller.bootstrap, client_id="sparklog-broker")
        try:
            body = kio_build.build(
                QuotaUsageRequest,
                {
                    "node_id": node_id,
                    "entries": [{"quota_type": "Produce", "tags": ALICE, "value": rate}],
                },
            )
            return await conn.request(body)
        finally:
            await conn.close()

    return run(go())


def test_the_controller_splits_a_quota_by_demand(cluster: Any) -> None:
    # as two more brokers (10, 11) beside the cluster's two, which see no traffic
    _report(cluster, 10, 3000.0)
    answer = _report(cluster, 11, 1000.0)
    assert answer.error_code == 0
    (share,) = [s for s in answer.shares if s.quota_type == "Produce"]
    # four brokers: a floor of 2.5 % each, the other 90 % split 3:1:0:0
    assert float(share.value) == pytest.approx(0.025 + 0.9 * 0.25)
    assert float(answer.default_share) == pytest.approx(0.25)
