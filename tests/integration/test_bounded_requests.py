"""One request cannot make the controller write more than `controller.max.records.per.batch`
records (Kafka's KAFKA-14996 bound): a Metadata request naming thousands of unknown topics,
or a CreateTopics/CreatePartitions asking for too many partitions, is refused with
POLICY_VIOLATION and a message that names the setting; the broker keeps heartbeating (forwarded
requests have their own controller connection) and log lines stay short."""

from __future__ import annotations

import asyncio
import logging

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.protocol.api_versions import ApiKey

from .broker_wire import call, connect, create_topic

POLICY_VIOLATION = 44
BUDGET = 500


@pytest.fixture(scope="module")
def small_budget(tmp_path_factory):
    config = {"controller.max.records.per.batch": str(BUDGET), "num.partitions": "1"}
    with EmbeddedCluster(brokers=1, data_dir=tmp_path_factory.mktemp("budget"), config=config) as c:
        yield c


def test_a_metadata_request_cannot_auto_create_thousands_of_topics(small_budget, caplog):
    names = [f"flood-{i}" for i in range(3 * BUDGET)]

    async def go():
        conn = await connect(small_budget.bootstrap_servers)
        try:
            flood = await call(
                conn,
                ApiKey.METADATA,
                {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": True},
                version=1,
            )
            ok = await create_topic(conn, "after-the-flood", partitions=2)
            return flood, ok
        finally:
            await conn.close()

    with caplog.at_level(logging.INFO):
        flood, ok = asyncio.run(go())
    assert {int(t.error_code) for t in flood.topics} == {POLICY_VIOLATION}
    assert int(ok.error_code) == 0  # the cluster carries on
    assert small_budget.controller.describe_topics() and all(
        not t["name"].startswith("flood-") for t in small_budget.controller.describe_topics()
    )
    assert len(small_budget.controller.live_brokers()) == 1  # heartbeats never stopped
    assert max(len(r.getMessage()) for r in caplog.records) < 2_000
    assert not [r for r in caplog.records if r.exc_info]  # no tracebacks


def test_create_topics_and_partitions_over_the_budget_name_the_setting(small_budget):
    async def go():
        conn = await connect(small_budget.bootstrap_servers)
        try:
            big = await call(
                conn,
                ApiKey.CREATE_TOPICS,
                {
                    "topics": [
                        {"name": f"big-{i}", "num_partitions": BUDGET // 2,
                         "replication_factor": 1, "assignments": [], "configs": []}
                        for i in range(3)
                    ],
                    "timeout": 10_000,
                    "validate_only": False,
                },
            )  # fmt: skip
            await create_topic(conn, "grows", partitions=1)
            grow = await call(
                conn,
                ApiKey.CREATE_PARTITIONS,
                {"topics": [{"name": "grows", "count": BUDGET * 2, "assignments": None}],
                 "timeout": 10_000, "validate_only": False},
            )  # fmt: skip
            return big, grow
        finally:
            await conn.close()

    big, grow = asyncio.run(go())
    assert [int(t.error_code) for t in big.topics] == [POLICY_VIOLATION] * 3
    assert "controller.max.records.per.batch" in big.topics[0].error_message
    assert int(grow.results[0].error_code) == POLICY_VIOLATION
