"""Consumer-group DataFrames over the group coordinator's Delta table: the latest committed
offset of every (group, topic, partition), and lag against the partitions' log end offsets
(what `kafka-consumer-groups --describe` prints).

The table is read with `read_delta`: Delta's own reader in a session built with Delta's
extension, else D8's file-listing fallback (sparklog.spark.delta_read); the "latest row per key" step runs in Spark, so the helpers stay cheap on a long history. Without
`path` they read the table of the cluster `sparklog.start(spark)` launched here, with its
`storage.options.*` (so a table on an object store is read with the cluster's credentials);
with `path`, pass `storage_options` for an object store (else delta-rs reads the `AWS_*`
environment variables).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sparklog.spark.delta_read import read_delta

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

GROUP_OFFSETS_COLUMNS = (
    "group_id",
    "topic",
    "partition",
    "committed_offset",
    "leader_epoch",
    "metadata",
    "commit_timestamp",
)
LAG_DDL = "group_id string, topic string, partition int, committed_offset long, log_end_offset long, lag long"


def offsets_table_path(path: str | None = None) -> str:
    """`path`, else the offsets table of the cluster running in this application."""
    return offsets_table(path)[0]


def offsets_table(
    path: str | None = None, storage_options: Mapping[str, str] | None = None
) -> tuple[str, dict[str, str] | None]:
    """(path, storage options) of the offsets table: `path` with `storage_options`, else the
    table of the cluster running in this application with that cluster's `storage.options.*`
    (also for `path` naming that table, when no `storage_options` are given)."""
    from sparklog.spark.cluster import active_cluster
    from sparklog.storage.object_store import storage_options as options_of

    cluster = active_cluster()
    coordinator = getattr(cluster, "coordinator", None) if cluster is not None else None
    if path and (coordinator is None or storage_options is not None):
        return path, dict(storage_options) if storage_options else None
    if coordinator is None:
        raise ValueError(
            "no sparklog cluster here: start one with sparklog.start(spark), or pass "
            "path='<offsets.table.path of the cluster>'"
        )
    assert cluster is not None  # it has a coordinator
    table_path = path or coordinator.table_path
    own = table_path.rstrip("/") == str(coordinator.table_path).rstrip("/")
    return table_path, (options_of(cluster.settings) or None) if own else None


def group_offsets_df(
    spark: SparkSession,
    group: str | None = None,
    path: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> DataFrame:
    """The latest committed offset per (group, topic, partition), deleted offsets excluded."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    table_path, options = offsets_table(path, storage_options)
    rows = read_delta(spark, table_path, storage_options=options)
    rows = rows.where(F.col("record_type") == "offset")
    if group is not None:
        rows = rows.where(F.col("group_id") == group)
    newest = Window.partitionBy("group_id", "topic", "partition").orderBy(F.col("sequence").desc())
    latest = rows.withColumn("_rank", F.row_number().over(newest)).where(F.col("_rank") == 1)
    return (
        latest.where(F.col("committed_offset").isNotNull())
        .select(*GROUP_OFFSETS_COLUMNS)
        .orderBy("group_id", "topic", "partition")
    )


def consumer_lag_df(
    spark: SparkSession,
    group: str | None = None,
    path: str | None = None,
    bootstrap_servers: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> DataFrame:
    """Per (group, topic, partition): committed offset, log end offset now, and their
    difference, like `kafka-consumer-groups --describe`."""
    from sparklog.spark.notebook import partition_offsets

    committed = group_offsets_df(spark, group, path, storage_options).select(
        "group_id", "topic", "partition", "committed_offset"
    )
    keys = committed.collect()
    topics = sorted({r["topic"] for r in keys})
    ends = {(t, p): end for t, p, _, _, end, _ in partition_offsets(topics, bootstrap_servers)}
    rows = []
    for r in keys:
        end = ends.get((r["topic"], r["partition"]))  # None: the partition is gone
        lag = None if end is None else max(0, end - r["committed_offset"])
        rows.append((r["group_id"], r["topic"], r["partition"], r["committed_offset"], end, lag))
    return spark.createDataFrame(sorted(rows, key=lambda x: x[:3]), LAG_DDL)
