"""Which log the cleaner works on next, and each log's cleaning state (Kafka's `LogCleanerManager`).

Theory of operation. Every compacted log has a *cleaner checkpoint*: its first dirty offset,
below which the log has been compacted and above which it has not (Kafka's
`cleaner-offset-checkpoint`, one file per log dir, entries `topic partition offset`). Each round
the cleaner asks `grab_filthiest_compacted_log(now_ms)`: for every compacted log the cleanable
range is [first dirty offset, first uncleanable offset), the first uncleanable offset being the
lowest of the last stable offset (which is <= the high watermark), the active segment's base
offset and the first segment younger than `min.compaction.lag.ms`, rounded down to a segment
base. A log qualifies when its dirty ratio (cleanable bytes / total bytes) exceeds
`min.cleanable.dirty.ratio`, or when `max.compaction.lag.ms` forces it; the dirtiest one wins and
is marked in progress until `done_cleaning(tp, end_offset)` moves its checkpoint.

Per-partition states (Kafka's `LogCleaningState`), with the legal transitions:

    (none)      -> IN_PROGRESS (grabbed for cleaning or retention), PAUSED(1) (abort_and_pause)
    IN_PROGRESS -> (none) (done), ABORTED (abort_and_pause while cleaning)
    ABORTED     -> PAUSED(1) (the cleaner noticed, in done_cleaning / done_deleting)
    PAUSED(n)   -> PAUSED(n + 1) (abort_and_pause), PAUSED(n - 1) or (none) (resume)

A missing transition raises `IllegalStateTransition`. The cleaner thread calls
`check_cleaning_aborted(tp)` between reads, so an abort takes effect within one I/O chunk.

Thread-safety: every method takes the manager's lock. Never call `abort_and_pause_cleaning`
while holding a log's lock: the cleaner may be waiting for that lock to finish its read.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from sparklog.errors import IllegalStateTransition
from sparklog.storage.checkpoint import CorruptCheckpointError, OffsetCheckpointFile
from sparklog.structs import TopicPartition

if TYPE_CHECKING:
    from sparklog.storage.log import Log
    from sparklog.storage.segment import LogSegment

logger = logging.getLogger(__name__)

__all__ = [
    "CLEANER_CHECKPOINT_FILE",
    "CleanerManager",
    "LogCleaningAbortedError",
    "LogToClean",
    "OffsetsToClean",
    "TopicPartition",
    "calculate_cleanable_bytes",
    "cleanable_offsets",
    "max_compaction_delay_ms",
    "non_active_segments_from",
    "racy_read",
    "segments_in_range",
    "topic_partition_of",
]

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
T = TypeVar("T")


class LogCleaningAbortedError(Exception):
    """This round of cleaning a log was given up (abort requested, or the segments changed
    under the cleaner); the log is untouched beyond groups already swapped in."""


class _State(enum.Enum):
    IN_PROGRESS = "in-progress"
    ABORTED = "aborted"
    PAUSED = "paused"


def topic_partition_of(log_: Log) -> TopicPartition:
    """(topic, partition) from a log dir named `<topic>-<partition>` (Kafka's naming)."""
    topic, sep, partition = log_.directory.name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(
            f"log dir {log_.directory} is not named <topic>-<partition>; pass topic_partition"
        )
    return TopicPartition(topic, int(partition))


def racy_read(read: Callable[[], T], attempts: int = 5) -> T:
    """Run `read` on log state that an appending thread may change under us (a dict mutated
    mid-iteration raises RuntimeError); retried, since the next try usually sees a quiet dict."""
    for attempt in range(attempts):
        try:
            return read()
        except RuntimeError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


# -- offsets and sizes (pure functions of a log and a snapshot of its segments) ---------------


def segments_in_range(
    segments: Sequence[LogSegment], from_offset: int, to_offset: int
) -> list[LogSegment]:
    """The segments holding offsets in [from, to): the one containing `from` (if any) and every
    later one with base offset < `to` (Kafka's `LogSegments.values(from, to)`)."""
    if to_offset <= from_offset:
        return []
    floor = 0
    for i, segment in enumerate(segments):
        if segment.base_offset <= from_offset:
            floor = i
    return [s for s in segments[floor:] if s.base_offset < to_offset]


def non_active_segments_from(segments: Sequence[LogSegment], from_offset: int) -> list[LogSegment]:
    """Kafka's `nonActiveLogSegmentsFrom`: segments from the one holding `from` up to, not
    including, the active (last) one."""
    active = segments[-1]
    if from_offset > active.base_offset:
        return []
    return segments_in_range(segments, from_offset, active.base_offset)


@dataclass(frozen=True, slots=True)
class OffsetsToClean:
    """A log's cleanable range [first_dirty_offset, first_uncleanable_dirty_offset), and whether
    its checkpoint was invalid and must be rewritten to `first_dirty_offset`."""

    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    force_update_checkpoint: bool = False


def cleanable_offsets(
    log_: Log, segments: Sequence[LogSegment], last_clean_offset: int | None, now_ms: int
) -> OffsetsToClean:
    """Kafka's `LogCleanerManager.cleanableOffsets` for `log_` with segment snapshot `segments`."""
    log_start_offset = log_.log_start_offset
    checkpoint = log_start_offset if last_clean_offset is None else last_clean_offset
    if checkpoint < log_start_offset or checkpoint > log_.log_end_offset:
        # Retention moved the start past it, or the log was truncated below it.
        if not (log_.config.compact and log_.config.delete):
            logger.info(
                "resetting first dirty offset of %s from %d to log start offset %d",
                log_.directory.name,
                checkpoint,
                log_start_offset,
            )
        first_dirty, force = log_start_offset, True
    else:
        first_dirty, force = checkpoint, False
    candidates = [log_.last_stable_offset, segments[-1].base_offset]
    lag_ms = max(log_.config.min_compaction_lag_ms, 0)
    if lag_ms > 0:
        for segment in non_active_segments_from(segments, first_dirty):
            if segment.largest_timestamp > now_ms - lag_ms:
                candidates.append(segment.base_offset)
                break
    return OffsetsToClean(first_dirty, max(first_dirty, min(candidates)), force)


def calculate_cleanable_bytes(
    segments: Sequence[LogSegment], first_dirty_offset: int, uncleanable_offset: int
) -> tuple[int, int]:
    """(first uncleanable offset rounded down to its segment's base, cleanable bytes)."""
    non_active = non_active_segments_from(segments, uncleanable_offset)
    first_uncleanable = (non_active[0] if non_active else segments[-1]).base_offset
    cleanable = segments_in_range(
        segments, min(first_dirty_offset, first_uncleanable), first_uncleanable
    )
    return first_uncleanable, sum(s.size_bytes for s in cleanable)


def max_compaction_delay_ms(
    log_: Log, segments: Sequence[LogSegment], first_dirty_offset: int, now_ms: int
) -> int:
    """How long past `max.compaction.lag.ms` the oldest dirty record is (0: not overdue)."""
    first_timestamps = [
        s.rolling_based_timestamp
        for s in non_active_segments_from(segments, first_dirty_offset)
        if s.rolling_based_timestamp is not None and s.rolling_based_timestamp > 0
    ]
    if not first_timestamps:
        return 0
    clean_until_ms = now_ms - max(log_.config.max_compaction_lag_ms, 0)
    earliest = min(first_timestamps)
    return clean_until_ms - earliest if earliest < clean_until_ms else 0


@dataclass(frozen=True, slots=True)
class LogToClean:
    """A log chosen for cleaning with its dirty-range figures (Kafka's `LogToClean`).

    `first_uncleanable_offset` is a segment base offset: the cleaner never splits a segment
    at the upper end. Invariant: first_dirty_offset <= first_uncleanable_offset.
    """

    topic_partition: TopicPartition
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool = False

    @classmethod
    def of(
        cls,
        topic_partition: TopicPartition,
        log_: Log,
        segments: Sequence[LogSegment],
        offsets: OffsetsToClean,
        need_compaction_now: bool = False,
    ) -> LogToClean:
        first_dirty = offsets.first_dirty_offset
        clean_bytes = sum(s.size_bytes for s in segments_in_range(segments, -1, first_dirty))
        first_uncleanable, cleanable_bytes = calculate_cleanable_bytes(
            segments, first_dirty, offsets.first_uncleanable_dirty_offset
        )
        return cls(
            topic_partition,
            log_,
            first_dirty,
            max(first_dirty, first_uncleanable),
            clean_bytes,
            cleanable_bytes,
            need_compaction_now,
        )

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    def should_clean(self) -> bool:
        """The dirty ratio passed `min.cleanable.dirty.ratio`, or `max.compaction.lag.ms` forces
        a clean of whatever is cleanable."""
        if self.need_compaction_now and self.cleanable_bytes > 0:
            return True
        return self.cleanable_ratio > self.log.config.min_cleanable_dirty_ratio


# -- the manager ------------------------------------------------------------------------------


class CleanerManager:
    """The compacted logs, their cleaner checkpoints and cleaning states (see module doc).

    With `persist_checkpoints` each checkpoint is also written to `cleaner-offset-checkpoint`
    in the log's parent dir (and read from it when the log is added), as Kafka does.
    """

    def __init__(self, *, persist_checkpoints: bool = True) -> None:
        self.persist_checkpoints = persist_checkpoints
        self._cond = threading.Condition(threading.RLock())
        self._logs: dict[TopicPartition, Log] = {}
        self._checkpoints: dict[TopicPartition, int] = {}
        self._states: dict[TopicPartition, tuple[_State, int]] = {}  # (state, paused count)
        self._uncleanable: set[TopicPartition] = set()
        self.dirtiest_log_cleanable_ratio = 0.0  # Kafka's max-dirty-percent gauge / 100

    # -- logs and checkpoints -------------------------------------------------------------------

    def add_log(self, log_: Log, topic_partition: TopicPartition | None = None) -> TopicPartition:
        """Start tracking `log_` (compacted or not: its policy may change later)."""
        tp = topic_partition or topic_partition_of(log_)
        with self._cond:
            self._logs[tp] = log_
            if self.persist_checkpoints and tp not in self._checkpoints:
                stored = self._read_checkpoint_file(log_.directory.parent).get(tp)
                if stored is not None:
                    self._checkpoints[tp] = stored
            return tp

    def remove_log(self, topic_partition: TopicPartition) -> None:
        """Stop tracking a log (deleted or moved): abort its cleaning, drop its checkpoint."""
        with self._cond:
            if topic_partition not in self._logs:
                return
            self.abort_cleaning(topic_partition)
            log_ = self._logs.pop(topic_partition)
            self._checkpoints.pop(topic_partition, None)
            self._uncleanable.discard(topic_partition)
            self._write_checkpoint_file(log_.directory.parent)

    def logs(self) -> dict[TopicPartition, Log]:
        with self._cond:
            return dict(self._logs)

    def checkpoint(self, topic_partition: TopicPartition) -> int | None:
        """The first dirty offset recorded for a log, None before its first clean."""
        with self._cond:
            return self._checkpoints.get(topic_partition)

    def all_cleaner_checkpoints(self) -> dict[TopicPartition, int]:
        with self._cond:
            return dict(self._checkpoints)

    def update_checkpoint(self, topic_partition: TopicPartition, offset: int) -> None:
        """Set a log's first dirty offset (and persist it)."""
        with self._cond:
            log_ = self._logs.get(topic_partition)
            if log_ is None:
                return
            self._checkpoints[topic_partition] = offset
            self._write_checkpoint_file(log_.directory.parent)

    def maybe_truncate_checkpoint(self, topic_partition: TopicPartition, offset: int) -> None:
        """After truncating a log to `offset`: lower its checkpoint if it lies above."""
        with self._cond:
            log_ = self._logs.get(topic_partition)
            current = self._checkpoints.get(topic_partition)
            if (
                log_ is not None
                and log_.config.compact
                and current is not None
                and current > offset
            ):
                self.update_checkpoint(topic_partition, offset)

    def _read_checkpoint_file(self, directory: Path) -> dict[TopicPartition, int]:
        path = directory / CLEANER_CHECKPOINT_FILE
        try:
            return OffsetCheckpointFile(path).read()
        except CorruptCheckpointError as e:
            # Cleaning from the log start is always safe, only slower.
            logger.warning("ignoring %s: %s", path, e)
            return {}

    def _write_checkpoint_file(self, directory: Path) -> None:
        if not self.persist_checkpoints:
            return
        entries = {
            tp: offset
            for tp, offset in self._checkpoints.items()
            if self._logs[tp].directory.parent == directory
        }
        OffsetCheckpointFile(directory / CLEANER_CHECKPOINT_FILE).write(entries)

    # -- choosing work --------------------------------------------------------------------------

    def grab_filthiest_compacted_log(self, now_ms: int) -> LogToClean | None:
        """The compacted log most worth cleaning, marked in progress; None if none qualifies."""
        with self._cond:
            dirty: list[LogToClean] = []
            for tp, log_ in self._logs.items():
                if not self._may_work_on(tp, log_):
                    continue
                candidate = self._log_to_clean(tp, log_, now_ms)
                if candidate.total_bytes > 0:
                    dirty.append(candidate)
            self.dirtiest_log_cleanable_ratio = max((c.cleanable_ratio for c in dirty), default=0.0)
            cleanable = [c for c in dirty if c.should_clean()]
            if not cleanable:
                return None
            filthiest = max(cleanable, key=lambda c: c.cleanable_ratio)
            self._states[filthiest.topic_partition] = (_State.IN_PROGRESS, 0)
            return filthiest

    def _may_work_on(self, tp: TopicPartition, log_: Log) -> bool:
        """Compacted, open, not paused or in progress, not marked uncleanable."""
        return (
            log_.config.compact
            and not log_.closed
            and tp not in self._states
            and tp not in self._uncleanable
        )

    def _log_to_clean(self, tp: TopicPartition, log_: Log, now_ms: int) -> LogToClean:
        segments = log_.segments
        offsets = cleanable_offsets(log_, segments, self._checkpoints.get(tp), now_ms)
        if offsets.force_update_checkpoint:
            self.update_checkpoint(tp, offsets.first_dirty_offset)
        delay_ms = max_compaction_delay_ms(log_, segments, offsets.first_dirty_offset, now_ms)
        return LogToClean.of(tp, log_, segments, offsets, need_compaction_now=delay_ms > 0)

    def deletable_logs(self) -> list[tuple[TopicPartition, Log]]:
        """Compacted logs not being cleaned, marked in progress for the retention pass (the
        cleaner thread runs `delete_old_segments` on them; other logs are the log manager's)."""
        with self._cond:
            found = [(tp, log_) for tp, log_ in self._logs.items() if self._may_work_on(tp, log_)]
            for tp, _ in found:
                self._states[tp] = (_State.IN_PROGRESS, 0)
            return found

    # -- state transitions ----------------------------------------------------------------------

    def done_cleaning(self, topic_partition: TopicPartition, end_offset: int) -> None:
        """A round ended: record `end_offset` as the new first dirty offset, unless aborted."""
        with self._cond:
            state = self._states.get(topic_partition)
            if state is None:
                raise IllegalStateTransition(f"no cleaning state for {topic_partition}")
            if state[0] is _State.IN_PROGRESS:
                self.update_checkpoint(topic_partition, end_offset)
                del self._states[topic_partition]
            elif state[0] is _State.ABORTED:
                self._states[topic_partition] = (_State.PAUSED, 1)
                self._cond.notify_all()
            else:
                raise IllegalStateTransition(f"{topic_partition} finished cleaning while {state}")

    def done_deleting(self, topic_partitions: Iterable[TopicPartition]) -> None:
        """The retention pass over these logs ended."""
        with self._cond:
            for tp in topic_partitions:
                state = self._states.get(tp)
                if state is None:
                    raise IllegalStateTransition(f"no cleaning state for {tp}")
                if state[0] is _State.IN_PROGRESS:
                    del self._states[tp]
                elif state[0] is _State.ABORTED:
                    self._states[tp] = (_State.PAUSED, 1)
                    self._cond.notify_all()
                else:
                    raise IllegalStateTransition(f"{tp} finished deleting while {state}")

    def abort_cleaning(self, topic_partition: TopicPartition) -> None:
        """Stop any cleaning of the partition now; later rounds may clean it again."""
        with self._cond:
            self.abort_and_pause_cleaning(topic_partition)
            self.resume_cleaning([topic_partition])

    def abort_and_pause_cleaning(self, topic_partition: TopicPartition) -> None:
        """Stop cleaning the partition and keep it stopped until `resume_cleaning`; blocks until
        a round in progress has noticed (Kafka's `abortAndPauseCleaning`)."""
        with self._cond:
            state = self._states.get(topic_partition)
            if state is None:
                self._states[topic_partition] = (_State.PAUSED, 1)
            elif state[0] is _State.IN_PROGRESS:
                self._states[topic_partition] = (_State.ABORTED, 0)
            elif state[0] is _State.PAUSED:
                self._states[topic_partition] = (_State.PAUSED, state[1] + 1)
            else:
                raise IllegalStateTransition(
                    f"cleaning of {topic_partition} cannot be aborted and paused while {state}"
                )
            self._cond.wait_for(lambda: self._is_paused(topic_partition))

    def resume_cleaning(self, topic_partitions: Iterable[TopicPartition]) -> None:
        """Undo one pause of each partition."""
        with self._cond:
            for tp in topic_partitions:
                state = self._states.get(tp)
                if state is None or state[0] is not _State.PAUSED:
                    raise IllegalStateTransition(
                        f"cleaning of {tp} cannot be resumed while {state}"
                    )
                if state[1] <= 1:
                    del self._states[tp]
                else:
                    self._states[tp] = (_State.PAUSED, state[1] - 1)

    def _is_paused(self, topic_partition: TopicPartition) -> bool:
        state = self._states.get(topic_partition)
        return state is not None and state[0] is _State.PAUSED

    def is_paused(self, topic_partition: TopicPartition) -> bool:
        with self._cond:
            return self._is_paused(topic_partition)

    def check_cleaning_aborted(self, topic_partition: TopicPartition) -> None:
        """Raise `LogCleaningAbortedError` if an abort of this partition was requested."""
        with self._cond:
            state = self._states.get(topic_partition)
            if state is not None and state[0] is _State.ABORTED:
                raise LogCleaningAbortedError(f"cleaning of {topic_partition} was aborted")

    # -- uncleanable partitions -------------------------------------------------------------------

    def mark_partition_uncleanable(self, topic_partition: TopicPartition) -> None:
        """A clean failed unexpectedly: skip this partition until it is re-added."""
        with self._cond:
            self._uncleanable.add(topic_partition)

    def uncleanable_partitions(self) -> set[TopicPartition]:
        with self._cond:
            return set(self._uncleanable)
