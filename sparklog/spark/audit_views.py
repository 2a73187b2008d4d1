"""`sparklog.audit_df(spark)`: the cluster's audit trail (docs/security.md "Audit trail") as a
Spark DataFrame: one row per authentication failure, denied request (and, with
`audit.log.allowed`, allowed one), ACL or credential change, and `EVENTS_DROPPED` row where a
full buffer lost events.

The table is read with `read_delta` (Delta's own reader when the session has it, else the
file-listing fallback), like the group views. Without `path` it is the table of the cluster `sparklog.start(spark)` launched here
(read with its `storage.options.*`); with `path`, pass `storage_options` for an object store.
Before the first event the table does not exist yet: the answer is an empty DataFrame with
the table's columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sparklog.spark.delta_read import read_delta

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

AUDIT_COLUMNS = (
    "time",
    "principal",
    "client_address",
    "listener",
    "api",
    "resource_type",
    "resource_name",
    "operation",
    "decision",
    "node_id",
    "detail",
)


def audit_table(
    path: str | None = None, storage_options: Mapping[str, str] | None = None
) -> tuple[str, dict[str, str] | None]:
    """(path, storage options) of the audit table: `path`, else the running cluster's."""
    from sparklog.spark.cluster import active_cluster
    from sparklog.storage.object_store import storage_options as options_of

    if path:
        return path, dict(storage_options) if storage_options else None
    cluster = active_cluster()
    coordinator = getattr(cluster, "coordinator", None) if cluster is not None else None
    if coordinator is None:
        raise ValueError(
            "no sparklog cluster here: start one with sparklog.start(spark), or pass "
            "path='<audit.table.path of the cluster>'"
        )
    assert cluster is not None
    return coordinator.audit.path, options_of(cluster.settings) or None


def audit_df(
    spark: SparkSession,
    path: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> DataFrame:
    """The audit trail, oldest first."""
    from deltalake import DeltaTable

    table_path, options = audit_table(path, storage_options)
    if not DeltaTable.is_deltatable(table_path, options):
        from pyspark.sql.pandas.types import from_arrow_schema

        from sparklog.coordinator.audit_log import SCHEMA

        return spark.createDataFrame([], from_arrow_schema(SCHEMA))
    return (
        read_delta(spark, table_path, storage_options=options)
        .select(*AUDIT_COLUMNS)
        .orderBy("time")
    )
