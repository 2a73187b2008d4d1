"""What every SparkSession sparklog builds (tests, jobs, notebooks, `sparklog serve`) adds.

`with_reference_jars(builder)` puts the pinned JARs on `spark.jars` (Spark's Kafka
connector for `format("kafka")`, delta-spark for `format("delta")`), from the cache `make`
fills; no Ivy resolution at run time. Without the cache (e.g. on Databricks, which ships both)
the builder is left alone. `with_delta(builder)` also switches on Delta's SQL extension and
catalog, for sessions that read or write Delta tables through Spark.
"""

from __future__ import annotations

from typing import Any

from sparklog.jars import spark_jar_paths, spark_jars_or_none

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def with_reference_jars(builder: Any) -> Any:
    """`builder` with `spark.jars` set to the pinned JARs when they are available."""
    jars = spark_jars_or_none()
    return builder if jars is None else builder.config("spark.jars", jars)


def with_delta(builder: Any) -> Any:
    """`with_reference_jars(builder)` plus Delta's session extension and catalog (only when
    delta-spark is among the JARs, so a session without it still starts)."""
    builder = with_reference_jars(builder)
    if spark_jars_or_none() is None or not any(
        p.name.startswith("delta-spark") for p in spark_jar_paths()
    ):
        return builder
    return builder.config("spark.sql.extensions", DELTA_EXTENSION).config(
        "spark.sql.catalog.spark_catalog", DELTA_CATALOG
    )
