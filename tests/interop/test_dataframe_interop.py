"""DataFrames and real Kafka clients on the same topics, both ways.

What `df.write.format("sparklog")` wrote is read by confluent-kafka (librdkafka) and by Debian's
`kcat`: same keys, values, headers, timestamps, partitions (Kafka's murmur2 partitioner) and
dense offsets. What confluent-kafka produced is read by `spark.read.format("sparklog")` with
every column of Spark's Kafka source schema matching, headers included. An embedded cluster on
loopback, reached with the `kafka.bootstrap.servers` option, as with Spark's Kafka connector.
"""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import time
import uuid

import pytest
from pyspark.sql import types as T

import sparklog
from sparklog.client import AdminClient, NewTopic
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.records.murmur2 import partition_for_key
from tests.spark.conftest import build_session

pytestmark = [pytest.mark.interop, pytest.mark.spark]

confluent_kafka = pytest.importorskip("confluent_kafka")

LIBRDKAFKA = {"broker.address.family": "v4"}
KCAT = shutil.which("kcat")
TIMEOUT_S = 60
PARTITIONS = 3
ROWS = 600
BASE = dt.datetime(2024, 5, 1, 12, 0, 0)
BASE_MS = int(BASE.timestamp() * 1000)
CREATE_TIME = 0  # Spark's timestampType for CreateTime
HEADERS = T.ArrayType(
    T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])
)
SINK_SCHEMA = T.StructType(
    [
        T.StructField("key", T.StringType()),
        T.StructField("value", T.BinaryType()),
        T.StructField("headers", HEADERS),
        T.StructField("timestamp", T.TimestampType()),
    ]
)


@pytest.fixture(scope="module")
def spark():
    """A local[4] session for this module (tests/spark/conftest.py's, outside tests/spark)."""
    session = build_session("local[4]", __name__)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(brokers=1, data_dir=tmp_path_factory.mktemp("df-interop")) as running:
        yield running


@pytest.fixture(scope="module")
def bootstrap(spark, cluster):
    sparklog.register(spark)
    return cluster.bootstrap_servers


def new_topic(bootstrap: str) -> str:
    name = f"df-interop-{uuid.uuid4().hex[:8]}"
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(name, PARTITIONS, 1)])
    return name


def local_time(ms: int) -> dt.datetime:
    """A CreateTime in ms as Spark returns a timestamp column: a naive local datetime."""
    return dt.datetime.fromtimestamp(ms // 1000) + dt.timedelta(milliseconds=ms % 1000)


def sink_rows() -> list[tuple]:
    """(key, value, headers, timestamp) rows: every third without headers, some header values
    null or empty; all text kcat prints unambiguously (no tabs, commas, '=' or newlines)."""
    rows = []
    for i in range(ROWS):
        headers = None
        if i % 3:
            headers = [("seq", str(i).encode()), ("null", None), ("empty", b"")][: 1 + i % 3]
        rows.append(
            (f"key-{i % 17}", f"value-{i}".encode(), headers, BASE + dt.timedelta(milliseconds=i))
        )
    return rows


@pytest.fixture(scope="module")
def written(spark, bootstrap):
    """A topic written by `df.write.format("sparklog")` from one task (one order per key)."""
    topic = new_topic(bootstrap)
    rows = sink_rows()
    df = spark.createDataFrame(rows, SINK_SCHEMA).coalesce(1)
    (
        df.write.format("sparklog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.compression.type", "lz4")
        .option("topic", topic)
        .save()
    )
    return topic, rows


def check_as_written(rows: list[tuple], got: list[tuple]) -> None:
    """`got` = (partition, offset, key, value, headers, timestamp ms) as a client read them."""
    assert len(got) == len(rows)
    by_value = {g[3]: g for g in got}
    assert len(by_value) == len(rows)
    for key, value, headers, timestamp in rows:
        partition, _, got_key, _, got_headers, got_ms = by_value[value]
        assert got_key == key.encode()
        assert partition == partition_for_key(got_key, PARTITIONS)
        assert got_headers == headers
        assert got_ms == BASE_MS + (timestamp - BASE) // dt.timedelta(milliseconds=1)
    for p in range(PARTITIONS):
        mine = sorted((g[1], int(g[3][len("value-") :])) for g in got if g[0] == p)
        assert [o for o, _ in mine] == list(range(len(mine))), f"offsets of partition {p}"
        for k in range(17):  # per key: offsets follow the order the task wrote the rows in
            ids = [i for _, i in mine if i % 17 == k]
            assert ids == sorted(ids)


def test_confluent_kafka_reads_what_the_sink_wrote(cluster, written):
    topic, rows = written
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"df-interop-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            **LIBRDKAFKA,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(got) < len(rows) and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=len(rows), timeout=0.5):
                assert m.error() is None, m.error()
                timestamp_type, timestamp_ms = m.timestamp()
                assert timestamp_type == confluent_kafka.TIMESTAMP_CREATE_TIME
                got.append(
                    (m.partition(), m.offset(), m.key(), m.value(), m.headers(), timestamp_ms)
                )
    finally:
        consumer.close()
    check_as_written(rows, got)


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (make kcat)")
def test_kcat_reads_what_the_sink_wrote(cluster, written):
    topic, rows = written
    result = subprocess.run(
        [
            *(KCAT, "-b", cluster.bootstrap_servers, "-X", "broker.address.family=v4"),
            *("-C", "-t", topic, "-o", "beginning", "-e", "-q"),
            *("-f", "%k\\t%s\\t%p\\t%o\\t%T\\t%K\\t%S\\t%h\\n"),
        ],
        capture_output=True,
        timeout=TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    got = []
    for line in result.stdout.splitlines():
        key, value, partition, offset, timestamp, key_len, value_len, headers = line.split(b"\t")
        assert (int(key_len), int(value_len)) == (len(key), len(value))  # none null
        parsed = None
        if headers:  # kcat prints name=value pairs joined by ',', a null value as NULL
            pairs = (h.partition(b"=") for h in headers.split(b","))
            parsed = [(k.decode(), None if v == b"NULL" else v) for k, _, v in pairs]
        got.append((int(partition), int(offset), key, value, parsed, int(timestamp)))
    check_as_written(rows, got)


def test_spark_reads_what_confluent_kafka_produced(spark, bootstrap):
    topic = new_topic(bootstrap)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "zstd", **LIBRDKAFKA}
    )
    sent = {}  # value -> (partition, offset, key, headers, timestamp ms)

    def delivered(err, msg):
        assert err is None, err
        sent[msg.value()] = (msg.partition(), msg.offset())

    produced = []
    for i in range(ROWS):
        key = None if i % 50 == 0 else (b"" if i % 50 == 1 else f"key-{i % 11}".encode())
        headers = [("n", str(i).encode()), ("null", None)][: i % 3] or None
        record = (key, f"value-{i}".encode(), headers, BASE_MS + 7 * i)
        produced.append(record)
        producer.produce(
            topic,
            key=key,
            value=record[1],
            headers=headers,
            timestamp=record[3],
            partition=i % PARTITIONS,
            on_delivery=delivered,
        )
    assert producer.flush(TIMEOUT_S) == 0
    producer.produce(topic, key=b"tombstone", value=None, partition=0, timestamp=BASE_MS)
    assert producer.flush(TIMEOUT_S) == 0

    df = (
        spark.read.format("sparklog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
    )
    got = df.collect()
    assert len(got) == ROWS + 1
    by_value = {r.value: r for r in got}
    tombstone = by_value.pop(None)
    assert (tombstone.key, tombstone.partition, tombstone.offset) == (
        b"tombstone",
        0,
        len([i for i in range(ROWS) if i % PARTITIONS == 0]),
    )
    for key, value, headers, timestamp_ms in produced:
        r = by_value[value]
        partition, offset = sent[value]
        assert (r.key, r.value, r.topic, r.partition, r.offset) == (
            key,
            value,
            topic,
            partition,
            offset,
        )
        assert (r.timestamp, r.timestampType) == (local_time(timestamp_ms), CREATE_TIME)
        assert (None if r.headers is None else [(h.key, h.value) for h in r.headers]) == headers
