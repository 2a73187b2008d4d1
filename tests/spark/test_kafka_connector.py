"""Spark's own Kafka connector (`format("kafka")`, spark-sql-kafka-0-10 via spark.jars) against a
sparklog cluster started by `sparklog.start(spark)`: a user keeps their `format("kafka")` code
and moves only the brokers. Reads are also compared row for row with `format("sparklog")`."""

from __future__ import annotations

import json
import time
import uuid

import pyarrow as pa
import pytest

import sparklog
from sparklog.client import AdminClient, KafkaProducer, NewTopic
from sparklog.jars import spark_jars_or_none

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(
        spark_jars_or_none() is None, reason="Spark's Kafka connector is not fetched: make jars"
    ),
]

BASE_TS = 1_700_000_000_000
COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]


@pytest.fixture(scope="module")
def cluster(spark, tmp_path_factory):
    running = sparklog.start(spark, brokers=1, data_dir=tmp_path_factory.mktemp("connector"))
    yield running
    close_cached_kafka_producers(spark)
    running.stop()


def close_cached_kafka_producers(spark) -> None:
    """Close the connector's JVM-wide producer cache (idle timeout 10 min), so its producers do
    not outlive this cluster and keep logging reconnect warnings for the rest of the run."""
    jvm = spark._jvm
    loader = jvm.Thread.currentThread().getContextClassLoader()
    name = "org.apache.spark.sql.kafka010.producer.InternalKafkaProducerPool$"
    jvm.java.lang.Class.forName(name, True, loader).getField("MODULE$").get(None).reset()


@pytest.fixture(scope="module")
def admin(cluster):
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as client:
        yield client


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(cluster, topic: str, n: int, start: int = 0) -> None:
    """n records: key k{i % 5}, value v{i}, timestamp BASE_TS + i, a header on odd records."""
    ids = range(start, start + n)
    batch = pa.record_batch(
        {
            "key": pa.array([f"k{i % 5}".encode() for i in ids]),
            "value": pa.array([f"v{i}".encode() for i in ids]),
            "timestamp": pa.array([BASE_TS + i for i in ids], pa.int64()),
            "headers": pa.array(
                [[{"key": "i", "value": str(i).encode()}] if i % 2 else None for i in ids],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
        }
    )
    with KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers}) as producer:
        producer.send_arrow(topic, batch).result()


def kafka_reader(spark, cluster, **options):
    reader = spark.read.format("kafka").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def rows(df) -> list[tuple]:
    out = []
    for r in df.collect():
        headers = tuple((h["key"], bytes(h["value"])) for h in r["headers"] or ())
        out.append(
            (r["topic"], r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"]),
             r["timestamp"], r["timestampType"], headers)
        )  # fmt: skip
    return sorted(out)


@pytest.fixture(scope="module")
def events(cluster, admin):
    topic = unique("connector-events")
    admin.create_topics([NewTopic(topic, 3)])
    produce(cluster, topic, 300)
    return topic


def test_batch_read_matches_format_sparklog_row_for_row(spark, cluster, events):
    theirs = kafka_reader(spark, cluster, subscribe=events, includeHeaders="true")
    assert theirs.columns == COLUMNS
    ours = (
        spark.read.format("sparklog")
        .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
        .option("subscribe", events)
        .option("includeHeaders", "true")
        .load()
    )
    got = rows(theirs)
    assert len(got) == 300
    assert got == rows(ours)
    values = sorted(int(r[4][1:]) for r in got)
    assert values == list(range(300))


def test_batch_write_then_read_back(spark, cluster, admin):
    topic = unique("connector-write")
    admin.create_topics([NewTopic(topic, 2)])
    df = spark.createDataFrame(
        [(f"k{i}", f"w{i}", i % 2, [("h", bytearray(b"x"))]) for i in range(100)],
        "key string, value string, partition int, headers array<struct<key:string,value:binary>>",
    )
    (
        df.write.format("kafka")
        .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
        .option("topic", topic)
        .save()
    )
    back = kafka_reader(spark, cluster, subscribe=topic, includeHeaders="true").collect()
    assert sorted(bytes(r["value"]).decode() for r in back) == sorted(f"w{i}" for i in range(100))
    assert {r["partition"] for r in back} == {0, 1}
    assert all(int(bytes(r["key"])[1:]) % 2 == r["partition"] for r in back)
    assert all([(h["key"], bytes(h["value"])) for h in r["headers"]] == [("h", b"x")] for r in back)


def test_starting_offsets_by_timestamp_and_min_partitions(spark, cluster, events):
    by_time = kafka_reader(
        spark,
        cluster,
        subscribe=events,
        startingOffsetsByTimestamp=json.dumps({events: {str(p): BASE_TS + 150 for p in range(3)}}),
    )
    assert sorted(int(bytes(r["value"])[1:]) for r in by_time.collect()) == list(range(150, 300))
    split = kafka_reader(spark, cluster, subscribe=events, minPartitions="9")
    assert split.rdd.getNumPartitions() >= 9
    assert split.count() == 300


def test_fail_on_data_loss_after_delete_records(spark, cluster, admin):
    topic = unique("connector-trimmed")
    admin.create_topics([NewTopic(topic, 1)])
    produce(cluster, topic, 100)
    admin.delete_records({(topic, 0): 40})
    stale = json.dumps({topic: {"0": 10}})
    with pytest.raises(Exception, match="(?i)data.{0,20}lost|failOnDataLoss|out of range"):
        kafka_reader(spark, cluster, subscribe=topic, startingOffsets=stale).count()
    kept = kafka_reader(
        spark, cluster, subscribe=topic, startingOffsets=stale, failOnDataLoss="false"
    )
    assert sorted(r["offset"] for r in kept.collect()) == list(range(40, 100))


def test_streaming_query_restarts_from_its_checkpoint(spark, cluster, admin, tmp_path):
    source, sink = unique("connector-stream-in"), unique("connector-stream-out")
    admin.create_topics([NewTopic(source, 2), NewTopic(sink, 1)])
    produce(cluster, source, 100)
    checkpoint = str(tmp_path / "checkpoint")

    def run_once() -> None:
        query = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("key", "value")
            .writeStream.format("kafka")
            .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
            .option("topic", sink)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120)
        assert query.exception() is None

    run_once()
    produce(cluster, source, 50, start=100)
    run_once()  # restarted from the checkpoint: only the 50 new records
    deadline = time.monotonic() + 30
    while True:
        copied = kafka_reader(spark, cluster, subscribe=sink).collect()
        if len(copied) >= 150 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert sorted(int(bytes(r["value"])[1:]) for r in copied) == list(range(150))
