"""The Spark data source `format("sparklog")`: Spark's Kafka connector, on sparklog (D10, D11).

Code written for `format("kafka")` runs by changing the format name: same columns, same
option names, same errors. Spark creates the data source, its readers and writers in Python
workers (planning on the driver, `read`/`write` on executors), so everything is decided from
the options and carried in picklable objects.

Where to connect: `kafka.bootstrap.servers` when given; else the cluster that
`sparklog.start(spark)` started in this application (its address is baked into the class
that `sparklog.register` registers, since the workers are other processes than the one that
started it); else an error naming both fixes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from typing import ClassVar, NoReturn

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sparklog.spark.options import (
    SinkOptions,
    SourceOptions,
    SparkLogOptionError,
    parse_sink_options,
    parse_source_options,
)
from sparklog.spark.user_errors import user_errors

NAME = "sparklog"

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def source_schema(include_headers: bool = False) -> StructType:
    """Spark's Kafka source schema (`KafkaRecordToRowConverter.kafkaSchema`)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


class SparkLogDataSource(DataSource):
    """`spark.read/readStream/write/writeStream.format("sparklog")`."""

    #: Set on the class `sparklog.register` registers when a cluster runs in this application.
    default_bootstrap_servers: ClassVar[str | None] = None
    #: ... and that cluster's `kafka.*` client settings, prefix removed (`register`)
    default_client_settings: ClassVar[dict[str, str]] = {}

    @classmethod
    def name(cls) -> str:
        return NAME

    def _default_bootstrap(self) -> str | None:
        if self.default_bootstrap_servers:
            return self.default_bootstrap_servers
        return running_cluster_bootstrap()

    def _source_options(self, streaming: bool | None) -> SourceOptions:
        return parse_source_options(
            self._with_cluster_settings(),
            streaming=streaming,
            default_bootstrap=self._default_bootstrap(),
        )

    def _sink_options(self) -> SinkOptions:
        return parse_sink_options(
            self._with_cluster_settings(), default_bootstrap=self._default_bootstrap()
        )

    def _with_cluster_settings(self) -> dict[str, str]:
        """The options, over the running cluster's `kafka.*` client settings when they name
        no cluster of their own (no `kafka.bootstrap.servers`): a secured cluster started
        with `sparklog.start(config={"kafka.security.protocol": ...})` is read and written
        with its credentials by default."""
        options = {str(k).lower(): v for k, v in self.options.items()}
        if "kafka.bootstrap.servers" in options:
            return options
        cluster = self.default_client_settings or running_cluster_client_settings()
        defaults = {f"kafka.{k}": v for k, v in cluster.items()}
        return {**defaults, **options}

    def schema(self) -> StructType:
        # General checks now, so a bad option or a missing topic fails at load() (batch and
        # stream alike: Spark asks for the schema then); mode-specific ones later.
        from sparklog.spark.offset_reader import OffsetReader

        with user_errors():
            options = self._source_options(streaming=None)
            with OffsetReader(options) as lookups:
                lookups.check_exists()
            return source_schema(options.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        from sparklog.spark.batch_reader import SparkLogBatchReader

        with user_errors():
            options = self._source_options(streaming=False)
            _check_read_schema(schema, options)
            return SparkLogBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from sparklog.spark.stream_reader import SparkLogStreamReader

        try:
            options = self._source_options(streaming=True)
            _check_read_schema(schema, options)
        except SparkLogOptionError as e:
            # PySpark's stream runner stops the reader in a `finally` even when creating it
            # failed, and the UnboundLocalError that raises hides this error; so the query
            # fails at its first call instead, with this error
            return _RefusedStreamReader(e)
        return SparkLogStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from sparklog.spark.writer import SparkLogBatchWriter

        with user_errors():
            return SparkLogBatchWriter(*self._checked_sink(schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from sparklog.spark.writer import SparkLogStreamWriter

        with user_errors():
            return SparkLogStreamWriter(*self._checked_sink(schema, overwrite))

    def _checked_sink(
        self, schema: StructType, overwrite: bool
    ) -> tuple[SinkOptions, tuple[str, ...]]:
        from sparklog.spark.writer import check_sink_schema, check_topics

        if overwrite:
            raise SparkLogOptionError(
                "the sparklog sink only appends records, like Kafka's: save mode 'overwrite' "
                "(or outputMode 'complete') is not supported; use mode('append')"
            )
        options = self._sink_options()
        columns = check_sink_schema(schema, options)
        if options.topic is not None:
            check_topics(options, [options.topic])
        return options, columns


class _RefusedStreamReader(DataSourceStreamReader):
    """A stream whose options were refused: every call Spark makes raises that error."""

    def __init__(self, error: SparkLogOptionError) -> None:
        self.error = error

    def _refuse(self) -> NoReturn:
        with user_errors():
            raise self.error

    def initialOffset(self) -> dict:
        self._refuse()

    def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:
        self._refuse()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        self._refuse()

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        self._refuse()

    def stop(self) -> None:
        pass


def _check_read_schema(schema: StructType, options: SourceOptions) -> None:
    expected = source_schema(options.include_headers)
    if [f.name for f in schema.fields] != [f.name for f in expected.fields] or [
        f.dataType for f in schema.fields
    ] != [f.dataType for f in expected.fields]:
        raise SparkLogOptionError(
            "the sparklog source has a fixed schema (Spark's Kafka source schema: "
            f"{expected.simpleString()}); drop the .schema(...) call, and select or cast "
            "columns after load()"
        )


def running_cluster_client_settings() -> dict[str, str]:
    """The `kafka.*` client settings `sparklog.start(config=...)` gave the running cluster
    (its security settings), prefix removed; empty without a cluster."""
    launcher = sys.modules.get("sparklog.spark.cluster")
    cluster = launcher.active_cluster() if launcher is not None else None
    return dict(getattr(cluster, "client_settings", {}) or {})


def running_cluster_bootstrap() -> str | None:
    """The bootstrap list of the cluster `sparklog.start()` runs in this process, if any.
    Where the launcher was never imported no cluster can run, so this does not import it (and
    the whole broker with it): Spark's planner workers ask this on every read and write."""
    launcher = sys.modules.get("sparklog.spark.cluster")
    cluster = launcher.active_cluster() if launcher is not None else None
    return cluster_bootstrap(cluster) if cluster is not None else None


def cluster_bootstrap(cluster: object) -> str | None:
    """A running cluster's bootstrap list: its brokers, then its controller (which answers
    Metadata too, so clients still find the brokers after they moved)."""
    brokers = getattr(cluster, "bootstrap_servers", "") or ""
    controller = getattr(getattr(cluster, "controller", None), "bootstrap", "") or ""
    servers = [s for s in (*brokers.split(","), controller) if s]
    return ",".join(dict.fromkeys(servers)) or None
