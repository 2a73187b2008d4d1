"""A DataFrame round trip across executor JVMs: on local-cluster[2,1,1024] the broker is a task
on one executor and Spark's write and read tasks run on the other, so every record crosses
processes over the Kafka protocol both ways."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

import sparklog
from sparklog.client import LATEST_TIMESTAMP, AdminClient, NewTopic
from sparklog.records.murmur2 import partition_for_key

SPARK_MASTER = "local-cluster[2,1,1024]"
pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS = 4_000  # 25 records per key: enough to see every key kept in order
TASKS = 4
PARTITIONS = 5
TOPIC = "round-trip"
BASE = dt.datetime(2024, 5, 1, 12, 0, 0)
HEADERS = T.ArrayType(
    T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])
)


@pytest.fixture(scope="module")
def cluster(spark, tmp_path_factory):
    running = sparklog.start(spark, brokers=1, data_dir=tmp_path_factory.mktemp("cluster"))
    yield running
    running.stop()


def executors_of(df) -> set[str]:
    """The executor ids that ran `df`'s tasks."""

    def where(_rows):
        from sparklog.spark.broker_task import executor_id

        yield executor_id()

    return set(df.rdd.mapPartitions(where).collect())


def rows_to_write(spark):
    """ROWS rows in TASKS Spark partitions; each key belongs to one task (so one writer orders
    it), headers vary (none, a null value, several), timestamps are BASE + id ms."""
    headers = F.when(F.col("id") % 4 == 0, F.lit(None)).otherwise(
        F.array(
            F.struct(F.lit("seq").alias("key"), F.col("id").cast("string").cast("binary")),
            F.struct(F.lit("empty").alias("key"), F.lit(None).cast("binary")),
            F.struct(
                F.lit("task").alias("key"),
                F.format_string("t%d", F.spark_partition_id()).cast("binary"),
            ),
        )
    )
    return spark.range(0, ROWS, numPartitions=TASKS).select(
        F.format_string("t%d-k%02d", F.spark_partition_id(), F.col("id") % 40).alias("key"),
        F.format_string("value-%06d", F.col("id")).cast("binary").alias("value"),
        headers.cast(HEADERS).alias("headers"),
        F.timestamp_millis(F.lit(int(BASE.timestamp() * 1000)) + F.col("id")).alias("timestamp"),
    )


def expected_records() -> dict[bytes, tuple]:
    """What `rows_to_write` holds, by value: (key, headers, timestamp); spark.range puts ids
    [j * ROWS / TASKS, (j + 1) * ROWS / TASKS) in partition j."""
    out = {}
    for i in range(ROWS):
        task = i // (ROWS // TASKS)
        headers = (
            None
            if i % 4 == 0
            else [("seq", str(i).encode()), ("empty", None), ("task", f"t{task}".encode())]
        )
        out[f"value-{i:06d}".encode()] = (
            f"t{task}-k{i % 40:02d}".encode(),
            headers,
            BASE + dt.timedelta(milliseconds=i),
        )
    return out


def test_dataframe_round_trip_between_executors(spark, cluster):
    [broker] = cluster.describe()["brokers"]
    assert broker["executor_id"] in {"0", "1"}, broker  # a task on an executor, not the driver
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])

        rows_to_write(spark).write.format("sparklog").option("topic", TOPIC).save()

        ends = admin.list_offsets({(TOPIC, p): LATEST_TIMESTAMP for p in range(PARTITIONS)})

    back = spark.read.format("sparklog").option("subscribe", TOPIC)
    back = back.option("includeHeaders", "true").load()
    other = {"0", "1"} - {broker["executor_id"]}
    assert executors_of(back) == other  # reads ran beside the broker's executor, not on it
    got = back.collect()
    assert len(got) == ROWS
    expected = expected_records()

    by_partition = defaultdict(list)
    for r in got:
        key, headers, timestamp = expected.pop(r.value)
        assert (r.key, r.topic, r.timestamp, r.timestampType) == (key, TOPIC, timestamp, 0)
        assert (None if r.headers is None else [(h.key, h.value) for h in r.headers]) == headers
        assert r.partition == partition_for_key(r.key, PARTITIONS)
        by_partition[r.partition].append(r)
    assert not expected  # every value read exactly once

    # dense offsets per partition, ending at the partition's high watermark
    for p in range(PARTITIONS):
        offsets = sorted(r.offset for r in by_partition[p])
        assert offsets == list(range(ends[(TOPIC, p)].offset)), f"partition {p}"

    # per-key order: one task wrote each key, so offsets follow the ids it wrote them in
    per_key = defaultdict(list)
    for r in got:
        per_key[r.key].append((r.offset, int(r.value[len("value-") :])))
    assert len(per_key) == TASKS * 40
    for key, entries in per_key.items():
        ids = [i for _, i in sorted(entries)]
        assert ids == sorted(ids), key
