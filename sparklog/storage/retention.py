"""Which segments retention may delete (Kafka's `UnifiedLog.deletableSegments` with its three
breach predicates: below the log start offset, `retention.ms`, `retention.bytes`).

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
) -> list[LogSegment]:
    """The oldest non-active segments, in order, that are wholly below the high watermark and
    either below `log_start_offset` or (cleanup.policy delete, `now_ms` given) older than
    `retention.ms` or beyond `retention.bytes`; stops at the first segment that must stay.
    `now_ms=None` (DeleteRecords) applies the log start offset only."""
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
        expired = 0 <= config.retention_ms < now_ms - segment.largest_timestamp
        oversize = 0 <= config.retention_bytes <= total - segment.size_bytes
        if not (expired or oversize):
            break
        out.append(segment)
        total -= segment.size_bytes
    return out
