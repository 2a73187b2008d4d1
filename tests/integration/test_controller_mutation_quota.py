"""`controller_mutation_rate` (KIP-599) over real sockets: CreateTopics, CreatePartitions and
DeleteTopics forwarded by a broker (in an Envelope with the client's identity) or sent to the
controller directly are refused over the quota with THROTTLING_QUOTA_EXCEEDED (89) and a
throttle time at the strict versions, and accepted then throttled at older ones; the quota is
the client's once for the cluster, whichever broker it asks."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.protocol.api_versions import ApiKey
from tests.integration.broker_wire import call, connect
from tests.integration.conftest import TEST_CONFIG
from tests.support.quota_records import set_client_quota

THROTTLED = 89


@pytest.fixture(scope="module")
def quota_cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with EmbeddedCluster(
        brokers=2, data_dir=tmp_path_factory.mktemp("mutation"), config=TEST_CONFIG
    ) as running:
        yield running


def _limit(cluster: Any, client_id: str, rate: float) -> None:
    set_client_quota(cluster, {"client-id": client_id}, "controller_mutation_rate", rate)


def _topic(name: str, partitions: int) -> dict[str, Any]:
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": 1,
        "assignments": [],
        "configs": [],
    }


async def _create(bootstrap: str, client_id: str, version: int, topics: list[dict]) -> Any:
    conn = await connect(bootstrap, client_id=client_id)
    try:
        data = {"topics": topics, "timeout": 10_000, "validate_only": False}
        return await call(conn, ApiKey.CREATE_TOPICS, data, version=version)
    finally:
        await conn.close()


def _ms(throttle: Any) -> float:
    return throttle.total_seconds() * 1000


@pytest.mark.parametrize("via", ["broker", "controller"])
def test_create_topics_v6_refuses_over_quota_topics(quota_cluster: Any, via: str) -> None:
    cluster = quota_cluster
    client_id = f"creator-{via}"
    _limit(cluster, client_id, 1.0)  # 11 partitions of burst (11 × 1 s windows)
    bootstrap = cluster.bootstrap_servers if via == "broker" else cluster.controller.bootstrap
    prefix = uuid.uuid4().hex[:8]
    topics = [_topic(f"{prefix}-a", 8), _topic(f"{prefix}-b", 4), _topic(f"{prefix}-c", 1)]
    response = asyncio.run(_create(bootstrap, client_id, 6, topics))
    codes = {t.name: t.error_code for t in response.topics}
    # a: 11 credits → 3; b: admitted whole → -1; c: the bucket is below zero → refused
    # (small overdrafts: the connection is muted for the throttle time afterwards)
    assert codes == {f"{prefix}-a": 0, f"{prefix}-b": 0, f"{prefix}-c": THROTTLED}
    refused = next(t for t in response.topics if t.error_code)
    assert refused.error_message is None  # as Kafka answers it
    assert 500 <= _ms(response.throttle_time) <= 1000  # 1 credit at 1/s, minus time passed
    # another client is not held by this one's quota
    other = asyncio.run(_create(bootstrap, f"other-{via}", 6, [_topic(f"{prefix}-d", 20)]))
    assert other.topics[0].error_code == 0 and _ms(other.throttle_time) == 0


def test_two_brokers_do_not_double_a_clients_quota(quota_cluster: Any) -> None:
    """Brokers forward CreateTopics in an Envelope carrying the client's principal and client
    id, and the controller charges the client's quota (Kafka's `ControllerApis`): a client
    that spent its burst through one broker is refused through the other."""
    cluster = quota_cluster
    _limit(cluster, "two-brokers", 1.0)  # 11 partitions of burst
    first, second = (b.bootstrap for b in cluster.brokers)
    prefix = uuid.uuid4().hex[:8]
    spent = asyncio.run(_create(first, "two-brokers", 6, [_topic(f"{prefix}-a", 12)]))
    assert spent.topics[0].error_code == 0  # admitted whole: 11 - 12 = -1 credit
    again = asyncio.run(_create(second, "two-brokers", 6, [_topic(f"{prefix}-b", 1)]))
    assert again.topics[0].error_code == THROTTLED
    assert _ms(again.throttle_time) > 0


def test_create_topics_v5_accepts_then_throttles(quota_cluster: Any) -> None:
    cluster = quota_cluster
    _limit(cluster, "old-client", 1.0)
    prefix = uuid.uuid4().hex[:8]
    topics = [_topic(f"{prefix}-a", 10), _topic(f"{prefix}-b", 3)]
    response = asyncio.run(_create(cluster.bootstrap_servers, "old-client", 5, topics))
    assert [t.error_code for t in response.topics] == [0, 0]  # v5 does not know error 89
    assert _ms(response.throttle_time) >= 1500  # 11 - 13 = -2 credits at 1/s


def test_delete_topics_and_create_partitions_cost_partitions(quota_cluster: Any) -> None:
    cluster = quota_cluster
    prefix = uuid.uuid4().hex[:8]
    setup = [_topic(f"{prefix}-x", 3), _topic(f"{prefix}-y", 6), _topic(f"{prefix}-z", 1)]
    assert all(
        t.error_code == 0
        for t in asyncio.run(_create(cluster.bootstrap_servers, "setup", 6, setup)).topics
    )
    _limit(cluster, "mutator", 1.0)

    async def mutate() -> tuple[Any, Any]:
        conn = await connect(cluster.bootstrap_servers, client_id="mutator")
        try:
            grown = await call(
                conn,
                ApiKey.CREATE_PARTITIONS,
                {
                    "topics": [{"name": f"{prefix}-z", "count": 10, "assignments": None}],
                    "timeout": 10_000,
                    "validate_only": False,
                },
                version=3,
            )  # 9 new partitions: 2 credits left
            deleted = await call(
                conn,
                ApiKey.DELETE_TOPICS,
                {"topic_names": [f"{prefix}-x", f"{prefix}-y"], "timeout": 10_000},
                version=5,
            )  # x: 3 partitions → -1; y: refused
            return grown, deleted
        finally:
            await conn.close()

    grown, deleted = asyncio.run(mutate())
    assert grown.results[0].error_code == 0
    assert {r.name: r.error_code for r in deleted.responses} == {
        f"{prefix}-x": 0,
        f"{prefix}-y": THROTTLED,
    }
    assert _ms(deleted.throttle_time) > 0
    image = cluster.brokers[0].metadata.image
    assert image.topic(f"{prefix}-x") is None and image.topic(f"{prefix}-y") is not None
