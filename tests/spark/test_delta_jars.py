"""delta-spark's JARs on our PySpark (DESIGN D8, D14) and the fallback reader sparklog uses.

delta-spark 4.4.x is built for Spark 4.2. On PySpark 4.3 its writes work, its reads fail; the
read test says which (and fails the day reads work, so the fallback can go).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from sparklog.jars import spark_jars_or_none
from sparklog.spark.delta_read import read_delta

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
    path = str(tmp_path / "read-by-spark")
    write_deltalake(path, pa.table({"k": [1, 2, 3]}))
    try:
        got = rows(spark.read.format("delta").load(path))
    except Exception as e:  # noqa: BLE001 - py4j wraps the JVM's error
        message = str(e)
        if "NoSuchMethodError" in message and "LogicalRDD" in message:
            pytest.xfail(
                "delta-spark 4.4 (built for Spark 4.2) cannot read on PySpark 4.3: "
                "NoSuchMethodError LogicalRDD.<init> in StateCache; sparklog reads Delta "
                "through sparklog.spark.delta_read (the fallback reader)"
            )
        raise
    assert got == [(1,), (2,), (3,)]
    pytest.fail(
        "delta-spark reads work on this PySpark now: drop the fallback note in docs/operations.md"
    )


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
