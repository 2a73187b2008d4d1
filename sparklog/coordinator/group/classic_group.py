"""A classic consumer group's state: members, generation, chosen protocol (Kafka's `ClassicGroup`).

Theory of operation. A group moves Empty -> PreparingRebalance when a member joins; the join
phase ends when every known member has rejoined (or the rebalance timeout fires), which starts
the next generation in CompletingRebalance and answers every parked JoinGroup; the leader's
SyncGroup carries the assignment, which is persisted, and the group is Stable. A leave, a
session expiry or a changed subscription sends it back to PreparingRebalance. A group with no
members is Empty; a deleted group is Dead. `TRANSITIONS` is the table of legal moves; anything
else raises `IllegalStateTransition` (a bug, never a peer's fault).

This module holds state and the small rules over it; the request handlers that drive it live in
`classic_protocol`. No I/O, no clock: times are passed in.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from sparklog.coordinator.clock import loaded_ms
from sparklog.errors import IllegalStateTransition


class GroupState(enum.Enum):
    """The states of a classic group, named as Kafka's DescribeGroups/ListGroups answer them."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
#: state -> states it may move to (Kafka's `ClassicGroupState.validPreviousStates`, inverted).
TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE, _S.DEAD}),
    _S.PREPARING_REBALANCE: frozenset({_S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD}),
    _S.COMPLETING_REBALANCE: frozenset({_S.STABLE, _S.PREPARING_REBALANCE, _S.DEAD}),
    _S.STABLE: frozenset({_S.PREPARING_REBALANCE, _S.DEAD}),
    _S.DEAD: frozenset({_S.DEAD}),
}


#: A parked JoinGroup/SyncGroup answer: called once with the response values.
Responder = Callable[[dict[str, Any]], None]


@dataclasses.dataclass(slots=True)
class ClassicMember:
    """One member of a classic group. `protocols` keeps the member's order of preference."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    #: the parked JoinGroup / SyncGroup answer while the member waits (None: not waiting)
    awaiting_join: Responder | None = None
    awaiting_sync: Responder | None = None
    #: the member is new in this rebalance (Kafka's `isNew`: a lost first JoinGroup expires it)
    is_new: bool = False
    heartbeat_deadline_ms: int = 0

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise AssertionError(f"member {self.member_id} does not support {protocol}")

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among `candidates`."""
        for name in self.protocol_names():
            if name in candidates:
                return name
        raise AssertionError("a member always supports one candidate")

    def to_record(self) -> dict[str, Any]:
        """What is persisted of the member (enough to rebuild the group after a restart)."""
        return {
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "client_id": self.client_id,
            "client_host": self.client_host,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "session_timeout_ms": self.session_timeout_ms,
            "protocol_type": self.protocol_type,
            "protocols": [[name, metadata.hex()] for name, metadata in self.protocols],
            "assignment": self.assignment.hex(),
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> ClassicMember:
        return cls(
            member_id=record["member_id"],
            group_instance_id=record["group_instance_id"],
            client_id=record["client_id"],
            client_host=record["client_host"],
            rebalance_timeout_ms=int(record["rebalance_timeout_ms"]),
            session_timeout_ms=int(record["session_timeout_ms"]),
            protocol_type=record["protocol_type"],
            protocols=[(name, bytes.fromhex(meta)) for name, meta in record["protocols"]],
            assignment=bytes.fromhex(record["assignment"]),
        )


class ClassicGroup:
    """The membership state of one classic group.

    Invariants: `leader_id` is None or a member; every static member's instance id maps to its
    member id in `static_members`; `protocol_name` is None exactly when the group has no
    generation with members; `pending_members` (KIP-394) are not members yet.
    """

    def __init__(self, group_id: str, now_ms: int, state: GroupState = GroupState.EMPTY) -> None:
        self.group_id = group_id
        self.state = state
        self.state_timestamp_ms = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, ClassicMember] = {}
        self.static_members: dict[str, str] = {}
        self.pending_members: dict[str, int] = {}  # member id -> expiry (ms)
        #: when the join phase ends at the latest (None outside PreparingRebalance)
        self.join_deadline_ms: int | None = None
        #: the initial-delay window: each new member extends it up to `join_hard_deadline_ms`
        self.join_delay_ms: int = 0
        self.join_hard_deadline_ms: int | None = None
        #: when the leader must have sent SyncGroup (None outside CompletingRebalance)
        self.sync_deadline_ms: int | None = None
        self.members_to_sync: set[str] = set()

    # -- state ------------------------------------------------------------------------------

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if state not in TRANSITIONS[self.state]:
            raise IllegalStateTransition(
                f"group {self.group_id}: {self.state.value} -> {state.value}"
            )
        self.state = state
        self.state_timestamp_ms = now_ms

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def is_empty(self) -> bool:
        return not self.members

    # -- members ----------------------------------------------------------------------------

    def add(self, member: ClassicMember) -> None:
        assert member.member_id not in self.members
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> ClassicMember:
        member = self.members.pop(member_id)
        instance_id = member.group_instance_id
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        self.members_to_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> ClassicMember:
        """Give a restarted static member a new member id, keeping its place and assignment."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.members_to_sync:
            self.members_to_sync.discard(old_id)
            self.members_to_sync.add(new_id)
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def size(self) -> int:
        return len(self.members) + len(self.pending_members)

    # -- protocols --------------------------------------------------------------------------

    def supports(self, protocol_type: str, protocol_names: Iterable[str]) -> bool:
        """Whether a member with this protocol type and these protocols may join (Kafka:
        same type as the group, and at least one protocol every member supports)."""
        names = set(protocol_names)
        if not names:
            return False
        if self.is_empty():
            return bool(protocol_type)
        if protocol_type != self.protocol_type:
            return False
        return bool(names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names())
        for m in members[1:]:
            common &= set(m.protocol_names())
        return common

    def select_protocol(self) -> str:
        """The protocol with most votes among the common ones (ties: first in member order)."""
        candidates = self.candidate_protocols()
        assert candidates, f"group {self.group_id} has members without a common protocol"
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return max(votes, key=lambda name: votes[name])

    # -- rebalance bookkeeping --------------------------------------------------------------

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(
            m.awaiting_join is not None for m in self.members.values()
        )

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol type), None when unknown."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        from sparklog.protocol.consumer_protocol import subscription_topics

        topics: set[str] = set()
        for m in self.members.values():
            try:
                topics |= subscription_topics(m.metadata_for(self.protocol_name))
            except (ValueError, AssertionError):
                return None
        return topics

    # -- persistence ------------------------------------------------------------------------

    def to_record(self) -> dict[str, Any]:
        """The group's persisted form (Kafka's GroupMetadataValue): generation, protocol,
        leader and members with their assignments."""
        return {
            "generation_id": self.generation_id,
            "protocol_type": self.protocol_type,
            "protocol_name": self.protocol_name,
            "leader_id": self.leader_id,
            "state": self.state.value,
            "state_timestamp_ms": self.state_timestamp_ms,
            "members": [m.to_record() for m in self.members.values()],
        }

    @classmethod
    def from_record(cls, group_id: str, record: dict[str, Any], now_ms: int) -> ClassicGroup:
        """A group as it was persisted; members get a full session to heartbeat again."""
        members = [ClassicMember.from_record(m) for m in record["members"]]
        state = GroupState.STABLE if members else GroupState.EMPTY
        since_ms = loaded_ms(int(record.get("state_timestamp_ms") or now_ms), now_ms)
        group = cls(group_id, since_ms, state)
        group.generation_id = int(record["generation_id"])
        group.protocol_type = record["protocol_type"]
        group.protocol_name = record["protocol_name"] if members else None
        for m in members:
            m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
            group.add(m)
        group.leader_id = (
            record["leader_id"]
            if record["leader_id"] in group.members
            else (next(iter(group.members), None))
        )
        return group
