"""Read a Delta table into Spark without delta-spark (the fallback while delta-spark's reads fail).

delta-spark 4.4 is built for Spark 4.2; on our PySpark 4.3 it writes tables but cannot read
them (`NoSuchMethodError: LogicalRDD.<init>` in its `StateCache`, see docs/operations.md "Reference JARs").
So sparklog's DataFrame helpers read their Delta tables the portable way: `deltalake` lists the
files of the table's snapshot (the log replayed, removed files excluded), and Spark's own Parquet
reader reads exactly those. That is a faithful read for the tables sparklog writes (D8: protocol
(1,2), no deletion vectors, no column mapping); anything that needs more is refused by name.

On an object store (`s3://...`, reached with delta-rs `storage_options`), Spark reads the files
itself only when its Hadoop has the `s3a` filesystem (the hadoop-aws JAR and its AWS SDK,
configured with `spark.hadoop.fs.s3a.*`): the paths are handed over as `s3a://`. Without it
(sparklog ships no such JARs), the files are read on the driver by `deltalake` with the same
storage options and become a DataFrame from Arrow: right for tables of driver size (the
offsets table), said once in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from deltalake import DeltaTable

logger = logging.getLogger(__name__)

#: Table features this reader cannot honour by reading the listed Parquet files as they are.
_UNSUPPORTED_READER_FEATURES = frozenset({"deletionVectors", "columnMapping", "v2Checkpoint"})


class DeltaReadError(ValueError):
    """A table this fallback cannot read faithfully; says why."""


def read_delta(
    spark: Any,
    path: str,
    version: int | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> Any:
    """The Delta table at `path` (its latest snapshot, or `version`) as a Spark DataFrame;
    `storage_options` reach an object store (delta-rs option names, as `storage.options.*`)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    options = dict(storage_options) if storage_options else None
    table = DeltaTable(path, version=version, storage_options=options)
    _check_readable(table, path)
    schema = from_arrow_schema(_arrow_schema(table))
    files = table.file_uris()
    if not files:
        return spark.createDataFrame([], schema)
    base = table.table_uri
    on_s3 = _scheme(base) in ("s3", "s3a")
    if on_s3:  # Hadoop's S3 filesystem is s3a; delta-rs names the files s3://
        files = [_as_s3a(f) for f in files]
        base = _as_s3a(base)
    reader = spark.read.schema(schema)
    if table.metadata().partition_columns:
        reader = reader.option("basePath", base)  # Hive-style col=value/ folders
    if _scheme(base) in ("", "file"):
        return reader.parquet(*files)
    try:
        return reader.parquet(*files)
    except Exception as e:  # noqa: BLE001 - Spark has no filesystem (or no access) for the store
        first = str(e).strip().splitlines()[0][:300] if str(e) else type(e).__name__
        logger.info(
            "Spark cannot read %s itself (%s); reading its files on the driver with deltalake "
            "instead (add hadoop-aws and spark.hadoop.fs.s3a.* settings to read them in tasks)",
            path,
            first,
        )
        return spark.createDataFrame(table.to_pyarrow_table(), schema)


def _scheme(uri: str) -> str:
    scheme, sep, _ = uri.partition("://")
    return scheme.lower() if sep else ""


def _as_s3a(uri: str) -> str:
    return "s3a://" + uri.partition("://")[2] if _scheme(uri) == "s3" else uri


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
    return pa.schema(schema.to_arrow())
