"""Committed offsets in memory (the cache half of Kafka's `OffsetMetadataManager`).

The coordinator validates a commit, persists its rows, and only then calls `apply`, so what
OffsetFetch reads from here is always durable. Expiry follows KIP-211: an Empty group's offsets
expire `offsets.retention.minutes` after the group became empty; a group that never had members
(a standalone/admin committer) expires each offset that long after its commit; an explicit
expire timestamp (OffsetCommit v2-v4 retention time) wins.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from sparklog.structs import TopicPartition


@dataclasses.dataclass(frozen=True, slots=True)
class CommittedOffset:
    """One committed offset (Kafka's `OffsetAndMetadata`)."""

    committed_offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None


class OffsetCache:
    """group id -> (topic, partition) -> committed offset."""

    def __init__(self) -> None:
        self._offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}

    def apply(self, group_id: str, changes: dict[TopicPartition, CommittedOffset | None]) -> None:
        """Apply durable changes; None deletes (a tombstone)."""
        offsets = self._offsets.setdefault(group_id, {})
        for tp, value in changes.items():
            if value is None:
                offsets.pop(tp, None)
            else:
                offsets[tp] = value
        if not offsets:
            del self._offsets[group_id]

    def has_offsets(self, group_id: str) -> bool:
        return bool(self._offsets.get(group_id))

    def get(self, group_id: str, tp: TopicPartition) -> CommittedOffset | None:
        return self._offsets.get(group_id, {}).get(tp)

    def of_group(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        return dict(self._offsets.get(group_id, {}))

    def groups(self) -> list[str]:
        return list(self._offsets)

    def items(self) -> list[tuple[str, dict[TopicPartition, CommittedOffset]]]:
        """(group id, its offsets) for every group with offsets: copies, so a caller on
        another thread (the metrics' scrape, the lag poller) never iterates the live dicts."""
        return [(group_id, dict(offsets)) for group_id, offsets in list(self._offsets.items())]

    def delete_group(self, group_id: str) -> list[TopicPartition]:
        """Drop every offset of the group; the partitions that had one."""
        return list(self._offsets.pop(group_id, {}))

    def partitions_of_topics(self, group_id: str, topics: Iterable[str]) -> list[TopicPartition]:
        wanted = set(topics)
        return [tp for tp in self._offsets.get(group_id, {}) if tp[0] in wanted]

    def expired(
        self, group_id: str, now_ms: int, retention_ms: int, empty_since_ms: int | None
    ) -> list[TopicPartition]:
        """Offsets of `group_id` whose retention ran out. `empty_since_ms` is when a group with
        members became Empty (None: the group has members, or never had any)."""
        out = []
        for tp, o in self._offsets.get(group_id, {}).items():
            if o.expire_timestamp_ms is not None:
                due = o.expire_timestamp_ms
            elif empty_since_ms is not None:
                due = max(empty_since_ms, o.commit_timestamp_ms) + retention_ms
            else:
                due = o.commit_timestamp_ms + retention_ms
            if due <= now_ms:
                out.append(tp)
        return out
