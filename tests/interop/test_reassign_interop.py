"""Kafka's own kafka-reassign-partitions.sh (`ReassignPartitionsCommand`) against sparklog:
`--execute --throttle` sets the KIP-73 topic and broker configs sparklog applies, the move
completes, and `--verify` clears the throttles."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.metrics.replication_quota import (
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
)
from sparklog.protocol.api_versions import ApiKey
from tests.integration.broker_wire import batch, call, connect, produce, run

from .java_tools import classpath_or_fail
from .test_kafka_tools import tool


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    classpath_or_fail()
    with EmbeddedCluster(
        brokers=2, data_dir=tmp_path, config={"broker.heartbeat.interval.ms": "200"}
    ) as running:
        yield running


def _wait(what: str, check: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_kafka_reassign_partitions_throttle_and_verify(cluster: Any, tmp_path: Path) -> None:
    topic = "kafka-tool-moving"

    async def fill() -> None:
        conn = await connect(cluster.brokers[0].bootstrap)
        try:
            created = await call(
                conn,
                ApiKey.CREATE_TOPICS,
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
            assert created.topics[0].error_code == 0
            for i in range(20):
                assert (await produce(conn, topic, batch([bytes([i]) * 1000]))).error_code == 0
        finally:
            await conn.close()

    run(fill())
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [0, 1]}]}
        )
    )
    bs = cluster.bootstrap_servers
    out = tool("reassign.ReassignPartitionsCommand", "--bootstrap-server", bs, "--execute",
               "--reassignment-json-file", str(plan), "--throttle", "1000000")  # fmt: skip
    assert "The inter-broker throttle limit was set to 1000000 B/s" in out, out
    image = cluster.brokers[0].metadata.image
    _wait("the throttles", lambda: image.configs("broker", "1").get(LEADER_RATE) == "1000000")
    topic_configs = image.configs("topic", topic)
    assert topic_configs[LEADER_REPLICAS] == "0:0", dict(topic_configs)
    assert topic_configs[FOLLOWER_REPLICAS] == "0:1", dict(topic_configs)
    _wait(
        "the move",
        lambda: (
            "is complete"
            in tool(
                "reassign.ReassignPartitionsCommand",
                "--bootstrap-server",
                bs,
                "--verify",
                "--reassignment-json-file",
                str(plan),
            )
        ),  # fmt: skip
    )
    _wait("the cleared throttles", lambda: not image.configs("broker", "1").get(LEADER_RATE))
    assert not image.configs("topic", topic).get(LEADER_REPLICAS)
    assert cluster.brokers[1].replica_manager.hosted(topic, 0).log.log_end_offset == 20
