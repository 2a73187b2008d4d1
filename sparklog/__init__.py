"""sparklog: Apache Kafka's log rebuilt in Python, living inside Spark.

`sparklog.start(spark, brokers=N)` runs a cluster in this Spark application and
`sparklog.register(spark)` makes `format("sparklog")` known to a session (done automatically
by `start`, and at import when a SparkSession is already active). `sparklog.topics_df(spark)`,
`offsets_df`, `brokers_df` and `query_lag_df` are small DataFrames to `display()` in a notebook;
`group_offsets_df` and `consumer_lag_df` read the consumer groups' Delta table, `audit_df` the
audit trail's (authentication failures, denials, ACL and credential changes);
`topic_table`, `topic_table_as_of` and `committed_records` read a topic's remote tier, a Delta
table (docs/tiered-storage.md); `read_topic` is `format("sparklog")`'s batch read with
the tiered offsets scanned by Spark's own Parquet reader.
Importing sparklog does not import pyspark.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from sparklog.lazy_names import lazy_getattr

if TYPE_CHECKING:  # the public API's types, without importing pyspark at run time
    from pyspark.sql import SparkSession

    from sparklog.spark.audit_views import audit_df as audit_df
    from sparklog.spark.cluster import SparkLogCluster
    from sparklog.spark.group_views import consumer_lag_df as consumer_lag_df
    from sparklog.spark.group_views import group_offsets_df as group_offsets_df
    from sparklog.spark.notebook import brokers_df as brokers_df
    from sparklog.spark.notebook import offsets_df as offsets_df
    from sparklog.spark.notebook import query_lag_df as query_lag_df
    from sparklog.spark.notebook import topics_df as topics_df
    from sparklog.spark.source import SparkLogDataSource
    from sparklog.spark.table_scan import read_topic as read_topic
    from sparklog.spark.topic_tables import committed_records as committed_records
    from sparklog.spark.topic_tables import topic_table as topic_table
    from sparklog.spark.topic_tables import topic_table_as_of as topic_table_as_of


def register(
    spark: SparkSession | None = None, *, bootstrap_servers: str | None = None
) -> type[SparkLogDataSource]:
    """Register `format("sparklog")` with `spark` (default: the active session); returns the
    data source class registered. Without `bootstrap_servers`, the cluster `start()` runs in
    this application is the default for reads and writes that set no
    `kafka.bootstrap.servers`. Installing sparklog registers it already (PySpark finds the
    `pyspark_sparklog` module); call this to bind another default cluster."""
    from sparklog.spark.register import register as _register

    return _register(spark, bootstrap_servers=bootstrap_servers)


def start(
    spark: SparkSession,
    brokers: int = 1,
    *,
    config: dict[str, Any] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    timeout_s: float = 120.0,
    **kwargs: Any,
) -> SparkLogCluster:
    """Start a sparklog cluster in this Spark application (controller in the driver, brokers
    as Spark tasks) and register `format("sparklog")` to use it by default. Settings use
    Kafka's names (`config={"num.partitions": 6}`, or `num_partitions=6` as keywords); data goes
    under `data_dir` (docs/storage.md, "Where data lives"). Returns once every broker registered; stop it
    with `cluster.stop()`."""
    from sparklog.spark.cluster import start as _start
    from sparklog.spark.register import register as _register

    cluster = _start(
        spark, brokers, config=config, data_dir=data_dir, timeout_s=timeout_s, **kwargs
    )
    _register(spark)
    return cluster


#: the package's public API (docs/api.md is generated from these names' docstrings)
__all__ = [
    "start",
    "register",
    "topics_df",
    "offsets_df",
    "brokers_df",
    "query_lag_df",
    "group_offsets_df",
    "consumer_lag_df",
    "audit_df",
]

_NOTEBOOK_VIEWS = {
    "topics_df": "sparklog.spark.notebook",
    "offsets_df": "sparklog.spark.notebook",
    "brokers_df": "sparklog.spark.notebook",
    "query_lag_df": "sparklog.spark.notebook",
    "group_offsets_df": "sparklog.spark.group_views",
    "consumer_lag_df": "sparklog.spark.group_views",
    "audit_df": "sparklog.spark.audit_views",
    "topic_table": "sparklog.spark.topic_tables",
    "topic_table_as_of": "sparklog.spark.topic_tables",
    "committed_records": "sparklog.spark.topic_tables",
    "read_topic": "sparklog.spark.table_scan",
}


__getattr__ = lazy_getattr(__name__, _NOTEBOOK_VIEWS)  # the notebook views, on first use


def _register_at_import() -> None:
    import sys

    if "pyspark.sql" in sys.modules:
        from sparklog.spark.register import maybe_register_active_session

        maybe_register_active_session()


_register_at_import()
