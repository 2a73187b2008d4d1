"""spark.read.format("sparklog"): Spark's Kafka batch source on an embedded cluster."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

import sparklog
from sparklog.client import AdminClient, KafkaProducer, NewTopic
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.storage import segment
from tests.corrupt_log import damage_batch_holding

pytestmark = pytest.mark.spark

BASE_TS = 1_700_000_000_000  # record i of a topic written by `produce` has timestamp BASE_TS + i


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(brokers=1, data_dir=tmp_path_factory.mktemp("batch")) as running:
        yield running


@pytest.fixture(scope="module")
def admin(cluster):
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as client:
        yield client


@pytest.fixture(scope="module")
def sl(spark, cluster):
    """A reader factory bound to the embedded cluster."""
    sparklog.register(spark)

    def reader(**options):
        r = spark.read.format("sparklog").option(
            "kafka.bootstrap.servers", cluster.bootstrap_servers
        )
        for k, v in options.items():
            r = r.option(k, v)
        return r.load()

    return reader


def produce(cluster, topic, n, *, partition=None, keys=7, start=0, headers=False):
    """n records: key k{i % keys}, value v{i}, timestamp BASE_TS + i, optional headers."""
    ids = range(start, start + n)
    columns = {
        "key": pa.array([f"k{i % keys}".encode() for i in ids]),
        "value": pa.array([f"v{i}".encode() for i in ids]),
        "timestamp": pa.array([BASE_TS + i for i in ids], pa.int64()),
    }
    if headers:
        columns["headers"] = pa.array(
            [
                [{"key": "i", "value": str(i).encode()}, {"key": "n", "value": None}]
                if i % 2
                else None
                for i in ids
            ],
            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
        )
    with KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers}) as producer:
        producer.send_arrow(topic, pa.record_batch(columns), partition=partition).result()


@pytest.fixture(scope="module")
def events(cluster, admin):
    """Topic `events`: 3 partitions, 600 records with headers."""
    admin.create_topics([NewTopic("events", 3)])
    produce(cluster, "events", 600, headers=True)
    return "events"


def test_schema_is_sparks_kafka_schema(sl, events):
    df = sl(subscribe=events)
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )
    with_headers = sl(subscribe=events, includeHeaders="true")
    assert with_headers.schema.simpleString().endswith(
        "timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )


def test_reads_every_record_with_keys_values_headers_timestamps(sl, events):
    rows = sl(subscribe=events, includeHeaders="true").collect()
    assert len(rows) == 600
    by_value = {r.value.decode(): r for r in rows}
    assert set(by_value) == {f"v{i}" for i in range(600)}
    for i in (0, 1, 598, 599):
        r = by_value[f"v{i}"]
        assert r.key == f"k{i % 7}".encode()
        assert r.topic == events
        assert r.timestamp == dt.datetime.fromtimestamp((BASE_TS + i) / 1000)
        assert r.timestampType == 0
        if i % 2:
            assert [(h.key, h.value) for h in r.headers] == [("i", str(i).encode()), ("n", None)]
        else:
            assert r.headers is None
    # offsets are dense per partition and keys keep their order (one partition per key)
    for p in range(3):
        offsets = sorted(r.offset for r in rows if r.partition == p)
        assert offsets == list(range(len(offsets)))
    for k in range(7):
        mine = sorted((r.offset, int(r.value[1:])) for r in rows if r.key == f"k{k}".encode())
        assert len({r.partition for r in rows if r.key == f"k{k}".encode()}) == 1
        assert [v for _, v in mine] == sorted(v for _, v in mine)


def test_subscribe_pattern_and_assign_choose_partitions(sl, cluster, admin, events):
    admin.create_topics([NewTopic("pat-a", 2), NewTopic("pat-b", 1), NewTopic("other-pat", 1)])
    for t in ("pat-a", "pat-b", "other-pat"):
        produce(cluster, t, 10)
    got = sl(subscribePattern="pat-.*").groupBy("topic").count().collect()
    assert {(r.topic, r["count"]) for r in got} == {("pat-a", 10), ("pat-b", 10)}
    assigned = sl(assign='{"events":[0,2]}').select("partition").distinct().collect()
    assert sorted(r.partition for r in assigned) == [0, 2]
    assert sl(subscribe="pat-a,pat-b").count() == 20
    # a topic that does not exist fails the read, as Spark's connector does (issue 35)
    with pytest.raises(Exception, match="Topic 'no-such-topic' not present in metadata"):
        sl(subscribe="pat-a,pat-b,no-such-topic")


def test_specific_offsets_with_earliest_and_latest_markers(sl, admin, events):
    ends = admin.list_offsets({(events, p): -1 for p in range(3)})
    df = sl(
        subscribe=events,
        startingOffsets='{"events":{"0":5,"1":-2,"2":10}}',
        endingOffsets='{"events":{"0":15,"1":3,"2":-1}}',
    )
    counts = {r.partition: r["count"] for r in df.groupBy("partition").count().collect()}
    assert counts == {0: 10, 1: 3, 2: ends[(events, 2)].offset - 10}
    first = {r.partition: r["min(offset)"] for r in df.groupBy("partition").min("offset").collect()}
    assert first == {0: 5, 1: 0, 2: 10}


def test_timestamp_bounds(sl, cluster, admin):
    admin.create_topics([NewTopic("timed", 1)])
    produce(cluster, "timed", 100)
    values = lambda df: sorted(int(r.value[1:]) for r in df.collect())  # noqa: E731
    assert values(sl(subscribe="timed", startingTimestamp=str(BASE_TS + 90))) == list(
        range(90, 100)
    )
    assert values(
        sl(
            subscribe="timed",
            startingOffsetsByTimestamp=f'{{"timed":{{"0":{BASE_TS + 10}}}}}',
            endingOffsetsByTimestamp=f'{{"timed":{{"0":{BASE_TS + 13}}}}}',
        )
    ) == [10, 11, 12]
    assert values(sl(subscribe="timed", endingTimestamp=str(BASE_TS + 3))) == [0, 1, 2]
    # an ending timestamp past the last record means the end of the partition
    assert len(values(sl(subscribe="timed", endingTimestamp=str(BASE_TS + 10**9)))) == 100
    future = str(BASE_TS + 10**9)
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        sl(subscribe="timed", startingTimestamp=future).count()
    latest = sl(
        subscribe="timed", startingTimestamp=future, startingOffsetsByTimestampStrategy="latest"
    )
    assert latest.count() == 0


@pytest.mark.slow
def test_min_partitions_and_max_records_per_partition_split_ranges(sl, events):
    assert sl(subscribe=events).rdd.getNumPartitions() == 3
    split = sl(subscribe=events, minPartitions="12")
    assert split.rdd.getNumPartitions() == 12
    assert split.count() == 600 and split.select("offset", "partition").distinct().count() == 600
    capped = sl(subscribe=events, maxRecordsPerPartition="50")
    assert capped.rdd.getNumPartitions() >= 12
    assert sorted(r.value for r in capped.collect()) == sorted(
        r.value for r in sl(subscribe=events).collect()
    )


def test_kafka_consumer_settings_pass_through(sl, events):
    df = sl(
        subscribe=events,
        **{
            "kafka.isolation.level": "read_committed",
            "kafka.max.poll.records": "17",
            "kafka.fetch.max.wait.ms": "50",
            "kafka.group.id": "ignored",
        },
    )
    assert df.count() == 600


def test_records_deleted_before_the_read_follow_fail_on_data_loss(sl, cluster, admin):
    admin.create_topics([NewTopic("trimmed", 1)])
    produce(cluster, "trimmed", 100)
    admin.delete_records({("trimmed", 0): 40})
    stale = '{"trimmed":{"0":10}}'
    with pytest.raises(Exception, match="failOnDataLoss"):
        sl(subscribe="trimmed", startingOffsets=stale).count()
    kept = sl(subscribe="trimmed", startingOffsets=stale, failOnDataLoss="false")
    assert sorted(r.offset for r in kept.collect()) == list(range(40, 100))
    assert sl(subscribe="trimmed").count() == 60  # earliest is the new log start


@pytest.mark.parametrize("served", [False, True], ids=["broker-refuses", "in-response"])
def test_a_corrupt_batch_fails_the_query_whatever_fail_on_data_loss(
    sl, cluster, admin, monkeypatch, served
):
    """A batch damaged on disk: the broker answers CORRUPT_MESSAGE for it, or (`served`, as
    Apache Kafka's broker does: it serves segment bytes unchecked) sends it inside a good
    response and the client's CRC check finds it. Either way the query fails naming the
    partition and offset, with failOnDataLoss=false too (Spark's Kafka source does not skip
    corrupt records either); the records around it stay readable."""
    topic = f"damaged-{'served' if served else 'refused'}"
    admin.create_topics([NewTopic(topic, 1)])
    for start in range(0, 100, 20):  # several batches
        produce(cluster, topic, 20, partition=0, start=start)
    damage = damage_batch_holding(cluster.broker_dir(0) / f"{topic}-0", 60)
    if served:
        monkeypatch.setattr(segment, "_good_length", lambda data, batches: len(data))
    for fail_on_data_loss in ("true", "false"):
        with pytest.raises(
            Exception, match=rf"{topic}-0 at offset {damage.base_offset} is corrupt"
        ):
            sl(subscribe=topic, failOnDataLoss=fail_on_data_loss).collect()
    before = sl(subscribe=topic, endingOffsets=f'{{"{topic}":{{"0":{damage.base_offset}}}}}')
    assert sorted(r.offset for r in before.collect()) == list(range(damage.base_offset))
    after = sl(subscribe=topic, startingOffsets=f'{{"{topic}":{{"0":{damage.next_offset}}}}}')
    assert sorted(r.offset for r in after.collect()) == list(range(damage.next_offset, 100))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "One of the following options must be specified"),
        ({"subscribe": "events", "assign": '{"events":[0]}'}, "Only one of the following options"),
        ({"subscribe": "events", "startingOffsets": "latest"}, "can't be latest for batch"),
        ({"subscribe": "events", "endingOffsets": "earliest"}, "can't be earliest"),
        ({"assign": '{"events":[7]}'}, "do not exist"),
        ({"subscribe": "events", "startingOffsets": '{"events":{"0":0}}'}, "must specify all"),
        ({"subscribe": "events", "kafka.auto.offset.reset": "earliest"}, "startingOffsets"),
    ],
)
def test_option_errors_reach_the_user(sl, events, options, message):
    with pytest.raises(Exception, match=message):
        sl(**options).count()


def test_missing_bootstrap_names_both_fixes(spark, events):
    with pytest.raises(Exception, match=r"kafka\.bootstrap\.servers.*sparklog\.start"):
        spark.read.format("sparklog").option("subscribe", events).load().count()
