"""A replica's log as the simulation keeps it: records, the real epoch cache, producer state.

A record is (offset, leader epoch, producer id, sequence, value) plus the broker that first
appended it (only the checks read that). The epoch cache is sparklog's `LeaderEpochFileCache`
kept in memory (the simulated disk is this object; checkpoint files would cost a fsync per
leader change). Producer state is a fold of the log — the last sequence of every producer and
the offset of every (producer id, sequence) — so a follower that copies the log, or a new
leader, dedupes exactly as the old leader did; truncation rebuilds it.

Invariants: offsets are dense from 0; epochs never decrease along the log; a (producer id,
sequence) appears at most once (the broker checks before appending, the log asserts).

Where sparklog's storage `Log` decides something replication depends on, the model asks the
real `Log` once (`real_log_truncation_clears_epoch_at_end`) and behaves the same, so the
simulation tests the code as it is, and follows it when it changes.
"""

from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass

from sparklog.records import SimpleRecord, build_batch
from sparklog.storage.epoch_cache import LeaderEpochFileCache
from sparklog.storage.log import Log


@functools.cache
def real_log_truncation_clears_epoch_at_end() -> bool:
    """Whether sparklog's `Log.truncate_to(log_end_offset)` drops an epoch entry that starts
    at the log end (a leader that stamped its epoch and appended nothing). Kafka's
    `UnifiedLog.truncateTo` always truncates the epoch cache for exactly this case; without it
    the follower asks OffsetForLeaderEpoch for that epoch forever."""
    with tempfile.TemporaryDirectory(prefix="sparklog-sim-probe-") as directory:
        log = Log.open(f"{directory}/t-0", now_ms=0)
        try:
            log.append_as_leader(build_batch([SimpleRecord(b"v", None, 0)]), 0, 0)
            log.epoch_cache.assign(1, log.log_end_offset)  # BecameLeader, then nothing appended
            log.truncate_to(log.log_end_offset, 0)
            return log.latest_epoch == 0
        finally:
            log.close()


@dataclass(frozen=True, slots=True)
class SimRecord:
    offset: int
    leader_epoch: int
    producer_id: int
    sequence: int
    value: str
    appended_by: int

    def __str__(self) -> str:
        return (
            f"@{self.offset}(e{self.leader_epoch} p{self.producer_id}s{self.sequence} "
            f"{self.value} by b{self.appended_by})"
        )


class MemoryEpochCache(LeaderEpochFileCache):
    """`LeaderEpochFileCache` without its checkpoint file: same assign/truncate/end_offset_for
    code, state kept in memory (the simulated disk survives a kill as this object)."""

    def __init__(self) -> None:  # noqa: D107 - deliberately skips the file-backed constructor
        self._entries = []

    def _write(self) -> None:
        pass


class SimLog:
    """One replica's log on one simulated disk."""

    def __init__(self) -> None:
        self.records: list[SimRecord] = []
        self.epochs = MemoryEpochCache()
        self.high_watermark = 0  # in memory (Kafka's Log.highWatermark); rebuilt on start
        # Kafka's replication-offset-checkpoint: the HW as last flushed (restart recovers it).
        self.checkpoint_high_watermark = 0
        # how far the OS has written the log back to the device: a power loss keeps this much
        # and, torn, any prefix of the rest (recovery cuts at the first incomplete batch)
        self.flushed_offset = 0
        self._last_sequence: dict[int, int] = {}
        self._offset_of: dict[tuple[int, int], int] = {}

    @property
    def log_end_offset(self) -> int:
        return len(self.records)

    @property
    def latest_epoch(self) -> int | None:
        return self.epochs.latest_epoch

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        return self.epochs.end_offset_for(epoch, self.log_end_offset)

    def offset_of(self, producer_id: int, sequence: int) -> int | None:
        return self._offset_of.get((producer_id, sequence))

    def last_sequence(self, producer_id: int) -> int | None:
        return self._last_sequence.get(producer_id)

    def append(self, record: SimRecord) -> None:
        assert record.offset == len(self.records), (record, len(self.records))
        key = (record.producer_id, record.sequence)
        assert key not in self._offset_of, f"duplicate {key} at {record.offset}"
        self.epochs.assign(record.leader_epoch, record.offset)  # a no-op within an epoch
        self.records.append(record)
        self._offset_of[key] = record.offset
        self._last_sequence[record.producer_id] = record.sequence

    def truncate_to(self, offset: int) -> bool:
        """Cut everything at and after `offset`; True when something was cut."""
        if offset >= len(self.records):
            if real_log_truncation_clears_epoch_at_end():
                self.epochs.truncate_from_end(len(self.records))
            return False
        del self.records[offset:]
        self.epochs.truncate_from_end(offset)
        self.checkpoint_high_watermark = min(self.checkpoint_high_watermark, offset)
        self.flushed_offset = min(self.flushed_offset, offset)
        self._last_sequence = {}
        self._offset_of = {}
        for record in self.records:
            self._offset_of[(record.producer_id, record.sequence)] = record.offset
            self._last_sequence[record.producer_id] = record.sequence
        return True

    def flush(self) -> None:
        """The OS wrote every appended record back to the device."""
        self.flushed_offset = len(self.records)

    def recover_after_power_loss(self, surviving_end: int) -> int:
        """Reopen after a power loss that kept `surviving_end` records (>= the flushed offset),
        as Kafka's recovery does: cut the torn tail, trim the epoch cache and the HW checkpoint
        to it. Returns how many records were lost."""
        assert self.flushed_offset <= surviving_end <= len(self.records)
        lost = len(self.records) - surviving_end
        self.truncate_to(surviving_end)
        return lost

    def read(self, start: int, max_records: int, upper: int | None = None) -> tuple[SimRecord, ...]:
        end = len(self.records) if upper is None else min(upper, len(self.records))
        return tuple(self.records[start : min(end, start + max_records)])
