"""DescribeLogDirs (API 35): the broker's log directory, its partitions and their sizes.

What Kafka's `ReplicaManager.describeLogDirs` answers and `kafka-log-dirs.sh --describe` /
`Admin.describeLogDirs` read: per log dir its path, total and usable bytes, and per hosted
partition (all, or those asked for) its size in bytes and offset lag (how far the log end is
behind the high watermark; 0 for a leader). sparklog brokers have one log dir.
"""

from __future__ import annotations

import shutil
from typing import Any

from sparklog.broker.log_manager import LogManager


def describe_log_dirs(log_manager: LogManager, topics: Any) -> list[dict[str, Any]]:
    """The `results` of a DescribeLogDirs response; `topics` None means every partition."""
    wanted: dict[str, set[int]] | None = None
    if topics is not None:
        wanted = {}
        for t in topics:
            wanted.setdefault(str(t.topic), set()).update(int(p) for p in t.partitions)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), log in sorted(log_manager.logs().items()):
        if wanted is not None and partition not in wanted.get(topic, ()):
            continue
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "partition_size": log.size_in_bytes,
                "offset_lag": max(0, log.high_watermark - log.log_end_offset),
                "is_future_key": False,
            }
        )
    usage = shutil.disk_usage(log_manager.data_dir)
    return [
        {
            "error_code": 0,
            "log_dir": str(log_manager.data_dir),
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            "total_bytes": usage.total,
            "usable_bytes": usage.free,
        }
    ]
