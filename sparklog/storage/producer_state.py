"""Per-partition producer state: idempotence, fencing and transactions (Kafka's
`ProducerStateManager`; `ProducerAppendInfo` and the values an append produces are in
`producer_append_info`, `ProducerStateEntry` and the snapshots in `producer_snapshot`).

Theory of operation. For each producer id the partition remembers its epoch, the metadata of
its last 5 batches (sequence range, offsets, max timestamp), the first offset of its ongoing
transaction, the epoch of the last transaction coordinator that wrote a marker for it, and the
timestamp of its last write. An append goes through two steps (STYLE rule 6):

1. `prepare_append(header, origin, base_offset=...)` checks one batch against that state and
   returns a `DuplicateBatch` (a retry of one of the last 5 batches: answer the producer with
   the original offsets and write nothing) or a `ProducerAppendInfo` holding the would-be state.
   The manager does not change; a bad batch raises `InvalidProducerEpochError`,
   `OutOfOrderSequenceNumberError`, `InvalidTxnStateError` or `TransactionCoordinatorFencedError`.
2. After the segment write succeeded the log calls `update(info)`; then, for each
   `info.completed_txns`, `last_stable_offset_for(txn)` (the LSO an aborted txn's .txnindex
   entry stores), the txn index append, `complete_txn(txn)`; finally
   `update_map_end_offset(log_end_offset)` (Kafka's `UnifiedLog.append` order).

Offsets are taken at prepare time: the log knows the base offset it will assign (its log end
offset) before validating, as Kafka's `UnifiedLog.append` assigns offsets before
`analyzeAndValidateProducerState`; a duplicate or a rejected batch writes nothing either way.

A transaction is *ongoing* from its first transactional batch to its marker, then *unreplicated*
until the high watermark passes the marker. The first unstable offset is the earliest first
offset among both; the last stable offset is min(first unstable offset, high watermark).
Snapshots (`producer_snapshot.py`) save the state at the map end offset, so recovery replays
only the batches after the newest one (`rebuild_from`).

Invariants: `ongoing_txns` holds exactly the entries whose `current_txn_first_offset` is set
(keyed by it); both txn maps are ordered by first offset.
Thread-safety: none; the owning log serialises calls.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from sparklog.records.batch import BatchHeader
from sparklog.records.control import EndTransactionMarker
from sparklog.storage.producer_append_info import (
    AppendOrigin,
    CompletedTxn,
    DuplicateBatch,
    ProducerAppendInfo,
    TxnMetadata,
)
from sparklog.storage.producer_snapshot import (
    CorruptSnapshot,
    ProducerStateEntry,
    SnapshotFiles,
)

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms
DEFAULT_TRANSACTION_MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms
LATE_TRANSACTION_BUFFER_MS = 5 * 60 * 1000  # ProducerStateManager.LATE_TRANSACTION_BUFFER_MS


@dataclass(frozen=True, slots=True)
class RecoveredTxn:
    """A transaction completed while replaying the log, with the LSO its txn index entry needs."""

    txn: CompletedTxn
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class ProducerStateReloaded:
    """What `load` / `truncate_and_reload` did; the log replays its batches from
    `map_end_offset` up to its log end offset (`rebuild_from`)."""

    map_end_offset: int
    reloaded: bool  # False: the state already ended at the log end offset and was kept
    snapshot_offset: int | None  # the snapshot the state came from (None: none used)
    removed_snapshot_offsets: tuple[int, ...]  # out of range: > log end or <= log start
    corrupt_snapshots: tuple[CorruptSnapshot, ...]


def _insert_sorted(txns: dict[int, TxnMetadata], txn: TxnMetadata) -> None:
    """Keep `txns` ordered by first offset; appends come in offset order, so re-sorting is rare."""
    out_of_order = bool(txns) and txn.first_offset < next(reversed(txns))
    txns[txn.first_offset] = txn
    if out_of_order:
        ordered = sorted(txns.items())
        txns.clear()
        txns.update(ordered)


class ProducerStateManager:
    """All producers of one partition log, with snapshots in the partition dir.

    `map_end_offset` is the offset up to which the state reflects the log (exclusive): after a
    load the log replays its batches from there (`rebuild_from`). Clock-free: time comes in as
    `now_ms`, only expiration and late-transaction checks need it.
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        max_transaction_timeout_ms: int = DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.max_transaction_timeout_ms = max_transaction_timeout_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing_txns: dict[int, TxnMetadata] = {}  # by first offset, ascending
        self._unreplicated_txns: dict[int, TxnMetadata] = {}  # completed, marker >= HW; ascending
        self._snapshots = SnapshotFiles(self.log_dir)
        self._map_end_offset = 0
        self._last_snapshot_offset = 0

    # -- reading state ------------------------------------------------------------------------

    @property
    def map_end_offset(self) -> int:
        return self._map_end_offset

    @property
    def active_producers(self) -> Mapping[int, ProducerStateEntry]:
        """Read-only view: producer id -> entry (do not mutate the entries)."""
        return MappingProxyType(self._producers)

    @property
    def ongoing_txns(self) -> Mapping[int, TxnMetadata]:
        """Read-only view: first offset -> undecided transaction, ascending."""
        return MappingProxyType(self._ongoing_txns)

    @property
    def is_empty(self) -> bool:
        return not self._producers and not self._unreplicated_txns

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def first_undecided_offset(self) -> int | None:
        """First offset of the earliest transaction without a marker yet."""
        return next(iter(self._ongoing_txns), None)

    def first_unstable_offset(self) -> int | None:
        """Earliest first offset of a transaction undecided or decided above the high watermark
        (the LSO building block, Kafka's `firstUnstableOffset`)."""
        ongoing, unreplicated = self._ongoing_txns, self._unreplicated_txns
        if not ongoing:
            return next(iter(unreplicated)) if unreplicated else None
        first = next(iter(ongoing))
        return min(first, next(iter(unreplicated))) if unreplicated else first

    def last_stable_offset(self, high_watermark: int) -> int:
        """The LSO a read_committed fetch stops at: the first unstable offset if below the high
        watermark, else the high watermark (Kafka's `UnifiedLog.lastStableOffset`)."""
        first_unstable = self.first_unstable_offset()
        if first_unstable is not None and first_unstable < high_watermark:
            return first_unstable
        return high_watermark

    def last_stable_offset_for(self, completed_txn: CompletedTxn) -> int:
        """The LSO once `completed_txn` ends, before `complete_txn` (the value stored in its
        txn index entry; Kafka's `lastStableOffset(CompletedTxn)`).

        Only transactions begun before the marker count: one append may also start
        transactions after it (a follower's fetched chunk), which Kafka counts, so a follower's
        entry could differ from the leader's; this way every replica, and a replay, store the
        LSO the leader saw when it wrote the marker."""
        for txn in self._ongoing_txns.values():
            if txn.first_offset > completed_txn.last_offset:
                break  # ordered by first offset: the rest began after the marker too
            if txn.producer_id != completed_txn.producer_id:
                return txn.first_offset
        return completed_txn.last_offset + 1

    def has_late_transaction(self, now_ms: int) -> bool:
        """Whether the oldest open transaction outlived transaction.max.timeout.ms plus a buffer
        (a hanging transaction, KIP-664)."""
        oldest = next(iter(self._ongoing_txns.values()), None)
        entry = self._producers.get(oldest.producer_id) if oldest else None
        last_timestamp = entry.last_timestamp if entry else -1
        limit_ms = self.max_transaction_timeout_ms + LATE_TRANSACTION_BUFFER_MS
        return last_timestamp > 0 and now_ms - last_timestamp > limit_ms

    # -- appending ----------------------------------------------------------------------------

    def prepare_update(self, producer_id: int, origin: AppendOrigin | str) -> ProducerAppendInfo:
        """A pending update for one producer (Kafka's `prepareUpdate`); changes nothing."""
        current = self._producers.get(producer_id)
        if current is None:
            current = ProducerStateEntry(producer_id)
        return ProducerAppendInfo(producer_id, current, AppendOrigin(origin))

    def prepare_append(
        self,
        header: BatchHeader,
        origin: AppendOrigin | str,
        *,
        base_offset: int | None = None,
        marker: EndTransactionMarker | None = None,
        transaction_version: int = 0,
        pending: ProducerAppendInfo | None = None,
    ) -> ProducerAppendInfo | DuplicateBatch:
        """Validate one batch of a producer; changes nothing until `update`.

        `base_offset`: the offset the log assigns to the batch (default `header.base_offset`).
        `marker`: the decoded COMMIT/ABORT record of a control batch. `transaction_version`: of
        a marker (2 = KIP-890 strict epochs). `pending`: this producer's info from an earlier
        batch of the same append; the batch is added to it and it is returned.
        Raises the Kafka error of an invalid batch (see the module doc).
        """
        assert header.has_producer_id, "only batches with a producer id have producer state"
        origin = AppendOrigin(origin)
        if origin is AppendOrigin.CLIENT:
            # Kafka's findDuplicateBatch: a producer retries only its last in-flight batches.
            committed = self._producers.get(header.producer_id)
            duplicate = None
            if committed is not None:
                duplicate = committed.find_duplicate_batch(
                    header.producer_epoch, header.base_sequence, header.last_sequence
                )
            if duplicate is not None:
                return DuplicateBatch(
                    header.producer_id,
                    header.producer_epoch,
                    duplicate.first_seq,
                    duplicate.last_seq,
                    duplicate.first_offset,
                    duplicate.last_offset,
                    duplicate.timestamp,
                )
        if pending is None:
            info = self.prepare_update(header.producer_id, origin)
        else:
            assert pending.producer_id == header.producer_id and pending.origin is origin
            info = pending
        info.append(
            header, base_offset=base_offset, marker=marker, transaction_version=transaction_version
        )
        return info

    def update(self, append_info: ProducerAppendInfo) -> None:
        """Commit a pending update, after its batches were written (Kafka's `update`)."""
        updated = append_info.to_entry()
        current = self._producers.get(append_info.producer_id)
        if current is not None:
            current.update(updated)
        else:
            self._producers[append_info.producer_id] = updated
        for txn in append_info.started_transactions:
            _insert_sorted(self._ongoing_txns, txn)

    def complete_txn(self, completed_txn: CompletedTxn) -> None:
        """Move an ended transaction to the unreplicated set; it stays unstable until the high
        watermark passes its marker (`on_high_watermark_updated`)."""
        txn = self._ongoing_txns.pop(completed_txn.first_offset, None)
        assert txn is not None, f"completing {completed_txn}, which was never started"
        _insert_sorted(
            self._unreplicated_txns,
            TxnMetadata(txn.producer_id, txn.first_offset, completed_txn.last_offset),
        )

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is below the high watermark."""
        self._remove_unreplicated_txns(high_watermark)

    def update_map_end_offset(self, offset: int) -> None:
        self._map_end_offset = offset

    def replay_batch(
        self, header: BatchHeader, marker: EndTransactionMarker | None = None
    ) -> RecoveredTxn | None:
        """Apply one batch read back from the log with replication semantics, and advance the
        map end offset past it (Kafka's `LogSegment.updateProducerState`)."""
        recovered = None
        if header.has_producer_id:
            info = self.prepare_update(header.producer_id, AppendOrigin.REPLICATION)
            completed = info.append(header, marker=marker)
            self.update(info)
            if completed is not None:
                recovered = RecoveredTxn(completed, self.last_stable_offset_for(completed))
                self.complete_txn(completed)
        self._map_end_offset = header.next_offset
        return recovered

    def rebuild_from(
        self, batches: Iterable[tuple[BatchHeader, EndTransactionMarker | None]]
    ) -> list[RecoveredTxn]:
        """Replay `(header, marker)` pairs in offset order (the marker only for control batches);
        returns the transactions they completed, for rebuilding txn indexes."""
        recovered = (self.replay_batch(header, marker) for header, marker in batches)
        return [txn for txn in recovered if txn is not None]

    def remove_expired_producers(
        self, now_ms: int, producer_id_expiration_ms: int | None = None
    ) -> list[int]:
        """Forget producers idle for producer.id.expiration.ms (default: the configured value),
        never one with an open transaction; returns their ids."""
        expired = [
            pid
            for pid, entry in self._producers.items()
            if self._is_expired(now_ms, entry, producer_id_expiration_ms)
        ]
        for pid in expired:
            del self._producers[pid]
        return expired

    def _is_expired(
        self, now_ms: int, entry: ProducerStateEntry, expiration_ms: int | None = None
    ) -> bool:
        limit_ms = self.producer_id_expiration_ms if expiration_ms is None else expiration_ms
        return entry.current_txn_first_offset is None and now_ms - entry.last_timestamp >= limit_ms

    def _remove_unreplicated_txns(self, offset: int) -> None:
        for first_offset, txn in list(self._unreplicated_txns.items()):
            assert txn.last_offset is not None
            if txn.last_offset < offset:
                del self._unreplicated_txns[first_offset]

    # -- snapshots, truncation, loading -------------------------------------------------------

    @property
    def latest_snapshot_offset(self) -> int | None:
        return self._snapshots.latest_offset

    @property
    def oldest_snapshot_offset(self) -> int | None:
        return self._snapshots.oldest_offset

    @property
    def snapshot_offsets(self) -> tuple[int, ...]:
        return self._snapshots.offsets

    def fetch_snapshot(self, offset: int) -> Path | None:
        """The snapshot file taken at exactly `offset`, if there is one."""
        return self._snapshots.path_for(offset)

    def take_snapshot(self, log_end_offset: int | None = None) -> Path | None:
        """Write a snapshot at the map end offset unless one exists there; `log_end_offset` first
        moves the map end offset there (Kafka's roll: `updateMapEndOffset` + `takeSnapshot`)."""
        if log_end_offset is not None:
            self.update_map_end_offset(log_end_offset)
        if self._map_end_offset <= self._last_snapshot_offset:
            return None
        entries = [e for _, e in sorted(self._producers.items())]
        path = self._snapshots.write(self._map_end_offset, entries)
        self._last_snapshot_offset = self._map_end_offset
        return path

    def delete_snapshots_before(self, offset: int) -> tuple[int, ...]:
        """Delete the snapshots taken below `offset` (segments deleted); returns their offsets."""
        return self._snapshots.delete_where(lambda o: o < offset)

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> tuple[int, ...]:
        """Delete snapshots of no segment, keeping a newest one above them all (clean shutdown)."""
        return self._snapshots.remove_strays(segment_base_offsets)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything and delete every snapshot; the state now starts empty at `offset`."""
        self._clear_state()
        self._snapshots.delete_where(lambda o: True)
        self._last_snapshot_offset = 0
        self._map_end_offset = offset

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """The log start moved forward (retention, DeleteRecords)."""
        self._remove_unreplicated_txns(log_start_offset)
        self._map_end_offset = max(self._map_end_offset, log_start_offset)
        latest = self._snapshots.latest_offset
        self._last_snapshot_offset = log_start_offset if latest is None else latest

    def truncate_and_reload(
        self,
        log_start_offset: int,
        log_end_offset: int,
        now_ms: int,
        high_watermark: int | None = None,
    ) -> ProducerStateReloaded:
        """After the log was truncated to `log_end_offset`: delete the snapshots outside
        (log start, min(log end, high watermark)], and reload from the newest one left unless
        the state already ends at the log end (Kafka's `truncateAndReload`). Unlike Kafka, a
        snapshot above the high watermark goes too: it cannot hold the transactions it saw
        completed above the high watermark (still unstable), which only the replay from a
        snapshot at or below it rebuilds."""
        kept_end_offset = log_end_offset if high_watermark is None else high_watermark
        return self._reload(
            log_start_offset, log_end_offset, now_ms, force=False, kept_end_offset=kept_end_offset
        )

    def load(
        self, log_start_offset: int, log_end_offset: int, now_ms: int
    ) -> ProducerStateReloaded:
        """Startup: rescan the partition dir, then load the newest snapshot <= the log end offset
        (deleting those above it, and corrupt ones, falling back to older ones). Expired
        producers are dropped. The log then replays batches from the returned map end offset."""
        self._snapshots.rescan()
        return self._reload(log_start_offset, log_end_offset, now_ms, force=True)

    def _reload(
        self,
        log_start_offset: int,
        log_end_offset: int,
        now_ms: int,
        *,
        force: bool,
        kept_end_offset: int | None = None,
    ) -> ProducerStateReloaded:
        kept_end = (
            log_end_offset if kept_end_offset is None else min(kept_end_offset, log_end_offset)
        )
        removed = self._snapshots.delete_where(lambda o: o > kept_end or o <= log_start_offset)
        if not force and log_end_offset == self._map_end_offset:
            self.on_log_start_offset_incremented(log_start_offset)
            return ProducerStateReloaded(self._map_end_offset, False, None, removed, ())
        # The log end is at or below the high watermark, so no unreplicated txn survives.
        self._clear_state()
        newest = self._snapshots.read_newest()
        for entry in newest.entries:
            if not self._is_expired(now_ms, entry):
                self._producers[entry.producer_id] = entry
                if entry.current_txn_first_offset is not None:
                    txn = TxnMetadata(entry.producer_id, entry.current_txn_first_offset)
                    _insert_sorted(self._ongoing_txns, txn)
        start = log_start_offset if newest.offset is None else newest.offset
        self._last_snapshot_offset = self._map_end_offset = start
        return ProducerStateReloaded(start, True, newest.offset, removed, newest.corrupt)

    def _clear_state(self) -> None:
        self._producers.clear()
        self._ongoing_txns.clear()
        self._unreplicated_txns.clear()
