"""The Kafka producer: `send()` returns a future, a background thread batches and sends
(Kafka's `KafkaProducer`, same settings and semantics).

`send()` runs the interceptors' `on_send`, serializes, waits (up to `max.block.ms`) for the
topic's metadata, picks a partition, waits (up to the rest of `max.block.ms`) for room in
`buffer.memory`, and appends to the accumulator; the sender thread does the rest. The
idempotent producer is on by default (`enable.idempotence=true`: acks=all, sequence numbers,
retries without duplicates or reordering).

`send_arrow()` is the bulk path for Arrow data: partitions by murmur2 over the whole key column
and encodes with `arrow_codec.build_batches`, with no Python loop per record.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparklog.errors import (
    KafkaError,
    MessageTooLargeError,
    RequestTimedOutError,
    TransactionAbortableError,
)
from sparklog.records.arrow_codec import build_batches
from sparklog.records.compression import CompressionType
from sparklog.structs import TopicPartition

from .accumulator import (
    RECORD_OVERHEAD_BYTES,
    BatchMetadata,
    RecordAccumulator,
    RecordMetadata,
    estimate_record_bytes,
)
from .arrow_send import BatchesFuture, byte_lengths, split_by_partition
from .broker_connection import now_ms
from .config import producer_config
from .metadata import Metadata
from .network import NetworkClient
from .partitioner import BuiltInPartitioner, make_partitioner
from .record_future import RecordFuture, Waiters, future_class
from .sender import Sender
from .throttle import client_metrics, metric_values, throttle_recorder
from .transaction_manager import TransactionHandle, TransactionManager, TransactionStateError

logger = logging.getLogger(__name__)

DeliveryCallback = Callable[[Any, BaseException | None], None]
Headers = Mapping[str, bytes | str | None] | Iterable[tuple[str, bytes | str | None]] | None

_RECORDS_COUNT_OFFSET = 57
_REQUEST_OVERHEAD_BYTES = 1024  # request header, topic name, partition fields


class ClientClosedError(RuntimeError):
    """The client was closed by its user; no further calls are possible."""


@dataclass(frozen=True, slots=True)
class ProducerRecord:
    """What `send()` was asked to send; interceptors may return a changed copy."""

    topic: str
    value: Any
    key: Any = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    partition: int | None = None
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class _SendSettings:
    """The settings `send()` reads per record, looked up once."""

    max_block_ms: int
    key_serializer: Any
    value_serializer: Any
    max_request_size: int
    buffer_memory: int
    builtin_partitioner: bool


class KafkaProducer:
    """A thread-safe producer. Use as a context manager, or call `close()`."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = producer_config(config)
        c = self.config
        #: Kafka's producer metrics this client records (`produce-throttle-time-avg|max`)
        self.client_metrics = client_metrics(c)
        record_throttle = throttle_recorder(
            self.client_metrics, "producer", c["client.id"] or "sparklog"
        )
        self._network = NetworkClient(c, on_throttle_time=record_throttle)
        self._metadata = Metadata(self._network, c)
        self._rlock = threading.RLock()  # `with` on it directly: the per-record path
        self._lock = threading.Condition(self._rlock)
        self._accumulator = RecordAccumulator(
            batch_size=c["batch.size"],
            linger_ms=c["linger.ms"],
            buffer_memory=c["buffer.memory"],
            delivery_timeout_ms=c["delivery.timeout.ms"],
            retry_backoff_ms=c["retry.backoff.ms"],
            retry_backoff_max_ms=c["retry.backoff.max.ms"],
        )
        self._partitioner = make_partitioner(
            c["partitioner.class"],
            batch_size=c["batch.size"],
            ignore_keys=c["partitioner.ignore.keys"],
        )
        self._interceptors = [i() if isinstance(i, type) else i for i in c["interceptor.classes"]]
        self._waiters = Waiters()
        self._future = future_class()
        self._topic_partitions: dict[str, list[TopicPartition]] = {}
        self._settings = _SendSettings(
            max_block_ms=c["max.block.ms"],
            key_serializer=c["key.serializer"],
            value_serializer=c["value.serializer"],
            max_request_size=c["max.request.size"],
            buffer_memory=c["buffer.memory"],
            builtin_partitioner=isinstance(self._partitioner, BuiltInPartitioner),
        )
        self._compression = CompressionType.from_name(c["compression.type"])
        self._sender = Sender(
            config=c,
            accumulator=self._accumulator,
            lock=self._lock,
            metadata=self._metadata,
            network=self._network,
        )
        self._transaction: TransactionManager | None = None
        if c["transactional.id"] is not None:
            self._transaction = TransactionManager(
                c["transactional.id"],
                c["transaction.timeout.ms"],
                self._network,
                self._metadata.candidates,
                self._set_producer_id,
                c["retry.backoff.ms"],
            )
            self._sender.transaction = self._transaction
        self._closed = False
        self._sender.start()

    # -- transactions (Kafka's KafkaProducer transactional API) -----------------------------

    def _set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        assert self._sender.idempotence is not None
        with self._lock:
            self._sender.idempotence.set_producer_id(producer_id, producer_epoch)
            self._accumulator.reset_sequences()
        self._sender.wakeup()

    def _transactional(self) -> TransactionManager:
        self._check_open()
        if self._transaction is None:
            raise TransactionStateError(
                "this producer has no transactional.id; set one to use transactions"
            )
        return self._transaction

    def init_transactions(self, timeout_ms: int | None = None) -> None:
        """Register `transactional.id` with the coordinator: fences every older producer with
        the same id and aborts a transaction it left open."""
        self._transactional().init_transactions(timeout_ms or self.config["max.block.ms"])

    def begin_transaction(self) -> None:
        self._transactional().begin_transaction()

    def send_offsets_to_transaction(
        self, offsets: Mapping[Any, int] | Iterable[Any], group_metadata: Any
    ) -> None:
        """Commit consumer offsets as part of the transaction (Kafka's exactly-once
        consume-transform-produce). `offsets`: {(topic, partition): next offset} or objects
        with `topic`, `partition`, `offset`; `group_metadata`: a group id or a consumer's
        `group_metadata()`."""
        if isinstance(offsets, Mapping):
            items = [(tp[0], int(tp[1]), int(o)) for tp, o in offsets.items()]
        else:
            items = [(o.topic, int(o.partition), int(o.offset)) for o in offsets]
        if isinstance(group_metadata, str):
            group_id, member = group_metadata, {}
        else:
            member = dict(group_metadata)
            group_id = member.pop("group_id")
        self.flush()
        self._transactional().send_offsets(items, group_id, member)

    def commit_transaction(self, timeout_ms: int | None = None) -> None:
        """Send every record of the transaction, then commit it (all visible, or none)."""
        txn = self._transactional()
        self.flush(timeout_ms)
        txn.end(True, timeout_ms or self.config["max.block.ms"])

    def abort_transaction(self, timeout_ms: int | None = None) -> None:
        """Drop what is unsent, wait for what is in flight, abort the transaction."""
        txn = self._transactional()
        self._sender.abort_undrained(TransactionAbortableError("the transaction was aborted"))
        self.flush(timeout_ms)
        txn.end(False, timeout_ms or self.config["max.block.ms"])

    def prepare_transaction(self, timeout_ms: int | None = None) -> TransactionHandle:
        """Send every record of the open transaction and hand it over, undecided, to be ended
        by `sparklog.client.end_transactions` (Spark's exactly-once sink: the driver ends every
        task's transaction in one decision)."""
        txn = self._transactional()
        self.flush(timeout_ms)
        if txn.state.value == "abortable error":
            raise TransactionAbortableError(f"the transaction failed: {txn.error}")
        return txn.detach()

    def __enter__(self) -> KafkaProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------- send

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Headers = None,
        partition: int | None = None,
        timestamp: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> RecordFuture:
        """Queue one record; the future resolves to its `RecordMetadata` once acknowledged.

        `on_delivery(metadata, error)` runs on the producer's I/O thread when the record is
        acknowledged or fails; keep it short. Errors of the record (too large, metadata or
        memory not available within `max.block.ms`, broker errors) fail the future.
        """
        self._check_open()
        if self._interceptors:
            record = ProducerRecord(
                topic, value, key, _normalize_headers(headers), partition, timestamp
            )
            for interceptor in self._interceptors:
                record = _call_interceptor(interceptor, "on_send", record) or record
            topic, value, key = record.topic, record.value, record.key
            headers, partition, timestamp = record.headers, record.partition, record.timestamp
            headers = _normalize_headers(headers)
            future = self._future(self._waiters, self._acknowledge(on_delivery))
        else:
            headers = _normalize_headers(headers) if headers else ()
            future = self._future(self._waiters, on_delivery)
        try:
            self._enqueue(topic, value, key, headers, partition, timestamp, future)
        except KafkaError as e:
            future(None, e)
        return future

    def _enqueue(
        self,
        topic: str,
        value: Any,
        key: Any,
        headers: tuple,
        partition: int | None,
        timestamp: int | None,
        future: RecordFuture,
    ) -> None:
        """The per-record path: kept flat, and it allocates nothing per record but the future
        (every object kept until the batch is acknowledged costs the garbage collector)."""
        s = self._settings
        now = now_ms()
        deadline = now + s.max_block_ms
        if s.key_serializer is not None or not (key is None or type(key) is bytes):
            key = _serialize(s.key_serializer, topic, key, "key")
        if s.value_serializer is not None or not (value is None or type(value) is bytes):
            value = _serialize(s.value_serializer, topic, value, "value")
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        elif timestamp < 0:
            raise ValueError(f"invalid timestamp {timestamp}: timestamps must be >= 0")
        info = self._metadata.wait_for_topic(topic, deadline)
        size = RECORD_OVERHEAD_BYTES + (len(key) if key else 0) + (len(value) if value else 0)
        if headers:
            size = estimate_record_bytes(key, value, headers)
        if size > s.max_request_size or size > s.buffer_memory:
            raise MessageTooLargeError(
                f"the record is {size} bytes when serialized, larger than "
                f"{'max.request.size' if size > s.max_request_size else 'buffer.memory'}"
            )
        with self._rlock:
            if partition is not None:
                if not 0 <= partition < len(info.partitions):
                    raise ValueError(
                        f"invalid partition given with record: {partition} is not in the "
                        f"range [0...{len(info.partitions)}) of topic {topic!r}"
                    )
                sticky = False
            else:
                partition = self._partitioner.partition(topic, key, value, self._metadata.cluster)
                sticky = s.builtin_partitioner and (key is None or self._partitioner.ignore_keys)
            tps = self._topic_partitions.get(topic)
            if tps is None or len(tps) <= partition:
                tps = self._topic_partitions[topic] = [
                    TopicPartition(topic, p)
                    for p in range(max(partition + 1, len(info.partitions)))
                ]
            tp = tps[partition]
            if self._transaction is not None:
                self._transaction.on_send(tp)
            acc = self._accumulator
            if not acc.has_room_for(size):
                self._reserve(size, deadline)
            wake = acc.append(tp, timestamp, key, value, headers, future, size, now)
            if sticky:
                self._partitioner.on_append(topic, partition, size)
        if wake:
            self._sender.wakeup()

    def _reserve(self, size: int, deadline_ms: int) -> None:
        """Wait (holding the lock's condition) until `size` bytes fit in `buffer.memory`."""
        acc = self._accumulator
        acc.memory_waiters += 1
        try:
            self._sender.wakeup()
            while not acc.has_room_for(size):
                self._check_open()
                remaining = deadline_ms - now_ms()
                if remaining <= 0:
                    raise RequestTimedOutError(
                        "failed to allocate memory within the configured max blocking time "
                        f"{self.config['max.block.ms']} ms (buffer.memory={self.config['buffer.memory']})"
                    )
                self._lock.wait(remaining / 1000)
        finally:
            acc.memory_waiters -= 1

    def _acknowledge(self, on_delivery: DeliveryCallback | None) -> DeliveryCallback:
        """A delivery callback that tells the interceptors first, then calls `on_delivery`."""
        interceptors = self._interceptors

        def acknowledge(metadata: Any, error: BaseException | None) -> None:
            for interceptor in interceptors:
                _call_interceptor(interceptor, "on_acknowledgement", metadata, error)
            if on_delivery is not None:
                on_delivery(metadata, error)

        return acknowledge

    # ------------------------------------------------------------------ bulk path

    def send_arrow(
        self, topic: str, record_batch: pa.RecordBatch | pa.Table, partition: int | None = None
    ) -> Future:
        """Send every row of `record_batch` (columns `value`, optional `key`, `timestamp`,
        `headers`, `partition`), partitioned and encoded vectorized; the future resolves to
        a list of `BatchMetadata` (one per encoded batch) when all are acknowledged."""
        self._check_open()
        c = self.config
        deadline = now_ms() + c["max.block.ms"]
        if "value" not in record_batch.schema.names:
            raise ValueError(
                f"send_arrow needs a 'value' column; got columns {record_batch.schema.names}"
            )
        info = self._metadata.wait_for_topic(topic, deadline)
        partitions = self._partitions_of(topic, record_batch, partition, len(info.partitions))
        columns = [
            n for n in ("key", "value", "timestamp", "headers") if n in record_batch.schema.names
        ]
        data = record_batch.select(columns)
        max_batch_bytes = max(c["batch.size"], c["max.request.size"] - _REQUEST_OVERHEAD_BYTES)
        aggregate = BatchesFuture()
        encoded: list[tuple[int, bytes]] = []
        wall_ms = int(time.time() * 1000)
        for p, part in split_by_partition(data, partitions):
            for raw in build_batches(
                part, now_ms=wall_ms, compression=self._compression, max_batch_bytes=max_batch_bytes
            ):
                encoded.append((p, raw))
        aggregate.expect(len(encoded))
        for p, raw in encoded:
            count = int.from_bytes(raw[_RECORDS_COUNT_OFFSET : _RECORDS_COUNT_OFFSET + 4], "big")
            thunk = aggregate.thunk()
            try:
                with self._lock:
                    if self._transaction is not None:
                        self._transaction.on_send(TopicPartition(topic, p))
                    self._reserve(len(raw), deadline)
                    self._accumulator.append_prebuilt(
                        TopicPartition(topic, p), raw, count, thunk, now_ms()
                    )
            except KafkaError as e:
                thunk(None, e)
            self._sender.wakeup()
        return aggregate.future

    def _partitions_of(
        self, topic: str, batch: pa.RecordBatch | pa.Table, partition: int | None, count: int
    ) -> np.ndarray:
        n = batch.num_rows
        if partition is not None:
            if not 0 <= partition < count:
                raise ValueError(
                    f"invalid partition {partition}: topic {topic!r} has {count} partitions"
                )
            return np.full(n, partition, dtype=np.int32)
        explicit = None
        if "partition" in batch.schema.names:
            column = batch.column("partition")
            filled = pc.fill_null(column, -1)
            explicit = np.asarray(filled.to_numpy(zero_copy_only=False), dtype=np.int32)
            if n and (explicit.max() >= count or explicit.min() < -1):
                raise ValueError(f"a 'partition' value is outside [0, {count}) for topic {topic!r}")
            if column.null_count == 0:
                return explicit
        parts = self._partition_rows(topic, batch)
        return parts if explicit is None else np.where(explicit >= 0, explicit, parts)

    def _partition_rows(self, topic: str, batch: pa.RecordBatch | pa.Table) -> np.ndarray:
        """The partitioner's choice for every row (a null `partition` value), vectorized."""
        if not hasattr(self._partitioner, "partition_array"):
            raise TypeError(
                "send_arrow cannot call a per-record partitioner.class for every row; "
                "add an int 'partition' column or pass partition="
            )
        keys = batch.column("key") if "key" in batch.schema.names else None
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        sizes = byte_lengths(batch, "value") + (
            byte_lengths(batch, "key") if keys is not None else 0
        )
        with self._lock:
            return self._partitioner.partition_array(topic, keys, sizes, self._metadata.cluster)

    # ---------------------------------------------------------------- lifecycle

    def flush(self, timeout_ms: int | None = None) -> None:
        """Send everything queued now and wait until it is acknowledged or failed."""
        with self._lock:
            self._accumulator.flushes_in_progress += 1
            batches = self._accumulator.incomplete_batches()
        self._sender.wakeup()
        deadline = None if timeout_ms is None else now_ms() + timeout_ms
        try:
            with self._lock:
                while any(not b.done for b in batches):
                    remaining = None if deadline is None else deadline - now_ms()
                    if remaining is not None and remaining <= 0:
                        raise RequestTimedOutError(f"flush did not complete within {timeout_ms} ms")
                    self._lock.wait(None if remaining is None else remaining / 1000)
        finally:
            with self._lock:
                self._accumulator.flushes_in_progress -= 1

    def metrics(self) -> dict[str, dict[str, float]]:
        """This producer's metrics, {group: {name: value}} (`producer-metrics`:
        `produce-throttle-time-avg`, `produce-throttle-time-max`: the brokers' throttle times
        in ms over `metrics.sample.window.ms` × `metrics.num.samples`)."""
        return metric_values(self.client_metrics)

    def close(self, timeout_ms: int | None = None) -> None:
        """Send what is queued (waiting up to `timeout_ms`, forever when None), then stop; what
        is still unsent after the timeout fails. `close(0)` fails queued records at once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._sender.is_current_thread():  # called from a callback: cannot wait for itself
            self._sender.initiate_close(force=True)
            return
        self._sender.initiate_close(force=timeout_ms == 0)
        if not self._sender.join(None if timeout_ms is None else timeout_ms / 1000):
            self._sender.initiate_close(force=True)
            self._sender.join(None)
        for interceptor in self._interceptors:
            _call_interceptor(interceptor, "close")
        self._network.close()

    def partitions_for(self, topic: str) -> list[int]:
        """The partitions of `topic` (waiting for its metadata up to `max.block.ms`)."""
        info = self._metadata.wait_for_topic(topic, now_ms() + self.config["max.block.ms"])
        return [p.partition for p in info.partitions]

    def statistics(self) -> dict[str, int]:
        with self._lock:
            return self._accumulator.statistics()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("cannot send after the producer is closed")
        if self._sender.fatal_error is not None:
            raise self._sender.fatal_error


def _serialize(serializer: Any, topic: str, data: Any, what: str) -> bytes | None:
    if serializer is not None:
        data = (
            serializer(data)
            if not hasattr(serializer, "serialize")
            else serializer.serialize(topic, data)
        )
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    if isinstance(data, str):
        return data.encode("utf-8")
    raise TypeError(
        f"the {what} must be bytes, str or None, got {type(data).__name__}; "
        f"set {what}.serializer to convert it"
    )


def _normalize_headers(headers: Headers) -> tuple[tuple[str, bytes | None], ...]:
    if not headers:
        return ()
    items = headers.items() if isinstance(headers, Mapping) else headers
    out = []
    for h_key, h_value in items:
        if not isinstance(h_key, str):
            raise TypeError(f"header keys must be str, got {type(h_key).__name__}")
        if isinstance(h_value, str):
            h_value = h_value.encode("utf-8")
        elif isinstance(h_value, bytearray | memoryview):
            h_value = bytes(h_value)
        elif h_value is not None and not isinstance(h_value, bytes):
            raise TypeError(f"header {h_key!r}: values must be bytes, str or None")
        out.append((h_key, h_value))
    return tuple(out)


def _call_interceptor(interceptor: Any, method: str, *args: Any) -> Any:
    """Interceptor errors are logged and ignored, as Kafka's `ProducerInterceptors` does."""
    fn = getattr(interceptor, method, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception:
        logger.exception("interceptor %r.%s raised", interceptor, method)
        return None


__all__ = [
    "BatchMetadata",
    "ClientClosedError",
    "KafkaProducer",
    "ProducerRecord",
    "RecordMetadata",
]
