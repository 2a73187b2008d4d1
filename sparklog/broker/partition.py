"""One partition's replica state on one broker (Kafka's `Partition`), sans-IO.

Theory of operation. The controller owns a partition's registration (replicas, ISR, leader,
leader epoch, partition epoch); a broker learns it from the metadata log and calls
`apply_registration`, which makes this broker the leader, a follower, or neither. The leader
tracks each remote replica's log end offset (LEO) from its fetches and computes the high
watermark (HW) as the minimum LEO over the ISR, its own included; with one replica the HW is
the leader's LEO. The HW only moves forward while an epoch lasts. A follower lagging more than
`replica.lag.time.max.ms` is proposed for removal from the ISR, a caught-up one for
re-admission; the replica manager turns those proposals into AlterPartition requests (when
replication arrives). Requests carry a `current_leader_epoch`; one older than ours is fenced
(FENCED_LEADER_EPOCH), one newer is from a leader we have not heard of (UNKNOWN_LEADER_EPOCH).

Roles and their legal transitions (a missing entry raises `IllegalStateTransition`):

    NONE     -> LEADER, FOLLOWER, DELETED
    LEADER   -> LEADER (new epoch), FOLLOWER, DELETED
    FOLLOWER -> LEADER, FOLLOWER (new leader or epoch), DELETED

No I/O and no clock: the log's offsets and `now_ms` come in as arguments, and events come out
for the caller to act on (apply the HW to the log, wake waiting requests).
Thread-safety: none; the replica manager uses a partition from its event loop only.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from sparklog.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)

NO_LEADER = -1
NO_EPOCH = -1


class IllegalStateTransition(Exception):
    """A role change the table in the module doc does not allow (our bug)."""


class Role(enum.Enum):
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"
    DELETED = "deleted"


_TRANSITIONS: dict[Role, frozenset[Role]] = {
    Role.NONE: frozenset({Role.LEADER, Role.FOLLOWER, Role.DELETED}),
    Role.LEADER: frozenset({Role.LEADER, Role.FOLLOWER, Role.DELETED}),
    Role.FOLLOWER: frozenset({Role.LEADER, Role.FOLLOWER, Role.DELETED}),
    Role.DELETED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """The controller's view of a partition (an image `Partition`/`PartitionChange` record)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class HighWatermarkAdvanced:
    high_watermark: int


@dataclass(frozen=True, slots=True)
class BecameLeader:
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class BecameFollower:
    leader: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class IsrChangeProposed:
    """The leader wants the ISR to become `isr` (AlterPartition to the controller)."""

    isr: tuple[int, ...]


Event = HighWatermarkAdvanced | BecameLeader | BecameFollower | IsrChangeProposed


@dataclass(slots=True)
class RemoteReplica:
    """What the leader knows about one follower (Kafka's `Replica`)."""

    broker_id: int
    log_end_offset: int = -1  # -1: not fetched since this broker became leader
    last_caught_up_time_ms: int = 0


class Partition:
    """A partition replica hosted on broker `local_broker_id`."""

    def __init__(self, topic: str, partition_index: int, local_broker_id: int) -> None:
        self.topic = topic
        self.partition_index = partition_index
        self.local_broker_id = local_broker_id
        self.role = Role.NONE
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.leader = NO_LEADER
        self.leader_epoch = NO_EPOCH
        self.partition_epoch = NO_EPOCH
        # log_start_offset <= high_watermark <= leader log end offset (asserted on every move)
        self.high_watermark = 0
        self.remote_replicas: dict[int, RemoteReplica] = {}

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic}-{self.partition_index}, {self.role.value}, "
            f"leader={self.leader}, epoch={self.leader_epoch}, isr={self.isr}, "
            f"hw={self.high_watermark})"
        )

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    # -- metadata ---------------------------------------------------------------------------

    def apply_registration(
        self, registration: PartitionRegistration, now_ms: int, log_end_offset: int
    ) -> list[Event]:
        """Take on the role `registration` gives this broker; stale registrations are ignored."""
        assert self.local_broker_id in registration.replicas, "caller removes unhosted replicas"
        if registration.partition_epoch < self.partition_epoch:
            return []  # an older state than the one we hold (Kafka ignores it too)
        if registration.leader == self.local_broker_id:
            return self._make_leader(registration, now_ms, log_end_offset)
        return self._make_follower(registration)

    def _make_leader(
        self, registration: PartitionRegistration, now_ms: int, log_end_offset: int
    ) -> list[Event]:
        new_epoch = self.role is not Role.LEADER or registration.leader_epoch != self.leader_epoch
        self._transition(Role.LEADER)
        self._take(registration)
        events: list[Event] = []
        if new_epoch:
            self.remote_replicas = {
                b: RemoteReplica(b, -1, now_ms if b in registration.isr else 0)
                for b in registration.replicas
                if b != self.local_broker_id
            }
            events.append(BecameLeader(registration.leader_epoch))
        else:
            for b in registration.replicas:
                if b != self.local_broker_id and b not in self.remote_replicas:
                    self.remote_replicas[b] = RemoteReplica(b, -1, 0)
        events.extend(self._maybe_increment_high_watermark(log_end_offset))
        return events

    def _make_follower(self, registration: PartitionRegistration) -> list[Event]:
        changed = (
            self.role is not Role.FOLLOWER
            or registration.leader != self.leader
            or registration.leader_epoch != self.leader_epoch
        )
        self._transition(Role.FOLLOWER)
        self._take(registration)
        self.remote_replicas = {}
        return [BecameFollower(registration.leader, registration.leader_epoch)] if changed else []

    def mark_deleted(self) -> None:
        """The partition left this broker (topic deleted or replica moved)."""
        self._transition(Role.DELETED)

    def _take(self, registration: PartitionRegistration) -> None:
        self.replicas = registration.replicas
        self.isr = registration.isr
        self.leader = registration.leader
        self.leader_epoch = registration.leader_epoch
        self.partition_epoch = registration.partition_epoch

    def _transition(self, to: Role) -> None:
        if to not in _TRANSITIONS[self.role]:
            raise IllegalStateTransition(f"{self!r}: {self.role.value} -> {to.value}")
        self.role = to

    # -- request checks -----------------------------------------------------------------------

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Kafka's `checkCurrentLeaderEpoch`: -1 skips the check."""
        if current_leader_epoch == NO_EPOCH:
            return
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"{self.topic}-{self.partition_index}: request epoch {current_leader_epoch} is "
                f"newer than this broker's {self.leader_epoch}; its metadata is behind"
            )
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"{self.topic}-{self.partition_index}: request epoch {current_leader_epoch} is "
                f"older than the current {self.leader_epoch}; refresh metadata"
            )

    def check_leader(self, current_leader_epoch: int = NO_EPOCH) -> None:
        """Raise unless this broker leads the partition at the request's epoch."""
        self.check_leader_epoch(current_leader_epoch)
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of "
                f"{self.topic}-{self.partition_index} (leader {self.leader})"
            )

    def check_enough_replicas(self, min_insync_replicas: int) -> None:
        """acks=all is refused up front when the ISR is smaller than min.insync.replicas."""
        if len(self.isr) < min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{self.topic}-{self.partition_index}: ISR {list(self.isr)} has fewer than "
                f"min.insync.replicas={min_insync_replicas} members"
            )

    def acks_all_satisfied(self, required_offset: int, min_insync_replicas: int) -> bool:
        """Whether an acks=all append ending before `required_offset` is complete (Kafka's
        `checkEnoughReplicasReachOffset`); raises when it can no longer succeed."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"leadership of {self.topic}-{self.partition_index} moved while the produce waited"
            )
        if self.high_watermark < required_offset:
            return False
        if len(self.isr) < min_insync_replicas:
            raise NotEnoughReplicasAfterAppendError(
                f"{self.topic}-{self.partition_index}: appended, but the ISR shrank below "
                f"min.insync.replicas={min_insync_replicas}"
            )
        return True

    # -- offsets ------------------------------------------------------------------------------

    def on_leader_append(self, log_end_offset: int) -> list[Event]:
        """The leader's log grew; with a lone ISR member the HW follows the LEO."""
        assert self.is_leader
        return self._maybe_increment_high_watermark(log_end_offset)

    def on_follower_fetch(
        self, now_ms: int, replica_id: int, fetch_offset: int, leader_log_end_offset: int
    ) -> list[Event]:
        """A follower fetched from `fetch_offset`: it holds everything below it."""
        assert self.is_leader
        replica = self.remote_replicas.get(replica_id)
        if replica is None:
            raise NotLeaderOrFollowerError(
                f"broker {replica_id} is not a replica of {self.topic}-{self.partition_index}"
            )
        replica.log_end_offset = fetch_offset
        if fetch_offset >= leader_log_end_offset:
            replica.last_caught_up_time_ms = now_ms
        events = self._maybe_increment_high_watermark(leader_log_end_offset)
        if replica_id not in self.isr and fetch_offset >= self.high_watermark:
            events.append(IsrChangeProposed(tuple(sorted({*self.isr, replica_id}))))
        return events

    def out_of_sync_replicas(self, now_ms: int, replica_lag_time_max_ms: int) -> tuple[int, ...]:
        """ISR followers that have not caught up within `replica.lag.time.max.ms`."""
        assert self.is_leader
        return tuple(
            b
            for b in self.isr
            if b != self.local_broker_id
            and now_ms - self.remote_replicas[b].last_caught_up_time_ms > replica_lag_time_max_ms
        )

    def maybe_shrink_isr(self, now_ms: int, replica_lag_time_max_ms: int) -> list[Event]:
        lagging = self.out_of_sync_replicas(now_ms, replica_lag_time_max_ms)
        if not lagging:
            return []
        return [IsrChangeProposed(tuple(b for b in self.isr if b not in lagging))]

    def _maybe_increment_high_watermark(self, leader_log_end_offset: int) -> list[Event]:
        offsets = [leader_log_end_offset]
        for b in self.isr:
            if b != self.local_broker_id:
                replica = self.remote_replicas.get(b)
                offsets.append(replica.log_end_offset if replica is not None else -1)
        new_hw = min(offsets)
        if new_hw <= self.high_watermark:
            return []
        assert new_hw <= leader_log_end_offset
        self.high_watermark = new_hw
        return [HighWatermarkAdvanced(new_hw)]

    def reset_high_watermark(self, high_watermark: int) -> None:
        """The log clamped or moved the HW (load, truncation, DeleteRecords)."""
        self.high_watermark = high_watermark
