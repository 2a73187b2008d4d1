"""The rows a group coordinator persists in its table, and back (Kafka's
`GroupCoordinatorRecordHelpers`): an offset commit or deletion, a group's membership or its
tombstone. `GroupCoordinator.replay` is the one reader of these rows."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from sparklog.coordinator.clock import loaded_ms
from sparklog.coordinator.group.offsets import CommittedOffset
from sparklog.structs import TopicPartition


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetCommitPartition:
    topic: str
    partition: int
    committed_offset: int
    leader_epoch: int
    metadata: str | None


def offset_row(group_id: str, tp: TopicPartition, value: CommittedOffset | None) -> dict[str, Any]:
    """The persisted row of a commit (or, with None, of a deletion)."""
    return {
        "record_type": "offset",
        "group_id": group_id,
        "topic": tp[0],
        "partition": tp[1],
        "committed_offset": None if value is None else value.committed_offset,
        "leader_epoch": None if value is None else value.leader_epoch,
        "metadata": None if value is None else value.metadata,
        "commit_timestamp_ms": None if value is None else value.commit_timestamp_ms,
        "expire_timestamp_ms": None if value is None else value.expire_timestamp_ms,
        "group_metadata": None,
    }


def commit_row(
    group_id: str, p: OffsetCommitPartition, now_ms: int, expire_ms: int | None
) -> dict[str, Any]:
    """`offset_row` of a validated partition of an OffsetCommit, committed at `now_ms`."""
    return {
        "record_type": "offset",
        "group_id": group_id,
        "topic": p.topic,
        "partition": p.partition,
        "committed_offset": p.committed_offset,
        "leader_epoch": p.leader_epoch,
        "metadata": p.metadata or "",
        "commit_timestamp_ms": now_ms,
        "expire_timestamp_ms": expire_ms,
        "group_metadata": None,
    }


def group_row(group_id: str, record: dict[str, Any] | None, now_ms: int) -> dict[str, Any]:
    """The persisted row of a group's membership (None: the group was deleted)."""
    return {
        "record_type": "group",
        "group_id": group_id,
        "topic": None,
        "partition": None,
        "committed_offset": None,
        "leader_epoch": None,
        "metadata": None,
        "commit_timestamp_ms": now_ms,
        "expire_timestamp_ms": None,
        "group_metadata": None if record is None else json.dumps(record, sort_keys=True),
    }


def offset_of(row: dict[str, Any], now_ms: int) -> CommittedOffset:
    """The committed offset a persisted offset row holds, its times as `clock.loaded_ms` reads them."""
    committed_ms = int(row["commit_timestamp_ms"])
    expire_ms = None if row["expire_timestamp_ms"] is None else int(row["expire_timestamp_ms"])
    if (loaded := loaded_ms(committed_ms, now_ms)) != committed_ms:
        # written as uptime: the commit counts from now, an explicit retention with it
        expire_ms = None if expire_ms is None else expire_ms + loaded - committed_ms
        committed_ms = loaded
    return CommittedOffset(
        int(row["committed_offset"]),
        int(row["leader_epoch"] if row["leader_epoch"] is not None else -1),
        row["metadata"] or "",
        committed_ms,
        expire_ms,
    )
