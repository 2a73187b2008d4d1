"""Reading one offset range on an executor, as Arrow batches in Spark's Kafka source schema.

Runs inside a Spark task (batch and streaming reads alike). A consumer is assigned the one
partition, seeks to the range start and polls Arrow batches (decoded vectorized by the
client) until its position reaches the range end; rows at or past the end are cut off by one
binary search over the offset column. No Python code runs per record. Consumers come from
`client_pool.CONSUMERS`, so later tasks in the same Python worker reuse their connections.

Gaps follow Spark's `KafkaDataConsumer.fetchRecord`: offsets that are skipped while the log
start offset is still at or below them are invisible records (compacted away, transaction
markers, aborted data) and are not a loss; offsets below the log start offset (deleted by
retention or DeleteRecords before the query read them) or past the log end (the partition was
truncated or recreated) are lost, and `failOnDataLoss` decides: raise, or skip them with a
warning.

A corrupt batch is not a loss: the consumer delivers every record before it, then raises
`CorruptBatchError`, which fails the task whatever `failOnDataLoss` says, as Spark's
`KafkaDataConsumer.get` handles only `OffsetOutOfRangeException` and lets the Kafka consumer's
corrupt-record exception fail the task. No record of a damaged batch is skipped silently.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import Protocol

import numpy as np
import pyarrow as pa

from sparklog.client import TopicPartition
from sparklog.client.throttle import total_throttle_ms
from sparklog.spark.client_pool import CONSUMERS
from sparklog.spark.offsets import OffsetRange
from sparklog.spark.options import SourceOptions

logger = logging.getLogger(__name__)

HEADERS_ARROW_TYPE = pa.list_(
    pa.field(
        "element",
        pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]),
    )
)
_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
SPARK_ARROW_SCHEMA = pa.schema(_BASE_FIELDS)
SPARK_ARROW_SCHEMA_WITH_HEADERS = pa.schema(
    [*_BASE_FIELDS, pa.field("headers", HEADERS_ARROW_TYPE)]
)


class DataLossError(RuntimeError):
    """Records the query should have read are gone and `failOnDataLoss` is true."""


class FetchTimeoutError(TimeoutError):
    """No progress within `kafkaConsumer.pollTimeoutMs` although the records should exist."""


#: What a query can do about a corrupt batch (the consumer's own advice is to seek).
CORRUPT_ADVICE = (
    "The query stops here whatever failOnDataLoss says (a corrupt batch is no data loss, and "
    "Spark's Kafka source fails on it too): repair the replica (or move leadership to a good "
    "copy) and run the query again, or, to give up the batch's records, start a new query "
    "with startingOffsets past it"
)


def data_loss_message(what: str) -> str:
    """Spark's wording: what was lost, why it can happen, and the option that decides."""
    return (
        f"{what}. Some data may have been lost because they are not available in the log any "
        "more; either the data was aged out by retention (or DeleteRecords) or the topic may "
        "have been deleted before all the data in the topic was processed. If you don't want "
        'the query to fail on such cases, set the source option "failOnDataLoss" to "false".'
    )


def report_data_loss(fail_on_data_loss: bool, what: str) -> None:
    """Raise (failOnDataLoss=true) or log a warning (false)."""
    if fail_on_data_loss:
        raise DataLossError(data_loss_message(what))
    logger.warning(
        "%s. Some data may have been lost; continuing because failOnDataLoss is false", what
    )


def to_spark_arrow(batch: pa.RecordBatch, include_headers: bool) -> pa.RecordBatch:
    """A `poll_arrow` batch (timestamps as epoch ms) in the exact Arrow schema Spark expects."""
    schema = SPARK_ARROW_SCHEMA_WITH_HEADERS if include_headers else SPARK_ARROW_SCHEMA
    timestamps = batch.column("timestamp").cast(pa.int64())
    micros = pa.array(timestamps.to_numpy(zero_copy_only=False) * 1000, type=pa.int64()).cast(
        pa.timestamp("us", tz="UTC")
    )
    arrays = [
        batch.column("key"),
        batch.column("value"),
        batch.column("topic"),
        batch.column("partition"),
        batch.column("offset"),
        micros,
        batch.column("timestampType"),
    ]
    if include_headers:
        arrays.append(batch.column("headers").cast(HEADERS_ARROW_TYPE))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_range(r: OffsetRange, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    """Records of `r` in offset order, as Arrow batches in Spark's schema."""
    if r.size == 0:
        return
    with CONSUMERS.lease(options.consumer_config()) as consumer:
        throttled_before = total_throttle_ms(getattr(consumer, "client_metrics", None))
        yield from _RangeReader(consumer, r, options).batches()
        throttled = total_throttle_ms(getattr(consumer, "client_metrics", None)) - throttled_before
        if throttled:  # the consumer waited these out (KIP-219): slower, not failed
            logger.info(
                "sparklog read of %s-%d [%d, %d): throttled %d ms by broker quotas",
                r.topic,
                r.partition,
                r.from_offset,
                r.until_offset,
                throttled,
            )


class RangeConsumer(Protocol):
    """What a range reader needs from its consumer (a pooled `sparklog.client.KafkaConsumer`):
    one assigned partition, positioned by hand, polled as Arrow."""

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None: ...

    def seek(self, partition: tuple[str, int], offset: int) -> None: ...

    def position(self, partition: tuple[str, int], timeout_ms: int | None = None) -> int: ...

    def poll_arrow(
        self, timeout_ms: int = 0, *, include_headers: bool = False
    ) -> pa.RecordBatch: ...

    def beginning_offsets(
        self, partitions: Iterable[tuple[str, int]], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        """Log start offset by partition."""
        ...

    def end_offsets(
        self, partitions: Iterable[tuple[str, int]], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        """Log end offset by partition."""
        ...


class _RangeReader:
    """The poll loop of one range; `position` is the next offset the range still needs."""

    def __init__(self, consumer: RangeConsumer, r: OffsetRange, options: SourceOptions) -> None:
        self.consumer = consumer
        self.range = r
        self.options = options
        self.tp = (r.topic, r.partition)
        self.position = r.from_offset
        consumer.assign([self.tp])
        consumer.seek(self.tp, self.position)

    def batches(self) -> Iterator[pa.RecordBatch]:
        from sparklog.errors import CorruptBatchError

        try:
            yield from self._batches()
        except CorruptBatchError as e:
            raise CorruptBatchError(
                e.topic, e.partition, e.offset, e.reason, CORRUPT_ADVICE, refetching=e.refetching
            ) from e

    def _batches(self) -> Iterator[pa.RecordBatch]:
        from sparklog.errors import OffsetOutOfRangeError

        until = self.range.until_offset
        last_progress = time.monotonic()
        poll_ms = min(self.options.poll_timeout_ms, 1000)
        while self.position < until:
            try:
                batch = self.consumer.poll_arrow(
                    poll_ms, include_headers=self.options.include_headers
                )
            except OffsetOutOfRangeError:
                self._on_out_of_range()
                last_progress = time.monotonic()
                continue
            if batch.num_rows:
                batch = self._check_gap(batch)
                offsets = batch.column("offset").to_numpy()
                keep = int(np.searchsorted(offsets, until))
                if keep:
                    yield to_spark_arrow(batch.slice(0, keep), self.options.include_headers)
            new_position = self.consumer.position(self.tp)
            if new_position > self.position:
                self.position = new_position
                last_progress = time.monotonic()
            elif (time.monotonic() - last_progress) * 1000 >= self.options.poll_timeout_ms:
                self._on_stall()
                last_progress = time.monotonic()

    def _bounds(self) -> tuple[int, int]:
        """(log start offset, log end offset) of the partition now."""
        earliest = self.consumer.beginning_offsets([self.tp])
        latest = self.consumer.end_offsets([self.tp])
        return next(iter(earliest.values())), next(iter(latest.values()))

    def _on_out_of_range(self) -> None:
        earliest, latest = self._bounds()
        until = self.range.until_offset
        if self.position < earliest:
            lost_until = min(earliest, until)
            report_data_loss(
                self.options.fail_on_data_loss,
                f"Cannot fetch offsets [{self.position}, {lost_until}) of "
                f"{self.range.topic}-{self.range.partition}: the log now starts at {earliest}",
            )
            self._skip_to(lost_until)
        elif self.position >= latest:
            report_data_loss(
                self.options.fail_on_data_loss,
                f"Offsets [{self.position}, {until}) of {self.range.topic}-"
                f"{self.range.partition} are past its end offset {latest} (the partition was "
                "truncated, or the topic deleted and recreated)",
            )
            self._skip_to(until)
        else:  # the log moved while we fetched: just try again
            self.consumer.seek(self.tp, self.position)

    def _check_gap(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """A first record past the position is a loss only if the log start moved past it."""
        first = int(batch.column("offset")[0].as_py())
        if first <= self.position:
            return batch
        earliest, _ = self._bounds()
        if earliest <= self.position:
            return batch  # invisible records: compacted away, markers, aborted transactions
        lost_until = min(first, earliest, self.range.until_offset)
        report_data_loss(
            self.options.fail_on_data_loss,
            f"Cannot fetch offsets [{self.position}, {lost_until}) of "
            f"{self.range.topic}-{self.range.partition}: the log now starts at {earliest}",
        )
        return batch

    def _on_stall(self) -> None:
        """No progress for pollTimeoutMs: lost records past the end, or a real timeout."""
        earliest, latest = self._bounds()
        until = self.range.until_offset
        if latest <= self.position:
            report_data_loss(
                self.options.fail_on_data_loss,
                f"Offsets [{self.position}, {until}) of {self.range.topic}-"
                f"{self.range.partition} are past its end offset {latest}",
            )
            self._skip_to(until)
            return
        raise FetchTimeoutError(
            f"Cannot fetch records of {self.range.topic}-{self.range.partition} from offset "
            f"{self.position} within {self.options.poll_timeout_ms} ms (log start {earliest}, "
            f"end {latest}); check the brokers, or raise kafkaConsumer.pollTimeoutMs"
        )

    def _skip_to(self, offset: int) -> None:
        self.position = offset
        if offset < self.range.until_offset:
            self.consumer.seek(self.tp, offset)
