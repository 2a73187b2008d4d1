"""Read a Delta table into Spark: Delta's own reader when the session has it, else a fallback.

The way to query sparklog's Delta tables (the offsets table, the audit trail) is Delta's own
Spark reader: `spark.read.format("delta").load(path)` or SQL on ``delta.`path` ``, in a session
built with delta-spark's JARs, its SQL extension and catalog (`sparklog.spark.session.with_delta`;
docs/groups.md "Querying the table from Spark"). `read_delta` does that whenever the session can
(`native_delta_reads`).

delta-spark is built for one Spark minor version (the JAR `delta-spark_4.2_2.13` for Spark 4.2):
on a newer Spark its writes work but its reads fail (`NoSuchMethodError: LogicalRDD.<init>` in
its `StateCache` on Spark 4.3). For such a Spark, and for sessions without Delta's extension,
`read_delta_files` reads the table the portable way: `deltalake` lists the files of the table's
snapshot (the log replayed, removed files excluded), and Spark's own Parquet reader reads exactly
those. That is a faithful read for the tables sparklog writes (D8: protocol (1,2), no deletion
vectors, no column mapping); anything that needs more is refused by name. The tests compare it
with Delta's reader row for row.

On an object store (`s3://...`, reached with delta-rs `storage_options`), Spark reads the files
itself only when its Hadoop has the `s3a` filesystem (the hadoop-aws JAR and its AWS SDK,
configured with `spark.hadoop.fs.s3a.*`): the paths are handed over as `s3a://`. Without it
(sparklog ships no such JARs), the files are read on the driver by `deltalake` with the same
storage options and become a DataFrame from Arrow: right for tables of driver size (the
offsets table), said once in the log.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from deltalake import DeltaTable

from sparklog.spark.session import DELTA_CATALOG, DELTA_EXTENSION

logger = logging.getLogger(__name__)

#: Table features this reader cannot honour by reading the listed Parquet files as they are.
_UNSUPPORTED_READER_FEATURES = frozenset({"deletionVectors", "columnMapping", "v2Checkpoint"})


#: delta-spark's JAR names the Spark it is built for: delta-spark_4.2_2.13-4.4.0.jar
_DELTA_JAR = re.compile(r"delta-spark_(\d+\.\d+)_\d+\.\d+-[^/]*\.jar$")


class DeltaReadError(ValueError):
    """A table this fallback cannot read faithfully; says why."""


def delta_spark_supports(spark_version: str, jars: Iterable[str]) -> bool:
    """Whether the delta-spark JAR among `jars` reads on Spark `spark_version`: its name says
    which Spark minor it is built for (`delta-spark_4.2_2.13-*.jar`); a JAR without that part
    (a Spark distribution that ships Delta, such as Databricks) is taken at its word."""
    minor = ".".join(spark_version.split(".")[:2])
    built_for = [m.group(1) for j in jars if (m := _DELTA_JAR.search(j.strip()))]
    return not built_for or minor in built_for


def native_delta_reads(spark: Any) -> bool:
    """Whether `spark.read.format("delta")` works in this session: Delta's extension and
    catalog are configured (static: set when the session is built; Delta's reader refuses to
    run without them) and its JAR is built for this Spark's minor version."""
    conf = spark.conf
    extensions = conf.get("spark.sql.extensions", "") or ""
    catalog = conf.get("spark.sql.catalog.spark_catalog", "") or ""
    if DELTA_EXTENSION not in extensions or catalog != DELTA_CATALOG:
        return False
    jars = (conf.get("spark.jars", "") or "").split(",")
    return delta_spark_supports(spark.version, jars)


def read_delta(
    spark: Any,
    path: str,
    version: int | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> Any:
    """The Delta table at `path` (its latest snapshot, or `version`) as a Spark DataFrame:
    Delta's own reader when the session has it (`native_delta_reads`), else
    `read_delta_files`. `storage_options` reach an object store for the fallback (delta-rs
    option names, as `storage.options.*`); Delta's reader uses Spark's Hadoop settings."""
    if native_delta_reads(spark):
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        if _scheme(path) in ("", "file"):
            return reader.load(path)
        try:
            return reader.load(_as_s3a(path))
        except Exception as e:  # noqa: BLE001 - no Hadoop filesystem (or access) for the store
            logger.info(
                "Delta's reader cannot open %s (%s); listing it with deltalake instead",
                path,
                _first_line(e),
            )
    return read_delta_files(spark, path, version, storage_options)


def read_delta_files(
    spark: Any,
    path: str,
    version: int | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> Any:
    """The fallback: the files of the snapshot (`deltalake` lists them) read by Spark's
    Parquet reader, for a Spark that delta-spark does not support yet."""
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
        logger.info(
            "Spark cannot read %s itself (%s); reading its files on the driver with deltalake "
            "instead (add hadoop-aws and spark.hadoop.fs.s3a.* settings to read them in tasks)",
            path,
            _first_line(e),
        )
        return spark.createDataFrame(table.to_pyarrow_table(), schema)


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__


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
