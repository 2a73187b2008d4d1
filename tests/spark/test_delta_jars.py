"""delta-spark on our PySpark (DESIGN D8, D14): its reads and writes, SQL on ``delta.`path` ``,
and the file-listing fallback sparklog keeps for a Spark delta-spark does not support yet,
compared with Delta's own reader row for row.

delta-spark 4.4.x is built for Spark 4.2, the pinned PySpark (constraints.txt).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from sparklog.coordinator.group.coordinator import CommittedOffset, offset_row
from sparklog.coordinator.offsets_store import OffsetsStore
from sparklog.jars import spark_jars_or_none
from sparklog.spark.delta_read import native_delta_reads, read_delta, read_delta_files

SPARK_DELTA = True

needs_jars = pytest.mark.skipif(
    spark_jars_or_none() is None, reason="the pinned Spark JARs are not fetched: run `make jars`"
)


def rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.collect())


@needs_jars
def test_spark_writes_a_delta_table_that_deltalake_reads(spark, tmp_path):
    path = str(tmp_path / "written-by-spark")
    df = spark.createDataFrame(
        [("g1", "t", 0, 10), ("g1", "t", 1, 20)], "g string, t string, p int, o long"
    )
    df.write.format("delta").save(path)
    df.write.format("delta").mode("append").save(path)
    table = DeltaTable(path)
    assert table.version() == 1
    got = sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: (r["p"], r["o"]))
    assert [(r["g"], r["p"], r["o"]) for r in got] == [
        ("g1", 0, 10),
        ("g1", 0, 10),
        ("g1", 1, 20),
        ("g1", 1, 20),
    ]
    assert rows(read_delta(spark, path)) == rows(df.union(df))


@needs_jars
def test_spark_reads_a_delta_table_with_delta_spark(spark, tmp_path):
    """format("delta"), time travel, SQL on delta.`path`, DESCRIBE DETAIL and readStream all
    work on the pinned PySpark (on 4.3.0 they failed with NoSuchMethodError LogicalRDD.<init>)."""
    path = str(tmp_path / "read-by-spark")
    write_deltalake(path, pa.table({"k": [1, 2, 3]}))
    write_deltalake(path, pa.table({"k": [4]}), mode="append")
    assert rows(spark.read.format("delta").load(path)) == [(1,), (2,), (3,), (4,)]
    assert rows(spark.read.format("delta").option("versionAsOf", 0).load(path)) == [
        (1,),
        (2,),
        (3,),
    ]
    assert rows(spark.sql(f"SELECT k FROM delta.`{path}` WHERE k > 2")) == [(3,), (4,)]
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0]
    assert (detail["format"], detail["numFiles"]) == ("delta", 2)
    query = (
        spark.readStream.format("delta")
        .load(path)
        .writeStream.format("memory")
        .queryName("delta_stream")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert rows(spark.table("delta_stream")) == [(1,), (2,), (3,), (4,)]


@needs_jars
def test_read_delta_uses_delta_s_reader_when_the_session_has_it(spark, tmp_path):
    path = str(tmp_path / "native")
    write_deltalake(path, pa.table({"k": [1, 2]}))
    assert native_delta_reads(spark)
    plan = read_delta(spark, path)._jdf.queryExecution().executedPlan().toString()
    assert "DeltaFileIndex" in plan or "TahoeLogFileIndex" in plan, plan
    assert rows(read_delta(spark, path)) == [(1,), (2,)]


@needs_jars
@pytest.mark.slow
def test_the_fallback_reads_what_delta_s_reader_reads_row_for_row(spark, tmp_path):
    """Every snapshot of a table with appends, an overwrite, a delete and partitions, and an
    offsets table as sparklog's group coordinator writes it: read_delta_files == format("delta")."""
    path = str(tmp_path / "history")
    write_deltalake(path, pa.table({"g": ["a", "b"], "k": [1, 2]}), partition_by=["g"])
    write_deltalake(path, pa.table({"g": ["a"], "k": [3]}), mode="append")
    write_deltalake(path, pa.table({"g": ["c", "b"], "k": [10, 11]}), mode="overwrite")
    write_deltalake(path, pa.table({"g": ["a"], "k": [12]}), mode="append")
    DeltaTable(path).delete("k = 11")
    for version in range(DeltaTable(path).version() + 1):
        native = spark.read.format("delta").option("versionAsOf", version).load(path)
        fallback = read_delta_files(spark, path, version=version)
        assert sorted(fallback.columns) == sorted(native.columns)
        assert rows(fallback.select(*native.columns)) == rows(native), version
    assert rows(read_delta_files(spark, path)) == rows(
        spark.read.format("delta").load(path).select(*read_delta_files(spark, path).columns)
    )

    offsets = str(tmp_path / "__consumer_offsets")
    store = OffsetsStore(offsets)
    store.append(
        [
            offset_row(f"g{g}", ("t", p), CommittedOffset(p, 1, "m", 7, None))
            for g in range(3)
            for p in range(4)
        ]
    )
    store.append([offset_row("g1", ("t", 0), CommittedOffset(99, 2, "", 8, None))])
    native = spark.read.format("delta").load(offsets)
    fallback = read_delta_files(spark, offsets)
    # Spark reads Parquet files as nullable; Delta keeps the table's NOT NULL columns
    assert [(f.name, f.dataType) for f in fallback.schema] == [
        (f.name, f.dataType) for f in native.schema
    ]
    assert native.count() == 13
    assert rows(fallback) == rows(native)


def test_fallback_reads_the_current_snapshot_only(spark, tmp_path):
    path = str(tmp_path / "commits")
    write_deltalake(path, pa.table({"k": [1, 2], "v": ["a", "b"]}))
    write_deltalake(path, pa.table({"k": [3], "v": ["c"]}), mode="append")
    write_deltalake(path, pa.table({"k": [10, 11], "v": ["x", "y"]}), mode="overwrite")
    write_deltalake(path, pa.table({"k": [12], "v": ["z"]}), mode="append")
    DeltaTable(path).delete("k = 11")
    table = DeltaTable(path)
    want = sorted((r["k"], r["v"]) for r in table.to_pyarrow_table().to_pylist())
    assert want == [(10, "x"), (12, "z")]
    assert rows(read_delta(spark, path)) == want
    assert rows(read_delta(spark, path, version=1)) == [(1, "a"), (2, "b"), (3, "c")]


def test_fallback_reads_partition_columns_and_empty_tables(spark, tmp_path):
    path = str(tmp_path / "partitioned")
    data = pa.table({"group": ["g1", "g2", "g1"], "offset": [5, 6, 7]})
    write_deltalake(path, data, partition_by=["group"])
    df = read_delta(spark, path)
    assert sorted(df.columns) == ["group", "offset"]
    assert sorted((r["group"], r["offset"]) for r in df.collect()) == [
        ("g1", 5),
        ("g1", 7),
        ("g2", 6),
    ]
    empty = str(tmp_path / "empty")
    DeltaTable.create(empty, schema=data.schema)
    assert read_delta(spark, empty).count() == 0
    assert read_delta(spark, empty).columns == ["group", "offset"]
