"""sparklog inside Spark: the `format("sparklog")` data source and the cluster launcher.

Importing this package does not import pyspark; the names below load on first use.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "SparkLogDataSource": "sparklog.spark.source",
    "source_schema": "sparklog.spark.source",
    "register": "sparklog.spark.register",
    "start": "sparklog",  # starts a cluster and registers format("sparklog") for it
    "active_cluster": "sparklog.spark.cluster",
    "SparkLogCluster": "sparklog.spark.cluster",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sparklog.spark' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
