"""`sparklog.register(spark)`: make `format("sparklog")` known to a SparkSession.

Spark runs data sources in Python worker processes, which cannot see a cluster object that
lives in the driver's Python process. So when `sparklog.start()` runs a cluster here, the
class registered is a subclass of `SparkLogDataSource` that carries the cluster's bootstrap
servers (cloudpickle ships such a class by value); registering again after a (re)start
updates it.

Spark's Kafka sink accepts `df.write.format("kafka").save()` in the default ErrorIfExists
mode (appending), but Spark refuses that mode for every Python data source before the source
is asked. So that such code runs unchanged with `format("sparklog")`, registering also makes
PySpark's `DataFrameWriter.save` use mode "append" for format "sparklog" when the mode is
the default or "error"/"errorifexists" (other formats are untouched).
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sparklog.spark.source import SparkLogDataSource

logger = logging.getLogger(__name__)


def data_source_class(
    bootstrap_servers: str | None = None, client_settings: dict[str, str] | None = None
) -> type[SparkLogDataSource]:
    """The data source class to register: bound to `bootstrap_servers` when given, and to
    the cluster's `kafka.*` client settings (its security; Spark's planner runs the data
    source in a Python worker, which sees the class, not this process's cluster)."""
    from sparklog.spark.source import SparkLogDataSource

    if not bootstrap_servers:
        return SparkLogDataSource
    bound = type(
        "SparkLogDataSource",
        (SparkLogDataSource,),
        {
            "__module__": __name__,
            "__qualname__": "SparkLogDataSource.bound",  # not importable: pickled by value
            "__doc__": f"format('sparklog') defaulting to {bootstrap_servers}",
            "default_bootstrap_servers": bootstrap_servers,
            "default_client_settings": dict(client_settings or {}),
        },
    )
    return cast("type[SparkLogDataSource]", bound)


def register(
    spark: SparkSession | None = None, *, bootstrap_servers: str | None = None
) -> type[SparkLogDataSource]:
    """Register `format("sparklog")` with `spark` (default: the active session). Without
    `bootstrap_servers`, a cluster `sparklog.start()` runs in this application is the
    default for reads and writes that set no `kafka.bootstrap.servers`."""
    from pyspark.sql import SparkSession

    from sparklog.spark.source import running_cluster_bootstrap, running_cluster_client_settings

    spark = spark if spark is not None else SparkSession.getActiveSession()
    if spark is None:
        raise RuntimeError(
            "no active SparkSession to register format('sparklog') with: create one first, "
            "or pass it: sparklog.register(spark)"
        )
    client_settings: dict[str, str] = {}
    if bootstrap_servers is None:
        bootstrap_servers = running_cluster_bootstrap()
        client_settings = running_cluster_client_settings()
    cls = data_source_class(bootstrap_servers, client_settings)
    spark.dataSource.register(cls)
    append_by_default()
    from sparklog.spark.stream_load_check import refuse_ending_options_at_load

    refuse_ending_options_at_load()
    _redact_secret_options(spark)
    from sparklog.spark.group_commits import install

    install(spark, bootstrap_servers)  # groups follow each finished batch (kafka.group.id)
    logger.info("registered format('sparklog') (default bootstrap: %s)", bootstrap_servers)
    return cls


def _redact_secret_options(spark: Any) -> None:
    """Plans (the UI's SQL tab, the event log, explain()) print data source options; widen the
    session's `spark.sql.redaction.options.regex` to cover the connector's secret options."""
    from sparklog.spark.redaction import options_regex_covering_secrets

    key = "spark.sql.redaction.options.regex"
    wider = options_regex_covering_secrets(spark.conf.get(key, None))
    if wider is not None:
        spark.conf.set(key, wider)


def maybe_register_active_session() -> None:
    """At `import sparklog`: register with the active session if pyspark is already loaded
    (never imports pyspark, never creates a session, never fails the import)."""
    import sys

    if "pyspark.sql" not in sys.modules:
        return
    try:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is not None:
            register(spark)
    except Exception as e:  # noqa: BLE001 - an import must not fail over a convenience
        logger.debug("could not register format('sparklog') at import: %s", e)


_ERROR_MODES = frozenset({"error", "errorifexists", "default"})


def append_by_default() -> None:
    """Make `df.write.format("sparklog").save()` append, as Kafka's sink does (idempotent)."""
    from pyspark.sql.readwriter import DataFrameWriter

    if getattr(DataFrameWriter, "_sparklog_append_by_default", False):
        return
    from sparklog.spark.source import NAME

    original_format = DataFrameWriter.format
    original_mode = DataFrameWriter.mode
    original_save = DataFrameWriter.save

    @functools.wraps(original_format)
    def format(self: Any, source: str) -> Any:  # noqa: A001 - PySpark's name
        self._sparklog_format = str(source).lower()
        return original_format(self, source)

    @functools.wraps(original_mode)
    def mode(self: Any, saveMode: str | None) -> Any:  # noqa: N803 - PySpark's name
        if saveMode is not None:
            self._sparklog_mode = str(saveMode).lower()
        return original_mode(self, saveMode)

    @functools.wraps(original_save)
    def save(
        self: Any,
        path: str | None = None,
        format: str | None = None,  # noqa: A002 - PySpark's name
        mode: str | None = None,
        partitionBy: Any = None,  # noqa: N803 - PySpark's name
        **options: Any,
    ) -> None:
        source = str(format or getattr(self, "_sparklog_format", "")).lower()
        wanted = str(mode or getattr(self, "_sparklog_mode", "error")).lower()
        if source == NAME and wanted in _ERROR_MODES:
            mode = "append"
        return original_save(self, path, format, mode, partitionBy, **options)

    # Patching PySpark's class is the point here (see the docstring); its stubs forbid it.
    DataFrameWriter.format = format  # type: ignore[method-assign]
    DataFrameWriter.mode = mode  # type: ignore[method-assign]
    DataFrameWriter.save = save  # type: ignore[method-assign]
    DataFrameWriter._sparklog_append_by_default = True  # type: ignore[attr-defined]
