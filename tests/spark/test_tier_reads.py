"""format("sparklog") reading through a topic's table: the spanning read (table files for the
offsets the table holds, brokers for the rest) equals a broker-only read row for row."""

from __future__ import annotations

import time
import uuid

import pyarrow as pa
import pytest

import sparklog
from sparklog.client import AdminClient, KafkaProducer, NewTopic
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.spark.batch_reader import RangePartition, SparkLogBatchReader, TableRangePartition
from sparklog.spark.options import parse_source_options
from sparklog.spark.table_reader import load_rows
from sparklog.storage.remote.schema import TABLE_SCHEMA
from tests.spark.tier_tables import partition_dir, write_topic_table

pytestmark = pytest.mark.spark

BASE_TS = 1_700_000_000_000
N = 1500  # records per partition; the table holds the whole batches below TIERED of each
TIERED = 1000


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tier")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tables"))


@pytest.fixture(scope="module")
def cluster(data_dir, root):
    # the tier is on, for topics that ask (`live`); the others' tables are written by the tests
    config = {
        "remote.log.storage.system.enable": "true",
        "remote.table.root": root,
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
    }
    with EmbeddedCluster(brokers=1, data_dir=data_dir, config=config) as running:
        yield running


def local_start(data_dir, topic, partition):
    """The first offset the broker still holds on its disk (its first segment's base)."""
    logs = partition_dir(data_dir, topic, partition).glob("*.log")
    return min(int(log.stem) for log in logs)


def topic_id(cluster, topic):
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        return uuid.UUID(str(admin.describe_topics([topic])[topic].topic_id))


@pytest.fixture(scope="module")
def tiered(cluster, data_dir, root):
    """Topic `tiered`: 2 partitions of N records (headers on odd ones, timestamps one ms
    apart crossing midnight UTC, so segments split over two `date` folders); the table holds
    [0, TIERED) of each in three commits."""
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        # small segments: several per partition, several batches per commit
        # (timestamps of 2023: no retention by time)
        configs = {"segment.bytes": "16384", "retention.ms": "-1"}
        admin.create_topics([NewTopic("tiered", 2, configs=configs)])
    midnight = 1_700_006_400_000  # 2023-11-15T00:00:00Z
    with KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers}) as producer:
        for p in (0, 1):
            ids = range(N)
            batch = pa.record_batch(
                {
                    "key": pa.array([f"k{i % 7}".encode() for i in ids]),
                    "value": pa.array([f"p{p}-v{i}".encode() for i in ids]),
                    "timestamp": pa.array([midnight - TIERED // 2 + i for i in ids], pa.int64()),
                    "headers": pa.array(
                        [[{"key": "i", "value": str(i).encode()}] if i % 2 else None for i in ids],
                        pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
                    ),
                }
            )
            for start in range(0, N, 100):  # one batch each
                producer.send_arrow("tiered", batch.slice(start, 100), partition=p).result()
    ends = write_topic_table(
        data_dir, root, "tiered", {0: TIERED, 1: TIERED}, topic_id=topic_id(cluster, "tiered")
    )
    assert ends == {0: TIERED, 1: TIERED}  # batches of 100
    return "tiered"


@pytest.fixture(scope="module")
def txn(cluster, data_dir, root):
    """Topic `txn`: 1 partition: 100 plain records, a committed transaction, an aborted one,
    a committed one, 50 plain records; the table holds everything but the last 50."""
    bootstrap = cluster.bootstrap_servers
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic("txn", 1)])

    def batch(tag, n):
        return pa.record_batch(
            {
                "key": pa.array([f"{tag}{i}".encode() for i in range(n)]),
                "value": pa.array([f"{tag}-{i}".encode() for i in range(n)]),
            }
        )

    with KafkaProducer({"bootstrap.servers": bootstrap}) as plain:
        plain.send_arrow("txn", batch("a", 100), partition=0).result()
    with KafkaProducer({"bootstrap.servers": bootstrap, "transactional.id": "tier-t"}) as tx:
        tx.init_transactions()
        for tag, commit in (("c", True), ("x", False), ("d", True)):
            tx.begin_transaction()
            tx.send_arrow("txn", batch(tag, 40), partition=0)
            tx.flush()
            (tx.commit_transaction if commit else tx.abort_transaction)()
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        lso = admin.list_offsets({("txn", 0): -1}, isolation_level="read_committed")
        tiered_end = lso[("txn", 0)].offset  # below the LSO: every outcome is known
    with KafkaProducer({"bootstrap.servers": bootstrap}) as plain:
        plain.send_arrow("txn", batch("z", 50), partition=0).result()
    assert write_topic_table(data_dir, root, "txn", {0: tiered_end}, commits=2) == {0: tiered_end}
    return "txn"


@pytest.fixture(scope="module")
def read(spark, cluster, root):
    """read(tier=True|False, **options) -> sorted rows of a batch read."""
    sparklog.register(spark)

    def run(tier=True, **options):
        """tier: True reads through the tables under `root`, None through whatever tables
        the cluster names, False through brokers only."""
        r = spark.read.format("sparklog").option(
            "kafka.bootstrap.servers", cluster.bootstrap_servers
        )
        if tier:
            r = r.option("remoteTableRoot", root)
        elif tier is False:
            r = r.option("remoteTableReads", "false")
        for k, v in options.items():
            r = r.option(k, v)
        return sorted(tuple(row) for row in r.load().collect())

    return run


def planned(cluster, root, **options):
    opts = {k.lower(): str(v) for k, v in options.items()}
    opts |= {"kafka.bootstrap.servers": cluster.bootstrap_servers}
    if root is not None:
        opts["remotetableroot"] = root
    parts = SparkLogBatchReader(parse_source_options(opts, streaming=False)).partitions()
    for p in parts:  # the table tasks' files hold their whole ranges: no broker fallback
        if isinstance(p, TableRangePartition):
            assert load_rows(p.table_range, True).num_rows == p.table_range.range.size
    table = [p.table_range.range for p in parts if isinstance(p, TableRangePartition)]
    brokers = [p.range for p in parts if isinstance(p, RangePartition)]
    return table, brokers


def test_plan_reads_the_tiered_offsets_from_the_table(cluster, root, tiered):
    table, brokers = planned(cluster, root, subscribe=tiered)
    assert {(r.partition, r.from_offset, r.until_offset) for r in table} == {
        (0, 0, TIERED),
        (1, 0, TIERED),
    }
    assert {(r.partition, r.from_offset, r.until_offset) for r in brokers} == {
        (0, TIERED, N),
        (1, TIERED, N),
    }
    # no table at that root: brokers only
    table, brokers = planned(cluster, root + "/nothing-here", subscribe=tiered)
    assert not table and len(brokers) == 2


def test_spanning_read_equals_broker_read(read, tiered):
    both = read(subscribe=tiered, includeHeaders="true")
    assert len(both) == 2 * N
    assert both == read(tier=False, subscribe=tiered, includeHeaders="true")
    assert read(subscribe=tiered) == read(tier=False, subscribe=tiered)


def test_ending_inside_the_tier_and_starting_by_timestamp(read, tiered):
    ends = '{"tiered":{"0":700,"1":1200}}'
    opts = {"subscribe": tiered, "endingOffsets": ends, "minPartitions": "5"}
    got = read(**opts)
    assert len(got) == 700 + 1200
    assert got == read(tier=False, **opts)
    by_ts = {"subscribe": tiered, "startingTimestamp": str(1_700_006_400_000 - 100)}
    got = read(**by_ts)
    assert {r[4] for r in got if r[3] == 0} == set(range(TIERED // 2 - 100, N))
    assert got == read(tier=False, **by_ts)


def test_read_committed_drops_the_aborted_transaction(read, txn):
    committed = read(subscribe=txn, **{"kafka.isolation.level": "read_committed"})
    values = [r[1] for r in committed]
    assert not any(v.startswith(b"x-") for v in values)
    assert sum(v.startswith(b"c-") for v in values) == 40
    assert len(committed) == 100 + 80 + 50
    assert committed == read(
        tier=False, subscribe=txn, **{"kafka.isolation.level": "read_committed"}
    )
    uncommitted = read(subscribe=txn)
    assert sum(r[1].startswith(b"x-") for r in uncommitted) == 40
    assert uncommitted == read(tier=False, subscribe=txn)


@pytest.mark.slow
def test_stream_reads_through_the_table(spark, cluster, root, tiered, tmp_path):
    """A stream of micro-batches of at most 700 records, Trigger.AvailableNow, equals a
    broker-only batch read of the topic."""

    def stream(name, **options):
        r = spark.readStream.format("sparklog").option(
            "kafka.bootstrap.servers", cluster.bootstrap_servers
        )
        for k, v in {"subscribe": tiered, "startingOffsets": "earliest", **options}.items():
            r = r.option(k, v)
        out = tmp_path / name
        q = (
            r.load()
            .writeStream.format("parquet")
            .option("path", str(out / "data"))
            .option("checkpointLocation", str(out / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert q.awaitTermination(180), "the query did not finish"
        assert q.exception() is None, q.exception()
        batches = [p for p in q.recentProgress if p["numInputRows"]]
        return sorted(tuple(r) for r in spark.read.parquet(str(out / "data")).collect()), batches

    got, batches = stream("tier", remoteTableRoot=root, maxOffsetsPerTrigger="700")
    assert len(batches) >= 3 and all(b["numInputRows"] <= 700 for b in batches)
    brokers, _ = stream("brokers", remoteTableReads="false")
    assert len(got) == 2 * N
    assert got == brokers


def test_a_table_the_broker_copied_is_found_through_the_cluster(spark, read, cluster, data_dir):
    """A topic with remote.storage.enable: its leader copies closed segments into the table
    and deletes them locally (local.retention.ms=1); a read that names no root finds the
    table from the brokers' configs and reads through it, and equals a broker-only read, which
    the brokers serve from the table below their local log start."""
    bootstrap = cluster.bootstrap_servers
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        configs = {
            "remote.storage.enable": "true",
            "segment.bytes": "16384",
            "local.retention.ms": "1",
        }
        admin.create_topics([NewTopic("live", 2, configs=configs)])
    with KafkaProducer({"bootstrap.servers": bootstrap}) as producer:
        for p in (0, 1):
            for start in range(0, N, 100):
                values = pa.array([f"live-{p}-{i}".encode() for i in range(start, start + 100)])
                producer.send_arrow(
                    "live", pa.record_batch({"value": values}), partition=p
                ).result()
    deadline = time.monotonic() + 120
    while True:  # closed segments get copied, then deleted locally, within a few intervals
        table, brokers = planned(cluster, None, subscribe="live")
        if {r.partition for r in table} == {0, 1} and all(
            local_start(data_dir, "live", p) > 0 for p in (0, 1)
        ):
            break
        assert time.monotonic() < deadline, "the broker did not tier the topic"
        time.sleep(0.2)
    assert {r.from_offset for r in table} >= {0}  # copied from the log start
    through_table = read(tier=None, subscribe="live")
    assert len(through_table) == 2 * N
    assert through_table == read(tier=False, subscribe="live")
    # Spark's own Kafka connector (Kafka's Java consumer) gets the old offsets from the brokers
    kafka = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "live")
        .load()
    )
    assert sorted(tuple(r) for r in kafka.collect()) == through_table


# ------------------------------------------------------------------ the table as a DataFrame


def test_topic_table_equals_the_sparklog_read(spark, read, root, tiered):
    """`spark.read` of the table (Delta's reader or the fallback; this session has no Delta
    extension, so the fallback) holds the same records as format("sparklog") read them."""
    table = sparklog.topic_table(spark, tiered, root=root, committed=True)
    got = sorted(
        tuple(r)
        for r in table.selectExpr(
            "key", "value", "partition", "offset", "timestamp", "timestamp_type"
        ).collect()
    )
    ends = f'{{"{tiered}":{{"0":{TIERED},"1":{TIERED}}}}}'
    expected = [
        (r[0], r[1], r[3], r[4], r[5], r[6])
        for r in read(tier=False, subscribe=tiered, endingOffsets=ends)
    ]
    assert got == expected
    dates = {r[0] for r in table.select("date").distinct().collect()}
    assert len(dates) == 2  # the records cross midnight UTC


def test_committed_records_view_and_time_travel(spark, read, root, txn):
    view = sparklog.committed_records(spark, txn, root=root, view="txn_committed")
    assert view.count() == spark.sql("select * from txn_committed").count()
    committed = read(tier=False, subscribe=txn, **{"kafka.isolation.level": "read_committed"})
    in_table = sorted(r[4] for r in committed if not r[1].startswith(b"z-"))
    assert sorted(r[0] for r in view.select("offset").collect()) == in_table
    everything = sparklog.topic_table(spark, txn, root=root)
    assert everything.where("is_control").count() == 3  # three transaction markers
    assert everything.where("aborted").count() == 40
    # time travel: version 0 holds the first half (two commits); offsets -> that version
    first = sparklog.topic_table_as_of(spark, txn, {0: 100}, root=root)
    second = sparklog.topic_table_as_of(spark, txn, f'{{"{txn}":{{"0":150}}}}', root=root)
    assert first.count() < second.count() == everything.count()
    assert sparklog.topic_table_as_of(spark, txn, version=1, root=root).count() == first.count()
    assert sparklog.topic_table_as_of(spark, txn, version=0, root=root).count() == 0
    assert first.columns == everything.columns == list(TABLE_SCHEMA.names)
    with pytest.raises(ValueError, match="no version of the table reaches"):
        sparklog.topic_table_as_of(spark, txn, {0: 10**9}, root=root)


# ------------------------------------------------------------------------------- the CLI


def test_cli_tables_list_and_status(cluster, root, tiered, capsys):
    from sparklog.cli import main

    bootstrap = ["--bootstrap-server", cluster.bootstrap_servers, "--root", root]
    assert main(["tables", "list", *bootstrap, "--topic", tiered]) == 0
    (header, line) = capsys.readouterr().out.splitlines()
    assert header.split() == [
        "TOPIC",
        "VERSION",
        "PARTITIONS",
        "FILES",
        "ROWS",
        "BYTES",
        "LOCATION",
    ]
    topic, version, partitions, files, rows, _, location = line.split()
    # version 0 created the table, 1-3 are the three copies
    assert (topic, version, partitions, rows) == (tiered, "3", "2", str(2 * TIERED))
    assert int(files) >= 6 and location == f"{root}/{tiered}"

    assert main(["tables", "status", *bootstrap, "--topic", tiered]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split()[:6] == [
        "TOPIC",
        "PARTITION",
        "TABLE-START",
        "COPIED-END",
        "LOG-END",
        "PENDING",
    ]
    for p, line in enumerate(lines):
        cols = line.split()
        assert cols[:6] == [tiered, str(p), "0", str(TIERED), str(N), str(N - TIERED)]
        assert float(cols[6]) > 0  # the first record not copied is years old
        assert cols[7] == "3"
