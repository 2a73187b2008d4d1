"""One producer's pending state change over one append (Kafka's `ProducerAppendInfo`), and the
values an append produces: the `AppendOrigin` that decides what is checked, a `DuplicateBatch`
(a retried batch answered with its original offsets), the `TxnMetadata` of a transaction a
batch starts and the `CompletedTxn` a marker ends.

`ProducerStateManager.prepare_append` builds a `ProducerAppendInfo` from the producer's current
entry; `append` validates each batch against it (epoch fencing, sequence continuity,
transaction markers) and records the would-be state, and the manager applies it with
`update(info)` only after the segment write succeeded (see `producer_state`).
Thread-safety: none; the owning log serialises calls.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from sparklog.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from sparklog.records.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader
from sparklog.records.control import ControlRecordType, EndTransactionMarker
from sparklog.storage.producer_snapshot import ProducerStateEntry
from sparklog.structs import INT32_MAX


class AppendOrigin(enum.StrEnum):
    """Who appends, which decides how much is checked (Kafka's `AppendOrigin`)."""

    CLIENT = "client"  # a Produce request: epochs, sequences and duplicates
    REPLICATION = "replication"  # a follower copying the leader, or log recovery: nothing enforced
    COORDINATOR = "coordinator"  # WriteTxnMarkers from the transaction coordinator: epochs only


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    """Whether `next_sequence` directly follows `last_sequence` (0 follows INT32_MAX)."""
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == INT32_MAX)


@dataclass(frozen=True, slots=True)
class DuplicateBatch:
    """A client batch equal to a retained one: the broker answers with the original offsets."""

    producer_id: int
    producer_epoch: int
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a COMMIT/ABORT marker at `last_offset` (Kafka's `CompletedTxn`)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """An ongoing (`last_offset` None) or unreplicated transaction (Kafka's `TxnMetadata`)."""

    producer_id: int
    first_offset: int
    last_offset: int | None = None


class ProducerAppendInfo:
    """The pending state change of one producer over one append (Kafka's `ProducerAppendInfo`).

    Built from the producer's committed entry, which it never mutates; it validates each batch
    against the committed state and the batches appended to it before. After an exception the
    whole append is rejected and this object must be dropped.
    """

    __slots__ = ("_completed", "_current", "_started", "_updated", "origin", "producer_id")

    def __init__(
        self, producer_id: int, current_entry: ProducerStateEntry, origin: AppendOrigin
    ) -> None:
        self.producer_id = producer_id
        self.origin = AppendOrigin(origin)
        self._current = current_entry
        self._updated = current_entry.without_batches()
        self._started: list[TxnMetadata] = []
        self._completed: list[CompletedTxn] = []

    @property
    def started_transactions(self) -> tuple[TxnMetadata, ...]:
        return tuple(self._started)

    @property
    def completed_txns(self) -> tuple[CompletedTxn, ...]:
        """Non-empty transactions ended by markers in this append, in offset order."""
        return tuple(self._completed)

    def to_entry(self) -> ProducerStateEntry:
        """The pending entry (what `ProducerStateManager.update` merges in)."""
        return self._updated

    def append(
        self,
        header: BatchHeader,
        *,
        base_offset: int | None = None,
        marker: EndTransactionMarker | None = None,
        transaction_version: int = 0,
    ) -> CompletedTxn | None:
        """Validate and add one batch; returns the transaction a marker completed, if any.

        `base_offset` overrides `header.base_offset` (the offset the log assigns); a control batch
        with records needs its decoded `marker`; `transaction_version` is the marker's (2 = KIP-890).
        """
        assert header.producer_id == self.producer_id, (header.producer_id, self.producer_id)
        first_offset = header.base_offset if base_offset is None else base_offset
        if not header.is_control:
            self._append_data_batch(header, first_offset)
            return None
        if header.records_count == 0:
            return None  # the cleaner removed the marker: the txn is already gone from the log
        assert marker is not None, "a control batch needs its decoded end-transaction marker"
        return self._append_end_txn_marker(header, marker, first_offset, transaction_version)

    def _append_data_batch(self, header: BatchHeader, first_offset: int) -> None:
        # Kafka's appendDataBatch.
        epoch, first_seq = header.producer_epoch, header.base_sequence
        self._check_producer_epoch(epoch, first_offset, transaction_version=0)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        updated = self._updated
        last_offset = first_offset + header.last_offset_delta
        delta = header.last_offset_delta
        updated.add_batch(epoch, header.last_sequence, last_offset, delta, header.max_timestamp)
        if updated.current_txn_first_offset is not None and not header.is_transactional:
            raise InvalidTxnStateError(
                f"Expected transactional write from producer {self.producer_id} at offset "
                f"{first_offset}: its transaction from offset "
                f"{updated.current_txn_first_offset} is still open"
            )
        if updated.current_txn_first_offset is None and header.is_transactional:
            updated.current_txn_first_offset = first_offset
            self._started.append(TxnMetadata(self.producer_id, first_offset))

    def _append_end_txn_marker(
        self,
        header: BatchHeader,
        marker: EndTransactionMarker,
        offset: int,
        transaction_version: int,
    ) -> CompletedTxn | None:
        # Kafka's appendEndTxnMarker: an empty transaction (no data) completes nothing, as it
        # moves neither the LSO nor the txn index.
        self._check_producer_epoch(header.producer_epoch, offset, transaction_version)
        fenced = self._updated.coordinator_epoch > marker.coordinator_epoch
        if fenced and self.origin is not AppendOrigin.REPLICATION:
            raise TransactionCoordinatorFencedError(
                f"Invalid coordinator epoch for producer {self.producer_id} at offset "
                f"{offset}: {marker.coordinator_epoch} (zombie), "
                f"{self._updated.coordinator_epoch} (current)"
            )
        completed = None
        if self._updated.current_txn_first_offset is not None:
            is_aborted = marker.control_type == ControlRecordType.ABORT
            first_offset = self._updated.current_txn_first_offset
            completed = CompletedTxn(self.producer_id, first_offset, offset, is_aborted)
            self._completed.append(completed)
        self._updated.end_txn(header.producer_epoch, marker.coordinator_epoch, header.max_timestamp)
        return completed

    def _check_producer_epoch(
        self, producer_epoch: int, offset: int, transaction_version: int
    ) -> None:
        # KIP-890 transactions v2: the coordinator bumps the epoch before each marker, so a marker
        # must carry a strictly higher epoch; data batches and older versions allow an equal one.
        current = self._updated.producer_epoch
        strict = transaction_version >= 2
        if not (producer_epoch <= current if strict else producer_epoch < current):
            return
        if strict and producer_epoch == current and self._updated.current_txn_first_offset is None:
            return  # KAFKA-19999: a retried marker for a transaction that already ended
        if self.origin is AppendOrigin.REPLICATION:
            return  # the leader validated it; a follower follows the leader's log
        comparison = "<=" if strict else "<"
        raise InvalidProducerEpochError(
            f"Epoch of producer {self.producer_id} at offset {offset} is {producer_epoch}, which "
            f"is {comparison} the last seen epoch {current}"
        )

    def _check_sequence(self, producer_epoch: int, first_seq: int, offset: int) -> None:
        # Kafka's ProducerAppendInfo.checkSequence (without KIP-890 verification state).
        updated, current = self._updated, self._current
        if producer_epoch != updated.producer_epoch:
            # A new epoch restarts at 0, unless the producer is unknown here: its state expired or
            # its batches were all deleted (retention, DeleteRecords), so any sequence is accepted.
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceNumberError(
                    f"Invalid sequence number for new epoch of producer {self.producer_id} at "
                    f"offset {offset}: {producer_epoch} (request epoch), {first_seq} "
                    f"(seq. number), {updated.producer_epoch} (current producer epoch)"
                )
            return
        if not updated.is_empty:
            current_last_seq = updated.last_seq
        elif producer_epoch == current.producer_epoch:
            current_last_seq = current.last_seq
        else:
            current_last_seq = NO_SEQUENCE
        if current.producer_epoch != NO_PRODUCER_EPOCH and not in_sequence(
            current_last_seq, first_seq
        ):
            raise OutOfOrderSequenceNumberError(
                f"Out of order sequence number for producer {self.producer_id} at offset "
                f"{offset}: {first_seq} (incoming seq. number), {current_last_seq} "
                f"(current end sequence number)"
            )

    def __repr__(self) -> str:
        u = self._updated
        return (
            f"ProducerAppendInfo(producer_id={self.producer_id}, epoch={u.producer_epoch}, "
            f"seq={u.first_seq}..{u.last_seq}, txn_first_offset={u.current_txn_first_offset}, "
            f"started={len(self._started)}, completed={len(self._completed)})"
        )
