"""`sparklog.read_topic(spark, topic, ...)`: a batch read whose tiered offsets Spark's own
Parquet reader scans (opt-in fast path of `format("sparklog")`).

`spark.read.format("sparklog")` reads the offsets a topic's table holds in Spark tasks of
PySpark's Python data source, which hand their rows to the JVM as Arrow batches. That hand-off
bounds a read: a Python data source that yields ready-made batches of the connector's schema
and does nothing else is hardly faster than the brokers' path (docs/tiered-storage.md,
"Speed"). `read_topic` plans the read on the driver exactly as `format("sparklog")` does (the
same options, offsets resolved once, the table's files listed from one Delta snapshot,
`table_plan.plan_tiers`), then returns

- the offsets the table holds: `spark.read.parquet` of the listed files, filtered to each
  partition's planned range (Spark prunes files by partition folder and row groups by offset
  statistics), control records dropped, and aborted ones under `read_committed`, in the
  connector's columns,
- unioned with `format("sparklog")` reads of the rest (below the table's start, past its end)
  through the brokers, each an explicit `assign` + offsets range,

one gap-free, duplicate-free range with the schema of `format("sparklog")`. A topic without a
table (or `remoteTableReads=false`) is simply the `format("sparklog")` read.

Unlike the Python table tasks, the Parquet scan does not check that the files still hold every
offset (a VACUUM after compaction or retention deletes them): a file gone fails the query
(Spark's FileNotFoundException) instead of falling back to the brokers. Batch reads only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sparklog.spark.offsets import OffsetRange
from sparklog.spark.table_plan import TableRange

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

_SUBSCRIPTION = ("subscribe", "subscribepattern", "assign")
_RANGE_OPTIONS = (
    "startingoffsets",
    "endingoffsets",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestampstrategy",
    "remotetablereads",
)


def read_topic(
    spark: SparkSession,
    topic: str | None = None,
    options: Mapping[str, str] | None = None,
    **more: str,
) -> DataFrame:
    """The rows `spark.read.format("sparklog").options(...).load()` returns (`subscribe` =
    `topic` when given), with the offsets the topic's table holds scanned by Spark's Parquet
    reader."""
    from sparklog.spark.batch_reader import checked_ranges
    from sparklog.spark.offset_reader import OffsetReader
    from sparklog.spark.options import SparkLogOptionError
    from sparklog.spark.source import SparkLogDataSource
    from sparklog.spark.table_listing import locator_for, tier_snapshots
    from sparklog.spark.table_plan import plan_tiers
    from sparklog.spark.user_errors import user_errors

    opts = {str(k): str(v) for k, v in {**(options or {}), **more}.items()}
    if topic is not None:
        opts["subscribe"] = topic
    with user_errors():
        source_options = SparkLogDataSource(opts)._source_options(streaming=False)
        assert source_options.ending is not None
        if not source_options.remote_table_reads:
            return _sparklog(spark, opts)
        with OffsetReader(source_options) as reader:
            tps = reader.partitions()
            if reader.missing:
                raise SparkLogOptionError(
                    "option 'assign' names partitions that do not exist: "
                    + ", ".join(f"{t}-{p}" for t, p in reader.missing)
                )
            start = reader.resolve(source_options.starting, tps, starting=True)
            end = reader.resolve(source_options.ending, tps, starting=False)
            tiers = tier_snapshots(locator_for(source_options, reader.admin), {t for t, _ in tps})
        table, brokers = plan_tiers(checked_ranges(start, end, source_options), tiers)
    if not table:
        return _sparklog(spark, opts)
    df = scan_table_ranges(
        spark, table, source_options.include_headers, source_options.isolation_level
    )
    for layer in _layers(brokers):  # a partition may have ranges below and above the table
        df = df.unionByName(_broker_ranges(spark, opts, layer))
    return df


def scan_table_ranges(
    spark: SparkSession, ranges: list[TableRange], include_headers: bool, isolation_level: str
) -> DataFrame:
    """The records of `ranges` (one topic table's, or several) in the connector's columns,
    read by Spark's Parquet reader from the files the driver listed."""
    from functools import reduce

    from pyspark.sql import functions as F

    from sparklog.spark.delta_read import _as_s3a, _scheme

    by_location: dict[str, list[TableRange]] = {}
    for tr in ranges:
        by_location.setdefault(tr.location, []).append(tr)
    frames = []
    for location, trs in by_location.items():
        files = sorted({f.uri for tr in trs for f in tr.files})
        base = location
        if _scheme(location) in ("s3", "s3a"):  # Hadoop's S3 filesystem is s3a
            files, base = [_as_s3a(f) for f in files], _as_s3a(location)
        df = spark.read.schema(_file_schema()).option("basePath", base).parquet(*files)
        keep = reduce(lambda a, b: a | b, [_in_range(c) for c in _merged(trs)])
        drop = F.col("is_control")
        if isolation_level == "read_committed":
            drop = drop | F.col("aborted")
        df = df.where(keep & ~drop)
        topic = trs[0].range.topic
        columns = [
            F.col("key"),
            F.col("value"),
            F.lit(topic).alias("topic"),
            F.col("partition"),
            F.col("offset"),
            F.col("timestamp"),
            F.col("timestamp_type").alias("timestampType"),
        ]
        if include_headers:  # a record without headers is null, as the brokers return it
            h = F.col("headers")
            columns.append(F.when(F.size(h) > 0, h).alias("headers"))
        frames.append(df.select(*columns))
    return reduce(lambda a, b: a.unionByName(b), frames)


def _in_range(r: OffsetRange) -> Column:
    from pyspark.sql import functions as F

    return (
        (F.col("partition") == F.lit(r.partition))
        & (F.col("offset") >= F.lit(r.from_offset))
        & (F.col("offset") < F.lit(r.until_offset))
    )


def _merged(ranges: list[TableRange]) -> list[OffsetRange]:
    """Each partition's consecutive task ranges as one range (fewer filter terms)."""
    out: list[OffsetRange] = []
    for r in sorted((tr.range for tr in ranges), key=lambda r: (r.partition, r.from_offset)):
        last = out[-1] if out else None
        if last and last.partition == r.partition and last.until_offset == r.from_offset:
            out[-1] = OffsetRange(r.topic, r.partition, last.from_offset, r.until_offset)
        else:
            out.append(r)
    return out


def _layers(brokers: list[OffsetRange]) -> list[list[OffsetRange]]:
    """The broker ranges in groups holding at most one range per partition."""
    layers: list[list[OffsetRange]] = []
    for r in sorted(brokers, key=lambda r: (r.topic, r.partition, r.from_offset)):
        for layer in layers:
            if all((o.topic, o.partition) != (r.topic, r.partition) for o in layer):
                layer.append(r)
                break
        else:
            layers.append([r])
    return [layer for layer in layers if any(r.size for r in layer)]


def _broker_ranges(
    spark: SparkSession, opts: Mapping[str, str], ranges: list[OffsetRange]
) -> DataFrame:
    """`format("sparklog")` of exactly `ranges` through the brokers."""
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for r in ranges:
        assign.setdefault(r.topic, []).append(r.partition)
        starting.setdefault(r.topic, {})[str(r.partition)] = r.from_offset
        ending.setdefault(r.topic, {})[str(r.partition)] = r.until_offset
    kept = {k: v for k, v in opts.items() if k.lower() not in (*_SUBSCRIPTION, *_RANGE_OPTIONS)}
    kept |= {
        "assign": json.dumps(assign),
        "startingOffsets": json.dumps(starting),
        "endingOffsets": json.dumps(ending),
        "remoteTableReads": "false",
    }
    return _sparklog(spark, kept)


def _sparklog(spark: SparkSession, opts: Mapping[str, str]) -> DataFrame:
    return spark.read.format("sparklog").options(**opts).load()


def _file_schema() -> Any:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        BooleanType,
        DateType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    return StructType(
        [
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("timestamp_type", IntegerType()),
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("headers", ArrayType(header)),
            StructField("is_control", BooleanType()),
            StructField("aborted", BooleanType()),
            StructField("partition", IntegerType()),
            StructField("date", DateType()),
        ]
    )
