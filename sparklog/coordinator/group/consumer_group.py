"""KIP-848 consumer groups: the coordinator assigns partitions, members reconcile incrementally
(Kafka's `ConsumerGroup` + the consumer half of `GroupMetadataManager`).

Theory of operation. Every ConsumerGroupHeartbeat carries the member's epoch, subscription and
owned partitions. A change of membership, subscription or subscribed topics' partition counts
bumps the **group epoch**; the coordinator then computes a **target assignment** with the
server-side assignor (`uniform` or `range`, `group.remote.assignor` / the member's
`server_assignor`) and stamps it with that epoch. Each member moves towards its target on its
own heartbeats: first it must give up partitions it owns that are no longer its (the answer
drops them, its epoch stays); once it no longer reports them, it gets the target epoch and
the target partitions that no other member still holds; the rest follow when those members
have let go. Nobody stops the world: members outside a change keep consuming.

Errors as Kafka answers them: UNKNOWN_MEMBER_ID (a member the group does not know),
FENCED_MEMBER_EPOCH (an epoch that is neither the member's current nor previous one),
UNSUPPORTED_ASSIGNOR, GROUP_MAX_SIZE_REACHED, UNRELEASED_INSTANCE_ID (a static member's
instance still held by a live member). Timers: the session (`group.consumer.session.timeout.ms`)
and the revocation deadline (the member's rebalance timeout) fence a member.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Callable
from typing import Any

from sparklog.coordinator.clock import loaded_ms

Assignment = dict[str, set[int]]  # topic -> partitions
ASSIGNORS = ("uniform", "range")


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclasses.dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: list[str]
    subscribed_regex: str | None
    server_assignor: str | None
    rebalance_timeout_ms: int
    member_epoch: int = 0
    previous_epoch: int = -1
    assigned: Assignment = dataclasses.field(default_factory=dict)
    revoking: Assignment = dataclasses.field(default_factory=dict)
    heartbeat_deadline_ms: int = 0
    revocation_deadline_ms: int | None = None
    #: what the member was last told (an answer repeats the assignment only when it changed)
    sent: Assignment | None = None

    def to_record(self) -> dict[str, Any]:
        return {
            "member_id": self.member_id,
            "instance_id": self.instance_id,
            "rack_id": self.rack_id,
            "client_id": self.client_id,
            "client_host": self.client_host,
            "subscribed_topics": self.subscribed_topics,
            "subscribed_regex": self.subscribed_regex,
            "server_assignor": self.server_assignor,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "member_epoch": self.member_epoch,
            "assigned": {t: sorted(ps) for t, ps in self.assigned.items()},
        }

    @classmethod
    def from_record(cls, r: dict[str, Any]) -> ConsumerMember:
        return cls(
            member_id=r["member_id"],
            instance_id=r["instance_id"],
            rack_id=r["rack_id"],
            client_id=r["client_id"],
            client_host=r["client_host"],
            subscribed_topics=list(r["subscribed_topics"]),
            subscribed_regex=r["subscribed_regex"],
            server_assignor=r["server_assignor"],
            rebalance_timeout_ms=int(r["rebalance_timeout_ms"]),
            member_epoch=int(r["member_epoch"]),
            assigned={t: set(ps) for t, ps in r["assigned"].items()},
        )


class ConsumerGroup:
    """One KIP-848 group. Invariant: a partition is in at most one member's `assigned` or
    `revoking`; `assignment_epoch <= group_epoch`."""

    group_type = "consumer"
    protocol_type = "consumer"

    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, Assignment] = {}
        self.partition_counts: dict[str, int] = {}
        self.assignor = ASSIGNORS[0]
        self.state_timestamp_ms = now_ms
        self.pending_members: dict[str, int] = {}  # none: KIP-848 has no KIP-394 handshake
        self.dead = False

    @property
    def generation_id(self) -> int:
        """The group epoch, where classic views (offset expiry, describe) want a generation."""
        return self.group_epoch

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.assignment_epoch < self.group_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(
            m.member_epoch != self.assignment_epoch
            or m.revoking
            or m.assigned != self.target[m.member_id]
            for m in self.members.values()
        ):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def is_in(self, *states: Any) -> bool:
        names = {getattr(s, "value", s) for s in states}
        return self.state.value in names

    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topics(self) -> set[str]:
        topics: set[str] = set()
        for m in self.members.values():
            topics |= set(m.subscribed_topics)
        return topics

    def owner_elsewhere(self, member_id: str) -> Assignment:
        """Partitions other members still hold (assigned or being revoked)."""
        held: Assignment = {}
        for m in self.members.values():
            if m.member_id == member_id:
                continue
            for source in (m.assigned, m.revoking):
                for t, ps in source.items():
                    held.setdefault(t, set()).update(ps)
        return held

    def to_record(self) -> dict[str, Any]:
        return {
            "type": "consumer",
            "group_epoch": self.group_epoch,
            "assignment_epoch": self.assignment_epoch,
            "assignor": self.assignor,
            "partition_counts": self.partition_counts,
            "state_timestamp_ms": self.state_timestamp_ms,
            "members": [m.to_record() for m in self.members.values()],
            "target": {
                mid: {t: sorted(ps) for t, ps in a.items()} for mid, a in self.target.items()
            },
        }

    @classmethod
    def from_record(cls, group_id: str, r: dict[str, Any], now_ms: int) -> ConsumerGroup:
        group = cls(group_id, loaded_ms(int(r.get("state_timestamp_ms") or now_ms), now_ms))
        group.group_epoch = int(r["group_epoch"])
        group.assignment_epoch = int(r["assignment_epoch"])
        group.assignor = r["assignor"]
        group.partition_counts = {t: int(n) for t, n in r["partition_counts"].items()}
        for m in r["members"]:
            member = ConsumerMember.from_record(m)
            member.previous_epoch = member.member_epoch
            group.members[member.member_id] = member
        group.target = {mid: {t: set(ps) for t, ps in a.items()} for mid, a in r["target"].items()}
        return group


# -- assignors ------------------------------------------------------------------------------


def assign(
    assignor: str,
    members: dict[str, ConsumerMember],
    counts: dict[str, int],
    previous: dict[str, Assignment],
) -> dict[str, Assignment]:
    """The target assignment of every member: `uniform` balances partition counts and keeps
    what members had where it can (sticky); `range` gives each member contiguous ranges of
    every topic it subscribes to, like the classic range assignor."""
    target: dict[str, Assignment] = {mid: {} for mid in members}
    if not members:
        return target
    subscribers: dict[str, list[str]] = {}
    for mid in sorted(members):
        for topic in members[mid].subscribed_topics:
            if counts.get(topic, 0) > 0:
                subscribers.setdefault(topic, []).append(mid)
    if assignor == "range":
        for topic, mids in sorted(subscribers.items()):
            n, k = counts[topic], len(mids)
            start = 0
            for i, mid in enumerate(mids):
                size = n // k + (1 if i < n % k else 0)
                if size:
                    target[mid][topic] = set(range(start, start + size))
                start += size
        return target
    load = dict.fromkeys(members, 0)
    total = sum(counts[t] for t in subscribers)
    quota = -(-total // len(members))  # ceil: the most any member should hold
    unplaced: list[tuple[str, int]] = []
    for topic, mids in sorted(subscribers.items()):
        for p in range(counts[topic]):
            keeper = next((mid for mid in mids if p in previous.get(mid, {}).get(topic, ())), None)
            if keeper is not None and load[keeper] < quota:
                target[keeper].setdefault(topic, set()).add(p)
                load[keeper] += 1
            else:
                unplaced.append((topic, p))
    for topic, p in unplaced:
        mid = min(subscribers[topic], key=lambda m: (load[m], m))
        target[mid].setdefault(topic, set()).add(p)
        load[mid] += 1
    return target


def regex_topics(regex: str | None, topics: Callable[[], list[str]]) -> list[str]:
    """Topics a subscription regex matches (Python syntax; RE2/J patterns mostly agree)."""
    if not regex:
        return []
    try:
        pattern = re.compile(regex)
    except re.error as e:
        raise ValueError(f"subscribed topic regex {regex!r} is not valid: {e}") from None
    return sorted(t for t in topics() if pattern.fullmatch(t))
