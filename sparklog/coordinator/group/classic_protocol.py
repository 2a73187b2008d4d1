"""The classic group protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and their timers
(the classic half of Kafka's `GroupMetadataManager`).

Each handler takes `now_ms` and the request's values and answers through a `Responder` — at
once, or later when the rebalance it waits for completes (Kafka parks JoinGroup and SyncGroup
the same way). `tick(now_ms)` fires the timers: session expiry, the join phase's deadline
(rebalance timeout, or the initial delay of an Empty group), the SyncGroup deadline and the
expiry of KIP-394 pending members. Group records go out through `store(group, done)`; `done`
receives an error code once the record is durable (or not).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sparklog.coordinator.group.classic_group import (
    ClassicGroup,
    ClassicMember,
    GroupState,
    Responder,
)
from sparklog.coordinator.group.config import GroupConfig
from sparklog.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

logger = logging.getLogger(__name__)

_S = GroupState
#: Store hook: persist the group's record, then call `done(now_ms, error_code)`.
StoreGroup = Callable[[ClassicGroup, Callable[[int, int], None]], None]


def join_error(code: int, member_id: str = "") -> dict[str, Any]:
    return {
        "error_code": code,
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None,
        "leader": "",
        "skip_assignment": False,
        "member_id": member_id,
        "members": [],
    }


class ClassicGroups:
    """Drives classic groups; `groups` is shared with the coordinator (which owns it)."""

    def __init__(
        self,
        groups: dict[str, Any],
        config: GroupConfig,
        store: StoreGroup,
        new_uuid: Callable[[], str],
        has_offsets: Callable[[str], bool],
    ) -> None:
        self.groups = groups
        self.config = config
        self.store = store
        self.new_uuid = new_uuid
        self.has_offsets = has_offsets

    # -- JoinGroup --------------------------------------------------------------------------

    def join(
        self,
        now_ms: int,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
        supports_skip_assignment: bool,
        respond: Responder,
    ) -> None:
        """Handle a JoinGroup; `respond` is called now or when the join phase completes."""
        if not group_id:
            return respond(join_error(InvalidGroupIdError.code, member_id))
        if not (
            self.config.group_min_session_timeout_ms
            <= session_timeout_ms
            <= self.config.group_max_session_timeout_ms
        ):
            return respond(join_error(InvalidSessionTimeoutError.code, member_id))
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return respond(join_error(UnknownMemberIdError.code, member_id))
            group = self.groups[group_id] = ClassicGroup(group_id, now_ms)
        if not isinstance(group, ClassicGroup):  # a KIP-848 group: its members heartbeat
            return respond(join_error(InconsistentGroupProtocolError.code, member_id))
        if group.is_in(_S.DEAD):
            return respond(join_error(CoordinatorNotAvailableError.code, member_id))
        if not group.supports(protocol_type, (name for name, _ in protocols)):
            return respond(join_error(InconsistentGroupProtocolError.code, member_id))
        member = ClassicMember(
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=max(rebalance_timeout_ms, session_timeout_ms),
            session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
        )
        if not member_id:
            self._join_unknown_member(
                now_ms, group, member, require_known_member_id, supports_skip_assignment, respond
            )
        else:
            self._join_known_member(now_ms, group, member, respond)
        self._maybe_forget_empty(group)

    def _join_unknown_member(
        self,
        now_ms: int,
        group: ClassicGroup,
        member: ClassicMember,
        require_known_member_id: bool,
        supports_skip_assignment: bool,
        respond: Responder,
    ) -> None:
        instance_id = member.group_instance_id
        old_id = group.static_member_id(instance_id)
        if old_id is None and group.size() >= self.config.group_max_size:
            return respond(join_error(GroupMaxSizeReachedError.code))
        prefix = instance_id if instance_id is not None else member.client_id
        member.member_id = f"{prefix}-{self.new_uuid()}"
        if old_id is not None:
            return self._replace_static_member(
                now_ms, group, old_id, member, supports_skip_assignment, respond
            )
        if instance_id is None and require_known_member_id:
            # KIP-394: hand out the id and wait for the member to join with it
            group.pending_members[member.member_id] = now_ms + member.session_timeout_ms
            return respond(join_error(MemberIdRequiredError.code, member.member_id))
        self._add_member_and_rebalance(now_ms, group, member, respond)

    def _join_known_member(
        self, now_ms: int, group: ClassicGroup, member: ClassicMember, respond: Responder
    ) -> None:
        member_id = member.member_id
        if member.group_instance_id is not None:
            registered = group.static_member_id(member.group_instance_id)
            if registered is None:
                return respond(join_error(UnknownMemberIdError.code, member_id))
            if registered != member_id:
                return respond(join_error(FencedInstanceIdError.code, member_id))
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            return self._add_member_and_rebalance(now_ms, group, member, respond)
        existing = group.members.get(member_id)
        if existing is None or group.is_in(_S.EMPTY, _S.DEAD):
            return respond(join_error(UnknownMemberIdError.code, member_id))
        changed = not existing.same_protocols(member.protocols)
        if group.is_in(_S.PREPARING_REBALANCE):
            return self._update_member_and_rebalance(now_ms, group, existing, member, respond)
        if group.is_in(_S.COMPLETING_REBALANCE) and not changed:
            return respond(self._join_answer(group, existing, include_members=True))
        if group.is_in(_S.STABLE) and not changed and group.leader_id != member_id:
            existing.heartbeat_deadline_ms = now_ms + existing.session_timeout_ms
            return respond(self._join_answer(group, existing, include_members=False))
        self._update_member_and_rebalance(now_ms, group, existing, member, respond)

    def _replace_static_member(
        self,
        now_ms: int,
        group: ClassicGroup,
        old_id: str,
        joining: ClassicMember,
        supports_skip_assignment: bool,
        respond: Responder,
    ) -> None:
        """KIP-345: a static member restarted with a new member id. The old incarnation is
        fenced; in a Stable group with unchanged protocols it keeps its assignment and no
        rebalance happens (a leader skips the assignment, KIP-814, when its client can)."""
        old = group.members[old_id]
        for parked in (old.awaiting_join, old.awaiting_sync):
            if parked is not None:
                parked(join_error(FencedInstanceIdError.code, old_id))
        old.awaiting_join = old.awaiting_sync = None
        assert joining.group_instance_id is not None
        member = group.replace_static_member(joining.group_instance_id, old_id, joining.member_id)
        changed = not member.same_protocols(joining.protocols)
        member.client_id, member.client_host = joining.client_id, joining.client_host
        member.session_timeout_ms = joining.session_timeout_ms
        member.rebalance_timeout_ms = joining.rebalance_timeout_ms
        member.protocols = joining.protocols
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        is_leader = group.leader_id == member.member_id
        if group.is_in(_S.STABLE) and not changed and (not is_leader or supports_skip_assignment):
            answer = self._join_answer(group, member, include_members=is_leader)
            answer["skip_assignment"] = is_leader
            group.members_to_sync.discard(member.member_id)

            def stored(_now_ms: int, code: int) -> None:
                respond(answer if code == 0 else join_error(code, member.member_id))

            return self.store(group, stored)
        self._update_member_and_rebalance(now_ms, group, member, joining, respond)

    def _add_member_and_rebalance(
        self, now_ms: int, group: ClassicGroup, member: ClassicMember, respond: Responder
    ) -> None:
        member.is_new = True
        member.awaiting_join = respond
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        group.add(member)
        if group.join_hard_deadline_ms is not None and group.is_in(_S.PREPARING_REBALANCE):
            # each member joining an Empty group's initial delay extends it (Kafka's
            # InitialDelayedJoin), never past the rebalance timeout
            group.join_deadline_ms = min(now_ms + group.join_delay_ms, group.join_hard_deadline_ms)
        self._maybe_prepare_rebalance(now_ms, group, f"{member.member_id} joined")

    def _update_member_and_rebalance(
        self,
        now_ms: int,
        group: ClassicGroup,
        member: ClassicMember,
        joining: ClassicMember,
        respond: Responder,
    ) -> None:
        member.protocols = joining.protocols
        member.rebalance_timeout_ms = joining.rebalance_timeout_ms
        member.session_timeout_ms = joining.session_timeout_ms
        if member.awaiting_join is not None and member.awaiting_join is not respond:
            # a member re-sent its JoinGroup: answer the older one as Kafka does
            member.awaiting_join(join_error(UnknownMemberIdError.code, member.member_id))
        member.awaiting_join = respond
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        self._maybe_prepare_rebalance(now_ms, group, f"{member.member_id} rejoined")

    def _join_answer(
        self, group: ClassicGroup, member: ClassicMember, include_members: bool
    ) -> dict[str, Any]:
        assert group.protocol_name is not None
        members = []
        if include_members or group.leader_id == member.member_id:
            members = [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "metadata": m.metadata_for(group.protocol_name),
                }
                for m in group.members.values()
            ]
        return {
            "error_code": 0,
            "generation_id": group.generation_id,
            "protocol_type": group.protocol_type,
            "protocol_name": group.protocol_name,
            "leader": group.leader_id or "",
            "skip_assignment": False,
            "member_id": member.member_id,
            "members": members,
        }

    # -- rebalance --------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, now_ms: int, group: ClassicGroup, reason: str) -> None:
        if group.is_in(_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY):
            self.prepare_rebalance(now_ms, group, reason)
        elif group.is_in(_S.PREPARING_REBALANCE):
            self._maybe_complete_join(now_ms, group)

    def prepare_rebalance(self, now_ms: int, group: ClassicGroup, reason: str) -> None:
        """Start a join phase: parked SyncGroups learn of it, and the join deadline is set."""
        if group.is_in(_S.COMPLETING_REBALANCE):
            for m in group.members.values():
                m.assignment = b""
                if m.awaiting_sync is not None:
                    m.awaiting_sync({"error_code": RebalanceInProgressError.code})
                    m.awaiting_sync = None
        group.members_to_sync.clear()
        group.sync_deadline_ms = None
        was_empty = group.is_in(_S.EMPTY)
        group.transition_to(_S.PREPARING_REBALANCE, now_ms)
        logger.info(
            "group %s: preparing rebalance for generation %d (%s)",
            group.group_id,
            group.generation_id + 1,
            reason,
        )
        delay_ms = self.config.group_initial_rebalance_delay_ms
        if was_empty and delay_ms > 0:
            group.join_delay_ms = delay_ms
            group.join_hard_deadline_ms = now_ms + max(group.max_rebalance_timeout_ms(), delay_ms)
            group.join_deadline_ms = min(now_ms + delay_ms, group.join_hard_deadline_ms)
            return
        group.join_hard_deadline_ms = None
        group.join_deadline_ms = now_ms + group.max_rebalance_timeout_ms()
        self._maybe_complete_join(now_ms, group)

    def _maybe_complete_join(self, now_ms: int, group: ClassicGroup) -> None:
        if group.join_hard_deadline_ms is not None:
            return  # the initial delay runs to its end
        if group.all_members_joined():
            self.complete_join(now_ms, group)

    def complete_join(self, now_ms: int, group: ClassicGroup) -> None:
        """End the join phase: drop members that did not rejoin, start the next generation
        and answer every parked JoinGroup (the leader with the members' metadata)."""
        assert group.is_in(_S.PREPARING_REBALANCE)
        for m in [m for m in group.members.values() if m.awaiting_join is None]:
            group.remove(m.member_id)
            logger.info(
                "group %s: removed %s (did not rejoin in time)", group.group_id, m.member_id
            )
        group.pending_members.clear()
        group.join_deadline_ms = group.join_hard_deadline_ms = None
        group.generation_id += 1
        if group.is_empty():
            group.protocol_name = None
            group.transition_to(_S.EMPTY, now_ms)
            self.store(group, lambda _now_ms, _code: None)
            return
        group.protocol_name = group.select_protocol()
        group.transition_to(_S.COMPLETING_REBALANCE, now_ms)
        group.members_to_sync = set(group.members)
        group.sync_deadline_ms = now_ms + group.max_rebalance_timeout_ms()
        logger.info(
            "group %s: generation %d with %d members (protocol %s, leader %s)",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
            group.leader_id,
        )
        for m in list(group.members.values()):
            respond, m.awaiting_join = m.awaiting_join, None
            m.is_new = False
            m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
            assert respond is not None
            respond(self._join_answer(group, m, include_members=False))

    # -- SyncGroup --------------------------------------------------------------------------

    def sync(
        self,
        now_ms: int,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
        respond: Responder,
    ) -> None:
        """Handle a SyncGroup: the leader's carries the assignment, which is persisted before
        any member (the leader included) gets its share."""
        group = self.groups.get(group_id)
        code = self._check_member(group, member_id, group_instance_id, generation_id)
        if code:
            return respond({"error_code": code})
        assert isinstance(group, ClassicGroup)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return respond({"error_code": InconsistentGroupProtocolError.code})
        if group.is_in(_S.PREPARING_REBALANCE):
            return respond({"error_code": RebalanceInProgressError.code})
        member = group.members[member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        group.members_to_sync.discard(member_id)
        if group.is_in(_S.STABLE):
            return respond(self._sync_answer(group, member))
        member.awaiting_sync = respond
        if member_id == group.leader_id:
            self._store_assignment(group, assignments)

    def _store_assignment(self, group: ClassicGroup, assignments: dict[str, bytes]) -> None:
        generation = group.generation_id
        proposed = {mid: assignments.get(mid, b"") for mid in group.members}

        def stored(now_ms: int, code: int) -> None:
            if not group.is_in(_S.COMPLETING_REBALANCE) or group.generation_id != generation:
                return  # a rebalance started meanwhile; parked syncs were answered by it
            if code:
                for m in group.members.values():
                    if m.awaiting_sync is not None:
                        m.awaiting_sync({"error_code": code})
                        m.awaiting_sync = None
                self.prepare_rebalance(now_ms, group, "assignment not stored")
                return
            group.transition_to(_S.STABLE, now_ms)
            for m in group.members.values():
                if m.awaiting_sync is not None:
                    m.awaiting_sync(self._sync_answer(group, m))
                    m.awaiting_sync = None
            if not group.members_to_sync:
                group.sync_deadline_ms = None

        for mid, assignment in proposed.items():
            group.members[mid].assignment = assignment
        self.store(group, stored)

    def _sync_answer(self, group: ClassicGroup, member: ClassicMember) -> dict[str, Any]:
        return {
            "error_code": 0,
            "protocol_type": group.protocol_type,
            "protocol_name": group.protocol_name,
            "assignment": member.assignment,
        }

    # -- Heartbeat / LeaveGroup -------------------------------------------------------------

    def heartbeat(
        self,
        now_ms: int,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
    ) -> int:
        """Handle a Heartbeat; the error code to answer."""
        group = self.groups.get(group_id)
        code = self._check_member(group, member_id, group_instance_id, generation_id)
        if code:
            return code
        assert isinstance(group, ClassicGroup)
        member = group.members[member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if group.is_in(_S.PREPARING_REBALANCE):
            return RebalanceInProgressError.code
        return 0

    def leave(
        self, now_ms: int, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[int, list[int]]:
        """Handle a LeaveGroup of (member id, instance id) pairs: (top-level error, per-member
        errors)."""
        group = self.groups.get(group_id)
        if not isinstance(group, ClassicGroup) or group.is_in(_S.DEAD):
            return UnknownMemberIdError.code, [UnknownMemberIdError.code] * len(members)
        codes, removed = [], []
        for member_id, instance_id in members:
            target = member_id
            if instance_id is not None:
                registered = group.static_member_id(instance_id)
                if registered is None:
                    codes.append(UnknownMemberIdError.code)
                    continue
                if member_id and member_id != registered:
                    codes.append(FencedInstanceIdError.code)
                    continue
                target = registered
            if target in group.pending_members:
                del group.pending_members[target]
                codes.append(0)
                removed.append(target)
                continue
            if target not in group.members:
                codes.append(UnknownMemberIdError.code)
                continue
            self._remove_member(group, target, RebalanceInProgressError.code)
            codes.append(0)
            removed.append(target)
        if removed:
            self._maybe_prepare_rebalance(now_ms, group, f"{', '.join(removed)} left")
        self._maybe_forget_empty(group)
        return 0, codes

    def _remove_member(self, group: ClassicGroup, member_id: str, parked_code: int) -> None:
        member = group.remove(member_id)
        for parked in (member.awaiting_join, member.awaiting_sync):
            if parked is not None:
                parked(join_error(parked_code, member_id))

    def _check_member(
        self, group: Any, member_id: str, instance_id: str | None, generation_id: int
    ) -> int:
        """Kafka's member validation for SyncGroup/Heartbeat: 0 when the caller is current."""
        if not isinstance(group, ClassicGroup) or group.is_in(_S.DEAD):
            return UnknownMemberIdError.code
        if instance_id is not None:
            registered = group.static_member_id(instance_id)
            if registered is not None and registered != member_id:
                return FencedInstanceIdError.code
        if group.is_in(_S.EMPTY) or member_id not in group.members:
            return UnknownMemberIdError.code
        if generation_id != group.generation_id:
            return IllegalGenerationError.code
        return 0

    # -- timers -----------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Fire every due timer of every classic group."""
        for group in [g for g in self.groups.values() if isinstance(g, ClassicGroup)]:
            self._tick_group(now_ms, group)

    def _tick_group(self, now_ms: int, group: ClassicGroup) -> None:
        for member_id, deadline in list(group.pending_members.items()):
            if deadline <= now_ms:
                del group.pending_members[member_id]
                self._maybe_prepare_rebalance(now_ms, group, f"{member_id} never joined")
        expired = [
            m.member_id
            for m in group.members.values()
            if m.awaiting_join is None
            and m.awaiting_sync is None
            and m.heartbeat_deadline_ms <= now_ms
        ]
        for member_id in expired:
            logger.info("group %s: member %s's session expired", group.group_id, member_id)
            self._remove_member(group, member_id, UnknownMemberIdError.code)
        if expired:
            self._maybe_prepare_rebalance(now_ms, group, "session expired")
        if group.is_in(_S.PREPARING_REBALANCE) and (
            group.join_deadline_ms is not None and group.join_deadline_ms <= now_ms
        ):
            self.complete_join(now_ms, group)
        if (
            group.is_in(_S.COMPLETING_REBALANCE, _S.STABLE)
            and group.sync_deadline_ms is not None
            and group.sync_deadline_ms <= now_ms
        ):
            group.sync_deadline_ms = None
            late = sorted(group.members_to_sync)
            if late:
                for member_id in late:
                    self._remove_member(group, member_id, RebalanceInProgressError.code)
                self.prepare_rebalance(now_ms, group, f"no SyncGroup from {', '.join(late)}")
        self._maybe_forget_empty(group)

    def _maybe_forget_empty(self, group: ClassicGroup) -> None:
        """A group created by a JoinGroup that never got a member leaves no trace."""
        if (
            group.is_in(_S.EMPTY)
            and group.is_empty()
            and not group.pending_members
            and group.generation_id == 0
            and self.groups.get(group.group_id) is group
            and not self.has_offsets(group.group_id)
        ):
            del self.groups[group.group_id]
