"""An in-memory `TopicTable` (the contract of `storage/remote/tier.py`) for the broker's
tiered-read tests, and `tier_log`, which copies a log's batches into it and moves the log's local
start up as the remote log manager's copy and local retention would.

The table keeps whole batches as bytes, so what it serves is what was copied; it counts its
reads and the threads they ran on, and can be made to block or fail.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from sparklog.records import iter_batches
from sparklog.storage.remote.tier import (
    EpochEntry,
    FencedUploadError,
    ProducerSnapshotEntry,
    RemoteRead,
    RemoteStorageError,
    SegmentUpload,
)
from sparklog.storage.txn_index import AbortedTxn
from sparklog.structs import MAX_TIMESTAMP


@dataclass
class _Partition:
    batches: list[bytes] = field(default_factory=list)
    aborted: list[AbortedTxn] = field(default_factory=list)
    start: int | None = None
    end: int | None = None


class MemoryTopicTable:
    """A `TopicTable` in memory; `reads`/`read_threads` record the reads, `gate` (an Event)
    holds every read until set, `failure` is raised by every read."""

    def __init__(self, topic: str, topic_id: uuid.UUID | None = None) -> None:
        self.topic = topic
        self.topic_id = topic_id or uuid.uuid4()
        self.location = f"memory://{topic}"
        self._parts: dict[int, _Partition] = {}
        self._lock = threading.Lock()
        self.reads = 0
        self.read_threads: set[str] = set()
        self.gate: threading.Event | None = None
        self.failure: Exception | None = None
        self.dropped = False

    def refresh(self) -> None:
        pass

    def copied_end_offset(self, partition: int) -> int | None:
        return self._parts.get(partition, _Partition()).end

    def start_offset(self, partition: int) -> int | None:
        return self._parts.get(partition, _Partition()).start

    def append(self, uploads: Sequence[SegmentUpload]) -> int | None:
        with self._lock:
            wrote = False
            for u in uploads:
                part = self._parts.setdefault(u.partition, _Partition())
                if part.end == u.end_offset:
                    continue  # a retry
                if part.end is not None and part.end != u.start_offset:
                    raise FencedUploadError(f"{self.topic}-{u.partition} is at {part.end}")
                part.batches.extend(bytes(b.data) for b in iter_batches(u.records))
                part.aborted.extend(u.aborted)
                part.start = u.start_offset if part.start is None else part.start
                part.end = u.end_offset
                wrote = True
            return 1 if wrote else None

    def read(
        self,
        partition: int,
        start_offset: int,
        max_bytes: int,
        *,
        upper_bound_offset: int | None = None,
        include_aborted: bool = False,
    ) -> RemoteRead:
        self.read_threads.add(threading.current_thread().name)
        if self.gate is not None:
            self.gate.wait()
        if self.failure is not None:
            raise self.failure
        with self._lock:
            self.reads += 1
            part = self._parts[partition]
            out: list[bytes] = []
            size = 0
            last = start_offset
            for data in part.batches:
                header = next(iter_batches(data)).header
                if header.base_offset + header.last_offset_delta < start_offset:
                    continue
                if upper_bound_offset is not None and header.base_offset >= upper_bound_offset:
                    break
                if out and size + len(data) > max_bytes:
                    break
                out.append(data)
                size += len(data)
                last = header.base_offset + header.last_offset_delta + 1
            aborted = None
            if include_aborted:
                aborted = tuple(
                    a
                    for a in part.aborted
                    if a.last_offset >= start_offset and a.first_offset < last
                )
            return RemoteRead(start_offset, b"".join(out), aborted)

    def offset_for_timestamp(
        self, partition: int, timestamp: int, *, start_offset: int = 0
    ) -> tuple[int, int] | None:
        best: tuple[int, int] | None = None
        start = max(self.start_offset(partition) or 0, start_offset)
        for data in self._parts.get(partition, _Partition()).batches:
            for batch in iter_batches(data):
                for r in batch.records():
                    if r.offset < start:
                        continue
                    if timestamp == MAX_TIMESTAMP:
                        if best is None or r.timestamp > best[1]:
                            best = (r.offset, r.timestamp)
                    elif r.timestamp >= timestamp:
                        return r.offset, r.timestamp
        return best

    def delete_before(self, partition: int, offset: int) -> int:
        raise RemoteStorageError("not in the fake")

    def expire(
        self, partition: int, *, retention_ms: int, retention_bytes: int, now_ms: int
    ) -> int | None:
        return None

    def epochs(self, partition: int, end_offset: int) -> list[EpochEntry]:
        out: list[EpochEntry] = []
        for data in self._parts.get(partition, _Partition()).batches:
            h = next(iter_batches(data)).header
            if h.base_offset >= end_offset:
                break
            if not out or out[-1].epoch != h.partition_leader_epoch:
                out.append(EpochEntry(h.partition_leader_epoch, h.base_offset))
        return out

    def producer_states(self, partition: int, end_offset: int) -> list[ProducerSnapshotEntry]:
        last: dict[int, ProducerSnapshotEntry] = {}
        for data in self._parts.get(partition, _Partition()).batches:
            h = next(iter_batches(data)).header
            if h.base_offset >= end_offset:
                break
            if h.producer_id >= 0:
                last[h.producer_id] = ProducerSnapshotEntry(
                    h.producer_id,
                    h.producer_epoch,
                    h.base_sequence,
                    h.base_sequence + h.last_offset_delta,
                    h.base_offset + h.last_offset_delta,
                    h.max_timestamp,
                )
        return list(last.values())

    def drop(self) -> None:
        self.dropped = True
        self._parts.clear()


def tier_log(log_, table: MemoryTopicTable, partition: int, upto: int) -> None:
    """Copy `log_`'s batches from what `table` holds (or the log start) up to `upto` (a batch
    boundary) into `table` and
    make `upto` the log's local start, as the copy task and local retention would."""
    copied = table.copied_end_offset(partition)
    start = log_.log_start_offset if copied is None else copied
    data = log_.read(start, 1 << 30, upper_bound_offset=upto)
    records = data.records
    aborted = tuple(log_.collect_aborted_transactions(start, upto))
    table.append([SegmentUpload(partition, start, upto, bytes(records), aborted)])
    set_local_log_start(log_, upto)


def set_local_log_start(log_, offset: int) -> None:
    """Move the log's local start (Kafka's localLogStartOffset) and what the tier holds
    (highestOffsetInRemoteStorage), as the copy task and local retention do."""
    log_.update_highest_offset_in_remote_storage(offset - 1)
    with log_._lock:
        log_.local_log_start_offset = offset
