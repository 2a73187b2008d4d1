"""Replication throttles (KIP-73) over real brokers: `reassign-partitions --execute --throttle`
sets Kafka's topic and broker configs, the new replica copies the log at no more than the
throttle (measured from the follower's own log size over the interval), and `--verify` clears
the throttles once the move is complete."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from sparklog.cli import main
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.metrics.replication_quota import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
)
from tests.integration.broker_wire import batch, call, connect, produce, run
from tests.integration.conftest import TEST_CONFIG

THROTTLE = 100_000  # bytes/s
FETCH_MAX = 8192  # replica.fetch.max.bytes: what one fetch may overshoot the quota by
CONFIG = {
    **TEST_CONFIG,
    # two 1 s windows: a burst of one window before the rate holds (Kafka's 11 would let the
    # first 10 s through at once, far longer than a test)
    "replication.quota.window.num": "2",
    "replica.fetch.max.bytes": str(FETCH_MAX),
}


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    with EmbeddedCluster(brokers=2, data_dir=tmp_path, config=CONFIG) as running:
        yield running


def _fill(cluster: Any, topic: str, batches: int) -> None:
    async def go() -> None:
        conn = await connect(cluster.bootstrap_servers)
        try:
            response = await call(
                conn,
                _CREATE,
                {
                    "topics": [
                        {
                            "name": topic,
                            "num_partitions": -1,
                            "replication_factor": -1,
                            "assignments": [{"partition_index": 0, "broker_ids": [0]}],
                            "configs": [],
                        }
                    ],
                    "timeout": 10_000,
                    "validate_only": False,
                },
            )
            assert response.topics[0].error_code == 0
            leader = await connect(cluster.brokers[0].bootstrap)
            try:
                for i in range(batches):
                    result = await produce(leader, topic, batch([bytes([i % 256]) * 1000]))
                    assert result.error_code == 0
            finally:
                await leader.close()
        finally:
            await conn.close()

    run(go())


from sparklog.protocol.api_versions import ApiKey  # noqa: E402

_CREATE = ApiKey.CREATE_TOPICS


def _wait(what: str, check: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_reassignment_throttle_holds_the_copy_and_verify_clears_it(
    cluster: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = "moving"
    _fill(cluster, topic, 260)
    leader_log = cluster.brokers[0].replica_manager.hosted(topic, 0).log
    total = leader_log.size_in_bytes
    assert total > 2.5 * THROTTLE
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [0, 1]}]}
        )
    )
    bootstrap = cluster.bootstrap_servers
    args = ["reassign-partitions", "--bootstrap-server", bootstrap]
    args += ["--reassignment-json-file", str(plan)]
    assert main([*args, "--execute", "--throttle", str(THROTTLE)]) == 0
    printed = capsys.readouterr().out
    assert '"replicas":[0]' in printed  # the rollback plan
    assert f"The inter-broker throttle limit was set to {THROTTLE} B/s" in printed

    # the configs Kafka's tool sets: replica lists on the topic, rates on both brokers
    image = cluster.brokers[1].metadata.image
    _wait("the throttle configs", lambda: image.configs("broker", "1").get(LEADER_RATE))
    assert dict(image.configs("topic", topic)) == {LEADER_REPLICAS: "0:0", FOLLOWER_REPLICAS: "0:1"}
    assert image.configs("broker", "0")[FOLLOWER_RATE] == str(THROTTLE)

    follower = cluster.brokers[1].replica_manager
    _wait("the new replica", lambda: _has(follower, topic))

    def copied() -> int:
        return follower.hosted(topic, 0).log.size_in_bytes

    # past the first window's burst, the copy runs at the throttle
    _wait("the burst", lambda: copied() >= 1.2 * THROTTLE)
    start_bytes, start = copied(), time.monotonic()
    assert start_bytes < total, "the whole log was copied at once: no throttle"
    _wait("the copy", lambda: copied() >= total)
    elapsed = time.monotonic() - start
    moved = copied() - start_bytes
    assert moved <= THROTTLE * 1.05 * elapsed + FETCH_MAX, (moved, elapsed)

    _wait("the reassignment", lambda: main([*args, "--verify"]) == 0)
    printed = capsys.readouterr().out
    assert f"Reassignment of partition {topic}-0 is complete." in printed
    assert "Clearing broker-level throttles on brokers 0,1" in printed
    assert f"Clearing topic-level throttles on topic {topic}" in printed
    _wait("the cleared configs", lambda: not image.configs("broker", "0").get(LEADER_RATE))
    assert not image.configs("topic", topic).get(LEADER_REPLICAS)
    assert cluster.brokers[1].replica_manager.leader_quota.quota >= 2**63 - 1


def _has(replica_manager: Any, topic: str) -> bool:
    try:
        replica_manager.hosted(topic, 0)
    except Exception:  # noqa: BLE001 - not created yet
        return False
    return True
