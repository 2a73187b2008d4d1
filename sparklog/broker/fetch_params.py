"""What a fetch asks for and what it gets, per partition (Kafka's `FetchParams` and
`FetchPartitionData`), shared by the replica manager's read path, `DelayedFetch` and the fetch
sessions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from sparklog.records.file_records import FileRecords
from sparklog.storage.txn_index import AbortedTxn
from sparklog.structs import TopicPartition


@dataclass(frozen=True, slots=True)
class FetchPartition:
    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class FetchParams:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int = 0
    #: large reads may be file slices the network layer sends with sendfile
    zero_copy: bool = False

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0


#: `unchanged(tp, high_watermark, log_start_offset)`: a caught-up partition need not be answered.
Unchanged = Callable[[TopicPartition, int, int], bool]


class FetchResult(NamedTuple):
    """One partition's answer to a fetch (a tuple: a large session builds one per partition)."""

    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | FileRecords = b""
    aborted_transactions: tuple[AbortedTxn, ...] | None = None
    leader_id: int = -1
    leader_epoch: int = -1
