"""The leader epoch cache of a partition (`leader-epoch-checkpoint`), Kafka's `LeaderEpochFileCache`.

Theory of operation: every batch carries the leader epoch of the leader that appended it. The
cache remembers, for each epoch, the offset of the first batch written in it. A follower that
lost track of the leader asks "where did my last epoch end on your log?"
(OffsetForLeaderEpoch → `end_offset_for`) and truncates there before fetching, so replicas never
diverge below the high watermark (KIP-101, KIP-279).
"""

from __future__ import annotations

import os
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from sparklog.storage.checkpoint import CheckpointFile, parse_int32, parse_int64
from sparklog.structs import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

__all__ = ["UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "EpochEntry", "LeaderEpochFileCache"]


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """A leader epoch and the offset of the first record written in it."""

    epoch: int
    start_offset: int


class LeaderEpochFileCache:
    """Epoch -> start offset for one replica, persisted to `leader-epoch-checkpoint` on change.

    Invariants: epochs and start offsets both strictly increase along `entries()`; an assignment
    that would break this first removes the conflicting later entries (a new leader overwrote
    them). Every change is written to the checkpoint before the call returns (Kafka flushes the
    truncations asynchronously; we do it synchronously, which is the safer order). Loading uses
    the same assignment rule, so a checkpoint with non-monotonic entries is repaired in memory.
    A corrupt checkpoint raises `CorruptCheckpointError` from the constructor; the log then
    deletes the file and rebuilds the cache from its batches.

    Thread-safety: none; the owning log serialises access.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._checkpoint = CheckpointFile(path, (parse_int32, parse_int64))
        self._entries: list[EpochEntry] = []
        for epoch, start_offset in self._checkpoint.read():
            self._assign(EpochEntry(epoch, start_offset))

    @property
    def path(self) -> Path:
        return self._checkpoint.path

    def entries(self) -> list[EpochEntry]:
        """All entries, oldest epoch first."""
        return list(self._entries)

    def non_empty(self) -> bool:
        return bool(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        """The epoch of the latest entry (the epoch being written to), None when empty."""
        return self._entries[-1].epoch if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset` (no-op if already covered)."""
        if self._assign(EpochEntry(epoch, start_offset)):
            self._write()

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"Received invalid partition leader epoch entry {entry}")
        latest = self.latest_entry
        # The latest epoch already covers this offset: nothing new to remember.
        if (
            latest is not None
            and entry.epoch == latest.epoch
            and entry.start_offset >= latest.start_offset
        ):
            return False
        # Later epochs, or epochs starting at or after the new one, were overwritten.
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch
            or self._entries[-1].start_offset >= entry.start_offset
        ):
            self._entries.pop()
        if self._entries:
            previous = self._entries[-1]
            assert previous.epoch < entry.epoch and previous.start_offset < entry.start_offset
        self._entries.append(entry)
        return True

    def previous_epoch(self, epoch: int | None = None) -> int | None:
        """The largest epoch below `epoch` (default: below the latest epoch), None if there is none."""
        if epoch is None:
            if not self._entries:
                return None
            epoch = self._entries[-1].epoch
        slot = self._slot_below(epoch)
        return self._entries[slot].epoch if slot >= 0 else None

    def next_epoch(self, epoch: int) -> int | None:
        """The smallest cached epoch above `epoch`, None if there is none."""
        return next((e.epoch for e in self._entries if e.epoch > epoch), None)

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        """The entry for exactly `epoch`, None if it is not cached."""
        return next((e for e in self._entries if e.epoch == epoch), None)

    def _slot_below(self, epoch: int) -> int:
        """Index of the last entry with an epoch < `epoch` (-1 if none)."""
        return bisect_right([e.epoch for e in self._entries], epoch - 1) - 1

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that `offset` was written in, None if it precedes the earliest entry."""
        slot = bisect_right([e.start_offset for e in self._entries], offset) - 1
        return self._entries[slot].epoch if slot >= 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """`(epoch, end_offset)` answering OffsetForLeaderEpoch (Kafka's `endOffsetFor`).

        - requested is UNDEFINED_EPOCH, or above every cached epoch, or the cache is empty:
          `(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`;
        - requested is the latest epoch: `(latest, log_end_offset)`;
        - requested is below the earliest epoch: `(requested, earliest start offset)` — the data
          before it is gone, so the follower truncates to where this log starts;
        - otherwise: the largest epoch <= requested, ended by the start offset of the first
          epoch above requested.
        """
        undefined = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        if requested_epoch == UNDEFINED_EPOCH:
            return undefined
        if self._entries and self._entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
        if higher is None:
            return undefined
        floor_slot = self._slot_below(requested_epoch + 1)
        if floor_slot < 0:
            return requested_epoch, higher.start_offset
        return self._entries[floor_slot].epoch, higher.start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove the entries starting at or after `end_offset` (the log was truncated there).

        A negative `end_offset` (UNDEFINED_EPOCH_OFFSET) removes nothing.
        """
        if end_offset < 0:
            return
        count = len(self._entries)
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()
        if len(self._entries) != count:
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop the entries wholly before `start_offset` (the log start moved up); the last
        entry starting at or before it is kept, moved to start at `start_offset`.

        Exclusive: `truncate_from_start(6)` keeps an entry that starts at 6 unchanged.
        """
        slot = bisect_right([e.start_offset for e in self._entries], start_offset) - 1
        if slot < 0:
            return
        first = self._entries[slot]
        if slot == 0 and first.start_offset == start_offset:
            return
        self._entries[: slot + 1] = [EpochEntry(first.epoch, start_offset)]
        self._write()

    def clear_and_flush(self) -> None:
        """Remove every entry and write the empty checkpoint."""
        self._entries.clear()
        self._write()

    def _write(self) -> None:
        self._checkpoint.write([(e.epoch, e.start_offset) for e in self._entries])
