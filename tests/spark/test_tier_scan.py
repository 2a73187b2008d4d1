"""`sparklog.read_topic`: the tiered offsets scanned by Spark's Parquet reader, the rest read
through the brokers, equals a broker-only `format("sparklog")` read row for row."""

from __future__ import annotations

import pytest

import sparklog
from tests.spark.test_tier_reads import (  # noqa: F401 - the module's fixtures
    TIERED,
    N,
    cluster,
    data_dir,
    read,
    root,
    tiered,
    txn,
)

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def scan(spark, cluster, root):  # noqa: F811
    def run(topic, **options):
        opts = {"kafka.bootstrap.servers": cluster.bootstrap_servers, "remoteTableRoot": root}
        df = sparklog.read_topic(spark, topic, opts, **options)
        return df, sorted(tuple(row) for row in df.collect())

    return run


def test_read_topic_equals_broker_read(scan, read, tiered):  # noqa: F811
    df, got = scan(tiered, includeHeaders="true")
    assert len(got) == 2 * N
    assert got == read(tier=False, subscribe=tiered, includeHeaders="true")
    assert df.schema == read_schema(df.sparkSession, headers=True)
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "FileScan parquet" in plan  # the tiered offsets: Spark's own scan
    _, got = scan(tiered)
    assert got == read(tier=False, subscribe=tiered)


def test_read_topic_ranges_inside_and_across_the_tier(scan, read, tiered):  # noqa: F811
    ends = '{"tiered":{"0":700,"1":1200}}'
    starts = '{"tiered":{"0":50,"1":999}}'
    opts = {"startingOffsets": starts, "endingOffsets": ends}
    _, got = scan(tiered, **opts)
    assert len(got) == 650 + 201
    assert got == read(tier=False, subscribe=tiered, **opts)
    by_ts = {"startingTimestamp": str(1_700_006_400_000 - 100)}
    _, got = scan(tiered, **by_ts)
    assert {r[4] for r in got if r[3] == 0} == set(range(TIERED // 2 - 100, N))
    assert got == read(tier=False, subscribe=tiered, **by_ts)


def test_read_topic_read_committed(scan, read, txn):  # noqa: F811
    level = {"kafka.isolation.level": "read_committed"}
    _, committed = scan(txn, **level)
    assert len(committed) == 100 + 80 + 50
    assert committed == read(tier=False, subscribe=txn, **level)
    _, uncommitted = scan(txn)
    assert sum(r[1].startswith(b"x-") for r in uncommitted) == 40
    assert uncommitted == read(tier=False, subscribe=txn)


def test_read_topic_without_table_is_the_sparklog_read(scan, read, tiered):  # noqa: F811
    df, got = scan(tiered, remoteTableReads="false")
    assert "FileScan parquet" not in df._jdf.queryExecution().executedPlan().toString()
    assert got == read(tier=False, subscribe=tiered)


def read_schema(spark, headers):
    from sparklog.spark.source import source_schema

    return source_schema(headers)
