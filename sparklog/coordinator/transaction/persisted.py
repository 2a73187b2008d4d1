"""What the transaction coordinator persists and hands to its edge: the row of a transactional
id's new state, the markers of a decided transaction, and the group coordinator's side of
transactional offsets."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Protocol

from sparklog.coordinator.transaction.metadata import TransactionMetadata
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
