"""sparklog inside Spark: the `format("sparklog")` data source and the cluster launcher.

Importing this package does not import pyspark; the names below load on first use.
"""

from __future__ import annotations

from sparklog.lazy_names import lazy_getattr

_LAZY = {
    "SparkLogDataSource": "sparklog.spark.source",
    "source_schema": "sparklog.spark.source",
    "register": "sparklog.spark.register",
    "start": "sparklog",  # starts a cluster and registers format("sparklog") for it
    "active_cluster": "sparklog.spark.cluster",
    "SparkLogCluster": "sparklog.spark.cluster",
}

__all__ = sorted(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY)
