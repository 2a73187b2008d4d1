"""The cleaner's sans-IO core: what it remembers while walking a log, and what it keeps of
each batch. Nothing here touches files or clocks; `cleaner.py` feeds it batches.

`OffsetMap` (Kafka's `SkimpyOffsetMap`): key -> latest offset of the dirty section. Kafka
stores a 16-byte MD5 per key in a fixed table sized by `log.cleaner.dedupe.buffer.size` and
accepts the (tiny) collision risk. Here the map is a dict keyed by the key bytes, so it is
exact; its budget counts what an entry costs in CPython (the key bytes plus
`ENTRY_OVERHEAD_BYTES`). Like Kafka's it is filled to `load_factor` of its budget only
(`log.cleaner.io.buffer.load.factor`); the cleaner then cleans only as far as the map reached.
Invariants: `used_bytes <= capacity_bytes * load_factor`; `latest_offset` never decreases
until `clear()`.

`CleanedTransactionMetadata` (Kafka's class of that name): fed the aborted transactions of
each range (from the txn indexes) and every batch in offset order, it tells which data batches
belong to aborted transactions and which markers may go, and writes the aborted transactions
whose marker stays into the cleaned segment's `.txnindex`.

`BatchFilter` (Kafka's log-cleaner `RecordFilter` with `MemoryRecords.filterTo`): the bytes a
cleaned segment keeps of one batch: the batch itself, the batch rebuilt with fewer records or a
KIP-534 delete horizon (same base offset, last offset delta, producer fields, attributes and
leader epoch), a header-only batch (`RETAIN_EMPTY`), or nothing.

Thread-safety: none; one cleaner owns one of each.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sparklog.records.batch import NO_TIMESTAMP, BatchHeader, RecordBatch, TimestampType
from sparklog.records.builder import assemble_batch
from sparklog.records.compression import CompressionType
from sparklog.records.control import ControlRecordType, control_type_of
from sparklog.records.errors import CorruptRecordError
from sparklog.records.record import Record, encode_record
from sparklog.records.varint import wrap_int64
from sparklog.storage.txn_index import AbortedTxn, TransactionIndex

__all__ = [
    "ENTRY_OVERHEAD_BYTES",
    "BatchFilter",
    "CleanedTransactionMetadata",
    "CleanerStats",
    "LastRecord",
    "OffsetMap",
    "empty_batch",
    "rebuild_batch",
]

INT64_MAX = 2**63 - 1


# CPython cost of one entry beyond the key's bytes: ~33 bytes of bytes-object header, ~40 of
# dict entry and index at 2/3 load, ~32 for an int offset above the small-int cache.
ENTRY_OVERHEAD_BYTES = 104


class OffsetMap:
    """Key bytes -> the largest offset seen for that key, with a memory budget."""

    __slots__ = ("_entries", "capacity_bytes", "latest_offset", "load_factor", "used_bytes")

    def __init__(self, capacity_bytes: int, load_factor: float = 0.9) -> None:
        if capacity_bytes <= 0 or not 0 < load_factor <= 1:
            raise ValueError(
                f"offset map needs a positive budget and a load factor in (0, 1], got "
                f"{capacity_bytes} bytes at {load_factor}"
            )
        self.capacity_bytes = capacity_bytes
        self.load_factor = load_factor
        self._entries: dict[bytes, int] = {}
        self.used_bytes = 0
        self.latest_offset = -1

    @property
    def size(self) -> int:
        """Number of keys held."""
        return len(self._entries)

    @property
    def utilization(self) -> float:
        """Fraction of the budget in use (Kafka's `utilization`, reported in cleaner stats)."""
        return self.used_bytes / self.capacity_bytes

    def put(self, key: bytes, offset: int) -> bool:
        """Map `key` to `offset`; False (and no change) if a new key would exceed the budget.

        Replacing the offset of a key already held costs nothing, so it always succeeds.
        """
        if key in self._entries:
            self._entries[key] = offset
            return True
        cost = len(key) + ENTRY_OVERHEAD_BYTES
        if self.used_bytes + cost > self.capacity_bytes * self.load_factor:
            return False
        self._entries[key] = offset
        self.used_bytes += cost
        return True

    def get(self, key: bytes) -> int:
        """The offset stored for `key`, or -1 when absent (Kafka's convention)."""
        return self._entries.get(key, -1)

    def update_latest_offset(self, offset: int) -> None:
        """Record that every offset up to `offset` has been read into the map."""
        self.latest_offset = max(self.latest_offset, offset)

    def clear(self) -> None:
        """Forget every key and the latest offset (start of a cleaning round)."""
        self._entries.clear()
        self.used_bytes = 0
        self.latest_offset = -1

    def __repr__(self) -> str:
        return (
            f"OffsetMap(keys={self.size}, used={self.used_bytes}/{self.capacity_bytes}, "
            f"latest_offset={self.latest_offset})"
        )


# -- transactions -----------------------------------------------------------------------------


@dataclass(slots=True)
class _AbortedTxnState:
    aborted: AbortedTxn
    last_observed_batch_offset: int | None = None


class CleanedTransactionMetadata:
    """Transaction state while the cleaner walks the log in offset order (Kafka's
    `CleanedTransactionMetadata`): which batches belong to aborted transactions, which markers
    may go, and which aborted transactions the cleaned `.txnindex` must list."""

    def __init__(self) -> None:
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, _AbortedTxnState] = {}
        self._aborted: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._pushed = 0
        self.cleaned_index: TransactionIndex | None = None

    def add_aborted_transactions(self, aborted: Sequence[AbortedTxn]) -> None:
        for txn in aborted:
            heapq.heappush(self._aborted, (txn.first_offset, self._pushed, txn))
            self._pushed += 1

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            txn = heapq.heappop(self._aborted)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, _AbortedTxnState(txn))

    def on_control_batch_read(self, header: BatchHeader, records: Sequence[Record]) -> bool:
        """Walk past a control batch; True if the marker may be discarded."""
        self._consume_aborted_up_to(header.last_offset)
        if not records:
            return True  # an empty control batch was cleaned before
        try:
            kind = control_type_of(records[0].key)
        except CorruptRecordError:
            return False  # a control record we do not know: keep it
        if kind == ControlRecordType.ABORT:
            state = self._ongoing_aborted.pop(header.producer_id, None)
            if state is not None and state.last_observed_batch_offset is not None:
                # Data of the transaction is still in the log: keep marker and index entry.
                if self.cleaned_index is not None:
                    self.cleaned_index.append(state.aborted)
                return False
            return True
        if kind == ControlRecordType.COMMIT:
            if header.producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(header.producer_id)
                return False
            return True
        return False

    def on_batch_read(self, header: BatchHeader) -> bool:
        """Walk past a data batch; True if it belongs to an aborted transaction."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        state = self._ongoing_aborted.get(header.producer_id)
        if state is not None:
            state.last_observed_batch_offset = header.last_offset
            return True
        self._ongoing_committed.add(header.producer_id)
        return False


@dataclass(slots=True)
class CleanerStats:
    """What one round did (Kafka's `CleanerStats`, without timings); mutable while it runs."""

    map_bytes_read: int = 0
    map_messages_read: int = 0
    bytes_read: int = 0
    messages_read: int = 0
    bytes_written: int = 0
    messages_written: int = 0
    invalid_messages: int = 0  # keyless records dropped (a compacted topic needs keys)
    groups_cleaned: int = 0
    buffer_utilization: float = 0.0


@dataclass(frozen=True, slots=True)
class LastRecord:
    """An active producer's last data offset (None: only markers) and epoch (Kafka's `LastRecord`)."""

    last_data_offset: int | None
    producer_epoch: int


class _Retention(enum.Enum):
    """Kafka's `BatchRetention`."""

    DELETE = 1  # drop the batch without looking at its records
    RETAIN_EMPTY = 2  # keep at least the header, even with no record left
    DELETE_EMPTY = 3  # keep the retained records; drop the batch if none


class BatchFilter:
    """Decides, batch by batch in offset order, what one cleaned group keeps (see module doc).

    `producers` maps each active producer to its last record; `round_upper_offset` is where
    the round stops (the batch ending there is always kept, as Kafka keeps it).
    """

    def __init__(
        self,
        offset_map: OffsetMap,
        txn: CleanedTransactionMetadata,
        producers: Mapping[int, LastRecord],
        *,
        now_ms: int,
        delete_retention_ms: int,
        round_upper_offset: int,
        stats: CleanerStats,
    ) -> None:
        self.offset_map = offset_map
        self.txn = txn
        self.producers = producers
        self.now_ms = now_ms
        self.delete_retention_ms = delete_retention_ms
        self.round_upper_offset = round_upper_offset
        self.stats = stats

    def filter(self, batch: RecordBatch, *, last_in_group: bool = False) -> bytes | None:
        """The bytes to keep of one batch (itself, rebuilt, or an empty header), or None.

        `last_in_group`: the batch ends the group, so it is kept at least as a header.
        """
        header = batch.header
        self.stats.messages_read += header.records_count
        records = batch.records() if header.is_control else None
        if records is not None:
            # Markers piggy-back on the tombstone horizon: gone once their data is gone and
            # the horizon has passed.
            can_discard_batch = self.txn.on_control_batch_read(header, records)
            discard_records = (
                can_discard_batch
                and header.has_delete_horizon
                and header.delete_horizon_ms <= self.now_ms
            )
        else:
            can_discard_batch = discard_records = self.txn.on_batch_read(header)
        retention = self._retention(header, discard_records, last_in_group)
        if retention is _Retention.DELETE:
            return None
        records = batch.records() if records is None else records
        retained = (
            []
            if discard_records
            else [r for r in records if header.is_control or self.should_retain_record(r, header)]
        )
        if not retained:
            if retention is _Retention.DELETE_EMPTY:
                return None
            return bytes(batch.data) if not records else empty_batch(header)
        self.stats.messages_written += len(retained)
        needs_horizon = not header.has_delete_horizon and (
            any(r.value is None for r in retained) or (can_discard_batch and header.is_control)
        )
        if len(retained) == len(records) and not needs_horizon:
            return bytes(batch.data)
        if needs_horizon:
            horizon_ms: int | None = min(self.now_ms + self.delete_retention_ms, INT64_MAX)
        else:
            horizon_ms = header.delete_horizon_ms if header.has_delete_horizon else None
        return rebuild_batch(header, retained, horizon_ms)

    def _retention(
        self, header: BatchHeader, discard_records: bool, last_in_group: bool
    ) -> _Retention:
        """Kafka's `checkBatchRetention`: keep the header of an active producer's last batch
        (its sequence and epoch matter to idempotence and fencing) and of the batch ending the
        group or round (its offsets bound the segment)."""
        if header.has_producer_id and _is_last_batch_of_producer(header, self.producers):
            return _Retention.RETAIN_EMPTY
        if header.next_offset == self.round_upper_offset or last_in_group:
            return _Retention.RETAIN_EMPTY
        return _Retention.DELETE if discard_records else _Retention.DELETE_EMPTY

    def should_retain_record(self, record: Record, header: BatchHeader) -> bool:
        """Kafka's `Cleaner.shouldRetainRecord` for v2 batches."""
        if record.offset > self.offset_map.latest_offset:
            return True  # beyond what this round mapped: not ours to judge
        if record.key is None:
            self.stats.invalid_messages += 1
            return False
        if record.offset < self.offset_map.get(record.key):
            return False  # a later record of the key exists
        if record.value is not None:
            return True
        return not header.has_delete_horizon or self.now_ms < header.delete_horizon_ms


def _is_last_batch_of_producer(header: BatchHeader, producers: Mapping[int, LastRecord]) -> bool:
    last = producers.get(header.producer_id)
    if last is None:
        return False
    if last.last_data_offset is not None:
        return header.last_offset == last.last_data_offset
    return header.is_control and header.producer_epoch == last.producer_epoch


def rebuild_batch(
    header: BatchHeader, records: Sequence[Record], delete_horizon_ms: int | None
) -> bytes:
    """`records` re-encoded with the source batch's header fields (Kafka's
    `buildRetainedRecordsInto`): same base offset, last offset delta (so the last sequence
    survives), producer fields, attributes and leader epoch; a delete horizon if given."""
    base_timestamp = records[0].timestamp if delete_horizon_ms is None else delete_horizon_ms
    body = b"".join(
        encode_record(
            r.offset - header.base_offset,
            wrap_int64(r.timestamp - base_timestamp),
            r.key,
            r.value,
            r.headers,
        )
        for r in records
    )
    log_append = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    return assemble_batch(
        body,
        records_count=len(records),
        last_offset_delta=header.last_offset_delta,
        base_offset=header.base_offset,
        base_timestamp=base_timestamp,
        max_timestamp=header.max_timestamp if log_append else max(r.timestamp for r in records),
        compression=header.compression,
        timestamp_type=header.timestamp_type,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        partition_leader_epoch=header.partition_leader_epoch,
        has_delete_horizon=delete_horizon_ms is not None,
    )


def empty_batch(header: BatchHeader) -> bytes:
    """A header-only batch with the source's offsets and producer fields (Kafka's
    `DefaultRecordBatch.writeEmptyHeader`: no compression, no base timestamp)."""
    return assemble_batch(
        b"",
        records_count=0,
        last_offset_delta=header.last_offset_delta,
        base_offset=header.base_offset,
        base_timestamp=NO_TIMESTAMP,
        max_timestamp=header.max_timestamp,
        compression=CompressionType.NONE,
        timestamp_type=header.timestamp_type,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        partition_leader_epoch=header.partition_leader_epoch,
    )
