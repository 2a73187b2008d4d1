"""ConsumerGroupHeartbeat (KIP-848) on the sans-IO coordinator: join, leave, subscription
changes, target assignment and incremental reconciliation; see `consumer_group` for the model.

`heartbeat(now_ms, ...)` answers at once (the new protocol never parks a request). A group's
changed state goes out through `store(group)` without waiting: a restarted coordinator that
lost the last change fences the affected members, which rejoin with epoch 0 (Kafka's recovery
path for a lost epoch too).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from sparklog.coordinator.group.classic_group import ClassicGroup
from sparklog.coordinator.group.consumer_group import (
    ASSIGNORS,
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    assign,
    regex_topics,
)
from sparklog.errors import (
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    InvalidRequestError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)

logger = logging.getLogger(__name__)

LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """Kafka's `group.consumer.*` settings."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ASSIGNORS

    @classmethod
    def from_group_config(cls, config: Any) -> ConsumerConfig:
        assignors = tuple(
            a.strip() for a in config.group_consumer_assignors.split(",") if a.strip()
        )
        unknown = [a for a in assignors if a not in ASSIGNORS]
        if unknown or not assignors:
            raise ValueError(
                f"group.consumer.assignors={config.group_consumer_assignors!r}: sparklog has "
                f"{', '.join(ASSIGNORS)}"
            )
        return cls(
            config.group_consumer_session_timeout_ms,
            config.group_consumer_heartbeat_interval_ms,
            config.group_consumer_max_size,
            assignors,
        )


def _error(code: int, message: str | None, member_id: str = "", epoch: int = -1) -> dict[str, Any]:
    return {
        "error_code": code,
        "error_message": message,
        "member_id": member_id,
        "member_epoch": epoch,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }


class ConsumerGroups:
    """Drives KIP-848 groups; `groups` is shared with the coordinator (which owns it)."""

    def __init__(
        self,
        groups: dict[str, Any],
        config: ConsumerConfig,
        partition_count: Callable[[str], int],
        topic_names: Callable[[], list[str]],
        store: Callable[[ConsumerGroup], None],
        group_config: Callable[[str], Mapping[str, str]] = lambda group_id: {},
    ) -> None:
        self.groups = groups
        self.config = config
        #: a group's own configs (the GROUP config resource, validated by the controller)
        self.group_config = group_config
        self.partition_count = partition_count
        self.topic_names = topic_names
        self.store = store

    def heartbeat(
        self,
        now_ms: int,
        *,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        rack_id: str | None,
        rebalance_timeout_ms: int,
        subscribed_topic_names: list[str] | None,
        subscribed_topic_regex: str | None,
        server_assignor: str | None,
        owned: Assignment | None,
        client_id: str,
        client_host: str,
    ) -> dict[str, Any]:
        """Handle one ConsumerGroupHeartbeat; the response values."""
        if not group_id:
            return _error(InvalidRequestError.code, "GroupId can't be empty.")
        if server_assignor is not None and server_assignor not in self.config.assignors:
            return _error(
                UnsupportedAssignorError.code,
                f"server assignor {server_assignor!r} is not one of {', '.join(self.config.assignors)}",
            )
        group = self.groups.get(group_id)
        if member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(now_ms, group, member_id, member_epoch)
        if member_epoch == 0:
            joined = self._join(now_ms, group_id, group, member_id, instance_id, owned)
            if isinstance(joined, dict):
                return joined
            group, member = joined
            if subscribed_topic_names is None and subscribed_topic_regex is None:
                subscribed_topic_names = []
        else:
            if not isinstance(group, ConsumerGroup) or member_id not in group.members:
                return _error(
                    UnknownMemberIdError.code, f"member {member_id} is not in group {group_id}"
                )
            member = group.members[member_id]
            if member_epoch not in (member.member_epoch, member.previous_epoch):
                return _error(
                    FencedMemberEpochError.code,
                    f"epoch {member_epoch} is not the member's epoch {member.member_epoch}",
                    member_id,
                )
        changed = self._update_member(
            member, rack_id, rebalance_timeout_ms, subscribed_topic_names,
            subscribed_topic_regex, server_assignor, client_id, client_host,
        )  # fmt: skip
        member.heartbeat_deadline_ms = now_ms + self.session_timeout_ms(group_id)
        if changed or member_epoch == 0:
            group.group_epoch += 1
        self._maybe_assign(now_ms, group)
        self._reconcile(now_ms, group, member, owned)
        self.store(group)
        return self._answer(group_id, member, full=member_epoch == 0)

    # -- join / leave -----------------------------------------------------------------------

    def _join(
        self,
        now_ms: int,
        group_id: str,
        group: Any,
        member_id: str,
        instance_id: str | None,
        owned: Assignment | None,
    ) -> tuple[ConsumerGroup, ConsumerMember] | dict[str, Any]:
        if isinstance(group, ClassicGroup):
            if group.members or group.pending_members:
                return _error(
                    GroupIdNotFoundError.code,
                    f"Group {group_id} is not a consumer group (it has classic members)",
                )
            group = None  # an empty classic group (offsets only) becomes a consumer group
        if group is None:
            group = self.groups[group_id] = ConsumerGroup(group_id, now_ms)
        member_id = member_id or str(uuid.uuid4())
        previous = group.members.pop(member_id, None)  # a member rejoining after a fence
        inherited: Assignment = {}
        if instance_id is not None:
            holder = next((m for m in group.members.values() if m.instance_id == instance_id), None)
            if holder is not None:
                if holder.member_epoch != STATIC_LEAVE_EPOCH:
                    if previous is not None:
                        group.members[member_id] = previous
                    return _error(
                        UnreleasedInstanceIdError.code,
                        f"static member {instance_id} is still held by {holder.member_id}",
                        member_id,
                    )
                inherited = holder.assigned  # KIP-848 static member: the assignment waits for it
                del group.members[holder.member_id]
                group.target[member_id] = group.target.pop(holder.member_id, {})
        if len(group.members) >= self.config.max_size:
            return _error(GroupMaxSizeReachedError.code, f"group {group_id} is full", member_id)
        member = ConsumerMember(
            member_id=member_id,
            instance_id=instance_id,
            rack_id=None,
            client_id="",
            client_host="",
            subscribed_topics=[],
            subscribed_regex=None,
            server_assignor=None,
            rebalance_timeout_ms=300_000,
            assigned={t: set(ps) for t, ps in inherited.items()},
        )
        group.members[member_id] = member
        group.target.setdefault(member_id, {})
        return group, member

    def _leave(self, now_ms: int, group: Any, member_id: str, epoch: int) -> dict[str, Any]:
        if not isinstance(group, ConsumerGroup) or member_id not in group.members:
            return _error(UnknownMemberIdError.code, f"member {member_id} is not in the group")
        member = group.members[member_id]
        if epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            member.member_epoch = STATIC_LEAVE_EPOCH  # its partitions wait for its return
            member.heartbeat_deadline_ms = now_ms + self.session_timeout_ms(group.group_id)
        else:
            self.remove(now_ms, group, member_id, "left the group")
        self.store(group)
        return _error(0, None, member_id, epoch)

    def remove(self, now_ms: int, group: ConsumerGroup, member_id: str, why: str) -> None:
        del group.members[member_id]
        group.target.pop(member_id, None)
        group.group_epoch += 1
        group.state_timestamp_ms = now_ms
        logger.info("consumer group %s: member %s %s", group.group_id, member_id, why)
        self._maybe_assign(now_ms, group)

    # -- subscription, assignment, reconciliation -------------------------------------------

    def _update_member(
        self,
        member: ConsumerMember,
        rack_id: str | None,
        rebalance_timeout_ms: int,
        topics: list[str] | None,
        regex: str | None,
        assignor: str | None,
        client_id: str,
        client_host: str,
    ) -> bool:
        changed = False
        member.client_id, member.client_host = client_id, client_host
        if rack_id is not None:
            member.rack_id = rack_id
        if rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        if regex is not None and regex != member.subscribed_regex:
            member.subscribed_regex = regex or None
            changed = True
        wanted = topics if topics is not None else None
        if member.subscribed_regex:
            wanted = sorted(
                set(topics or []) | set(regex_topics(member.subscribed_regex, self.topic_names))
            )
        if wanted is not None and sorted(wanted) != sorted(member.subscribed_topics):
            member.subscribed_topics = sorted(wanted)
            changed = True
        if assignor is not None and assignor != member.server_assignor:
            member.server_assignor = assignor
            changed = True
        return changed

    def _maybe_assign(self, now_ms: int, group: ConsumerGroup) -> None:
        counts = {t: self.partition_count(t) for t in sorted(group.subscribed_topics())}
        if counts != group.partition_counts:
            group.partition_counts = counts
            group.group_epoch += 1
        if group.assignment_epoch >= group.group_epoch:
            return
        preferred = [m.server_assignor for m in group.members.values() if m.server_assignor]
        group.assignor = (
            max(set(preferred), key=preferred.count) if preferred else self.config.assignors[0]
        )
        group.target = assign(group.assignor, group.members, counts, group.target)
        group.assignment_epoch = group.group_epoch
        group.state_timestamp_ms = now_ms

    def _reconcile(
        self, now_ms: int, group: ConsumerGroup, member: ConsumerMember, owned: Assignment | None
    ) -> None:
        if owned is not None and member.revoking:
            member.revoking = {
                t: ps & owned.get(t, set())
                for t, ps in member.revoking.items()
                if ps & owned.get(t, set())
            }
        if member.revoking:
            return  # the member has not let go yet
        member.revocation_deadline_ms = None
        target = group.target.get(member.member_id, {})
        revoke = {t: ps - target.get(t, set()) for t, ps in member.assigned.items()}
        revoke = {t: ps for t, ps in revoke.items() if ps}
        if revoke:
            member.assigned = {t: ps & target.get(t, set()) for t, ps in member.assigned.items()}
            member.assigned = {t: ps for t, ps in member.assigned.items() if ps}
            member.revoking = revoke
            member.revocation_deadline_ms = now_ms + member.rebalance_timeout_ms
            return
        if member.member_epoch != group.assignment_epoch:
            member.previous_epoch, member.member_epoch = member.member_epoch, group.assignment_epoch
        held = group.owner_elsewhere(member.member_id)
        for topic, partitions in target.items():
            free = partitions - held.get(topic, set())
            if free:
                member.assigned.setdefault(topic, set()).update(free)

    def session_timeout_ms(self, group_id: str) -> int:
        """The group's `consumer.session.timeout.ms`, else `group.consumer.session.timeout.ms`
        (Kafka's `GroupMetadataManager.consumerGroupSessionTimeoutMs`)."""
        return self._group_value(
            group_id, "consumer.session.timeout.ms", self.config.session_timeout_ms
        )

    def heartbeat_interval_ms(self, group_id: str) -> int:
        """The group's `consumer.heartbeat.interval.ms`, else the broker default."""
        return self._group_value(
            group_id, "consumer.heartbeat.interval.ms", self.config.heartbeat_interval_ms
        )

    def _group_value(self, group_id: str, name: str, default: int) -> int:
        raw = self.group_config(group_id).get(name)
        try:
            return default if raw is None else int(raw)
        except ValueError:  # the controller validated it; a newer one may write more
            return default

    def _answer(self, group_id: str, member: ConsumerMember, full: bool) -> dict[str, Any]:
        current = {t: set(ps) for t, ps in member.assigned.items() if ps}
        send = full or member.sent != current
        member.sent = current
        return {
            "error_code": 0,
            "error_message": None,
            "member_id": member.member_id,
            "member_epoch": member.member_epoch,
            "heartbeat_interval_ms": self.heartbeat_interval_ms(group_id),
            "assignment": current if send else None,
        }

    # -- timers -----------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Fence members whose session or revocation deadline passed."""
        for group in [g for g in self.groups.values() if isinstance(g, ConsumerGroup)]:
            for member in list(group.members.values()):
                if member.heartbeat_deadline_ms <= now_ms:
                    self.remove(now_ms, group, member.member_id, "session expired")
                    self.store(group)
                elif (
                    member.revocation_deadline_ms is not None
                    and member.revocation_deadline_ms <= now_ms
                ):
                    self.remove(now_ms, group, member.member_id, "did not revoke in time")
                    self.store(group)
