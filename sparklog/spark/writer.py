"""Writes: `df.write.format("sparklog")` and `df.writeStream.format("sparklog")` (Spark's
`KafkaWriter` / `KafkaSink`).

Columns as in Spark's Kafka sink: `value` (string or binary, required), `key` (string or
binary), `headers` (array<struct<key: string, value: binary>>), `topic` (string; the `topic`
option overrides it), `partition` (int; null or absent lets the producer pick: murmur2 of the
key, sticky for null keys). sparklog also honours a `timestamp` column of a timestamp type as
the records' CreateTime, so a read-then-write keeps timestamps; without one records get the
time they are sent. Other columns (and a `timestamp` of another type) are ignored, as Kafka's
sink ignores them.

The schema and a fixed topic are checked on the driver (`check_sink_schema`, `check_topics`)
before any task runs; a task checks each topic of a `topic` column before it sends the
first record to it. Each task sends its Arrow batches, a few MiB at a time, with one
producer's `send_arrow` (encoded vectorized, no Python per row), grouped by topic, and
waits for every acknowledgement before it reports success.

Streams are exactly-once by default (`exactlyOnce`, see `sink_transactions`): each task's rows
are one transaction, and the driver commits a micro-batch's transactions in one decision.
Batch writes are at-least-once like Spark's Kafka sink, or all-or-nothing with
`transactional=true`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from sparklog.client.throttle import total_throttle_ms
from sparklog.errors import InvalidTopicError, UnknownTopicOrPartitionError
from sparklog.spark.client_pool import PRODUCERS
from sparklog.spark.options import SinkOptions, SparkLogOptionError, check_topic_name
from sparklog.spark.sink_transactions import (
    batch_prefix,
    end_all,
    fence_leftovers,
    mark_write_aborted,
    streaming_prefix,
    task_transactional_id,
    write_was_aborted,
)

logger = logging.getLogger(__name__)


class SparkLogSchemaError(SparkLogOptionError):
    """The DataFrame to write does not have the columns the sink needs."""


class UnknownTopicError(SparkLogOptionError):
    """A topic to write to does not exist and the cluster does not create topics on demand."""


# ------------------------------------------------------------------------- checks (driver)


def check_sink_schema(schema: StructType, options: SinkOptions) -> tuple[str, ...]:
    """Spark's `KafkaWriter.validateQuery`: fail before any record is sent. Returns the
    columns the tasks send (besides `topic`)."""
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise SparkLogSchemaError(
            f"Required attribute 'value' not found: the DataFrame has columns "
            f"{list(types)}; add a string or binary 'value' column"
        )
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], StringType | BinaryType):
            raise SparkLogSchemaError(
                f"{name} attribute type must be a StringType or BinaryType, got "
                f"{types[name].simpleString()}; cast it, e.g. CAST({name} AS STRING)"
            )
    if options.topic is None:
        if "topic" not in types:
            raise SparkLogSchemaError(
                "topic option required when no 'topic' attribute is present. Use the topic "
                "option for setting a topic."
            )
        if not isinstance(types["topic"], StringType):
            raise SparkLogSchemaError(
                f"topic attribute type must be a StringType, got {types['topic'].simpleString()}"
            )
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise SparkLogSchemaError(
            f"partition attribute type must be an IntegerType, got "
            f"{types['partition'].simpleString()}; cast it, e.g. CAST(partition AS INT)"
        )
    if "headers" in types and not _is_headers_type(types["headers"]):
        raise SparkLogSchemaError(
            f"headers attribute type must be array<struct<key:string,value:binary>>, got "
            f"{types['headers'].simpleString()}"
        )
    timestamp = isinstance(types.get("timestamp"), TimestampType | TimestampNTZType)
    if "timestamp" in types and not timestamp:
        logger.info("column 'timestamp' (%s) is not a timestamp: ignored", types["timestamp"])
    return tuple(
        name
        for name in ("key", "value", "headers", "partition", "timestamp")
        if name in types and (name != "timestamp" or timestamp)
    )


def _is_headers_type(t: Any) -> bool:
    if not isinstance(t, ArrayType) or not isinstance(t.elementType, StructType):
        return False
    fields = t.elementType.fields
    return (
        len(fields) == 2
        and fields[0].name == "key"
        and isinstance(fields[0].dataType, StringType)
        and fields[1].name == "value"
        and isinstance(fields[1].dataType, BinaryType)
    )


# Topics found to exist, per bootstrap, with when: later tasks in this worker skip the check.
_KNOWN_TOPICS: dict[tuple[str, str], float] = {}
KNOWN_TOPIC_TTL_S = 60.0
#: Arrow bytes a write task queues before it sends them: Spark hands over 10,000-row batches
#: (about 1 MiB of 100-byte values), and encoding and producing a few MiB at once costs
#: about a third less CPU per row than one call per Spark batch.
COALESCE_BYTES = 4 << 20


def check_topics(options: SinkOptions, topics: Iterable[str]) -> None:
    """Each topic exists, or the cluster created it on demand (auto.create.topics.enable)."""
    from sparklog.client.config import producer_config
    from sparklog.client.metadata import Metadata
    from sparklog.client.network import NetworkClient

    now = time.monotonic()
    wanted = sorted(
        t
        for t in set(topics)
        if now - _KNOWN_TOPICS.get((options.bootstrap_servers, t), -KNOWN_TOPIC_TTL_S)
        >= KNOWN_TOPIC_TTL_S
    )
    if not wanted:
        return
    for topic in wanted:
        check_topic_name(topic, "column 'topic'")
    config = producer_config(options.producer_config())
    network = NetworkClient(config)
    try:
        response = Metadata(network, config, allow_auto_create=True).request_metadata(wanted)
    finally:
        network.close()
    for t in response.topics:
        code = int(t.error_code)
        if code == UnknownTopicOrPartitionError.code:
            raise UnknownTopicError(
                f"topic {t.name!r} does not exist and the cluster does not create topics on "
                "demand (auto.create.topics.enable=false): create it first, or write to an "
                "existing topic (the 'topic' option or column)"
            )
        if code == InvalidTopicError.code:
            check_topic_name(t.name, "topic")  # raises; the broker may know more rules
            raise UnknownTopicError(f"the cluster refuses topic name {t.name!r}")
    for topic in wanted:
        _KNOWN_TOPICS[(options.bootstrap_servers, topic)] = now


# ------------------------------------------------------------------------- task side


@dataclass(frozen=True)
class SparkLogCommitMessage(WriterCommitMessage):
    """What one write task sent: records, and per (topic, partition) the last offset."""

    records: int
    last_offsets: tuple[tuple[str, int, int], ...] = ()
    #: (transactional id, producer id, epoch) of the task's prepared transaction
    transaction: tuple[str, int, int] | None = None
    #: how long brokers throttled the task's producer (client quotas, KIP-219), in ms
    throttle_time_ms: int = 0


class ArrowProducer(Protocol):
    """What a task writer needs from its producer (a pooled `sparklog.client.KafkaProducer`)."""

    def send_arrow(
        self, topic: str, record_batch: pa.RecordBatch | pa.Table, partition: int | None = None
    ) -> Future: ...

    def flush(self, timeout_ms: int | None = None) -> None: ...


class _TaskWriter:
    """Sends one task's Arrow batches through one producer (leased from the pool)."""

    def __init__(
        self, options: SinkOptions, columns: tuple[str, ...], producer: ArrowProducer
    ) -> None:
        self.options = options
        self.columns = list(columns)
        self.records = 0
        self.producer = producer
        self._futures: list[Any] = []
        # A fixed topic was checked on the driver before the tasks started.
        self._checked: set[str] = {options.topic} if options.topic is not None else set()
        self._last: dict[tuple[str, int], int] = {}
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0
        self._throttled_before = _throttle_total(producer)

    def write(self, batch: pa.RecordBatch) -> None:
        """Queue `batch`; send once about `COALESCE_BYTES` are queued (fewer, larger encodes
        and produce requests than one per Spark Arrow batch of 10,000 rows)."""
        if batch.num_rows == 0:
            return
        if self.options.topic is None:  # every topic of a batch, before any of its records is sent
            unchecked = [t for t in _topics_of(batch) if t not in self._checked]
            if unchecked:
                check_topics(self.options, unchecked)
                self._checked.update(unchecked)
        self._pending.append(batch)
        self._pending_bytes += batch.nbytes
        if self._pending_bytes >= COALESCE_BYTES:
            self._send_pending()

    def _send_pending(self) -> None:
        if not self._pending:
            return
        batch = self._pending[0] if len(self._pending) == 1 else pa.concat_batches(self._pending)
        self._pending, self._pending_bytes = [], 0
        for topic, rows in self._by_topic(batch):
            for part in _by_partition_presence(rows):
                self._futures.append(self.producer.send_arrow(topic, part))
            self.records += rows.num_rows
        self._reap(block=False)

    def _by_topic(self, batch: pa.RecordBatch) -> Iterator[tuple[str, pa.RecordBatch]]:
        columns = self.columns
        if self.options.topic is not None:
            yield self.options.topic, batch.select(columns)
            return
        topics = batch.column("topic")
        unique = _topics_of(batch)
        if len(unique) == 1:
            yield unique[0], batch.select(columns)
            return
        for topic in sorted(unique):
            yield topic, batch.filter(pc.equal(topics, topic)).select(columns)

    def _reap(self, *, block: bool) -> None:
        """Collect finished sends; the first failure fails the task."""
        pending = []
        for future in self._futures:
            if block or future.done():
                for m in future.result():
                    tp = (m.topic, m.partition)
                    last = m.base_offset + m.record_count - 1
                    self._last[tp] = max(self._last.get(tp, -1), last)
            else:
                pending.append(future)
        self._futures = pending

    def finish(self) -> SparkLogCommitMessage:
        self._send_pending()
        self.producer.flush()
        self._reap(block=True)
        last = tuple((t, p, o) for (t, p), o in sorted(self._last.items()))
        throttled = int(_throttle_total(self.producer) - self._throttled_before)
        if throttled:
            logger.info(
                "sparklog write task: %d records, throttled %d ms by broker quotas",
                self.records,
                throttled,
            )
        return SparkLogCommitMessage(self.records, last, throttle_time_ms=throttled)


def _throttle_total(producer: Any) -> float:
    """The producer's total throttle time so far (0 for a producer without client metrics)."""
    return total_throttle_ms(getattr(producer, "client_metrics", None))


def _topics_of(batch: pa.RecordBatch) -> list[str]:
    """The distinct values of the `topic` column; a null one is an error, as in Spark."""
    topics = batch.column("topic")
    if topics.null_count:
        raise SparkLogSchemaError(
            "null topic present in the data. Use the topic option for setting a topic."
        )
    return pc.unique(topics).to_pylist()


def _by_partition_presence(rows: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """Rows with an explicit partition, then rows the partitioner places (null partition)."""
    if "partition" not in rows.schema.names:
        yield rows
        return
    partitions = rows.column("partition")
    if partitions.null_count == 0:
        yield rows
        return
    placed = rows.drop_columns(["partition"])
    if partitions.null_count == rows.num_rows:
        yield placed
        return
    explicit = partitions.is_valid()
    yield rows.filter(explicit)
    yield placed.filter(pc.invert(explicit))


def write_task(
    options: SinkOptions,
    columns: tuple[str, ...],
    iterator: Iterator[pa.RecordBatch],
    prefix: str | None = None,
    batch_write: bool = False,
) -> SparkLogCommitMessage:
    """The body of one write task: send everything, wait for every acknowledgement. With a
    transactional `prefix`, the rows are one transaction, prepared for the driver to end; a
    `batch_write`'s task first checks that the driver has not aborted the write already."""
    if prefix is None:
        with PRODUCERS.lease(options.producer_config()) as producer:
            writer = _TaskWriter(options, columns, producer)
            for batch in iterator:
                writer.write(batch)
            return writer.finish()
    from sparklog.client import KafkaProducer

    config = {**options.producer_config(), "transactional.id": task_transactional_id(prefix)}
    with KafkaProducer(config) as producer:
        producer.init_transactions()
        if batch_write and write_was_aborted(options, prefix):
            raise SparkLogWriteAbortedError(
                f"the write under {prefix} was aborted before this task started writing"
            )
        producer.begin_transaction()
        try:
            writer = _TaskWriter(options, columns, producer)
            for batch in iterator:
                writer.write(batch)
            message = writer.finish()
            handle = producer.prepare_transaction()
        except BaseException:
            _abort_quietly(producer)
            raise
    return dataclasses.replace(
        message,
        transaction=(handle.transactional_id, handle.producer_id, handle.producer_epoch),
    )


class SparkLogWriteAbortedError(RuntimeError):
    """A task of a batch write that the driver aborted already (Spark ran it late)."""


def _abort_quietly(producer: Any) -> None:
    """Abort a failed task's transaction so it does not hold back read_committed readers (the
    driver's abort also fences what a killed task left open)."""
    try:
        producer.abort_transaction(timeout_ms=10_000)
    except Exception as e:  # noqa: BLE001 - the task's own error is the one to report
        logger.warning("aborting the failed task's transaction failed: %s", e)


def _total(messages: list[WriterCommitMessage | None]) -> int:
    return sum(m.records for m in messages if isinstance(m, SparkLogCommitMessage))


def _throttled(messages: list[WriterCommitMessage | None]) -> str:
    """The tasks' throttle time for the commit's log line ("" when none was throttled):
    PySpark's Python sinks cannot add to the query's progress (`sink.metrics`), so the
    driver's log is where a write's throttling shows."""
    times = [m.throttle_time_ms for m in messages if isinstance(m, SparkLogCommitMessage)]
    total = sum(times)
    if not total:
        return ""
    return f"; brokers throttled its producers {total} ms in all (max {max(times)} ms in a task)"


class SparkLogBatchWriter(DataSourceArrowWriter):
    """`df.write.format("sparklog")`: append every row as a record (all-or-nothing with
    `transactional=true`)."""

    def __init__(self, options: SinkOptions, columns: tuple[str, ...]) -> None:
        self.options = options
        self.columns = columns  # what check_sink_schema found to send
        self.prefix = batch_prefix(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SparkLogCommitMessage:
        return write_task(self.options, self.columns, iterator, self.prefix, batch_write=True)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.prefix is not None:
            end_all(self.options, self.prefix, True, messages)
        logger.info(
            "sparklog write committed: %d records%s", _total(messages), _throttled(messages)
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.prefix is not None:
            end_all(self.options, self.prefix, False, messages)
            mark_write_aborted(self.options, self.prefix)
            fence_leftovers(self.options, self.prefix, messages)
            logger.warning("sparklog write aborted: none of its records is visible")
            return
        logger.warning(
            "sparklog write aborted; %d records of successful tasks stay in the log "
            "(at-least-once; option transactional=true writes all or nothing)",
            _total(messages),
        )


class SparkLogStreamWriter(DataSourceStreamArrowWriter):
    """`df.writeStream.format("sparklog")`: exactly-once per micro-batch (at-least-once with
    exactlyOnce=false)."""

    def __init__(self, options: SinkOptions, columns: tuple[str, ...]) -> None:
        self.options = options
        self.columns = columns  # what check_sink_schema found to send
        self.prefix = streaming_prefix(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SparkLogCommitMessage:
        return write_task(self.options, self.columns, iterator, self.prefix)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.prefix is not None:
            end_all(self.options, f"{self.prefix}:{batchId}", True, messages)
        logger.info(
            "sparklog batch %d committed: %d records%s",
            batchId,
            _total(messages),
            _throttled(messages),
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.prefix is not None:
            end_all(self.options, f"{self.prefix}:{batchId}", False, messages)
            fence_leftovers(self.options, self.prefix, messages)
            logger.warning("sparklog batch %d aborted: none of its records is visible", batchId)
            return
        logger.warning(
            "sparklog batch %d aborted; %d records of successful tasks stay in the log "
            "(at-least-once: a retry may write them again)",
            batchId,
            _total(messages),
        )
