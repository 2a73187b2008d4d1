"""The group coordinator's core (Kafka's `GroupCoordinatorService` + `GroupMetadataManager`,
without I/O): every group of the cluster, their committed offsets, and the records to persist.

Theory of operation. Requests come in as calls with `now_ms`; answers go out through return
values or, for JoinGroup/SyncGroup/OffsetCommit, through a responder called once the answer is
known. Anything that must be durable first (an offset commit, a group's new generation or
assignment, a deletion) becomes a `Write` in `take_writes()`: the runtime persists its rows
(many writes in one Delta commit), replays them (`replay(row)`, the one path by which a row
changes offsets and groups, live and at start alike) and calls `write.done(now_ms,
error_code)`, which answers the client. Validate, persist, replay: what OffsetFetch reads is
always durable, and `load(rows)` (a replay of every persisted row) cannot rebuild a state the
live path never had. Membership records are the exception Kafka makes too (`shard.Write`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sparklog.coordinator.group.classic_group import ClassicGroup, GroupState, Responder
from sparklog.coordinator.group.classic_protocol import ClassicGroups
from sparklog.coordinator.group.config import GroupConfig
from sparklog.coordinator.group.consumer_group import ConsumerGroup
from sparklog.coordinator.group.consumer_heartbeat import ConsumerConfig, ConsumerGroups
from sparklog.coordinator.group.offsets import CommittedOffset, OffsetCache
from sparklog.coordinator.group.rows import (
    OffsetCommitPartition,
    commit_row,
    group_row,
    offset_of,
    offset_row,
)
from sparklog.coordinator.shard import Row, Write, no_answer
from sparklog.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InvalidGroupIdError,
    NonEmptyGroupError,
    OffsetMetadataTooLargeError,
    RebalanceInProgressError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
)
from sparklog.structs import TopicPartition

logger = logging.getLogger(__name__)

_S = GroupState

#: `TopicPartition((topic, partition))` without the named tuple's Python-level `__new__`: the
#: commit and replay paths make one per offset (~20k a second under load)
_topic_partition = functools.partial(tuple.__new__, TopicPartition)


@dataclasses.dataclass(slots=True)
class _OffsetRun:
    """Consecutive offset rows of one group, each partition once (`replay_rows`)."""

    group_id: str | None = None
    changes: dict[TopicPartition, CommittedOffset | None] = dataclasses.field(default_factory=dict)


def _ignore(_count: int) -> None:
    pass


class GroupCoordinator:
    """All groups and offsets of the cluster; see the module doc for the flow."""

    def __init__(
        self,
        config: GroupConfig,
        partition_count: Callable[[str], int],
        new_uuid: Callable[[], str] | None = None,
        topic_names: Callable[[], list[str]] | None = None,
        group_config: Callable[[str], Mapping[str, str]] | None = None,
    ) -> None:
        self.config = config
        self.partition_count = partition_count
        self.groups: dict[str, Any] = {}
        self.offsets = OffsetCache()
        self._writes: list[Write] = []
        self.classic = ClassicGroups(
            self.groups,
            config,
            self._store_group,
            new_uuid or (lambda: str(uuid.uuid4())),
            self.offsets.has_offsets,
        )
        self.consumer = ConsumerGroups(
            self.groups,
            ConsumerConfig.from_group_config(config),
            partition_count,
            topic_names or list,
            self._store_consumer_group,
            group_config or (lambda group_id: {}),
        )
        self._next_expiry_check_ms = 0
        #: offsets of open transactions: producer id -> group -> partition -> offset
        self.txn_offsets: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        #: the transaction coordinator's check of a TxnOffsetCommit (0: it may go ahead)
        self.txn_check: Callable[[str, int, int, str], int] | None = None
        #: told how many offsets an OffsetCommit made durable (the server's
        #: `group-coordinator-metrics` offset-commit-rate/count)
        self.on_offsets_committed: Callable[[int], None] = _ignore

    # -- persistence ------------------------------------------------------------------------

    def take_writes(self) -> list[Write]:
        """Writes produced since the last call, in order."""
        writes, self._writes = self._writes, []
        return writes

    def _store_group(self, group: ClassicGroup, done: Callable[[int, int], None]) -> None:
        now_ms = group.state_timestamp_ms
        row = group_row(group.group_id, group.to_record(), now_ms)
        self._writes.append(Write([row], done, replay=False))

    def _store_consumer_group(self, group: ConsumerGroup) -> None:
        row = group_row(group.group_id, group.to_record(), group.state_timestamp_ms)
        self._writes.append(Write([row], no_answer, replay=False))

    def replay(self, row: Row, now_ms: int) -> None:
        """Apply one durable row: offsets, pending transactional offsets, a transaction's
        decision (which settles them), a group's record or tombstone. Persisted times are
        wall-clock; one written as uptime by an old coordinator counts from `now_ms`
        (`clock.loaded_ms`)."""
        kind, group_id = row["record_type"], row["group_id"]
        if kind == "offset":
            tp = _topic_partition((row["topic"], int(row["partition"])))
            value = None if row["committed_offset"] is None else offset_of(row, now_ms)
            self._apply_offsets(group_id, {tp: value})
        elif kind == "txn_offset":
            tp = _topic_partition((row["topic"], int(row["partition"])))
            pending = self.txn_offsets.setdefault(int(row["producer_id"]), {})
            pending.setdefault(group_id, {})[tp] = offset_of(row, now_ms)
        elif kind == "transaction":
            # a decision (or a new epoch): the producer's pending offsets are settled; a
            # commit's offsets follow as plain offset rows in the same Delta commit. An
            # Ongoing row (partitions or groups added) settles nothing.
            if row["txn_state"] != "Ongoing":
                self.txn_offsets.pop(int(row["producer_id"]), None)
        elif kind == "group":
            meta = row["group_metadata"]
            if meta is None:
                self._replay_tombstone(group_id, now_ms)
            else:
                self._replay_group(group_id, json.loads(meta), now_ms)

    def replay_rows(self, rows: Iterable[Row], now_ms: int) -> None:
        """`replay` each row, in order. A run of one group's offset rows (an OffsetCommit's,
        each partition once) lands as one change: the state `replay` leaves row by row."""
        run = _OffsetRun()
        for row in rows:
            if row["record_type"] != "offset":
                run = self._apply_run(run)
                self.replay(row, now_ms)
                continue
            tp = _topic_partition((row["topic"], int(row["partition"])))
            if row["group_id"] != run.group_id or tp in run.changes:
                run = self._apply_run(run)
                run.group_id = row["group_id"]
            run.changes[tp] = None if row["committed_offset"] is None else offset_of(row, now_ms)
        self._apply_run(run)

    def _apply_run(self, run: _OffsetRun) -> _OffsetRun:
        """Apply a run of offset rows (if any); a new, empty run."""
        if run.group_id is not None:
            self._apply_offsets(run.group_id, run.changes)
        return _OffsetRun()

    def _replay_group(self, group_id: str, record: dict[str, Any], now_ms: int) -> None:
        if record.get("type") == "consumer":
            group: ClassicGroup | ConsumerGroup = ConsumerGroup.from_record(
                group_id, record, now_ms
            )
            for member in group.members.values():
                member.heartbeat_deadline_ms = now_ms + self.consumer.config.session_timeout_ms
        else:
            group = ClassicGroup.from_record(group_id, record, now_ms)
        self.groups[group_id] = group

    def _replay_tombstone(self, group_id: str, now_ms: int) -> None:
        """A deleted group (DeleteGroups, or expiry of its last offset): its offsets go
        with it; the group too unless it gained members while the tombstone was written."""
        group = self.groups.get(group_id)
        if group is None or (group.is_in(_S.EMPTY) and not group.members):
            self._forget_group(group_id, now_ms)
        else:
            self.offsets.delete_group(group_id)

    def load(self, rows: Iterable[Row], now_ms: int) -> None:
        """Rebuild groups and offsets after a restart: replay every persisted row in order."""
        assert not self.groups and not self.offsets.groups(), "load into an empty coordinator"
        self.replay_rows(rows, now_ms)
        logger.info(
            "group coordinator loaded %d groups, %d with committed offsets",
            len(self.groups),
            len(self.offsets.groups()),
        )

    # -- classic membership (delegated) -----------------------------------------------------

    def join_group(self, now_ms: int, respond: Responder, **request: Any) -> None:
        self.classic.join(now_ms, respond=respond, **request)

    def sync_group(self, now_ms: int, respond: Responder, **request: Any) -> None:
        self.classic.sync(now_ms, respond=respond, **request)

    def heartbeat(self, now_ms: int, **request: Any) -> int:
        return self.classic.heartbeat(now_ms, **request)

    def consumer_heartbeat(self, now_ms: int, **request: Any) -> dict[str, Any]:
        """ConsumerGroupHeartbeat (KIP-848)."""
        return self.consumer.heartbeat(now_ms, **request)

    def leave_group(
        self, now_ms: int, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[int, list[int]]:
        return self.classic.leave(now_ms, group_id, members)

    # -- offsets ----------------------------------------------------------------------------

    def commit_offsets(
        self,
        now_ms: int,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        retention_time_ms: int,
        partitions: list[OffsetCommitPartition],
        respond: Callable[[dict[TopicPartition, int]], None],
    ) -> None:
        """Handle an OffsetCommit; `respond` gets per-partition error codes once the valid
        partitions are durable (or at once when the whole request is refused)."""
        code = self._check_commit(group_id, generation_id, member_id, group_instance_id)
        if code:
            return respond({TopicPartition(p.topic, p.partition): code for p in partitions})
        expire_ms = now_ms + retention_time_ms if retention_time_ms >= 0 else None
        codes, changes = self._check_partitions(partitions)
        if not changes:
            return respond(codes)

        def done(_now_ms: int, error: int) -> None:
            if not error:
                self.on_offsets_committed(len(changes))
            respond({tp: (error if tp in changes else c) for tp, c in codes.items()})

        # the rows straight from the request: `replay` builds the cache's CommittedOffset
        rows = [commit_row(group_id, p, now_ms, expire_ms) for p in changes.values()]
        self._writes.append(Write(rows, done))

    def _apply_offsets(
        self, group_id: str, changes: dict[TopicPartition, CommittedOffset | None]
    ) -> None:
        """Durable offsets land in memory. A standalone committer's group (Empty, no protocol)
        exists from here on, as Kafka's `OffsetMetadataManager.replay` creates it: created
        earlier, at the request, a tick could forget it (no offsets yet) while its offsets
        were being written, leaving offsets in a group that reads as Dead (issue 29)."""
        if group_id not in self.groups:
            first = next((v for v in changes.values() if v is not None), None)
            if first is not None:
                self.groups[group_id] = ClassicGroup(group_id, first.commit_timestamp_ms)
        self.offsets.apply(group_id, changes)

    def _validate_offsets(
        self, partitions: list[OffsetCommitPartition], now_ms: int, expire_ms: int | None
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, CommittedOffset]]:
        """Per-partition error codes, and the offsets of the partitions that passed."""
        codes, valid = self._check_partitions(partitions)
        changes = {
            tp: CommittedOffset(
                p.committed_offset, p.leader_epoch, p.metadata or "", now_ms, expire_ms
            )
            for tp, p in valid.items()
        }
        return codes, changes

    def _check_partitions(
        self, partitions: list[OffsetCommitPartition]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, OffsetCommitPartition]]:
        """Per-partition error codes, and the partitions that passed (a partition named twice:
        the later wins)."""
        codes: dict[TopicPartition, int] = {}
        valid: dict[TopicPartition, OffsetCommitPartition] = {}
        max_bytes = self.config.offset_metadata_max_bytes
        for p in partitions:
            tp = _topic_partition((p.topic, p.partition))
            if len((p.metadata or "").encode()) > max_bytes:
                codes[tp] = OffsetMetadataTooLargeError.code
            elif not 0 <= p.partition < self.partition_count(p.topic):
                codes[tp] = UnknownTopicOrPartitionError.code
            else:
                codes[tp] = 0
                valid[tp] = p
        return codes, valid

    def txn_commit_offsets(
        self,
        now_ms: int,
        *,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        partitions: list[OffsetCommitPartition],
        respond: Callable[[dict[TopicPartition, int]], None],
    ) -> None:
        """TxnOffsetCommit: the offsets are persisted as pending and become committed only
        with the transaction's commit decision (`txn_offset_rows`; `replay` settles them)."""
        code = 0
        if self.txn_check is not None:
            code = self.txn_check(transactional_id, producer_id, producer_epoch, group_id)
        if not code:
            code = self._check_commit(group_id, generation_id, member_id, group_instance_id)
        if code:
            return respond({TopicPartition(p.topic, p.partition): code for p in partitions})
        codes, changes = self._validate_offsets(partitions, now_ms, None)
        if not changes:
            return respond(codes)

        def done(_now_ms: int, error: int) -> None:
            respond({tp: (error if tp in changes else c) for tp, c in codes.items()})

        rows = []
        for tp, value in changes.items():
            row = offset_row(group_id, tp, value)
            row.update(
                record_type="txn_offset",
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
            )
            rows.append(row)
        self._writes.append(Write(rows, done))

    def txn_offset_rows(self, producer_id: int, groups: set[str]) -> list[dict[str, Any]]:
        """Offset rows that commit the pending offsets of `producer_id` (its decision's)."""
        pending = self.txn_offsets.get(producer_id, {})
        return [
            offset_row(group_id, tp, value)
            for group_id in sorted(groups)
            for tp, value in pending.get(group_id, {}).items()
        ]

    def has_pending_txn_offset(self, group_id: str, tp: TopicPartition) -> bool:
        """Whether an open transaction holds an offset for `tp` (OffsetFetch requireStable)."""
        return any(tp in g.get(group_id, {}) for g in self.txn_offsets.values())

    def _check_commit(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None
    ) -> int:
        """Kafka's `ClassicGroup.validateOffsetCommit`: 0 when the commit may go ahead."""
        if not group_id:
            return InvalidGroupIdError.code
        group = self.groups.get(group_id)
        if group is None:
            return 0 if generation_id < 0 else IllegalGenerationError.code
        if group.is_in(_S.DEAD):
            return CoordinatorNotAvailableError.code
        if generation_id < 0 and group.is_in(_S.EMPTY):
            return 0  # an admin or a consumer using assign(): no membership needed
        if isinstance(group, ConsumerGroup):
            member = group.members.get(member_id)
            if member is None:
                return UnknownMemberIdError.code
            if generation_id != member.member_epoch:
                return StaleMemberEpochError.code
            return 0
        if instance_id is not None:
            registered = group.static_member_id(instance_id)
            if registered is not None and registered != member_id:
                return FencedInstanceIdError.code
        if member_id not in group.members:
            return UnknownMemberIdError.code
        if generation_id != group.generation_id:
            return IllegalGenerationError.code
        if group.is_in(_S.COMPLETING_REBALANCE):
            return RebalanceInProgressError.code
        return 0

    def fetch_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, CommittedOffset | None]:
        """Committed offsets of `partitions` (every committed one when None); None where the
        group has no offset (answered as -1, as Kafka does)."""
        if partitions is None:
            return dict(self.offsets.of_group(group_id))
        return {tp: self.offsets.get(group_id, tp) for tp in partitions}

    def delete_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartition],
        now_ms: int,
        respond: Callable[[int, dict[TopicPartition, int]], None],
    ) -> None:
        """OffsetDelete: refused for topics a live consumer group subscribes to."""
        group = self.groups.get(group_id)
        if group is None or group.is_in(_S.DEAD):
            return respond(GroupIdNotFoundError.code, {})
        subscribed: set[str] = set()
        if not group.is_in(_S.EMPTY):
            topics = group.subscribed_topics()
            if topics is None and group.protocol_type == "consumer":
                topics = {tp[0] for tp in partitions}  # unknown subscriptions: refuse all
            subscribed = topics or set()
        codes = {
            tp: GroupSubscribedToTopicError.code if tp[0] in subscribed else 0 for tp in partitions
        }
        changes: dict[TopicPartition, CommittedOffset | None] = {
            tp: None for tp, c in codes.items() if c == 0 and self.offsets.get(group_id, tp)
        }

        def done(_now_ms: int, error: int) -> None:
            respond(error, codes if error == 0 else dict.fromkeys(codes, error))

        if not changes:
            return respond(0, codes)
        self._writes.append(Write([offset_row(group_id, tp, None) for tp in changes], done))

    # -- admin ------------------------------------------------------------------------------

    def list_groups(
        self, states: set[str] | None = None, types: set[str] | None = None
    ) -> list[dict[str, Any]]:
        """ListGroups entries (filters as in v4/v5: empty or None = all; case-insensitive)."""
        want_states = {s.lower() for s in states or ()}
        want_types = {t.lower() for t in types or ()}
        out = []
        for group_id, group in sorted(self.groups.items()):
            if group.is_in(_S.DEAD):
                continue
            entry = {
                "group_id": group_id,
                "protocol_type": group.protocol_type or "",
                "group_state": group.state.value,
                "group_type": getattr(group, "group_type", "classic"),
            }
            if want_states and entry["group_state"].lower() not in want_states:
                continue
            if want_types and entry["group_type"] not in want_types:
                continue
            out.append(entry)
        return out

    def describe_group(self, group_id: str) -> dict[str, Any] | None:
        """DescribeGroups values for one group (None: unknown)."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if isinstance(group, ConsumerGroup):
            return describe_consumer_group_classic(group)
        stable = group.is_in(_S.STABLE)
        return {
            "group_id": group_id,
            "group_state": group.state.value,
            "protocol_type": group.protocol_type or "",
            "protocol_data": group.protocol_name or "" if stable else "",
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": (
                        m.metadata_for(group.protocol_name)
                        if stable and group.protocol_name
                        else b""
                    ),
                    "member_assignment": m.assignment if stable else b"",
                }
                for m in group.members.values()
            ],
        }

    def delete_groups(
        self, group_ids: list[str], now_ms: int, respond: Callable[[dict[str, int]], None]
    ) -> None:
        """DeleteGroups: only Empty groups; their offsets go with them."""
        codes: dict[str, int] = {}
        rows: list[dict[str, Any]] = []
        deleted: list[str] = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if not group_id:
                codes[group_id] = InvalidGroupIdError.code
            elif group is None or group.is_in(_S.DEAD):
                codes[group_id] = GroupIdNotFoundError.code
            elif not group.is_in(_S.EMPTY) or group.pending_members:
                codes[group_id] = NonEmptyGroupError.code
            else:
                codes[group_id] = 0
                deleted.append(group_id)
                rows.extend(self._deletion_rows(group_id, now_ms))
        if not rows:
            return respond(codes)

        def done(_done_ms: int, error: int) -> None:
            for group_id in deleted:
                if error:
                    codes[group_id] = error
            respond(codes)

        self._writes.append(Write(rows, done))

    def _deletion_rows(self, group_id: str, now_ms: int) -> list[dict[str, Any]]:
        rows = [offset_row(group_id, tp, None) for tp in self.offsets.of_group(group_id)]
        rows.append(group_row(group_id, None, now_ms))
        return rows

    def _forget_group(self, group_id: str, now_ms: int) -> None:
        group = self.groups.pop(group_id, None)
        if isinstance(group, ConsumerGroup):
            group.dead = True
        elif group is not None and not group.is_in(_S.DEAD):
            group.transition_to(_S.DEAD, now_ms)
        self.offsets.delete_group(group_id)

    # -- timers -----------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Fire membership timers; every `offsets.retention.check.interval.ms`, expire offsets."""
        self.classic.tick(now_ms)
        self.consumer.tick(now_ms)
        if now_ms >= self._next_expiry_check_ms:
            self._next_expiry_check_ms = now_ms + self.config.offsets_retention_check_interval_ms
            self.expire_offsets(now_ms)

    def expire_offsets(self, now_ms: int) -> None:
        """Tombstone expired offsets; an Empty group left without offsets is deleted too."""
        for group_id in self.offsets.groups():
            group = self.groups.get(group_id)
            if group is not None and not group.is_in(_S.EMPTY):
                continue  # a group with members keeps its offsets
            empty_since = group.state_timestamp_ms if group and group.generation_id else None
            expired = self.offsets.expired(
                group_id, now_ms, self.config.offsets_retention_ms, empty_since
            )
            if not expired:
                continue
            rows = [offset_row(group_id, tp, None) for tp in expired]
            drop_group = len(expired) == len(self.offsets.of_group(group_id))
            if drop_group:
                rows.append(group_row(group_id, None, now_ms))
            logger.info("group %s: %d offsets expired", group_id, len(expired))
            self._writes.append(Write(rows, no_answer))


def describe_consumer_group_classic(group: ConsumerGroup) -> dict[str, Any]:
    """DescribeGroups' view of a KIP-848 group: members with their assignments encoded as the
    classic consumer protocol does, so classic tools can show them."""
    from sparklog.protocol.consumer_protocol import encode_assignment, encode_subscription

    return {
        "group_id": group.group_id,
        "group_state": group.state.value,
        "protocol_type": "consumer",
        "protocol_data": group.assignor,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": encode_subscription(m.subscribed_topics),
                "member_assignment": encode_assignment(
                    [(t, p) for t, ps in sorted(m.assigned.items()) for p in sorted(ps)]
                ),
            }
            for m in group.members.values()
        ],
    }
