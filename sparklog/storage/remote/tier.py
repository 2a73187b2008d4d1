"""The contract between the remote tier and its users (the broker's remote log manager and
fetch path, the Spark source, the CLI). Implemented by `table.DeltaTopicTable`.

Offsets here are Kafka offsets; a range is [start, end) with `end` exclusive. The tier of a
partition holds a contiguous range [`start_offset`, `copied_end_offset`) once anything was
copied (retention and DeleteRecords move the start up; copies move the end up).

Thread-safety: a `TopicTable` is used from worker threads, never from the event loop (every
method may do file or network I/O); one instance per topic per process, its methods serialised
by its own lock.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from sparklog.storage.txn_index import AbortedTxn


class RemoteStorageError(Exception):
    """The remote tier cannot be read or written now (table missing or damaged, object store
    unreachable); the message names the table and what to do. Local data is never deleted
    because of it; copies back off and retry (Kafka's `RemoteStorageException`)."""


class FencedUploadError(RemoteStorageError):
    """Another copier moved a partition's copied end first (a new leader, or a retried upload
    from a zombie); nothing was committed. The caller re-reads `copied_end_offset` and copies
    from there (Delta app-transaction conflict, `Concurrent transaction`)."""


@dataclass(frozen=True, slots=True)
class SegmentUpload:
    """One partition's contiguous range to copy: whole v2 batches covering [start, end).

    `start_offset` must equal the partition's `copied_end_offset` (or, for the first copy, the
    log start offset); `end_offset` is the next offset after the last batch (the copied end
    after the commit). `aborted` lists the aborted transactions overlapping the range (from the
    local transaction index), which set the rows' `aborted` column."""

    partition: int
    start_offset: int
    end_offset: int
    records: bytes
    aborted: tuple[AbortedTxn, ...] = ()
    leader_epoch: int = -1  # the copier's leader epoch, recorded in the commit's metadata


@dataclass(frozen=True, slots=True)
class RemoteRead:
    """Batches served from the tier: whole record-identical v2 batches starting with the one
    that holds the requested offset, `records` empty when nothing is there; `aborted` (None
    unless asked) lists aborted transactions overlapping the read, as a local read's does."""

    fetch_offset: int
    records: bytes
    aborted: tuple[AbortedTxn, ...] | None = None


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """A leader epoch and the first offset the tier holds for it (for followers rebuilding
    their epoch cache from the tier, as Kafka's from the remote leader-epoch checkpoint)."""

    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    """The last batch a producer wrote below an offset (for a follower rebuilding producer
    state from the tier, as Kafka's from the remote producer snapshot)."""

    producer_id: int
    producer_epoch: int
    first_sequence: int
    last_sequence: int
    last_offset: int
    last_timestamp: int


class TopicTable(Protocol):
    """One topic's remote tier. Every method may block on I/O: call from a worker thread."""

    topic: str
    topic_id: uuid.UUID
    location: str

    def refresh(self) -> None:
        """Catch up with commits other processes made (`update_incremental`)."""

    def copied_end_offset(self, partition: int) -> int | None:
        """The end (exclusive) of what the tier holds for `partition`, None if never copied."""

    def start_offset(self, partition: int) -> int | None:
        """The first offset the tier still holds for `partition`, None when it holds none."""

    def append(self, uploads: Sequence[SegmentUpload]) -> int | None:
        """Copy several partitions' ranges in ONE Delta commit; returns its version, None when
        every upload was already there (a retry). Raises FencedUploadError (nothing written)
        when a partition's copied end is neither `start_offset` (new) nor `end_offset` (a
        retry, which is skipped), RemoteStorageError when the table cannot be written."""

    def read(
        self,
        partition: int,
        start_offset: int,
        max_bytes: int,
        *,
        upper_bound_offset: int | None = None,
        include_aborted: bool = False,
    ) -> RemoteRead:
        """Whole batches from the one holding `start_offset`, at least one batch even past
        `max_bytes`, none at or past `upper_bound_offset`."""

    def offset_for_timestamp(
        self, partition: int, timestamp: int, *, start_offset: int = 0
    ) -> tuple[int, int] | None:
        """ListOffsets by timestamp within the tier: (offset, timestamp) of the first record at
        or after `timestamp`; -3 (max timestamp) gives the record with the largest one. Only
        records at or above `start_offset` count: the log start, which DeleteRecords may have
        moved past rows the table still holds (Kafka searches from the log start offset)."""

    def delete_before(self, partition: int, offset: int) -> int:
        """Retention / DeleteRecords: drop the partition's rows below `offset` (whole batches
        only: a batch straddling `offset` stays); returns the new start offset."""

    def expire(
        self, partition: int, *, retention_ms: int, retention_bytes: int, now_ms: int
    ) -> int | None:
        """Apply `retention.ms` / `retention.bytes` to the partition's tier; returns the new
        start offset when something was dropped."""

    def epochs(self, partition: int, end_offset: int) -> list[EpochEntry]:
        """Leader epochs of the rows below `end_offset`, each with its first offset."""

    def producer_states(self, partition: int, end_offset: int) -> list[ProducerSnapshotEntry]:
        """Each producer's last batch below `end_offset`."""

    def drop(self) -> None:
        """Delete the whole table (topic deleted, or remote.log.delete.on.disable)."""


class TableOpener(Protocol):
    """How the broker opens a topic's table: `table.open_topic_table` has this signature.

    Opens the Delta table at `schema.table_location(root, topic)` (`root` is
    `remote.table.root`), creating it (with `schema.TOPIC_ID_KEY` / `TOPIC_NAME_KEY` in its
    configuration) when missing and `create`; RemoteStorageError when it is missing and not
    `create` (followers and readers never create one), or holds another topic id's
    table (the topic was deleted and re-created while its old table stayed) or cannot be
    opened. `storage_options` are the `storage.options.<key>` settings (object stores)."""

    def __call__(
        self,
        root: str,
        topic: str,
        topic_id: uuid.UUID | None = None,
        *,
        storage_options: Mapping[str, str] | None = None,
        create: bool = True,
    ) -> TopicTable: ...


__all__: Sequence[str] = (
    "EpochEntry",
    "FencedUploadError",
    "ProducerSnapshotEntry",
    "RemoteRead",
    "RemoteStorageError",
    "SegmentUpload",
    "TableOpener",
    "TopicTable",
)
