"""The broker side of the remote tier (KIP-405, DESIGN D17) on a real cluster with real Delta
tables: leader-only copies, the table holding [log start, HW), the active segment's stable
prefix with remote.table.freshness.ms, local retention after upload, leader changes, whole-log
retention and DeleteRecords on the table, Kafka's config refusals, disable and delete."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.metrics.metric import MetricName
from sparklog.protocol.api_versions import ApiKey
from sparklog.records import SimpleRecord, build_batch

from .broker_wire import call, connect, create_topic, list_offset, now_ms, produce, run
from .conftest import REPLICATION_CONFIG

INVALID_CONFIG = 40


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    """A controller and three brokers with a remote tier under a shared local root."""
    data = tmp_path_factory.mktemp("tiered")
    config = {
        **REPLICATION_CONFIG,
        "remote.log.storage.system.enable": "true",
        "remote.table.root": str(data / "tables"),
        "remote.log.manager.task.interval.ms": "200",
        "remote.log.manager.task.retry.backoff.ms": "100",
    }
    with EmbeddedCluster(brokers=3, data_dir=data / "cluster", config=config) as running:
        yield running


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def root_of(cluster: EmbeddedCluster) -> Path:
    return Path(cluster.config["remote.table.root"])


def table_offsets(cluster: EmbeddedCluster, topic: str, partition: int = 0) -> list[int]:
    """Every offset the topic's table holds for `partition`, in table order, duplicates kept."""
    location = root_of(cluster) / topic
    if not (location / "_delta_log").exists():
        return []
    rows = DeltaTable(str(location)).to_pyarrow_table(
        columns=["offset"], filters=[("partition", "=", partition)]
    )
    return sorted(rows.column("offset").to_pylist())


def wait_until(what: str, check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen in {timeout_s} s")
        time.sleep(0.05)


def make_topic(cluster: EmbeddedCluster, topic: str, partitions: int = 1, **configs: str):
    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            props = {"remote.storage.enable": "true", "segment.bytes": "400", **configs}
            return await create_topic(conn, topic, partitions, props, replication_factor=3)
        finally:
            await conn.close()

    created = run(go())
    if created.error_code == 0:
        for p in range(partitions):
            cluster.wait_for_isr(topic, p)
    return created


def send(
    cluster: EmbeddedCluster, topic: str, count: int, partition: int = 0, ts: int | None = None
):
    leader = cluster.brokers[cluster.broker_index(cluster.wait_for_leader(topic, partition))]

    async def go():
        conn = await connect(leader.bootstrap)
        try:
            for i in range(count):
                record = SimpleRecord(b"value-%04d" % i + b"." * 60, None, ts or now_ms())
                response = await produce(conn, topic, build_batch([record]), partition, acks=-1)
                assert response.error_code == 0, response
        finally:
            await conn.close()

    run(go())


def leader_bootstrap(cluster: EmbeddedCluster, topic: str, partition: int = 0) -> str:
    return cluster.brokers[
        cluster.broker_index(cluster.wait_for_leader(topic, partition))
    ].bootstrap


def leader_log(cluster: EmbeddedCluster, topic: str, partition: int = 0):
    leader = cluster.leader_of(topic, partition)
    broker = cluster.brokers[cluster.broker_index(leader)]
    return broker, broker.replica_manager.partitions[(topic, partition)].log


def alter(cluster: EmbeddedCluster, topic: str, **configs: str):
    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            return await call(
                conn,
                ApiKey.INCREMENTAL_ALTER_CONFIGS,
                {
                    "resources": [
                        {
                            "resource_type": 2,
                            "resource_name": topic,
                            "configs": [
                                {"name": k, "config_operation": 0, "value": v}
                                for k, v in configs.items()
                            ],
                        }
                    ],
                    "validate_only": False,
                },
            )
        finally:
            await conn.close()

    return run(go()).responses[0]


def test_leader_copies_closed_segments_only_and_followers_never(tiered):
    topic = unique("closed")
    make_topic(tiered, topic, partitions=2)
    for p in range(2):
        send(tiered, topic, 30, partition=p)
    for p in range(2):
        _, log = leader_log(tiered, topic, p)
        closed_end = log.active_segment.base_offset
        assert closed_end > 0
        wanted = list(range(closed_end))
        wait_until(
            f"partition {p} copied",
            lambda p=p, wanted=wanted: table_offsets(tiered, topic, p) == wanted,
        )
    for broker in tiered.brokers:
        led = [p for p in range(2) if tiered.leader_of(topic, p) == broker.node_id]
        copied = broker.remote_log_tasks.manager.progress
        assert {k for k in copied if k[0] == topic} == {(topic, p) for p in led}


def test_freshness_puts_the_stable_active_prefix_in_the_table(tiered):
    topic = unique("fresh")
    make_topic(tiered, topic, **{"remote.table.freshness.ms": "100", "segment.bytes": "1048576"})
    send(tiered, topic, 25)
    _, log = leader_log(tiered, topic)
    assert len(log.segments) == 1
    wait_until("the active prefix copied", lambda: table_offsets(tiered, topic) == list(range(25)))
    send(tiered, topic, 5)
    wait_until("the new tail copied", lambda: table_offsets(tiered, topic) == list(range(30)))
    broker, _ = leader_log(tiered, topic)
    lag = MetricName.of(
        "kafka.server", "BrokerTopicMetrics", "RemoteCopyLagOffsets", {"topic": topic}
    )
    wait_until("the lag gauge", lambda: broker.metrics.metric(lag) is not None)
    wait_until("no lag", lambda: broker.metrics.metric(lag).value() == 0)
    segments = MetricName.of(
        "kafka.server", "BrokerTopicMetrics", "RemoteCopyLagSegments", {"topic": topic}
    )
    assert broker.metrics.metric(segments) is not None
    copied = MetricName.of("kafka.server", "BrokerTopicMetrics", "RemoteCopyBytesPerSec")
    assert broker.metrics.metric(copied) is not None


def test_local_segments_go_only_after_upload_and_local_retention(tiered):
    topic = unique("local")
    make_topic(tiered, topic, **{"local.retention.bytes": "500", "retention.bytes": "-1"})
    send(tiered, topic, 40)
    _, log = leader_log(tiered, topic)
    wait_until("local segments deleted", lambda: log.local_log_start_offset > 0)
    copied = table_offsets(tiered, topic)
    assert copied[: log.local_log_start_offset] == list(range(log.local_log_start_offset))
    assert log.highest_offset_in_remote_storage + 1 >= log.local_log_start_offset
    assert log.log_start_offset == 0

    bootstrap = leader_bootstrap(tiered, topic)

    async def earliest():
        conn = await connect(bootstrap)
        try:
            return (await list_offset(conn, topic, -2)).offset
        finally:
            await conn.close()

    assert run(earliest()) == 0  # the log still starts at 0: the table holds the head
    followers = [
        b.replica_manager.partitions[(topic, 0)].log
        for b in tiered.brokers
        if b.node_id != tiered.leader_of(topic)
    ]
    for follower in followers:  # they learn what the table holds and trim too
        wait_until("a follower trimmed", lambda f=follower: f.local_log_start_offset > 0)
        assert follower.local_log_start_offset <= follower.highest_offset_in_remote_storage + 1
        assert follower.log_start_offset == 0


def test_new_leader_continues_from_the_table(tiered):
    topic = unique("leader")
    make_topic(tiered, topic, **{"remote.table.freshness.ms": "0"})
    send(tiered, topic, 20)
    wait_until("first copy", lambda: table_offsets(tiered, topic) == list(range(20)))
    old = tiered.leader_of(topic)
    index = tiered.broker_index(old)
    tiered.stop_broker(index)
    try:
        tiered.wait_for_leader(topic, not_on=old)
        send(tiered, topic, 20)
        wait_until("the new leader's copy", lambda: len(table_offsets(tiered, topic)) >= 40)
        assert table_offsets(tiered, topic) == list(range(40))  # no gap, no duplicate
    finally:
        tiered.restart_broker(index)
        tiered.wait_for_isr(topic)


def test_whole_log_retention_expires_table_rows(tiered):
    topic = unique("expire")
    old = now_ms() - 3_600_000
    make_topic(tiered, topic, **{"retention.ms": "600000", "remote.table.freshness.ms": "0"})
    send(tiered, topic, 10, ts=old)
    _, log = leader_log(tiered, topic)
    # copied, then expired from the table and the log (local retention follows retention.ms)
    wait_until("old records expired", lambda: log.log_start_offset == 10)
    assert table_offsets(tiered, topic) == []
    send(tiered, topic, 10)
    wait_until("new records copied", lambda: table_offsets(tiered, topic) == list(range(10, 20)))
    assert log.log_start_offset == 10


def test_delete_records_applies_to_the_table(tiered):
    topic = unique("delrec")
    make_topic(tiered, topic, **{"remote.table.freshness.ms": "0"})
    send(tiered, topic, 20)
    wait_until("copied", lambda: table_offsets(tiered, topic) == list(range(20)))

    bootstrap = leader_bootstrap(tiered, topic)

    async def delete():
        conn = await connect(bootstrap)
        try:
            return await call(
                conn,
                ApiKey.DELETE_RECORDS,
                {
                    "topics": [
                        {"name": topic, "partitions": [{"partition_index": 0, "offset": 7}]}
                    ],
                    "timeout": 5000,
                },
            )
        finally:
            await conn.close()

    assert run(delete()).topics[0].partitions[0].low_watermark == 7
    wait_until("table trimmed", lambda: table_offsets(tiered, topic) == list(range(7, 20)))


def test_kafka_refuses_compacted_tiered_topics(tiered):
    created = make_topic(tiered, unique("compact"), **{"cleanup.policy": "compact"})
    assert created.error_code == INVALID_CONFIG
    assert created.error_message.startswith("Remote log storage only supports topics with")
    too_long = make_topic(
        tiered, unique("local"), **{"retention.ms": "1000", "local.retention.ms": "5000"}
    )
    assert too_long.error_code == INVALID_CONFIG
    assert "must not be more than retention.ms" in too_long.error_message


def test_disable_with_delete_drops_the_table_and_topic_deletion_too(tiered):
    topic = unique("disable")
    make_topic(tiered, topic, **{"remote.table.freshness.ms": "0"})
    send(tiered, topic, 5)
    wait_until("copied", lambda: table_offsets(tiered, topic) == list(range(5)))
    refused = alter(tiered, topic, **{"remote.storage.enable": "false"})
    assert refused.error_code == INVALID_CONFIG
    done = alter(
        tiered, topic, **{"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
    )
    assert done.error_code == 0
    wait_until("table dropped", lambda: not (root_of(tiered) / topic).exists())
    _, log = leader_log(tiered, topic)
    assert not log.remote_log_enabled
    again = alter(tiered, topic, **{"remote.storage.enable": "true"})
    assert again.error_code == 0  # a new table, backfilled from the local log
    wait_until("copied again", lambda: table_offsets(tiered, topic) == list(range(5)))

    gone = unique("deleted")
    make_topic(tiered, gone, **{"remote.table.freshness.ms": "0"})
    send(tiered, gone, 5)
    wait_until("copied", lambda: table_offsets(tiered, gone) == list(range(5)))

    async def delete_topic():
        conn = await connect(tiered.bootstrap_servers)
        try:
            await call(conn, ApiKey.DELETE_TOPICS, {"topic_names": [gone], "timeout": 10_000})
        finally:
            await conn.close()

    run(delete_topic())
    wait_until("deleted topic's table dropped", lambda: not (root_of(tiered) / gone).exists())


def test_enabling_on_an_existing_topic_backfills_its_history(tiered):
    topic = unique("backfill")
    make_topic(tiered, topic, **{"remote.storage.enable": "false"})
    send(tiered, topic, 20)
    assert table_offsets(tiered, topic) == []
    enabled = alter(
        tiered, topic, **{"remote.storage.enable": "true", "remote.table.freshness.ms": "0"}
    )
    assert enabled.error_code == 0
    wait_until("history copied", lambda: table_offsets(tiered, topic) == list(range(20)))


def test_log_start_below_the_local_start_survives_a_restart(tiered):
    topic = unique("restart")
    make_topic(tiered, topic, **{"local.retention.bytes": "500", "retention.bytes": "-1"})
    send(tiered, topic, 40)
    broker, log = leader_log(tiered, topic)
    wait_until("local segments deleted", lambda: log.local_log_start_offset > 0)
    local_start = log.local_log_start_offset
    index = tiered.broker_index(broker.node_id)
    restarted = tiered.restart_broker(index)
    tiered.wait_for_isr(topic)
    reopened = restarted.replica_manager.partitions[(topic, 0)].log
    assert reopened.log_start_offset == 0
    assert reopened.local_log_start_offset >= local_start


def test_a_table_gone_stops_copies_and_local_deletion_until_it_is_back(tiered):
    topic = unique("gone")
    make_topic(
        tiered,
        topic,
        **{
            "local.retention.bytes": "500",
            "retention.bytes": "-1",
            "remote.table.freshness.ms": "0",
        },
    )
    send(tiered, topic, 20)
    wait_until("copied", lambda: table_offsets(tiered, topic) == list(range(20)))
    broker, log = leader_log(tiered, topic)
    manager = broker.remote_log_tasks.manager
    location = root_of(tiered) / topic
    aside = location.with_name(f"{topic}.aside")
    location.rename(aside)
    try:
        send(tiered, topic, 20)
        wait_until("copies failing", lambda: manager.failures(topic) >= 2)
        assert log.highest_offset_in_remote_storage == 19
        assert log.local_log_start_offset <= 20  # nothing uncopied deleted
        assert log.read(20, 1 << 20).records  # still served locally
    finally:
        aside.rename(location)
    wait_until("copies resumed", lambda: table_offsets(tiered, topic) == list(range(40)))
    wait_until("healed", lambda: manager.failures(topic) == 0)


def test_typed_values_follow_the_topic_settings(tiered):
    refused = make_topic(tiered, unique("badschema"), **{"remote.table.value.format": "json"})
    assert refused.error_code == INVALID_CONFIG
    assert "remote.table.value.schema" in refused.error_message
    topic = unique("typed")
    make_topic(
        tiered,
        topic,
        **{
            "remote.table.freshness.ms": "0",
            "remote.table.value.format": "json",
            "remote.table.value.schema": "a INT, b STRING",
        },
    )
    leader = leader_bootstrap(tiered, topic)

    async def go():
        conn = await connect(leader)
        try:
            for value in (b'{"a": 1, "b": "x"}', b"not json"):
                record = SimpleRecord(value, None, now_ms())
                assert (await produce(conn, topic, build_batch([record]), acks=-1)).error_code == 0
        finally:
            await conn.close()

    run(go())
    wait_until("copied", lambda: table_offsets(tiered, topic) == [0, 1])
    rows = DeltaTable(str(root_of(tiered) / topic)).to_pyarrow_table().sort_by("offset")
    assert rows.column("value_typed").to_pylist()[0] == {"a": 1, "b": "x"}
    assert rows.column("value_error").to_pylist()[0] is None
    assert rows.column("value_error").to_pylist()[1]  # a dead letter, inline
