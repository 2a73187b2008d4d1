"""A topic table read by Delta's own Spark reader (delta-spark, in a session with Delta's
extension) equals the file-listing fallback and the rows the tier wrote, and time travel by
offsets picks the version Delta's `versionAsOf` gives."""

from __future__ import annotations

import uuid

import pytest

import sparklog
from sparklog.records.builder import SimpleRecord, build_batch
from sparklog.spark.delta_read import native_delta_reads, read_delta_files
from sparklog.storage.remote.schema import TABLE_SCHEMA
from sparklog.storage.remote.table import open_topic_table
from sparklog.storage.remote.tier import SegmentUpload

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPARK_DELTA = True
T0 = 1_700_006_400_000 - 50  # 50 ms before midnight UTC: two dates


def batch(base, count, tag):
    records = [
        SimpleRecord(f"{tag}{i}".encode(), f"k{i}".encode(), T0 + base + i) for i in range(count)
    ]
    return build_batch(records, base_offset=base)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("tables"))
    table = open_topic_table(root, "orders", uuid.uuid4())
    for lo in (0, 100, 200):  # three commits, each with both partitions
        table.append(
            [
                SegmentUpload(p, lo, lo + 100, batch(lo, 60, f"p{p}-") + batch(lo + 60, 40, "b"))
                for p in (0, 1)
            ]
        )
    return root


def test_native_reader_equals_the_fallback(spark, root):
    assert native_delta_reads(spark)
    native = sparklog.topic_table(spark, "orders", root=root)
    fallback = read_delta_files(spark, f"{root}/orders").select(*TABLE_SCHEMA.names)
    assert native.columns == list(TABLE_SCHEMA.names)
    rows = sorted(tuple(r) for r in native.collect())
    assert len(rows) == 600 and rows == sorted(tuple(r) for r in fallback.collect())
    assert native.select("date").distinct().count() == 2
    spark.read.format("delta").load(f"{root}/orders").createOrReplaceTempView("orders_raw")
    assert spark.sql("select count(*) from orders_raw where partition = 1").first()[0] == 300


def test_time_travel_by_offsets_is_delta_version_as_of(spark, root):
    as_of = sparklog.topic_table_as_of(spark, "orders", {0: 150, 1: 120}, root=root)
    assert as_of.count() == 400  # version 2: two commits of 2 x 100 rows
    delta = spark.read.format("delta").option("versionAsOf", 2).load(f"{root}/orders")
    assert sorted(map(tuple, as_of.collect())) == sorted(
        map(tuple, delta.select(*TABLE_SCHEMA.names).collect())
    )
