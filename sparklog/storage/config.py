"""Topic-level log settings with Kafka's names and defaults (Kafka's `LogConfig`).

`LogConfig.from_properties({"segment.bytes": "1048576", ...})` accepts Kafka's dotted names;
unknown names or bad values raise ValueError naming the setting and what it accepts.
The defaults here are the ones in `conf/sparklog-defaults.conf` (a unit test keeps them equal).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

LONG_MAX = 2**63 - 1

CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
COMPRESSION_TYPES = ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Settings of one partition log; attribute = Kafka name with dots as underscores."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 24 * 3600 * 1000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3600 * 1000
    compression_type: str = "producer"
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    preallocate: bool = False

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def kafka_names(cls) -> list[str]:
        """Every setting's Kafka name, e.g. "segment.bytes"."""
        return [f.name.replace("_", ".") for f in dataclasses.fields(cls)]

    @classmethod
    def from_properties(
        cls, props: Mapping[str, object], base: LogConfig | None = None
    ) -> LogConfig:
        """Build from Kafka-named properties, on top of `base` (defaults when None)."""
        base = base or cls()
        fields = {f.name: f for f in dataclasses.fields(cls)}
        changes: dict[str, object] = {}
        for name, raw in props.items():
            attr = name.replace(".", "_")
            if attr not in fields:
                raise ValueError(
                    f"unknown topic config {name!r}; known: {', '.join(cls.kafka_names())}"
                )
            changes[attr] = _parse(name, fields[attr].type, raw)
        config = dataclasses.replace(base, **changes)
        config.validate()
        return config

    def to_properties(self) -> dict[str, str]:
        """Kafka-named string values (what DescribeConfigs shows)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name.replace("_", ".")] = (
                str(value).lower() if isinstance(value, bool) else str(value)
            )
        return out

    def validate(self) -> None:
        """Raise ValueError naming the first setting out of its range."""
        _require(self.segment_bytes >= 14, "segment.bytes", "must be at least 14")
        _require(self.segment_ms >= 1, "segment.ms", "must be at least 1")
        _require(self.segment_index_bytes >= 8, "segment.index.bytes", "must be at least 8")
        _require(self.index_interval_bytes >= 0, "index.interval.bytes", "must be >= 0")
        _require(self.retention_ms >= -1, "retention.ms", "must be >= -1 (-1 = forever)")
        _require(self.retention_bytes >= -1, "retention.bytes", "must be >= -1 (-1 = no limit)")
        _require(
            self.cleanup_policy in CLEANUP_POLICIES, "cleanup.policy", f"one of {CLEANUP_POLICIES}"
        )
        _require(0 <= self.min_cleanable_dirty_ratio <= 1, "min.cleanable.dirty.ratio", "in [0, 1]")
        _require(self.max_message_bytes >= 0, "max.message.bytes", "must be >= 0")
        _require(self.flush_messages >= 1, "flush.messages", "must be >= 1")
        _require(self.flush_ms >= 0, "flush.ms", "must be >= 0")
        _require(
            self.message_timestamp_type in TIMESTAMP_TYPES,
            "message.timestamp.type",
            "CreateTime or LogAppendTime",
        )
        _require(
            self.compression_type in COMPRESSION_TYPES,
            "compression.type",
            f"one of {COMPRESSION_TYPES}",
        )
        _require(self.min_insync_replicas >= 1, "min.insync.replicas", "must be >= 1")


def _require(ok: bool, name: str, rule: str) -> None:
    if not ok:
        raise ValueError(f"invalid topic config {name}: {rule}")


def _parse(name: str, type_name: object, raw: object) -> object:
    text = str(raw).strip()
    try:
        if type_name in (bool, "bool"):
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if type_name in (int, "int"):
            return int(text)
        if type_name in (float, "float"):
            return float(text)
    except ValueError:
        raise ValueError(
            f"invalid value {raw!r} for topic config {name}: expected {type_name}"
        ) from None
    if name == "cleanup.policy":
        return ",".join(sorted(p.strip() for p in text.split(",")))
    return text
