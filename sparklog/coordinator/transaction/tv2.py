"""Transaction version 2 (KIP-890 part 2) rules of the transaction coordinator, without I/O.

With TV2 the client never sends AddPartitionsToTxn: the broker adds a partition to the
transaction when the first transactional batch reaches it (Produce v12), and the group
coordinator adds the group when TxnOffsetCommit v5 arrives. Every transaction end (EndTxn v5)
bumps the producer epoch, the markers carry the bumped epoch (WriteTxnMarkers v2, transaction
version 2), and EndTxn answers the new producer id and epoch - so a late produce of the ended
transaction is fenced on every partition, and cannot open a transaction no marker will close.

Since the epoch changes at each end, an EndTxn retry is recognised by its epoch being the one
before the bump (Kafka's `endTxnEpochBumped`), or the last epoch of a producer id that
overflowed (a fresh producer id at epoch 0).
"""

from __future__ import annotations

from sparklog.coordinator.transaction.metadata import MAX_PRODUCER_EPOCH, TransactionMetadata
from sparklog.coordinator.transaction.metadata import TxnState as _S
from sparklog.errors import InvalidProducerIdMappingError, ProducerFencedError
from sparklog.structs import NO_PRODUCER_ID

#: The `transaction.version` feature (Kafka's `TransactionVersion`): level 2 = KIP-890 part 2.
TRANSACTION_VERSION_FEATURE = "transaction.version"
TRANSACTION_VERSION_2 = 2
#: The request versions that speak TV2 (Kafka 4.x): a client sending them bumps at every end.
END_TXN_TV2_VERSION = 5
TXN_OFFSET_COMMIT_TV2_VERSION = 5
PRODUCE_TV2_VERSION = 12
#: The versions from which a client understands TRANSACTION_ABORTABLE (KIP-890 / KIP-1050).
TRANSACTION_ABORTABLE_SINCE = {
    "produce": 11,
    "add_partitions_to_txn": 5,
    "add_offsets_to_txn": 4,
    "end_txn": 4,
    "txn_offset_commit": 4,
    "init_producer_id": 5,
}


def retry_on_epoch_bump(meta: TransactionMetadata, producer_id: int, producer_epoch: int) -> bool:
    """An EndTxn sent at the epoch this id had before its last end bumped it (a retry)."""
    return (
        meta.producer_id == producer_id
        and meta.last_producer_id == producer_id
        and meta.last_producer_epoch == producer_epoch
        and meta.producer_epoch == producer_epoch + 1
    )


def retry_on_overflow(meta: TransactionMetadata, producer_id: int, producer_epoch: int) -> bool:
    """An EndTxn retry whose end moved the id to a fresh producer id (its epoch overflowed)."""
    return (
        meta.last_producer_id == producer_id
        and producer_epoch == MAX_PRODUCER_EPOCH - 1
        and meta.producer_epoch == 0
    )


def check_end_txn_v2(meta: TransactionMetadata, producer_id: int, producer_epoch: int) -> int:
    """Kafka's EndTxn epoch checks for an id whose last transaction spoke TV2: 0 when valid."""
    overflow = retry_on_overflow(meta, producer_id, producer_epoch)
    if meta.producer_id != producer_id and not overflow:
        return InvalidProducerIdMappingError.code
    state = meta.state
    if state.is_prepared:
        valid = retry_on_epoch_bump(meta, producer_id, producer_epoch)
    elif state in (_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
        valid = (
            retry_on_epoch_bump(meta, producer_id, producer_epoch)
            or overflow
            or meta.producer_epoch == producer_epoch  # a new (empty) transaction's end
        )
    else:
        valid = meta.producer_epoch == producer_epoch
    return 0 if valid else ProducerFencedError.code


def bump_for_end(meta: TransactionMetadata, new: TransactionMetadata, next_pid: int) -> None:
    """Give `new` (the decision of `meta`'s transaction) the epoch bump of a TV2 end; the
    producer id moves to `next_pid` once the markers are written, when the epoch overflowed."""
    new.producer_epoch = meta.producer_epoch + 1
    new.last_producer_id, new.last_producer_epoch = meta.producer_id, meta.producer_epoch
    new.transaction_version = TRANSACTION_VERSION_2
    new.next_producer_id = next_pid


def answered_producer(meta: TransactionMetadata) -> tuple[int, int]:
    """The (producer id, epoch) EndTxn v5 answers: the ones the next transaction uses."""
    if meta.next_producer_id != NO_PRODUCER_ID:
        return meta.next_producer_id, 0
    return meta.producer_id, meta.producer_epoch
