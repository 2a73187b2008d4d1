"""Read a Delta table into Spark without delta-spark (DESIGN D8's fallback).

delta-spark 4.4 is built for Spark 4.2; on our PySpark 4.3 it writes tables but cannot read
them (`NoSuchMethodError: LogicalRDD.<init>` in its `StateCache`, see README "Reference JARs").
So sparklog's DataFrame helpers read their Delta tables the portable way: `deltalake` lists the
files of the table's snapshot (the log replayed, removed files excluded), and Spark's own Parquet
reader reads exactly those. That is a faithful read for the tables sparklog writes (D8: protocol
(1,2), no deletion vectors, no column mapping); anything that needs more is refused by name.
"""

from __future__ import annotations

from typing import Any

from deltalake import DeltaTable

#: Table features this reader cannot honour by reading the listed Parquet files as they are.
_UNSUPPORTED_READER_FEATURES = frozenset({"deletionVectors", "columnMapping", "v2Checkpoint"})


class DeltaReadError(ValueError):
    """A table this fallback cannot read faithfully; says why."""


def read_delta(spark: Any, path: str, version: int | None = None) -> Any:
    """The Delta table at `path` (its latest snapshot, or `version`) as a Spark DataFrame."""
    from pyspark.sql.pandas.types import from_arrow_schema

    table = DeltaTable(path, version=version)
    _check_readable(table, path)
    schema = from_arrow_schema(_arrow_schema(table))
    files = table.file_uris()
    if not files:
        return spark.createDataFrame([], schema)
    reader = spark.read.schema(schema)
    if table.metadata().partition_columns:
        reader = reader.option("basePath", table.table_uri)  # Hive-style col=value/ folders
    return reader.parquet(*files)


def _check_readable(table: DeltaTable, path: str) -> None:
    protocol = table.protocol()
    features = set(protocol.reader_features or ())
    blocked = sorted(features & _UNSUPPORTED_READER_FEATURES)
    if blocked:
        raise DeltaReadError(
            f"the Delta table at {path} uses {', '.join(blocked)}, which reading its Parquet "
            "files directly cannot honour; read it with a Delta reader that supports them"
        )
    mode = table.metadata().configuration.get("delta.columnMapping.mode", "none")
    if mode != "none":
        raise DeltaReadError(
            f"the Delta table at {path} maps column names ({mode}); its Parquet files do not "
            "carry the table's column names, so read it with a Delta reader"
        )


def _arrow_schema(table: DeltaTable) -> Any:
    import pyarrow as pa

    schema = table.schema()
    arrow = schema.to_arrow() if hasattr(schema, "to_arrow") else schema.to_pyarrow()
    return pa.schema(arrow)
