"""Consumer-group DataFrames on a cluster from `sparklog.start`: `group_offsets_df` and
`consumer_lag_df` agree with what a real consumer committed, and the Delta table reads the same
through Delta's reader, D8's file-listing fallback and `deltalake`. The session has Delta's
extension (`SPARK_DELTA`), as README "Delta, natively" tells users to build theirs."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import sparklog
from sparklog.client import AdminClient, NewTopic
from sparklog.coordinator.offsets_store import OffsetsStore
from sparklog.spark.delta_read import native_delta_reads, read_delta, read_delta_files

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]
SPARK_DELTA = True


@pytest.fixture(scope="module")
def cluster(spark, tmp_path_factory):
    running = sparklog.start(
        spark,
        brokers=1,
        data_dir=tmp_path_factory.mktemp("groups"),
        config={"group.initial.rebalance.delay.ms": "0"},
    )
    yield running
    running.stop()


def commit(cluster, group: str, offsets: list[TopicPartition]) -> None:
    """Commit `offsets` for `group` the way any Kafka consumer does."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


def test_committed_offsets_and_lag_as_dataframes(spark, cluster):
    topic, group = f"gv-{uuid.uuid4().hex[:6]}", f"gv-group-{uuid.uuid4().hex[:6]}"
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(topic, 2)])
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(100):
        producer.produce(topic, value=b"%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    commit(cluster, group, [TopicPartition(topic, 0, 10), TopicPartition(topic, 1, 45)])
    commit(cluster, group, [TopicPartition(topic, 0, 30)])

    offsets = sparklog.group_offsets_df(spark, group=group).collect()
    assert [(r.topic, r.partition, r.committed_offset) for r in offsets] == [
        (topic, 0, 30),
        (topic, 1, 45),
    ]
    lag = sparklog.consumer_lag_df(spark, group=group).collect()
    assert [(r.partition, r.committed_offset, r.log_end_offset, r.lag) for r in lag] == [
        (0, 30, 50, 20),
        (1, 45, 50, 5),
    ]


def test_spark_and_deltalake_read_the_same_rows(spark, cluster):
    topic = f"gv-{uuid.uuid4().hex[:6]}"
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(topic, 3)])
    for n in range(3):
        commit(cluster, f"gv-rows-{n}", [TopicPartition(topic, p, 7 * n + p) for p in range(3)])
    path = cluster.coordinator.table_path
    assert native_delta_reads(spark)
    spark_rows = read_delta(spark, path).orderBy("sequence").collect()
    assert spark_rows == read_delta_files(spark, path).orderBy("sequence").collect()
    sql_rows = spark.sql(f"SELECT * FROM delta.`{path}` ORDER BY sequence").collect()
    assert sql_rows == spark_rows
    # the "latest committed offsets" query docs/groups.md gives, as it is written there
    doc = (ROOT / "docs" / "groups.md").read_text()
    query = doc.split("```sql\n", 1)[1].split("```", 1)[0]
    latest = spark.sql(query.replace("/path/to/__consumer_offsets", str(path))).collect()
    assert sorted((r.group_id, r.topic, r.partition, r.committed_offset) for r in latest) == [
        (r.group_id, r.topic, r.partition, r.committed_offset)
        for r in sparklog.group_offsets_df(spark).collect()
    ]
    expected = list(OffsetsStore(path).read_rows())
    assert [
        (r.sequence, r.group_id, r.topic, r.partition, r.committed_offset) for r in spark_rows
    ] == [
        (r["sequence"], r["group_id"], r["topic"], r["partition"], r["committed_offset"])
        for r in expected
    ]
    assert spark_rows, "the groups test committed offsets"


def produce(cluster, topic: str, count: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(start, start + count):
        producer.produce(topic, value=b"%d" % i, partition=i % 2)
    assert producer.flush(30) == 0


def test_a_streaming_query_with_a_group_id_shows_its_lag_falling_to_zero(spark, cluster, tmp_path):
    topic, group = f"gv-stream-{uuid.uuid4().hex[:6]}", f"gv-query-{uuid.uuid4().hex[:6]}"
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(topic, 2)])
    produce(cluster, topic, 40)

    def run_once() -> None:
        query = (
            spark.readStream.format("sparklog")
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("kafka.group.id", group)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run_once()
    lag = sparklog.consumer_lag_df(spark, group=group).collect()
    assert [(r.partition, r.committed_offset, r.lag) for r in lag] == [(0, 20, 0), (1, 20, 0)]
    produce(cluster, topic, 10, start=40)
    behind = sparklog.consumer_lag_df(spark, group=group).collect()
    assert [r.lag for r in behind] == [5, 5]  # visible while the query is not running
    run_once()  # the restarted query resumes from its checkpoint and catches up
    caught_up = sparklog.consumer_lag_df(spark, group=group).collect()
    assert [(r.committed_offset, r.lag) for r in caught_up] == [(25, 0), (25, 0)]


def test_a_batch_read_can_start_from_a_group_s_committed_offsets(spark, cluster):
    topic, group = f"gv-batch-{uuid.uuid4().hex[:6]}", f"gv-batch-{uuid.uuid4().hex[:6]}"
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(topic, 2)])
    produce(cluster, topic, 20)
    commit(cluster, group, [TopicPartition(topic, 0, 7)])  # partition 1: never committed
    rows = (
        spark.read.format("sparklog")
        .option("subscribe", topic)
        .option("startingOffsets", "group")
        .option("kafka.group.id", group)
        .load()
        .select("partition", "offset")
        .collect()
    )
    firsts = {p: min(r.offset for r in rows if r.partition == p) for p in (0, 1)}
    assert firsts == {0: 7, 1: 0} and len(rows) == (10 - 7) + 10
    with pytest.raises(Exception, match="kafka.group.id"):
        spark.read.format("sparklog").option("subscribe", topic).option(
            "startingOffsets", "group"
        ).load().collect()


def test_an_offsets_table_on_s3_reads_with_the_storage_options(spark, s3proxy, caplog):
    """On an object store the helpers need the store's credentials: delta-rs lists the files
    with them, and since this Spark has no s3a filesystem (no hadoop-aws JARs), the files are
    read on the driver and the DataFrame is built from Arrow, said once in the log."""
    import logging

    from sparklog.coordinator.group.coordinator import CommittedOffset, offset_row

    bucket = s3proxy.create_bucket(f"views-{uuid.uuid4().hex[:8]}")
    path = f"s3://{bucket}/cluster/__consumer_offsets"
    options = s3proxy.storage_options()
    store = OffsetsStore(path, storage_options=options)
    store.append(
        [offset_row("g3", ("t", p), CommittedOffset(10 + p, 1, "", 0, None)) for p in range(2)]
    )
    store.append([offset_row("g3", ("t", 0), CommittedOffset(30, 1, "", 0, None))])

    caplog.set_level(logging.INFO, logger="sparklog")
    offsets = sparklog.group_offsets_df(spark, group="g3", path=path, storage_options=options)
    assert [(r.topic, r.partition, r.committed_offset) for r in offsets.collect()] == [
        ("t", 0, 30),
        ("t", 1, 11),
    ]
    assert "reading its files on the driver" in caplog.text
    rows = read_delta(spark, path, storage_options=options).orderBy("sequence").collect()
    assert [r.committed_offset for r in rows] == [10, 11, 30]


def test_audit_df_reads_the_clusters_audit_table(spark, cluster):
    """`sparklog.audit_df(spark)` (D16, docs/security.md "Audit trail"): the audit table of
    the cluster running here, queryable with Spark SQL; on this module's cluster to spare a
    second `sparklog.start`."""
    from sparklog.security.audit import AuditEvent

    tag = uuid.uuid4().hex[:8]
    before = sparklog.audit_df(spark)  # empty (no table yet) or what other tests recorded
    assert before.columns[:3] == ["time", "principal", "client_address"]
    assert before.where(before.resource_name.contains(tag)).count() == 0
    denied = AuditEvent(
        time_ms=1_764_000_000_000,
        principal="User:mallory",
        client_address="192.0.2.9",
        listener="SASL_SSL",
        api="DELETE_TOPICS",
        resource_type="TOPIC",
        resource_name=f"payments-{tag}",
        operation="DELETE",
        decision="DENIED",
        node_id=0,
    )
    cluster.controller.audit.record(denied)  # the driver's sink, as the controller reports
    assert cluster.coordinator.audit.flush(30)

    sparklog.audit_df(spark).createOrReplaceTempView("audit")
    rows = spark.sql(
        "select principal, client_address, api, operation, decision, "
        f"unix_millis(time) from audit where resource_name = 'payments-{tag}'"
    ).collect()
    assert [tuple(r) for r in rows] == [
        ("User:mallory", "192.0.2.9", "DELETE_TOPICS", "DELETE", "DENIED", 1_764_000_000_000)
    ]


def test_after_stop_the_group_holds_the_last_finished_batch_s_end_offsets(spark, cluster, tmp_path):
    """A processing-time query with `kafka.group.id`: Spark calls the stream's `commit(end)`
    only when it plans the next batch, so the group used to trail the checkpoint by one
    trigger after `stop()`; the driver's listener commits each progress's `endOffset`."""
    topic, group = f"gv-stop-{uuid.uuid4().hex[:6]}", f"gv-stop-{uuid.uuid4().hex[:6]}"
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(topic, 2)])
    produce(cluster, topic, 40)
    query = (
        spark.readStream.format("sparklog")
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 10)
        .option("kafka.group.id", group)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="2 seconds")  # the next plan is 2 s away
        .start()
    )
    try:
        while query.lastProgress is None or query.lastProgress["batchId"] < 2:
            assert query.exception() is None
            query.awaitTermination(0.2)
    finally:
        query.stop()
    spark._jsparkSession.sparkContext().listenerBus().waitUntilEmpty()  # progress delivered
    last = query.lastProgress
    end = json.loads(last["sources"][0]["endOffset"])
    committed = {
        (r.topic, r.partition): r.committed_offset
        for r in sparklog.group_offsets_df(spark, group=group).collect()
    }
    assert committed == {(topic, int(p)): o for p, o in end[topic].items()}
    assert sum(committed.values()) == 10 * (last["batchId"] + 1) < 40  # not the whole topic
