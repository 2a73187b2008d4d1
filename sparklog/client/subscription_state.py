"""Assigned partitions and their fetch positions (Kafka's `SubscriptionState`), sans-IO.

Every assigned partition has a position: the offset of the next record to return (None until
`seek` sets it or `auto.offset.reset` finds it). A position remembers the leader epoch of the
record before it; when metadata shows a newer leader epoch the position awaits validation
(KIP-320), which the fetcher performs. A position at a corrupt batch holds the error the fetcher
raises for it (`corrupt`): a batch found corrupt in fetched data stops the partition until a seek
or reset; a broker's CORRUPT_MESSAGE answer keeps it fetched (after a backoff) and a good answer
clears it too. Not thread-safe: the consumer's poll thread owns it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sparklog.structs import TopicPartition

from .metadata import Cluster


@dataclass(slots=True)
class PartitionState:
    """Fetch state of one assigned partition; -1 marks an unknown watermark or epoch."""

    position: int | None = None
    paused: bool = False
    reset_strategy: str | None = None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    position_epoch: int = -1  # leader epoch of the record before `position` (KIP-320)
    leader_epoch: int = -1  # the newest leader epoch the position was checked against
    awaiting_validation: bool = False  # no fetching until OffsetForLeaderEpoch confirms it
    # The batch at `position` is corrupt: raised by every drain until a seek or, when the broker
    # reported it (CORRUPT_MESSAGE), until a fetch is answered without error.
    corrupt: BaseException | None = None
    # Reported by the broker: fetched again from this time (ms); -1: found in fetched data, not
    # fetched until a seek (the same bytes would come back).
    corrupt_refetch_ms: int = -1
    corrupt_answers: int = 0  # CORRUPT_MESSAGE answers in a row; the refetch backoff doubles

    def clear_corrupt(self) -> None:
        self.corrupt = None
        self.corrupt_refetch_ms = -1
        self.corrupt_answers = 0


class SubscriptionState:
    """Assigned partitions and their positions (manual assignment only, for now)."""

    def __init__(self, default_reset: str) -> None:
        self.default_reset = default_reset  # "earliest", "latest" or "none"
        self._states: dict[TopicPartition, PartitionState] = {}

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment; partitions kept keep their positions."""
        new = list(dict.fromkeys(partitions))
        self._states = {tp: self._states.get(tp) or PartitionState() for tp in new}

    def assignment(self) -> list[TopicPartition]:
        return list(self._states)

    def state(self, tp: TopicPartition) -> PartitionState:
        try:
            return self._states[tp]
        except KeyError:
            raise ValueError(
                f"{tp.topic}-{tp.partition} is not assigned to this consumer"
            ) from None

    def is_assigned(self, tp: TopicPartition) -> bool:
        return tp in self._states

    def seek(self, tp: TopicPartition, offset: int, epoch: int = -1) -> None:
        """Fetch from `offset` next; `epoch` is the leader epoch of the record before it, when
        known (a reset from ListOffsets, a validated truncation), which enables validation."""
        if offset < 0:
            raise ValueError(f"seek offset must not be negative, got {offset}")
        state = self.state(tp)
        state.position = offset
        state.position_epoch = epoch
        state.reset_strategy = None
        state.awaiting_validation = False
        state.clear_corrupt()

    def request_reset(self, tp: TopicPartition, strategy: str) -> None:
        state = self.state(tp)
        state.position = None
        state.position_epoch = -1
        state.reset_strategy = strategy
        state.awaiting_validation = False
        state.clear_corrupt()

    def maybe_validate_positions(self, cluster: Cluster) -> None:
        """Positions whose leader epoch grew since they were last checked await validation
        (Kafka's `maybeValidatePositionForCurrentLeader`); first sightings just record it."""
        for tp, state in self._states.items():
            epoch = cluster.leader_epoch_for(tp)
            if epoch <= state.leader_epoch:
                continue
            if state.leader_epoch >= 0 and state.position is not None and state.position_epoch >= 0:
                state.awaiting_validation = True
            state.leader_epoch = epoch

    def awaiting_validation(self) -> list[TopicPartition]:
        return [tp for tp, s in self._states.items() if s.awaiting_validation and not s.paused]

    def needing_reset(self) -> dict[TopicPartition, str]:
        """Partitions without a position and the strategy to find one ("none" when unset)."""
        return {
            tp: s.reset_strategy or self.default_reset
            for tp, s in self._states.items()
            if s.position is None
        }

    def is_fetchable(self, tp: TopicPartition) -> bool:
        state = self._states.get(tp)
        return (
            state is not None
            and not state.paused
            and state.position is not None
            and not state.awaiting_validation
            # A batch the broker refused is fetched again (its backoff is the fetcher's); one
            # found corrupt in fetched data is not: the same bytes would come back.
            and (state.corrupt is None or state.corrupt_refetch_ms >= 0)
        )

    def corrupt_refetch_due_ms(self) -> int:
        """When the next refetch of a partition whose batch the broker refused is due, or -1
        when no refetch can end the raising: no such partition, or an unpaused one is stopped
        at a corrupt batch in fetched data (only a seek ends that)."""
        due = -1
        for state in self._states.values():
            if state.corrupt is None or state.paused:
                continue
            if state.corrupt_refetch_ms < 0:
                return -1
            due = state.corrupt_refetch_ms if due < 0 else min(due, state.corrupt_refetch_ms)
        return due
