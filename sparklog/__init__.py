"""sparklog: Apache Kafka's log rebuilt in Python, living inside Spark.

`sparklog.start(spark, brokers=N)` runs a cluster in this Spark application and
`sparklog.register(spark)` makes `format("sparklog")` known to a session (done automatically
by `start`, and at import when a SparkSession is already active). `sparklog.topics_df(spark)`,
`offsets_df`, `brokers_df` and `query_lag_df` are small DataFrames to `display()` in a notebook;
`group_offsets_df` and `consumer_lag_df` read the consumer groups' Delta table, `audit_df` the
audit trail's (authentication failures, denials, ACL and credential changes).
Importing sparklog does not import pyspark.
"""

from __future__ import annotations

from typing import Any

from sparklog.lazy_names import lazy_getattr


def register(spark: Any = None, *, bootstrap_servers: str | None = None) -> type:
    """Register `format("sparklog")` with `spark` (default: the active session)."""
    from sparklog.spark.register import register as _register

    return _register(spark, bootstrap_servers=bootstrap_servers)


def start(spark: Any, brokers: int = 1, **kwargs: Any) -> Any:
    """Start a sparklog cluster in this Spark application (controller in the driver, brokers
    as Spark tasks) and register `format("sparklog")` to use it by default."""
    from sparklog.spark.cluster import start as _start
    from sparklog.spark.register import register as _register

    cluster = _start(spark, brokers, **kwargs)
    _register(spark)
    return cluster


_NOTEBOOK_VIEWS = {
    "topics_df": "sparklog.spark.notebook",
    "offsets_df": "sparklog.spark.notebook",
    "brokers_df": "sparklog.spark.notebook",
    "query_lag_df": "sparklog.spark.notebook",
    "group_offsets_df": "sparklog.spark.group_views",
    "consumer_lag_df": "sparklog.spark.group_views",
    "audit_df": "sparklog.spark.audit_views",
}


__getattr__ = lazy_getattr(__name__, _NOTEBOOK_VIEWS)  # the notebook views, on first use


def _register_at_import() -> None:
    import sys

    if "pyspark.sql" in sys.modules:
        from sparklog.spark.register import maybe_register_active_session

        maybe_register_active_session()


_register_at_import()
