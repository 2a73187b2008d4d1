"""Which segments retention may delete (Kafka's `UnifiedLog.deletableSegments` with its three
breach predicates: below the log start offset, `retention.ms`, `retention.bytes`; for a log
with a remote tier, `local.retention.*` and only segments the tier holds wholly).

Pure: `Log.delete_old_segments` calls it under the log lock and deletes what it returns.
"""

from __future__ import annotations

from collections.abc import Sequence

from sparklog.storage.config import LogConfig
from sparklog.storage.segment import LogSegment


def deletable_segments(
    segments: Sequence[LogSegment],
    bases: Sequence[int],
    size_in_bytes: int,
    high_watermark: int,
    log_start_offset: int,
    config: LogConfig,
    now_ms: int | None,
    *,
    remote_copied_end: int | None = None,
) -> list[LogSegment]:
    """The oldest non-active segments, in order, that are wholly below the high watermark and
    either below `log_start_offset` or (cleanup.policy delete, `now_ms` given) older than
    `retention.ms` or beyond `retention.bytes`; stops at the first segment that must stay.
    `now_ms=None` (DeleteRecords) applies the log start offset only.

    `remote_copied_end` (a log copying to its remote tier: the end, exclusive, of what the tier
    holds) switches the time and size limits to `local.retention.ms/bytes` (effective values)
    and keeps every segment not wholly below it (Kafka's `isSegmentEligibleForDeletion`)."""
    remote = remote_copied_end is not None
    retention_ms = config.local_retention_ms_effective if remote else config.retention_ms
    retention_bytes = config.local_retention_bytes_effective if remote else config.retention_bytes
    out: list[LogSegment] = []
    total = size_in_bytes
    for i, segment in enumerate(segments[:-1]):
        next_base = bases[i + 1]
        if next_base > high_watermark:
            break
        if next_base <= log_start_offset:
            out.append(segment)
            total -= segment.size_bytes
            continue
        if not config.delete or now_ms is None:
            break
        expired = 0 <= retention_ms < now_ms - segment.largest_timestamp
        oversize = 0 <= retention_bytes <= total - segment.size_bytes
        if not (expired or oversize):
            break
        if remote_copied_end is not None and next_base > remote_copied_end:
            break  # not in the remote tier yet: local retention never deletes it
        out.append(segment)
        total -= segment.size_bytes
    return out


def should_roll_for_retention(
    segments: Sequence[LogSegment],
    deletable: Sequence[LogSegment],
    size_in_bytes: int,
    log_end_offset: int,
    high_watermark: int,
    config: LogConfig,
    now_ms: int,
) -> bool:
    """Whether local retention of a log copying to its remote tier should roll the active
    segment: every closed segment is deletable and the active one, non-empty and wholly below
    the high watermark, is past `local.retention.ms/bytes` too (Kafka's `deleteOldSegments`
    rolls a log whose every segment is deletable; here the roll is what lets the copy task
    take the active segment's records, and the next round delete them locally)."""
    active = segments[-1]
    if not config.delete or active.size_bytes == 0 or high_watermark < log_end_offset:
        return False
    if len(deletable) != len(segments) - 1:
        return False
    retention_ms = config.local_retention_ms_effective
    retention_bytes = config.local_retention_bytes_effective
    left = size_in_bytes - sum(s.size_bytes for s in deletable)
    expired = 0 <= retention_ms < now_ms - active.largest_timestamp
    oversize = 0 <= retention_bytes <= left - active.size_bytes
    return expired or oversize
