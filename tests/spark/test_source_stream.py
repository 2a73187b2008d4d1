"""spark.readStream.format("sparklog"): Spark's Kafka micro-batch source on an embedded cluster.

The read-limit logic is driven directly through the stream reader (as Spark's driver-side
worker calls it) against the real cluster; queries check what only Spark can: checkpoints,
restarts, Trigger.AvailableNow, data loss surfacing as query failures.
"""

from __future__ import annotations

import json
import shutil
import time

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

import sparklog
from sparklog.client import AdminClient, KafkaProducer, NewTopic
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.protocol.api_versions import ApiKey
from sparklog.spark.options import parse_source_options
from sparklog.spark.progress import SourceLagListener, source_metrics
from sparklog.spark.stream_reader import SparkLogStreamReader
from sparklog.storage import segment
from tests.corrupt_log import damage_batch_holding
from tests.support.throttle_stage import FixedThrottle, throttle_installer

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(brokers=1, data_dir=tmp_path_factory.mktemp("stream")) as running:
        yield running


@pytest.fixture(scope="module")
def admin(cluster):
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as client:
        yield client


@pytest.fixture(scope="module")
def producer(cluster):
    with KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers}) as p:
        yield p


def produce(producer, topic, start, n, partition=None):
    """Values v{start}..v{start+n-1}, keys k{i % 5}."""
    ids = range(start, start + n)
    batch = pa.record_batch(
        {
            "key": pa.array([f"k{i % 5}".encode() for i in ids]),
            "value": pa.array([f"v{i}".encode() for i in ids]),
        }
    )
    producer.send_arrow(topic, batch, partition=partition).result()


def stream_reader(cluster, **options):
    opts = {k.lower(): v for k, v in options.items()}
    opts["kafka.bootstrap.servers"] = cluster.bootstrap_servers
    return SparkLogStreamReader(parse_source_options(opts, streaming=True))


def total(start, end):
    return sum(end[t][p] - start.get(t, {}).get(p, 0) for t in end for p in end[t])


@pytest.fixture(scope="module")
def query(spark, cluster, tmp_path_factory):
    """Run a query from sparklog into a parquet sink: query(options, name, trigger) ->
    (StreamingQuery, output path); the checkpoint of a name survives between calls."""
    sparklog.register(spark)
    root = tmp_path_factory.mktemp("queries")

    def run(options, name, *, available_now=True, wait=True):
        r = spark.readStream.format("sparklog").option(
            "kafka.bootstrap.servers", cluster.bootstrap_servers
        )
        for k, v in options.items():
            r = r.option(k, v)
        out = root / name
        w = (
            r.load()
            .writeStream.format("parquet")
            .option("path", str(out / "data"))
            .option("checkpointLocation", str(out / "checkpoint"))
        )
        w = w.trigger(availableNow=True) if available_now else w.trigger(processingTime="0 seconds")
        q = w.start()
        if wait:
            assert q.awaitTermination(120), "the query did not finish"
            if q.exception() is not None:
                raise q.exception()
        return q, str(out / "data")

    return run


# --------------------------------------------------------------- the reader, driven directly


def test_offsets_are_stable_json_and_start_where_asked(cluster, admin, producer):
    admin.create_topics([NewTopic("direct", 3)])
    produce(producer, "direct", 0, 300)
    latest = stream_reader(cluster, subscribe="direct").initialOffset()
    earliest = stream_reader(
        cluster, subscribe="direct", startingOffsets="earliest"
    ).initialOffset()
    assert list(latest) == ["direct"] and list(latest["direct"]) == ["0", "1", "2"]
    assert earliest == {"direct": {"0": 0, "1": 0, "2": 0}}
    assert total(earliest, latest) == 300
    json.dumps(latest)  # Spark stores it as JSON


def test_read_limits(cluster, admin, producer):
    admin.create_topics([NewTopic("limits", 3)])
    produce(producer, "limits", 0, 600)
    reader = stream_reader(cluster, subscribe="limits", maxOffsetsPerTrigger="100")
    assert reader.getDefaultReadLimit() == ReadMaxRows(100)
    start = reader.initialOffset()  # latest: nothing to read
    assert reader.latestOffset(start, ReadMaxRows(100)) == start
    zero = {"limits": {"0": 0, "1": 0, "2": 0}}
    end = reader.latestOffset(zero, reader.getDefaultReadLimit())
    assert total(zero, end) == 100
    assert total(zero, reader.latestOffset(zero, ReadMaxRows(250))) == 250
    assert total(zero, reader.latestOffset(zero, ReadAllAvailable())) == 600  # Trigger.Once
    assert reader.reportLatestOffset() == start
    parts = reader.partitions(zero, end)
    assert sum(p.range.size for p in parts) == 100
    reader.stop()


def test_min_offsets_per_trigger_holds_batches_until_enough_or_delay(cluster, admin, producer):
    admin.create_topics([NewTopic("trickle", 1)])
    produce(producer, "trickle", 0, 10)
    zero = {"trickle": {"0": 0}}
    reader = stream_reader(
        cluster, subscribe="trickle", minOffsetsPerTrigger="50", maxTriggerDelay="1h"
    )
    assert reader.getDefaultReadLimit() == ReadMinRows(50)
    first = reader.latestOffset(zero, ReadMinRows(50))  # Spark's first trigger never waits
    assert first == {"trickle": {"0": 10}}
    produce(producer, "trickle", 10, 20)
    assert reader.latestOffset(first, ReadMinRows(50)) == first  # 20 < 50: held back
    produce(producer, "trickle", 30, 30)
    assert reader.latestOffset(first, ReadMinRows(50)) == {"trickle": {"0": 60}}
    both = stream_reader(
        cluster,
        subscribe="trickle",
        minOffsetsPerTrigger="5",
        maxOffsetsPerTrigger="20",
        maxTriggerDelay="0ms",
    )
    assert both.getDefaultReadLimit() == ReadMaxRows(20)
    assert both.latestOffset(zero, ReadMaxRows(20)) == {"trickle": {"0": 20}}
    produce(producer, "trickle", 60, 1)
    # maxTriggerDelay passed (0 ms): a single new record is enough
    assert both.latestOffset({"trickle": {"0": 60}}, ReadMaxRows(20)) == {"trickle": {"0": 61}}


def test_trigger_available_now_stops_at_what_existed(cluster, admin, producer):
    admin.create_topics([NewTopic("fixed", 2)])
    produce(producer, "fixed", 0, 100)
    reader = stream_reader(cluster, subscribe="fixed", startingOffsets="earliest")
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    produce(producer, "fixed", 100, 50)
    end = reader.latestOffset(start, ReadAllAvailable())
    assert total(start, end) == 100
    assert reader.latestOffset(end, ReadAllAvailable()) == end


# ---------------------------------------------------------------------------- queries


def values_in(spark, path):
    return [r.value.decode() for r in spark.read.parquet(path).select("value").collect()]


@pytest.mark.slow
def test_restarted_query_writes_every_record_exactly_once(spark, admin, producer, query):
    admin.create_topics([NewTopic("orders", 3)])
    produce(producer, "orders", 0, 1000)
    options = {"subscribe": "orders", "startingOffsets": "earliest"}
    q, path = query(
        {**options, "maxOffsetsPerTrigger": "100"}, "orders", available_now=False, wait=False
    )
    deadline = time.monotonic() + 120
    while q.lastProgress is None or q.lastProgress["batchId"] < 1:
        assert q.exception() is None and time.monotonic() < deadline, q.exception()
        q.awaitTermination(0.2)
    q.stop()  # mid-way: the batch in flight, if any, is cut short and replayed on restart
    first_run = len(values_in(spark, path))
    assert 200 <= first_run < 1000
    produce(producer, "orders", 1000, 200)
    query(options, "orders")  # same checkpoint, no rate limit: the rest in one or two batches
    values = values_in(spark, path)
    assert len(values) == 1200
    assert sorted(values) == sorted(f"v{i}" for i in range(1200))


def test_available_now_runs_bounded_batches_and_terminates(spark, admin, producer, query):
    admin.create_topics([NewTopic("backlog", 3)])
    produce(producer, "backlog", 0, 1000)
    options = {"subscribe": "backlog", "startingOffsets": "earliest", "maxOffsetsPerTrigger": "300"}
    q, path = query(options, "backlog")
    rows = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert rows == [300, 300, 300, 100]
    assert len(values_in(spark, path)) == 1000


def test_progress_reports_how_far_each_batch_is_behind_latest(spark, admin, producer, query):
    # PySpark's Python stream cannot fill sources[].metrics; the same numbers follow from the
    # endOffset and latestOffset every progress carries (spark.progress, docs/metrics.md)
    admin.create_topics([NewTopic("lagging", 1)])
    produce(producer, "lagging", 0, 1000)
    listener = SourceLagListener()
    spark.streams.addListener(listener)
    try:
        options = {
            "subscribe": "lagging",
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": "300",
        }
        q, _path = query(options, "lagging")
        behind = [source_metrics(p)[0] for p in q.recentProgress if p["numInputRows"]]
        assert [m["maxOffsetsBehindLatest"] for m in behind] == ["700", "400", "100", "0"]
        assert behind[0] == {
            "minOffsetsBehindLatest": "700",
            "maxOffsetsBehindLatest": "700",
            "avgOffsetsBehindLatest": "700.0",
        }
        last = source_metrics(q.recentProgress[-1])
        deadline = time.monotonic() + 30  # the listener bus delivers asynchronously
        while listener.metrics(q.id) != last and time.monotonic() < deadline:
            time.sleep(0.05)
        assert listener.metrics(q.id) == last == [behind[-1]]
    finally:
        spark.streams.removeListener(listener)


def test_throttled_writes_and_reads_are_slower_never_failing(spark, cluster, admin):
    # issue 31 (c): the DataFrame writer and reader wait out broker throttles (KIP-219)
    admin.create_topics([NewTopic("throttled-io", 2)])
    bootstrap = cluster.bootstrap_servers
    with throttle_installer(cluster) as install:
        writes = install(FixedThrottle("throttled-io", ApiKey.PRODUCE, 200))
        df = spark.createDataFrame([(str(i),) for i in range(200)], "value string")
        (
            df.write.format("sparklog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("kafka.client.id", "throttled-io")
            .option("topic", "throttled-io")
            .mode("append")
            .save()
        )
        assert writes.arrivals
        reads = install(FixedThrottle("throttled-io", ApiKey.FETCH, 200))
        got = (
            spark.read.format("sparklog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("kafka.client.id", "throttled-io")
            .option("subscribe", "throttled-io")
            .load()
            .select("value")
            .collect()
        )
        assert reads.arrivals
    assert sorted(int(r.value) for r in got) == list(range(200))


def test_new_partitions_and_topics_are_picked_up(spark, cluster, admin, producer, query):
    admin.create_topics([NewTopic("grow-a", 1)])
    produce(producer, "grow-a", 0, 10)
    options = {"subscribePattern": "grow-.*", "startingOffsets": "earliest"}
    _, path = query(options, "grow")
    assert len(values_in(spark, path)) == 10
    admin.create_partitions({"grow-a": 3})
    admin.create_topics([NewTopic("grow-b", 2)])
    with KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers}) as fresh:
        for p in (1, 2):  # a fresh producer: the module's one cached grow-a with 1 partition
            produce(fresh, "grow-a", 100 * p, 5, partition=p)
        produce(fresh, "grow-b", 1000, 7)
    _, path = query(options, "grow")
    rows = spark.read.parquet(path).groupBy("topic", "partition").count().collect()
    counts = {(r.topic, r.partition): r["count"] for r in rows}
    assert {tp: n for tp, n in counts.items() if tp[0] == "grow-a"} == {
        ("grow-a", 0): 10,
        ("grow-a", 1): 5,
        ("grow-a", 2): 5,
    }
    assert sum(n for tp, n in counts.items() if tp[0] == "grow-b") == 7
    assert len(values_in(spark, path)) == 10 + 10 + 7


def test_retention_deleted_offsets_follow_fail_on_data_loss(
    spark, admin, producer, query, tmp_path
):
    admin.create_topics([NewTopic("aging", 1)])
    produce(producer, "aging", 0, 100)
    options = {"subscribe": "aging", "startingOffsets": "earliest"}
    _, path = query(options, "aging")
    assert len(values_in(spark, path)) == 100
    produce(producer, "aging", 100, 100)
    admin.delete_records({("aging", 0): 150})  # offsets 100..149 go before the query reads them
    checkpoint = path.replace("/data", "/checkpoint")
    saved = str(tmp_path / "checkpoint")
    shutil.copytree(checkpoint, saved)
    with pytest.raises(Exception, match="failOnDataLoss"):
        query(options, "aging")
    shutil.rmtree(checkpoint)
    shutil.copytree(saved, checkpoint)
    query({**options, "failOnDataLoss": "false"}, "aging")
    values = values_in(spark, path)
    assert sorted(values) == sorted(
        [f"v{i}" for i in range(100)] + [f"v{i}" for i in range(150, 200)]
    )


@pytest.mark.parametrize("served", [False, True], ids=["broker-refuses", "in-response"])
def test_a_corrupt_batch_fails_the_stream_with_fail_on_data_loss_false_too(
    spark, cluster, admin, producer, query, monkeypatch, served
):
    """A batch damaged on disk, refused by the broker (CORRUPT_MESSAGE) or served inside a
    good response as Apache Kafka's broker serves it: the query fails naming partition and
    offset; failOnDataLoss=false skips lost offsets, never corrupt ones (as Spark's source)."""
    topic = f"rotten-{'served' if served else 'refused'}"
    admin.create_topics([NewTopic(topic, 1)])
    for start in range(0, 100, 20):  # several batches
        produce(producer, topic, start, 20, partition=0)
    damage = damage_batch_holding(cluster.broker_dir(0) / f"{topic}-0", 60)
    if served:
        monkeypatch.setattr(segment, "_good_length", lambda data, batches: len(data))
    options = {"subscribe": topic, "startingOffsets": "earliest", "failOnDataLoss": "false"}
    with pytest.raises(Exception, match=rf"{topic}-0 at offset {damage.base_offset} is corrupt"):
        query(options, topic)


def test_ending_offsets_are_refused_in_streams(spark, cluster, admin):
    sparklog.register(spark)
    admin.create_topics([NewTopic("ending", 1)])  # a missing topic would fail first
    with pytest.raises(Exception, match="not valid in streaming queries"):
        (
            spark.readStream.format("sparklog")
            .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
            .option("subscribe", "ending")
            .option("endingOffsets", "latest")
            .load()
            .writeStream.format("console")
            .start()
            .awaitTermination(30)
        )
