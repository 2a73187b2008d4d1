"""The sink's transactions: a streaming query into sparklog is exactly-once by default (each
micro-batch's task transactions end in one coordinator decision), a replayed micro-batch is
recognised and not written twice, and `transactional=true` makes a batch write all or
nothing, which Spark's Kafka connector does not offer."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from pyspark.sql import functions as F

import sparklog
from sparklog.client import AdminClient, NewTopic

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def cluster(spark, tmp_path_factory):
    running = sparklog.start(
        spark,
        brokers=1,
        data_dir=tmp_path_factory.mktemp("eos"),
        config={"num.partitions": "3", "group.initial.rebalance.delay.ms": "0"},
    )
    yield running
    running.stop()


def new_topics(cluster, *prefixes: str) -> list[str]:
    names = [f"{p}-{uuid.uuid4().hex[:6]}" for p in prefixes]
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(n, 3) for n in names])
    return names


def values(spark, topic: str, isolation: str = "read_committed") -> list[int]:
    df = (
        spark.read.format("sparklog")
        .option("subscribe", topic)
        .option("kafka.isolation.level", isolation)
        .load()
    )
    return sorted(int(r.value) for r in df.select(F.col("value").cast("string")).collect())


def decided(cluster) -> dict[str, str]:
    return dict(cluster.coordinator.txn.decided_batches)


def stream(spark, source: str, sink: str, checkpoint: Path, **options):
    writer = (
        spark.readStream.format("sparklog")
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")
        .load()
        .select("value")
        .writeStream.format("sparklog")
        .option("topic", sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    for k, v in options.items():
        writer = writer.option(k, v)
    query = writer.start()
    assert query.awaitTermination(180)
    assert query.exception() is None
    return query


def fill(spark, topic: str, count: int) -> None:
    spark.range(count).select(F.col("id").cast("string").alias("value")).write.format(
        "sparklog"
    ).option("topic", topic).save()


@pytest.mark.slow
def test_a_stream_is_exactly_once_and_a_replayed_micro_batch_is_not_written_twice(
    spark, cluster, tmp_path
):
    source, sink = new_topics(cluster, "eos-in", "eos-out")
    fill(spark, source, 450)
    checkpoint = tmp_path / "checkpoint"
    stream(spark, source, sink, checkpoint)
    assert values(spark, sink) == list(range(450))
    keys = [k for k in decided(cluster) if k.endswith(tuple(f":{b}" for b in range(5)))]
    assert len(keys) == 5, f"one decision per micro-batch of 100 rows: {keys}"

    # The driver died after the last batch's decision but before Spark's commit log entry:
    # Spark replays that batch on restart, and its rows must not appear twice.
    commits = sorted(
        (p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    commits[-1].unlink()
    (checkpoint / "commits" / f".{commits[-1].name}.crc").unlink(missing_ok=True)
    stream(spark, source, sink, checkpoint)
    assert values(spark, sink) == list(range(450)), "the replay committed nothing"
    assert len(values(spark, sink, "read_uncommitted")) > 450, "the replay wrote, then aborted"

    fill(spark, source, 100)  # new input after the restart still flows, once
    stream(spark, source, sink, checkpoint)
    assert values(spark, sink) == sorted(list(range(450)) + list(range(100)))


def test_exactly_once_can_be_turned_off(spark, cluster, tmp_path):
    source, sink = new_topics(cluster, "alo-in", "alo-out")
    fill(spark, source, 50)
    before = set(decided(cluster))
    stream(spark, source, sink, tmp_path / "ck", exactlyOnce="false")
    assert values(spark, sink) == list(range(50))
    assert set(decided(cluster)) == before, "no transaction was used"


def test_a_transactional_batch_write_is_all_or_nothing(spark, cluster):
    (sink,) = new_topics(cluster, "atomic")

    @F.udf("string")
    def fail_late(value: str) -> str:
        if value == "2999":
            raise ValueError("boom at the last row")
        return value

    rows = spark.range(0, 3000, numPartitions=4).select(F.col("id").cast("string").alias("v"))
    # Spark does not wait for the tasks it cancels: the driver's abort fences the ids of tasks
    # without a commit message and marks the write aborted for tasks that start after it, so
    # no late task holds back read_committed readers until transaction.timeout.ms.
    with pytest.raises(Exception, match="boom"):
        rows.select(fail_late("v").alias("value")).write.format("sparklog").option(
            "topic", sink
        ).option("transactional", "true").save()
    assert values(spark, sink) == [], "the tasks that succeeded are invisible too"
    rows.select(F.col("v").alias("value")).write.format("sparklog").option("topic", sink).option(
        "transactional", "true"
    ).save()
    # The decision is durable when save() returns; markers follow within moments (as after
    # Kafka's commitTransaction), and read_committed readers see each partition once its marker
    # is written: all four, never a part of one.
    deadline = time.monotonic() + 30
    while (got := values(spark, sink)) != list(range(3000)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert got == list(range(3000))
