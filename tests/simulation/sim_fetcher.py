"""The follower side of a simulated broker: replica_fetcher.py's phases over simulated RPCs.

Each followed partition moves through TRUNCATING (OffsetForLeaderEpoch, then sparklog's
`truncation_for`, repeated until it says done; with no epochs at all, cut to the HW),
RESETTING (after OFFSET_OUT_OF_RANGE: ListOffsets, then sparklog's `reset_for_out_of_range`)
and FETCHING (append what the leader returns, take HW = min(leader HW, LEO)). A new leader or
epoch replaces the partition's `FetchState`; answers to an old state are dropped (compared by
identity, as replica_fetcher's `_current` does), so nothing fetched from an old leader lands
after a change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from sparklog.broker.partition_fetch_state import reset_for_out_of_range
from sparklog.broker.truncation import truncation_for
from sparklog.errors import NetworkExceptionError, OffsetOutOfRangeError

from .messages import (
    Fetch,
    FetchReply,
    ListOffsets,
    ListOffsetsReply,
    OffsetForLeaderEpoch,
    OffsetForLeaderEpochReply,
    TopicPartition,
)

if TYPE_CHECKING:
    from .sim_broker import BrokerNode

TRUNCATING, RESETTING, FETCHING = "truncating", "resetting", "fetching"
#: OffsetForLeaderEpoch rounds one truncation may take (each cuts the log or finishes).
MAX_TRUNCATION_ROUNDS = 64
TRUNCATION_LIVELOCK = "liveness: follower truncation never finishes"


@dataclass(slots=True, eq=False)
class FetchState:
    """One followed partition (replica_fetcher's `PartitionFetchState`); compared by identity."""

    leader: int
    leader_epoch: int
    phase: str
    rounds: int = 0


class SimReplicaFetcher:
    """Every partition one broker process follows; dies with the process."""

    def __init__(self, broker: BrokerNode) -> None:
        self.broker = broker
        self.node_id = broker.node_id
        self.settings = broker.settings
        self.states: dict[TopicPartition, FetchState] = {}

    def stop(self, tp: TopicPartition) -> None:
        """Stop following `tp` now (we lead it, or it went offline)."""
        self.states.pop(tp, None)

    def start(self, tp: TopicPartition, leader: int, leader_epoch: int) -> None:
        """Follow `tp` from `leader` at `leader_epoch`, truncating first."""
        self.states.pop(tp, None)
        if leader < 0 or leader == self.node_id:
            return  # offline: nobody to fetch from
        phase = FETCHING if self.broker.mutations.follower_skips_truncation else TRUNCATING
        state = FetchState(leader, leader_epoch, phase)
        self.states[tp] = state
        self.broker.set_timer(0, self._fetch_step, tp, state)

    def current(self, tp: TopicPartition, state: FetchState) -> bool:
        return self.states.get(tp) is state

    def _retry_later(self, tp: TopicPartition, state: FetchState) -> None:
        self.broker.set_timer(self.settings.replica_fetch_backoff_ms, self._fetch_step, tp, state)

    def _fetch_step(self, tp: TopicPartition, state: FetchState) -> None:
        if not self.current(tp, state):
            return
        log = self.broker.disk[tp]
        s = self.settings
        if state.phase == TRUNCATING:
            latest = log.latest_epoch
            if latest is None:  # no epochs to compare: keep only what was committed
                self._truncate(tp, log.high_watermark)
                state.phase = FETCHING
                self._fetch_step(tp, state)
                return
            request: Any = OffsetForLeaderEpoch(tp, self.node_id, state.leader_epoch, latest)
            on_reply: Callable[[Any], None] = partial(self._on_epoch_end, tp, state)
            self.broker.call(state.leader, request, s.rpc_timeout_ms, on_reply)
        elif state.phase == RESETTING:
            request = ListOffsets(tp, state.leader_epoch)
            self.broker.call(
                state.leader, request, s.rpc_timeout_ms, partial(self._on_reset, tp, state)
            )
        else:
            request = Fetch(tp, self.node_id, state.leader_epoch, log.log_end_offset)
            timeout_ms = s.rpc_timeout_ms + s.replica_fetch_wait_max_ms
            self.broker.call(
                state.leader, request, timeout_ms, partial(self._on_fetched, tp, state)
            )

    def _on_error(self, tp: TopicPartition, state: FetchState, error_code: int) -> None:
        if error_code == OffsetOutOfRangeError.code:
            state.phase = RESETTING
            self._fetch_step(tp, state)
        else:  # newer metadata will move us; until then back off (replica.fetch.backoff.ms)
            self._retry_later(tp, state)

    def _on_epoch_end(
        self, tp: TopicPartition, state: FetchState, reply: OffsetForLeaderEpochReply | None
    ) -> None:
        if not self.current(tp, state):
            return
        if reply is None or reply.error_code:
            self._on_error(tp, state, reply.error_code if reply else NetworkExceptionError.code)
            return
        log = self.broker.disk[tp]
        cut = truncation_for(
            reply.leader_epoch,
            reply.end_offset,
            local_end_offset_for=log.end_offset_for,
            log_end_offset=log.log_end_offset,
            high_watermark=log.high_watermark,
        )
        stuck = not cut.done and cut.offset >= log.log_end_offset
        latest = log.latest_epoch
        self._truncate(tp, cut.offset)
        state.rounds += 1
        # A round that cuts nothing and leaves the same latest epoch will be asked again.
        if state.rounds > MAX_TRUNCATION_ROUNDS or (stuck and log.latest_epoch == latest):
            self.broker.history.fail(
                f"{TRUNCATION_LIVELOCK}: broker {self.node_id} asks leader {state.leader} of {tp} "
                f"for epoch {log.latest_epoch} again and again; answer {reply}, its epochs "
                f"{log.epochs.entries()}, log end {log.log_end_offset}"
            )
        if cut.done:
            state.phase = FETCHING
        self._fetch_step(tp, state)

    def _on_reset(
        self, tp: TopicPartition, state: FetchState, reply: ListOffsetsReply | None
    ) -> None:
        if not self.current(tp, state):
            return
        if reply is None or reply.error_code:
            self._retry_later(tp, state)
            return
        log = self.broker.disk[tp]
        reset = reset_for_out_of_range(
            log.log_end_offset, reply.log_start_offset, reply.log_end_offset
        )
        assert reset.start_at is None, "no retention in the simulation: logs start at 0"
        self.broker.scheduler.note("b%s resets %s: %s", self.node_id, tp, reset)
        if reset.truncate_to is not None:
            self._truncate(tp, reset.truncate_to)
        state.phase = FETCHING
        self._fetch_step(tp, state)

    def _truncate(self, tp: TopicPartition, offset: int) -> None:
        log = self.broker.disk[tp]
        self.broker.history.on_truncate(
            self.node_id, tp, offset, log.log_end_offset, log.high_watermark
        )
        log.truncate_to(offset)
        log.high_watermark = min(log.high_watermark, log.log_end_offset)
        self.broker.partitions[tp].reset_high_watermark(log.high_watermark)

    def _on_fetched(self, tp: TopicPartition, state: FetchState, reply: FetchReply | None) -> None:
        if not self.current(tp, state):
            return
        if reply is None or reply.error_code:
            self._on_error(tp, state, reply.error_code if reply else NetworkExceptionError.code)
            return
        log = self.broker.disk[tp]
        for record in reply.records:
            assert record.offset == log.log_end_offset, (
                self.node_id,
                tp,
                record,
                log.log_end_offset,
            )
            if log.offset_of(record.producer_id, record.sequence) is not None:
                self.broker.history.fail(f"broker {self.node_id} would hold {record} twice in {tp}")
            log.append(record)
        high_watermark = min(reply.high_watermark, log.log_end_offset)
        if high_watermark > log.high_watermark:
            old, log.high_watermark = log.high_watermark, high_watermark
            self.broker.history.on_high_watermark(self.node_id, tp, log, old, high_watermark, False)
        self.broker.partitions[tp].reset_high_watermark(log.high_watermark)
        self._fetch_step(tp, state)
