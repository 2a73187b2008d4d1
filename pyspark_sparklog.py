"""`format("sparklog")` without `sparklog.register(spark)`: PySpark's data source discovery.

PySpark 4 registers, in every new session, the `DefaultSource` of each installed top-level
module whose name starts with `pyspark_` (`pyspark/sql/worker/lookup_data_sources.py`), so
installing sparklog is enough for `spark.read.format("sparklog")` in any order of imports and
session creation. Spark imports this module in a Python worker on the first data source
lookup, and every `pyspark_*` module in the same worker: keep the import light (the data
source only; the client, broker and launcher load when a read or write needs them), and
never fail it.

`sparklog.start()` and `sparklog.register()` still register a subclass bound to the cluster
they run (its address and security settings), which takes precedence over this one in that
session.
"""

from __future__ import annotations

from sparklog.spark.source import SparkLogDataSource as DefaultSource

__all__ = ["DefaultSource"]
