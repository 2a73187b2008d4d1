"""df.write / df.writeStream .format("sparklog"): Spark's Kafka sink, on a cluster that
`sparklog.start` runs inside this Spark application (so no kafka.bootstrap.servers option)."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

import sparklog
from sparklog.client import AdminClient, NewTopic
from sparklog.records.murmur2 import partition_for_key

pytestmark = pytest.mark.spark

TIMESTAMP_CREATE_TIME = 1  # confluent_kafka.TIMESTAMP_CREATE_TIME
HEADERS = T.ArrayType(
    T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])
)


@pytest.fixture(scope="module")
def cluster(spark, tmp_path_factory):
    running = sparklog.start(
        spark,
        brokers=1,
        data_dir=tmp_path_factory.mktemp("sink"),
        config={"auto.create.topics.enable": "false", "num.partitions": "3"},
    )
    yield running
    running.stop()


@pytest.fixture(scope="module")
def admin(cluster):
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as client:
        yield client


@pytest.fixture(scope="module")
def topics(admin):
    names = ["out", "routed-a", "routed-b", "placed", "sticky", "tuned", "copy-in", "copy-out"]
    admin.create_topics([NewTopic(name, 3) for name in names])
    return names


def read(spark, topic, **options):
    r = spark.read.format("sparklog").option("subscribe", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def end_offsets(admin, topic):
    return {
        p: r.offset for (_, p), r in admin.list_offsets({(topic, p): -1 for p in range(3)}).items()
    }


def test_round_trip_keeps_keys_values_headers_timestamps_and_key_order(spark, topics):
    base = dt.datetime(2024, 5, 1, 12, 0, 0)
    rows = [
        (
            f"k{i % 5}",
            f"v{i}".encode(),
            [("seq", str(i).encode()), ("empty", None)] if i % 3 else None,
            base + dt.timedelta(milliseconds=i),
        )
        for i in range(500)
    ]
    schema = T.StructType(
        [
            T.StructField("key", T.StringType()),
            T.StructField("value", T.BinaryType()),
            T.StructField("headers", HEADERS),
            T.StructField("timestamp", T.TimestampType()),
        ]
    )
    df = spark.createDataFrame(rows, schema).coalesce(1)  # one task: one order per key
    df.write.format("sparklog").option("topic", "out").save()  # Kafka's default mode appends
    got = read(spark, "out", includeHeaders="true").collect()
    assert len(got) == 500
    by_value = {r.value: r for r in got}
    for key, value, headers, ts in rows:
        r = by_value[value]
        assert r.key == key.encode()
        assert r.timestamp == ts
        assert r.partition == partition_for_key(key.encode(), 3)  # Kafka's murmur2 partitioner
        assert (None if r.headers is None else [(h.key, h.value) for h in r.headers]) == headers
    for k in range(5):
        mine = sorted((r.offset, int(r.value[1:])) for r in got if r.key == f"k{k}".encode())
        assert [v for _, v in mine] == sorted(v for _, v in mine)


def test_an_independent_client_reads_what_the_sink_wrote(cluster, topics):
    """librdkafka (confluent-kafka) as the oracle: the sink wrote real Kafka records."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "oracle",
            "enable.auto.commit": False,
            "broker.address.family": "v4",
        }
    )
    try:
        consumer.assign([TopicPartition("out", p, 0) for p in range(3)])
        got = {}
        deadline = time.monotonic() + 60
        while len(got) < 500 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got[msg.value()] = msg
    finally:
        consumer.close()
    assert len(got) == 500
    base_ms = int(dt.datetime(2024, 5, 1, 12, 0, 0).timestamp() * 1000)
    for i in (0, 1, 2, 499):
        msg = got[f"v{i}".encode()]
        assert msg.key() == f"k{i % 5}".encode()
        assert msg.timestamp() == (TIMESTAMP_CREATE_TIME, base_ms + i)
        assert msg.partition() == partition_for_key(msg.key(), 3)
        assert msg.headers() == ([("seq", str(i).encode()), ("empty", None)] if i % 3 else None)


@pytest.mark.slow
def test_topic_column_routes_and_topic_option_overrides_it(spark, admin, topics):
    df = spark.range(40).select(
        F.when(F.col("id") % 2 == 0, "routed-a").otherwise("routed-b").alias("topic"),
        F.col("id").cast("string").alias("value"),
    )
    df.write.format("sparklog").mode("append").save()
    assert read(spark, "routed-a").count() == 20
    assert read(spark, "routed-b").count() == 20
    df.write.format("sparklog").option("topic", "routed-a").mode("append").save()
    assert read(spark, "routed-a").count() == 60
    assert read(spark, "routed-b").count() == 20


def test_partition_column_places_records_and_null_falls_back_to_the_key(spark, topics):
    df = spark.range(30).select(
        F.when(F.col("id") < 20, (F.col("id") % 3).cast("int")).alias("partition"),
        F.concat(F.lit("key"), F.col("id")).alias("key"),
        F.col("id").cast("string").alias("value"),
        F.lit("not a time").alias("timestamp"),  # not a timestamp type: ignored, like Kafka
        F.col("id").alias("unrelated"),
    )
    df.write.format("sparklog").option("topic", "placed").mode("append").save()
    got = read(spark, "placed").collect()
    assert len(got) == 30
    for r in got:
        i = int(r.value)
        expected = i % 3 if i < 20 else partition_for_key(f"key{i}".encode(), 3)
        assert r.partition == expected


def test_null_keys_stick_to_one_partition_per_batch(spark, topics):
    df = spark.range(100).select(F.col("id").cast("string").alias("value")).coalesce(1)
    df.write.format("sparklog").option("topic", "sticky").mode("append").save()
    got = read(spark, "sticky").collect()
    assert len(got) == 100 and all(r.key is None for r in got)
    assert len({r.partition for r in got}) == 1


def test_producer_settings_pass_through(spark, topics):
    df = spark.range(300).select(F.col("id").cast("string").alias("value"))
    (
        df.write.format("sparklog")
        .option("topic", "tuned")
        .option("kafka.acks", "1")
        .option("kafka.compression.type", "gzip")
        .option("kafka.linger.ms", "20")
        .option("kafka.batch.size", "1024")
        .option("kafka.enable.idempotence", "false")
        .mode("append")
        .save()
    )
    assert sorted(int(r.value) for r in read(spark, "tuned").collect()) == list(range(300))


def _df(spark, ddl, rows):
    return spark.createDataFrame(rows, ddl)


@pytest.mark.parametrize(
    ("ddl", "row", "options", "message"),
    [
        ("key string", ("k",), {"topic": "out"}, "Required attribute 'value' not found"),
        ("key int, value string", (1, "v"), {"topic": "out"}, "key attribute type must be"),
        ("value array<int>", ([1],), {"topic": "out"}, "value attribute type must be"),
        ("value string", ("v",), {}, "topic option required when no 'topic' attribute"),
        ("topic int, value string", (1, "v"), {}, "topic attribute type must be a StringType"),
        (
            "value string, partition string",
            ("v", "0"),
            {"topic": "out"},
            "partition attribute type",
        ),
        (
            "value string, headers array<string>",
            ("v", ["h"]),
            {"topic": "out"},
            "headers attribute",
        ),
        ("value string", ("v",), {"topic": "no-such-topic"}, "auto.create.topics.enable=false"),
        ("value string", ("v",), {"topic": "bad/name"}, "not a valid topic name"),
        ("value string", ("v",), {"topic": "out", "kafka.acks": "2"}, "acks"),
        ("value string", ("v",), {"topic": "out", "kafka.value.serializer": "x"}, "not supported"),
    ],
)
def test_bad_writes_fail_before_any_record_is_sent(
    spark, admin, topics, ddl, row, options, message
):
    before = end_offsets(admin, "out")
    w = _df(spark, ddl, [row]).write.format("sparklog").mode("append")
    for k, v in options.items():
        w = w.option(k, v)
    with pytest.raises(Exception, match=message):
        w.save()
    assert end_offsets(admin, "out") == before


def test_unknown_topic_in_the_topic_column_sends_nothing_of_its_batch(spark, admin, topics):
    before = end_offsets(admin, "out")
    df = _df(spark, "topic string, value string", [("out", "a"), ("missing-topic", "b")]).coalesce(
        1
    )
    with pytest.raises(Exception, match="missing-topic"):
        df.write.format("sparklog").mode("append").save()
    assert end_offsets(admin, "out") == before


def test_overwrite_is_refused_like_kafka(spark, topics):
    df = _df(spark, "value string", [("v",)])
    with pytest.raises(Exception, match="only appends records"):
        df.write.format("sparklog").option("topic", "out").mode("overwrite").save()


def test_stream_to_stream_mirrors_every_record(spark, topics, tmp_path):
    spark.range(250).select(
        F.col("id").cast("string").alias("key"), F.col("id").cast("string").alias("value")
    ).write.format("sparklog").option("topic", "copy-in").save()
    query = (
        spark.readStream.format("sparklog")
        .option("subscribe", "copy-in")
        .option("startingOffsets", "earliest")
        .load()
        .withColumn("topic", F.lit("copy-out"))  # all source columns go on: a mirror
        .writeStream.format("sparklog")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    source = {r.value: r for r in read(spark, "copy-in").collect()}
    copied = read(spark, "copy-out").collect()
    assert sorted(int(r.value) for r in copied) == list(range(250))
    for r in copied:  # the partition and timestamp columns were honoured
        assert (r.key, r.partition, r.timestamp) == (
            source[r.value].key,
            source[r.value].partition,
            source[r.value].timestamp,
        )
