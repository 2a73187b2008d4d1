"""One partition's replica state on one broker (Kafka's `Partition`), sans-IO.

Theory of operation. The controller owns a partition's registration (replicas, ISR, leader,
leader epoch, partition epoch); a broker learns it from the metadata log and calls
`apply_registration`, which makes this broker the leader, a follower, or neither.

The leader tracks each remote replica's log end offset (LEO) from its fetches (Kafka's
`Replica.updateFetchState`) and computes the high watermark (HW) as the minimum LEO over the
*maximal* ISR: the committed ISR plus any member an in-flight AlterPartition proposes to add
(Kafka's `PendingExpandIsr`; a pending shrink keeps the members it removes). The HW only moves
forward while an epoch lasts, so a record below it is on every replica that could be elected.
It does not move at all while the committed ISR is smaller than the topic's min.insync.replicas
(capped at the replication factor; Kafka 4.x's `isUnderMinIsr` check, KIP-966): a replica that
left the ISR then is an eligible leader replica and must hold every committed record.

The leader never changes the ISR on its own. A follower outside the ISR whose LEO reached the
HW and the start of the current leader epoch is proposed for admission; an ISR follower that has
not caught up with the leader's LEO within `replica.lag.time.max.ms` is proposed for removal.
A proposal is an `IsrChangeProposed` event for the caller to send to the controller
(AlterPartition); only one is in flight per partition, and `apply_isr_outcome` applies the
controller's answer at once (success), reverts it (INELIGIBLE_REPLICA, OPERATION_NOT_ATTEMPTED),
keeps it pending until newer metadata arrives (stale epochs) or asks the caller to retry.

Requests carry a `current_leader_epoch`; one older than ours is fenced (FENCED_LEADER_EPOCH), one
newer is from a leader we have not heard of (UNKNOWN_LEADER_EPOCH).

Roles and their legal transitions (a missing entry raises `IllegalStateTransition`):

    NONE     -> LEADER, FOLLOWER, DELETED
    LEADER   -> LEADER (new epoch or ISR), FOLLOWER, DELETED
    FOLLOWER -> LEADER, FOLLOWER (new leader or epoch), DELETED

No I/O and no clock: the log's offsets and `now_ms` come in as arguments, and events come out
for the caller to act on (apply the HW to the log, start or stop fetching, send proposals, wake
waiting requests). Thread-safety: none; the replica manager uses a partition from one loop.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from sparklog.errors import (
    FencedLeaderEpochError,
    IllegalStateTransition,
    IneligibleReplicaError,
    InvalidRequestError,
    InvalidUpdateVersionError,
    NewLeaderElectedError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OperationNotAttemptedError,
    UnknownLeaderEpochError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from sparklog.structs import NO_LEADER

NO_EPOCH = -1
UNKNOWN_OFFSET = -1

#: AlterPartition errors after which the controller did not apply the change: back to the
#: committed ISR (Kafka's handleAlterPartitionError).
_REVERT_ERRORS = frozenset({IneligibleReplicaError.code, OperationNotAttemptedError.code})
#: Errors that newer metadata resolves: the proposal stays pending until it arrives.
_AWAIT_METADATA_ERRORS = frozenset(
    {
        UnknownTopicOrPartitionError.code,
        UnknownTopicIdError.code,
        FencedLeaderEpochError.code,
        InvalidUpdateVersionError.code,
        InvalidRequestError.code,
        NewLeaderElectedError.code,
        NotLeaderOrFollowerError.code,
    }
)


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
    """Follow `leader` (NO_LEADER: the partition is offline; fetch from nobody)."""

    leader: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class IsrChangeProposed:
    """The leader wants the ISR to become `isr` (AlterPartition against these epochs)."""

    isr: tuple[int, ...]
    leader_epoch: int = NO_EPOCH
    partition_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class IsrChanged:
    """The committed ISR changed (an AlterPartition succeeded)."""

    isr: tuple[int, ...]
    partition_epoch: int


Event = HighWatermarkAdvanced | BecameLeader | BecameFollower | IsrChangeProposed | IsrChanged


@dataclass(slots=True)
class RemoteReplica:
    """What the leader knows about one follower (Kafka's `Replica`)."""

    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET  # not fetched since this broker became leader
    last_caught_up_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0

    def update_fetch_state(
        self, now_ms: int, fetch_offset: int, leader_log_end_offset: int
    ) -> None:
        """Kafka's `Replica.updateFetchState`: caught up when the fetch reached the leader's LEO
        now, or the LEO the leader had at this follower's previous fetch (then as of that time)."""
        if fetch_offset >= leader_log_end_offset:
            if now_ms > self.last_caught_up_time_ms:
                self.last_caught_up_time_ms = now_ms
        elif fetch_offset >= self.last_fetch_leader_log_end_offset >= 0:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = leader_log_end_offset
        self.last_fetch_time_ms = now_ms


class Partition:
    """A partition replica hosted on broker `local_broker_id`."""

    def __init__(self, topic: str, partition_index: int, local_broker_id: int) -> None:
        self.topic = topic
        self.partition_index = partition_index
        self.local_broker_id = local_broker_id
        self.role = Role.NONE
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()  # committed: the controller's
        self.pending_isr: IsrChangeProposed | None = None  # in flight; leader only
        self.leader = NO_LEADER
        self.leader_epoch = NO_EPOCH
        self.partition_epoch = NO_EPOCH
        # where this broker's leadership epoch starts in its log (Kafka's leaderEpochStartOffsetOpt)
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        # log_start_offset <= high_watermark <= leader log end offset (asserted on every move)
        self.high_watermark = 0
        self.remote_replicas: dict[int, RemoteReplica] = {}
        # the topic's min.insync.replicas (the caller keeps it current from the log config)
        self.min_insync_replicas = 1

    def __repr__(self) -> str:
        pending = f", pending={self.pending_isr.isr}" if self.pending_isr else ""
        return (
            f"Partition({self.topic}-{self.partition_index}, {self.role.value}, "
            f"leader={self.leader}, epoch={self.leader_epoch}, isr={self.isr}{pending}, "
            f"hw={self.high_watermark})"
        )

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The committed ISR plus members a pending expansion adds (Kafka's `maximalIsr`)."""
        if self.pending_isr is None:
            return self.isr
        return tuple(sorted({*self.isr, *self.pending_isr.isr}))

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
        newer = registration.partition_epoch > self.partition_epoch
        self._transition(Role.LEADER)
        if new_epoch or newer:
            self.pending_isr = None  # the metadata overrides whatever we proposed
        self._take(registration)
        events: list[Event] = []
        if new_epoch:
            # Kafka's resetReplicaState: ISR members count as caught up now, others never were.
            self.remote_replicas = {
                b: RemoteReplica(b, last_caught_up_time_ms=now_ms if b in registration.isr else 0)
                for b in registration.replicas
                if b != self.local_broker_id
            }
            self.leader_epoch_start_offset = log_end_offset
            events.append(BecameLeader(registration.leader_epoch))
        else:
            self.remote_replicas = {
                b: self.remote_replicas.get(b) or RemoteReplica(b)
                for b in registration.replicas
                if b != self.local_broker_id
            }
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
        self.pending_isr = None
        self.remote_replicas = {}
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        return [BecameFollower(registration.leader, registration.leader_epoch)] if changed else []

    def mark_deleted(self) -> None:
        """The partition left this broker (topic deleted or replica moved)."""
        self._transition(Role.DELETED)
        self.pending_isr = None

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
        if current_leader_epoch != self.leader_epoch:  # inlined: every partition of every fetch
            self.check_leader_epoch(current_leader_epoch)
        if self.role is not Role.LEADER:
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
        self,
        now_ms: int,
        replica_id: int,
        fetch_offset: int,
        leader_log_end_offset: int,
        *,
        replica_eligible: bool = True,
    ) -> list[Event]:
        """A follower fetched from `fetch_offset`: it holds everything below it.

        `replica_eligible`: the follower's broker may join the ISR (registered, unfenced, not
        shutting down); Kafka's `isReplicaIsrEligible`, known to the caller from the image.
        Called for every partition of every follower fetch: the common case (an ISR member
        that did not move) returns an empty list after one state update.
        """
        assert self.role is Role.LEADER
        replica = self.remote_replicas.get(replica_id)
        if replica is None:
            raise NotLeaderOrFollowerError(
                f"broker {replica_id} is not a replica of {self.topic}-{self.partition_index}"
            )
        previous_end = replica.log_end_offset
        replica.update_fetch_state(now_ms, fetch_offset, leader_log_end_offset)
        joins = replica_eligible and replica_id not in self.isr and self._follower_may_join(replica)
        if fetch_offset == previous_end and not joins:
            return []
        events: list[Event] = []
        if fetch_offset != previous_end:  # as Kafka: only a follower that moved moves the HW
            events = self._maybe_increment_high_watermark(leader_log_end_offset)
        if joins:
            self.pending_isr = IsrChangeProposed(
                tuple(sorted({*self.isr, replica_id})), self.leader_epoch, self.partition_epoch
            )
            events.append(self.pending_isr)
        return events

    def _follower_may_join(self, replica: RemoteReplica) -> bool:
        """Kafka's `needsExpandIsr` + `isFollowerInSync`."""
        return (
            self.pending_isr is None
            and replica.broker_id not in self.isr
            and replica.log_end_offset >= self.high_watermark
            and replica.log_end_offset >= self.leader_epoch_start_offset
        )

    def out_of_sync_replicas(
        self, now_ms: int, replica_lag_time_max_ms: int, leader_log_end_offset: int | None = None
    ) -> tuple[int, ...]:
        """ISR followers that have not caught up within `replica.lag.time.max.ms` (Kafka's
        `getOutOfSyncReplicas`); one at the leader's LEO (when given) is never out of sync."""
        assert self.is_leader
        lagging = []
        for b in self.isr:
            replica = self.remote_replicas.get(b)
            if b == self.local_broker_id:
                continue
            at_leader_end = replica is not None and replica.log_end_offset == leader_log_end_offset
            if replica is None or (
                not at_leader_end
                and now_ms - replica.last_caught_up_time_ms > replica_lag_time_max_ms
            ):
                lagging.append(b)
        return tuple(lagging)

    def maybe_shrink_isr(
        self, now_ms: int, replica_lag_time_max_ms: int, leader_log_end_offset: int | None = None
    ) -> list[Event]:
        """Propose removing the out-of-sync followers (none while a proposal is in flight)."""
        if not self.is_leader or self.pending_isr is not None:
            return []
        lagging = self.out_of_sync_replicas(now_ms, replica_lag_time_max_ms, leader_log_end_offset)
        if not lagging:
            return []
        self.pending_isr = IsrChangeProposed(
            tuple(b for b in self.isr if b not in lagging), self.leader_epoch, self.partition_epoch
        )
        return [self.pending_isr]

    def apply_isr_outcome(
        self,
        proposal: IsrChangeProposed,
        error_code: int,
        *,
        leader_epoch: int = NO_EPOCH,
        isr: tuple[int, ...] = (),
        partition_epoch: int = NO_EPOCH,
        leader_log_end_offset: int = 0,
    ) -> tuple[list[Event], bool]:
        """The controller answered `proposal`: `(events, retry)`; `retry` asks the caller to
        send the same proposal again later (Kafka's `submitAlterPartition` callback)."""
        if self.pending_isr != proposal or not self.is_leader:
            return [], False  # newer metadata replaced the proposal meanwhile: out of date
        if error_code in _REVERT_ERRORS:
            self.pending_isr = None
            return [], False
        if error_code in _AWAIT_METADATA_ERRORS:
            return [], False
        if error_code != 0:
            return [], True
        if (
            leader_epoch != self.leader_epoch
            or partition_epoch < self.partition_epoch
            or self.local_broker_id not in isr
        ):
            return [], False  # stale (or not ours to apply): the metadata will settle it
        self.pending_isr = None
        self.isr = tuple(isr)
        self.partition_epoch = partition_epoch
        events: list[Event] = [IsrChanged(self.isr, partition_epoch)]
        events.extend(self._maybe_increment_high_watermark(leader_log_end_offset))
        return events, False

    @property
    def is_under_min_isr(self) -> bool:
        """Kafka's `isUnderMinIsr`: the committed ISR is below min.insync.replicas, capped at
        the replication factor (so a one-replica topic is never under it)."""
        return len(self.isr) < min(self.min_insync_replicas, len(self.replicas))

    def _maybe_increment_high_watermark(self, leader_log_end_offset: int) -> list[Event]:
        if self.is_under_min_isr:
            return []  # KIP-966: the ELR must hold every committed record
        offsets = [leader_log_end_offset]
        for b in self.maximal_isr:
            if b != self.local_broker_id:
                replica = self.remote_replicas.get(b)
                offsets.append(replica.log_end_offset if replica is not None else UNKNOWN_OFFSET)
        new_hw = min(offsets)
        if new_hw <= self.high_watermark:
            return []
        assert new_hw <= leader_log_end_offset
        self.high_watermark = new_hw
        return [HighWatermarkAdvanced(new_hw)]

    def reset_high_watermark(self, high_watermark: int) -> None:
        """The log clamped or moved the HW (load, truncation, follower fetch, DeleteRecords)."""
        self.high_watermark = high_watermark
