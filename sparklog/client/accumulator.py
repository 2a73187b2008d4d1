"""Per-partition queues of record batches waiting to be sent (Kafka's `RecordAccumulator`).

Theory of operation. `send()` appends a record to the last open batch of its partition, or
opens a new one. A partition's head batch becomes sendable when it is full (`batch.size`, or
a second batch queued behind it), has waited `linger.ms`, a flush or close is under way, or
senders block on `buffer.memory`; a retried batch instead waits its backoff (`retry.backoff.ms`
doubling per attempt up to `retry.backoff.max.ms`), unless its partition has a newer leader
epoch than when it was last sent: then it goes at once (KIP-951). The sender asks
`ready()` which leaders have sendable data, then `drain()`s at most one batch per partition per
request, up to `max.request.size`, rotating the starting partition per node for fairness.

Ordering: a batch that must be retried goes back to the head of its queue, sorted by sequence
number, and its partition is muted while any earlier batch of it is still in flight, so
retries never overtake (what Kafka's idempotent producer guarantees with up to 5 requests
in flight).

Sans-IO and not thread-safe: time is passed in as `now_ms`; the producer serializes calls
with its lock. Memory: `used_bytes` counts the estimated bytes of every incomplete batch;
`used_bytes <= buffer_memory` except for a single record larger than what is free when the
buffer is empty.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from typing import Any, NamedTuple

from sparklog.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE
from sparklog.records.compression import CompressionType
from sparklog.records.crc import crc32c
from sparklog.records.records_builder import new_records_builder, seal_records
from sparklog.structs import TopicPartition

from .metadata import Cluster
from .record_future import resolve_batch

#: The bytes a record can take beyond its key, value and headers (varints, attributes).
RECORD_OVERHEAD_BYTES = 21


class RecordMetadata(NamedTuple):
    """Where an acknowledged record went; offset -1 when unknown (acks=0). A named tuple:
    one is made per record, and a frozen dataclass costs twice as much to build."""

    topic: str
    partition: int
    offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Where a batch of `send_arrow` went: its first offset and record count."""

    topic: str
    partition: int
    base_offset: int
    record_count: int
    timestamp: int


Thunk = Callable[[Any, BaseException | None], None]
_TRANSACTIONAL_BIT = 0x10  # attributes bit 4 (the low byte of the int16)


def estimate_record_bytes(key: bytes | None, value: bytes | None, headers: tuple) -> int:
    """An upper bound of a record's encoded size (Kafka's `estimateSizeInBytesUpperBound`)."""
    size = RECORD_OVERHEAD_BYTES + (len(key) if key else 0) + (len(value) if value else 0)
    for h_key, h_value in headers:
        size += 10 + len(h_key.encode()) + (len(h_value) if h_value else 0)
    return size


class ProducerBatch:
    """Records for one partition, sent and acknowledged together (Kafka's `ProducerBatch`).

    Either `builder` (records appended one by one, see `records_builder`) or `prebuilt`
    bytes from the Arrow path. Producer id, epoch and base sequence are set when the batch is
    first drained and kept on retries.
    """

    __slots__ = (
        "tp",
        "created_ms",
        "builder",
        "thunks",
        "size_bytes",
        "reserved_bytes",
        "prebuilt",
        "prebuilt_count",
        "closed",
        "attempts",
        "last_attempt_ms",
        "backoff_ms",
        "base_sequence",
        "producer_id",
        "producer_epoch",
        "leader_epoch",
        "done",
        "transactional",
    )

    def __init__(
        self,
        tp: TopicPartition,
        created_ms: int,
        *,
        prebuilt: bytes | None = None,
        prebuilt_count: int = 0,
        thunk: Thunk | None = None,
    ) -> None:
        self.tp = tp
        self.created_ms = created_ms
        self.builder: Any = None if prebuilt is not None else new_records_builder()
        self.thunks: list[Thunk] = [] if thunk is None else [thunk]
        self.prebuilt = prebuilt
        self.prebuilt_count = prebuilt_count
        self.size_bytes = HEADER_SIZE if prebuilt is None else len(prebuilt)
        self.reserved_bytes = 0 if prebuilt is None else len(prebuilt)  # of buffer.memory
        self.closed = prebuilt is not None
        self.attempts = 0
        self.last_attempt_ms = created_ms
        self.backoff_ms = 0
        self.base_sequence: int | None = None
        self.producer_id = -1
        self.producer_epoch = -1
        self.leader_epoch = -1  # of the partition's leader when this batch was last drained
        self.done = False
        self.transactional = False

    def __repr__(self) -> str:
        return (
            f"ProducerBatch({self.tp.topic}-{self.tp.partition}, {self.record_count} records, "
            f"seq={self.base_sequence}, attempts={self.attempts})"
        )

    @property
    def record_count(self) -> int:
        return self.prebuilt_count if self.prebuilt is not None else self.builder.count

    def is_full(self, batch_size: int) -> bool:
        return self.closed or self.size_bytes >= batch_size

    def try_append(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: tuple,
        thunk: Thunk,
        size: int,
        batch_size: int,
    ) -> bool:
        """Append when the batch is open and has room (an empty batch takes any record)."""
        if self.closed or (self.thunks and self.size_bytes + size > batch_size):
            return False
        self.builder.append(timestamp, key, value, headers)
        self.thunks.append(thunk)
        self.size_bytes += size
        self.reserved_bytes += size
        return True

    def encode(self, compression: CompressionType) -> bytes:
        """The v2 batch bytes with this batch's producer id, epoch and sequence."""
        sequence = -1 if self.base_sequence is None else self.base_sequence
        if self.prebuilt is not None:
            return restamp_producer(
                self.prebuilt,
                self.producer_id,
                self.producer_epoch,
                sequence,
                transactional=self.transactional,
            )
        return seal_records(
            self.builder,
            compression,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=sequence,
            is_transactional=self.transactional,
        )

    def complete(self, base_offset: int, log_append_time_ms: int) -> None:
        """Resolve every record's future; offsets follow the base offset in order."""
        tp = self.tp
        if self.prebuilt is not None:
            meta = BatchMetadata(
                tp.topic, tp.partition, base_offset, self.prebuilt_count, log_append_time_ms
            )
            self.thunks[0](meta, None)
        else:
            n = len(self.thunks)
            offsets = range(base_offset, base_offset + n) if base_offset >= 0 else repeat(-1, n)
            times = (
                self.builder.timestamps()
                if log_append_time_ms < 0
                else repeat(log_append_time_ms, n)
            )
            # built without a Python frame per record (a named tuple's __new__ is one)
            fields = zip(repeat(tp.topic, n), repeat(tp.partition, n), offsets, times, strict=True)
            metadatas = list(map(RecordMetadata._make, fields))
            resolve_batch(self.thunks, metadatas)
        self.done = True

    def fail(self, error: BaseException) -> None:
        """Fail every record's future with `error`."""
        for thunk in self.thunks:
            thunk(None, error)
        self.done = True


def restamp_producer(
    data: bytes,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    *,
    transactional: bool = False,
) -> bytes:
    """A prebuilt batch with producer id, epoch, base sequence (and the transactional flag)
    rewritten, CRC recomputed."""
    raw = bytearray(data)
    if transactional:
        raw[ATTRIBUTES_OFFSET + 1] |= _TRANSACTIONAL_BIT
    raw[43:51] = producer_id.to_bytes(8, "big", signed=True)
    raw[51:53] = producer_epoch.to_bytes(2, "big", signed=True)
    raw[53:57] = base_sequence.to_bytes(4, "big", signed=True)
    raw[CRC_OFFSET:ATTRIBUTES_OFFSET] = crc32c(memoryview(raw)[ATTRIBUTES_OFFSET:]).to_bytes(
        4, "big"
    )
    return bytes(raw)


@dataclass(frozen=True, slots=True)
class ReadyCheck:
    """Which leaders have sendable batches, when to look again, and topics lacking a leader."""

    nodes: frozenset[int]
    next_ready_check_ms: int
    unknown_leader_topics: frozenset[str]


class RecordAccumulator:
    """The queues; see the module docstring for the rules."""

    def __init__(
        self,
        *,
        batch_size: int,
        linger_ms: int,
        buffer_memory: int,
        delivery_timeout_ms: int,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int,
    ) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.buffer_memory = buffer_memory
        self.delivery_timeout_ms = delivery_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = max(retry_backoff_max_ms, retry_backoff_ms)
        self.used_bytes = 0
        self.memory_waiters = 0
        self.flushes_in_progress = 0
        self.closed = False
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._in_flight: dict[TopicPartition, int] = {}
        self._incomplete: dict[ProducerBatch, None] = {}  # insertion-ordered set
        self._drain_start: dict[int, int] = {}

    # ------------------------------------------------------------------ appending

    def has_room_for(self, size: int) -> bool:
        """Whether `size` more bytes fit in `buffer.memory` (a record alone always fits)."""
        return self.used_bytes + size <= self.buffer_memory or self.used_bytes == 0

    def append(
        self,
        tp: TopicPartition,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: tuple,
        thunk: Thunk,
        size: int,
        now_ms: int,
    ) -> bool:
        """Queue a record; True when the sender should wake: a batch was created, or this record
        filled one (a sender woken per record would take the GIL from the caller each time)."""
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        last = queue[-1] if queue else None
        if last is not None and last.try_append(
            timestamp, key, value, headers, thunk, size, self.batch_size
        ):
            self.used_bytes += size
            return last.is_full(self.batch_size)
        batch = ProducerBatch(tp, now_ms)
        appended = batch.try_append(timestamp, key, value, headers, thunk, size, self.batch_size)
        assert appended, "an empty batch takes any record"
        self.used_bytes += size
        if last is not None:
            last.closed = True
        queue.append(batch)
        self._incomplete[batch] = None
        return True

    def append_prebuilt(
        self, tp: TopicPartition, data: bytes, record_count: int, thunk: Thunk, now_ms: int
    ) -> None:
        """Queue an encoded batch (the Arrow path) behind whatever the partition holds."""
        queue = self._queues.setdefault(tp, deque())
        if queue:
            queue[-1].closed = True
        batch = ProducerBatch(tp, now_ms, prebuilt=data, prebuilt_count=record_count, thunk=thunk)
        self.used_bytes += batch.reserved_bytes
        queue.append(batch)
        self._incomplete[batch] = None

    # ---------------------------------------------------------------- sending

    def ready(self, now_ms: int, cluster: Cluster) -> ReadyCheck:
        """Leaders with a sendable head batch (Kafka's `RecordAccumulator.ready`)."""
        nodes: set[int] = set()
        unknown: set[str] = set()
        next_check = self.linger_ms if self.linger_ms > 0 else 1000
        urgent = self.memory_waiters > 0 or self.flushes_in_progress > 0 or self.closed
        for tp, queue in self._queues.items():
            if not queue:
                continue
            batch = queue[0]
            leader = cluster.leader_for(tp)
            if leader is None:
                unknown.add(tp.topic)
                continue
            if leader in nodes or self._muted(tp, batch):
                continue
            waited = now_ms - batch.last_attempt_ms
            backing_off = self._backing_off(batch, now_ms, cluster)
            wait_ms = batch.backoff_ms if backing_off else self.linger_ms
            full = len(queue) > 1 or batch.is_full(self.batch_size)
            if not backing_off and (full or urgent or waited >= wait_ms):
                nodes.add(leader)
            else:
                next_check = min(next_check, max(1, wait_ms - waited))
        return ReadyCheck(frozenset(nodes), next_check, frozenset(unknown))

    @staticmethod
    def _backing_off(batch: ProducerBatch, now_ms: int, cluster: Cluster) -> bool:
        """A retried batch waits its backoff, unless the leader changed since it was sent
        (Kafka's `RecordAccumulator.shouldBackoff` with KIP-951)."""
        if batch.attempts == 0 or now_ms - batch.last_attempt_ms >= batch.backoff_ms:
            return False
        epoch = cluster.leader_epoch_for(batch.tp)
        return not (batch.leader_epoch >= 0 and epoch > batch.leader_epoch)

    def _muted(self, tp: TopicPartition, head: ProducerBatch) -> bool:
        """A retried head batch waits until nothing earlier of its partition is in flight."""
        return head.attempts > 0 and self._in_flight.get(tp, 0) > 0

    def drain(
        self,
        cluster: Cluster,
        node: int,
        max_request_size: int,
        now_ms: int,
        sendable: Callable[[TopicPartition], bool] | None = None,
    ) -> list[ProducerBatch]:
        """Take at most one sendable batch per partition led by `node`, within the size limit
        (a transactional producer's `sendable` holds back partitions not yet in the
        transaction)."""
        tps = [
            tp
            for tp, q in self._queues.items()
            if q and cluster.leader_for(tp) == node and (sendable is None or sendable(tp))
        ]
        if not tps:
            return []
        start = self._drain_start.get(node, 0) % len(tps)
        self._drain_start[node] = start + 1
        out: list[ProducerBatch] = []
        size = 0
        for tp in tps[start:] + tps[:start]:
            batch = self._queues[tp][0]
            if self._muted(tp, batch):
                continue
            if self._backing_off(batch, now_ms, cluster):
                continue
            if out and size + batch.size_bytes > max_request_size:
                break
            self._queues[tp].popleft()
            batch.closed = True
            batch.leader_epoch = cluster.leader_epoch_for(tp)
            self._in_flight[tp] = self._in_flight.get(tp, 0) + 1
            size += batch.size_bytes
            out.append(batch)
        return out

    def on_attempt_done(self, batch: ProducerBatch) -> None:
        """The request carrying `batch` completed (whatever the outcome)."""
        left = self._in_flight.get(batch.tp, 0) - 1
        assert left >= 0, "a batch finished that was not in flight"
        self._in_flight[batch.tp] = left

    def reenqueue(self, batch: ProducerBatch, now_ms: int) -> None:
        """Put a batch to retry back in its queue, in sequence order, with a backoff."""
        batch.attempts += 1
        batch.last_attempt_ms = now_ms
        exponent = min(batch.attempts - 1, 20)
        batch.backoff_ms = min(self.retry_backoff_max_ms, self.retry_backoff_ms * (1 << exponent))
        queue = self._queues.setdefault(batch.tp, deque())
        index = 0
        if batch.base_sequence is not None:
            while index < len(queue):
                queued = queue[index].base_sequence
                if queued is None or queued >= batch.base_sequence:
                    break
                index += 1
        queue.insert(index, batch)

    def deallocate(self, batch: ProducerBatch) -> None:
        """A batch is finished: free its memory and forget it."""
        if batch in self._incomplete:
            del self._incomplete[batch]
            self.used_bytes -= batch.reserved_bytes
            assert self.used_bytes >= 0

    # --------------------------------------------------------------- lifecycle

    def expire(self, now_ms: int) -> list[ProducerBatch]:
        """Remove and return queued batches older than `delivery.timeout.ms`."""
        expired: list[ProducerBatch] = []
        for queue in self._queues.values():
            keep = deque(b for b in queue if now_ms - b.created_ms < self.delivery_timeout_ms)
            if len(keep) != len(queue):
                expired.extend(
                    b for b in queue if now_ms - b.created_ms >= self.delivery_timeout_ms
                )
                queue.clear()
                queue.extend(keep)
        return expired

    def reset_sequences(self) -> None:
        """Forget every queued batch's sequence (after a new producer id or epoch)."""
        for queue in self._queues.values():
            for batch in queue:
                batch.base_sequence = None

    def abort_undrained(self) -> list[ProducerBatch]:
        """Remove and return every queued batch (a forced close)."""
        out = [b for q in self._queues.values() for b in q]
        for queue in self._queues.values():
            queue.clear()
        return out

    def incomplete_batches(self) -> list[ProducerBatch]:
        return list(self._incomplete)

    @property
    def has_incomplete(self) -> bool:
        return bool(self._incomplete)

    @property
    def has_undrained(self) -> bool:
        return any(self._queues.values())

    def in_flight_count(self, tp: TopicPartition) -> int:
        return self._in_flight.get(tp, 0)

    def queued(self, tp: TopicPartition) -> list[ProducerBatch]:
        return list(self._queues.get(tp, ()))

    def statistics(self) -> dict[str, int]:
        """Counts for monitoring and tests."""
        return {
            "used_bytes": self.used_bytes,
            "queued_batches": sum(len(q) for q in self._queues.values()),
            "in_flight_batches": sum(self._in_flight.values()),
            "incomplete_batches": len(self._incomplete),
        }
