"""What the transaction coordinator persists and hands to its edge: the row of a transactional
id's new state (written, and read back by `replay`, as Kafka's `TransactionLog` writes and reads
its records), the markers of a decided transaction, and the group coordinator's side of
transactional offsets."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Protocol

from sparklog.coordinator.clock import loaded_ms
from sparklog.coordinator.transaction.metadata import TransactionMetadata, TxnState
from sparklog.structs import TopicPartition


class TxnOffsets(Protocol):
    """The group coordinator's side of transactional offset commits."""

    def txn_offset_rows(self, producer_id: int, groups: set[str]) -> list[dict[str, Any]]:
        """Offset rows that make the pending offsets of `producer_id` committed (the
        group coordinator's `replay` of the decision row and of these rows settles them)."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class MarkerJob:
    """COMMIT/ABORT markers to write to every partition of one transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: frozenset[TopicPartition]
    #: WriteTxnMarkers v2's TransactionVersion: 2 when the epoch was bumped for this end
    transaction_version: int = 1


def transaction_row(meta: TransactionMetadata, now_ms: int) -> dict[str, Any]:
    """The persisted row of one transactional id's new state."""
    return {
        "record_type": "transaction",
        "group_id": "",
        "commit_timestamp_ms": now_ms,
        "expire_timestamp_ms": None,
        "transactional_id": meta.transactional_id,
        "producer_id": meta.producer_id,
        "producer_epoch": meta.producer_epoch,
        "txn_state": meta.state.value,
        "transaction_metadata": json.dumps(meta.to_record(), sort_keys=True),
    }


def read_transaction_row(row: dict[str, Any], now_ms: int) -> TransactionMetadata | None:
    """The state a "transaction" row holds (Kafka's `TransactionLog.readTxnRecordValue`); None
    for a Dead id, which is forgotten. A time written as uptime by an old coordinator counts
    from `now_ms` (`clock.loaded_ms`), so an open transaction gets its whole timeout again."""
    record = json.loads(row["transaction_metadata"])
    if record["state"] == TxnState.DEAD.value:
        return None
    meta = TransactionMetadata.from_record(row["transactional_id"], record)
    meta.txn_start_ms = loaded_ms(meta.txn_start_ms, now_ms)
    meta.last_update_ms = loaded_ms(meta.last_update_ms, now_ms)
    return meta


def read_sink_batch_row(row: dict[str, Any]) -> tuple[str, str]:
    """(batch key, "committed" / "aborted") of a decided EndTxnBatch's "sink_batch" row (written
    by `sink_batches.end_txn_batch`)."""
    record = json.loads(row["transaction_metadata"])
    return record["batch_key"], record["outcome"]
