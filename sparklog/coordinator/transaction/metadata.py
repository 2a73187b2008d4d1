"""One transactional id's state (Kafka's `TransactionMetadata` and `TransactionState`).

States: Empty -> Ongoing -> PrepareCommit | PrepareAbort -> CompleteCommit | CompleteAbort ->
Ongoing ...; PrepareEpochFence is the moment between fencing an Ongoing transaction (epoch
bumped) and its abort being durable; Dead is an expired id. `pending` is set while a write that
changes this id is in flight: any other request for it answers CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from sparklog.errors import IllegalStateTransition
from sparklog.structs import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TopicPartition

#: Kafka bumps to a fresh producer id once the epoch reaches Short.MAX_VALUE - 1.
MAX_PRODUCER_EPOCH = 32_767


class TxnState(enum.StrEnum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def is_prepared(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


_T = TxnState
#: state -> the states it may be entered from (Kafka's `TransactionState.validPreviousStates`).
#: One addition: PrepareEpochFence -> Ongoing, the fence of a timed-out or superseded
#: transaction taken back when its abort could not be written (the tick tries again).
VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    _T.EMPTY: frozenset({_T.EMPTY, _T.COMPLETE_COMMIT, _T.COMPLETE_ABORT}),
    _T.ONGOING: frozenset(
        {_T.ONGOING, _T.EMPTY, _T.COMPLETE_COMMIT, _T.COMPLETE_ABORT, _T.PREPARE_EPOCH_FENCE}
    ),
    _T.PREPARE_COMMIT: frozenset({_T.ONGOING}),
    _T.PREPARE_ABORT: frozenset(
        {_T.ONGOING, _T.PREPARE_EPOCH_FENCE, _T.EMPTY, _T.COMPLETE_COMMIT, _T.COMPLETE_ABORT}
    ),
    _T.COMPLETE_COMMIT: frozenset({_T.PREPARE_COMMIT}),
    _T.COMPLETE_ABORT: frozenset({_T.PREPARE_ABORT}),
    _T.DEAD: frozenset({_T.EMPTY, _T.COMPLETE_COMMIT, _T.COMPLETE_ABORT}),
    _T.PREPARE_EPOCH_FENCE: frozenset({_T.ONGOING}),
}


@dataclasses.dataclass(slots=True)
class TransactionMetadata:
    """What the coordinator knows about one transactional id."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: set[TopicPartition] = dataclasses.field(default_factory=set)
    #: consumer groups whose offsets join this transaction (AddOffsetsToTxn)
    groups: set[str] = dataclasses.field(default_factory=set)
    txn_start_ms: int = -1
    last_update_ms: int = -1
    pending: bool = False
    #: the transaction version the client speaks (Kafka's `clientTransactionVersion`): 2 once a
    #: transaction was added implicitly or ended with EndTxn v5 (KIP-890 part 2), else 1
    transaction_version: int = 1
    #: TV2: the producer id the next transaction gets when this one's epoch bump overflowed
    #: (Kafka's `nextProducerId`); NO_PRODUCER_ID otherwise
    next_producer_id: int = NO_PRODUCER_ID
    #: TV2, after a restart: adds of the open transaction may have been forgotten, so the
    #: producer may only abort at this epoch (in memory only; `adds._add_in_memory`)
    suspect: bool = False

    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= MAX_PRODUCER_EPOCH - 1

    def to_record(self) -> dict[str, Any]:
        """The JSON-able form persisted in the coordinator table."""
        return {
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "last_producer_id": self.last_producer_id,
            "last_producer_epoch": self.last_producer_epoch,
            "timeout_ms": self.timeout_ms,
            "state": self.state.value,
            "partitions": sorted([t, p] for t, p in self.partitions),
            "groups": sorted(self.groups),
            "txn_start_ms": self.txn_start_ms,
            "last_update_ms": self.last_update_ms,
            "transaction_version": self.transaction_version,
            "next_producer_id": self.next_producer_id,
        }

    @classmethod
    def from_record(cls, transactional_id: str, record: dict[str, Any]) -> TransactionMetadata:
        return cls(
            transactional_id=transactional_id,
            producer_id=int(record["producer_id"]),
            producer_epoch=int(record["producer_epoch"]),
            timeout_ms=int(record["timeout_ms"]),
            state=TxnState(record["state"]),
            last_producer_id=int(record["last_producer_id"]),
            last_producer_epoch=int(record["last_producer_epoch"]),
            partitions={TopicPartition(t, int(p)) for t, p in record["partitions"]},
            groups=set(record["groups"]),
            txn_start_ms=int(record["txn_start_ms"]),
            last_update_ms=int(record["last_update_ms"]),
            transaction_version=int(record.get("transaction_version", 1)),
            next_producer_id=int(record.get("next_producer_id", NO_PRODUCER_ID)),
        )

    def matches(
        self,
        states: set[str] | None,
        producer_ids: set[int] | None,
        duration_filter_ms: int,
        now_ms: int,
    ) -> bool:
        """Whether ListTransactions' filters keep this id (Kafka's
        `TransactionStateManager.listTransactionStates`): empty filters match everything."""
        if states and self.state.value not in states:
            return False
        if producer_ids and self.producer_id not in producer_ids:
            return False
        return duration_filter_ms < 0 or (
            self.txn_start_ms >= 0 and now_ms - self.txn_start_ms >= duration_filter_ms
        )

    def transition_to(self, state: TxnState) -> None:
        """Move this (in-memory) metadata to `state`, checked against the table."""
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalStateTransition(
                f"transactional id {self.transactional_id}: {self.state.value} -> {state.value}"
            )
        self.state = state

    def copy(self, **changes: Any) -> TransactionMetadata:
        """A copy with `changes`; sets are copied so the original stays as it was."""
        new = dataclasses.replace(
            self,
            partitions=set(self.partitions),
            groups=set(self.groups),
            pending=False,
            suspect=False,
        )
        for name, value in changes.items():
            setattr(new, name, value)
        return new


def check_transition(old: TransactionMetadata, new: TransactionMetadata) -> None:
    """Refuse a move outside `VALID_PREVIOUS_STATES`: a bug in the coordinator."""
    if old.state not in VALID_PREVIOUS_STATES[new.state]:
        raise IllegalStateTransition(
            f"transactional id {old.transactional_id}: {old.state.value} -> {new.state.value}"
        )
