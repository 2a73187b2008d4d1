"""Topic-level log settings with Kafka's names and defaults (Kafka's `LogConfig`).

The settings are declared here, into the registry (`sparklog.settings`), with their
broker-level synonyms (`log.retention.ms` for `retention.ms`, Kafka's
`ServerTopicConfigSynonyms`). `LogConfig.from_properties({"segment.bytes": "1048576", ...})`
parses Kafka's dotted names with them; unknown names or bad values raise `ConfigError` (a
ValueError) naming the setting, the value and what it accepts. A unit test keeps
`conf/sparklog-defaults.conf` equal to the declared defaults.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sparklog.settings import (
    LONG_MAX,
    Check,
    ConfigType,
    OneOf,
    Range,
    Scope,
    Setting,
    UpdateMode,
    define,
)

CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
COMPRESSION_TYPES = ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd")
_DAY_MS = 24 * 3600 * 1000


def _policy(raw: object) -> str:
    """`cleanup.policy` in one spelling: "delete,compact" and "compact, delete" alike."""
    return ",".join(sorted(p.strip() for p in str(raw).strip().split(",")))


def _throttled_replicas(raw: object) -> str:
    """`leader|follower.replication.throttled.replicas` in one spelling ("0:1,1:2" or "*")."""
    parts = raw if isinstance(raw, list | tuple) else str(raw).split(",")
    return ",".join(str(p).strip() for p in parts if str(p).strip())


def _valid_throttled_replicas(value: object) -> bool:
    """Kafka's `ThrottledReplicaListValidator`: the literal `*` or `partition:broker,...`."""
    entries = [e.strip() for e in str(value).split(",")]
    return entries == ["*"] or all(re.fullmatch(r"([0-9]+:[0-9]+)?", e) for e in entries)


_THROTTLED_RULE = Check(
    _valid_throttled_replicas,
    "the literal '*' or a list of replicas in the following format: "
    "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
)


def _topic(
    name: str,
    kind: ConfigType,
    default: object,
    synonyms: str | tuple[str, ...],
    doc: str,
    validator: object = None,
    **extra: object,
) -> Setting:
    return Setting(
        name,
        kind,
        default,
        validator,  # type: ignore[arg-type]
        doc=doc,
        scope=Scope.TOPIC,
        synonyms=(synonyms,) if isinstance(synonyms, str) else synonyms,
        read_only=False,
        # Kafka's `DynamicLogConfig.ReconfigurableConfigs`: every topic config's broker name
        dynamic=UpdateMode.CLUSTER_WIDE,
        **extra,  # type: ignore[arg-type]
    )


_I, _L = ConfigType.INT, ConfigType.LONG
#: Kafka's topic configs sparklog implements, finest broker synonym first.
TOPIC_SETTINGS = define(
    _topic("segment.bytes", _I, 1024**3, "log.segment.bytes", "segment file size", Range(14)),
    _topic(
        "segment.ms",
        _L,
        7 * _DAY_MS,
        ("log.roll.ms", "log.roll.hours"),
        "roll a segment this old",
        Range(1),
    ),
    _topic(
        "segment.jitter.ms",
        _L,
        0,
        ("log.roll.jitter.ms", "log.roll.jitter.hours"),
        "random jitter subtracted from segment.ms",
    ),
    _topic(
        "segment.index.bytes",
        _I,
        10 * 1024 * 1024,
        "log.index.size.max.bytes",
        "offset/time index size",
        Range(8),
    ),
    _topic(
        "index.interval.bytes",
        _I,
        4096,
        "log.index.interval.bytes",
        "bytes between index entries",
        Range(0),
    ),
    _topic(
        "retention.ms",
        _L,
        7 * _DAY_MS,
        ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
        "delete segments older than this",
        Range(-1, text="at least -1 (-1 = forever)"),
    ),
    _topic(
        "retention.bytes",
        _L,
        -1,
        "log.retention.bytes",
        "delete segments beyond this size",
        Range(-1, text="at least -1 (-1 = no limit)"),
    ),
    _topic(
        "cleanup.policy",
        ConfigType.LIST,
        "delete",
        "log.cleanup.policy",
        "delete, compact or both",
        OneOf(CLEANUP_POLICIES),
        parser=_policy,
    ),
    _topic(
        "delete.retention.ms",
        _L,
        _DAY_MS,
        "log.cleaner.delete.retention.ms",
        "how long compaction keeps tombstones",
    ),
    _topic(
        "min.cleanable.dirty.ratio",
        ConfigType.DOUBLE,
        0.5,
        "log.cleaner.min.cleanable.ratio",
        "dirty share that makes a log cleanable",
        Check(lambda v: 0 <= v <= 1, "in [0, 1]"),
    ),
    _topic(
        "min.compaction.lag.ms",
        _L,
        0,
        "log.cleaner.min.compaction.lag.ms",
        "records younger than this stay uncompacted",
    ),
    _topic(
        "max.compaction.lag.ms",
        _L,
        LONG_MAX,
        "log.cleaner.max.compaction.lag.ms",
        "records older than this are compacted",
    ),
    _topic(
        "file.delete.delay.ms",
        _L,
        60_000,
        "log.segment.delete.delay.ms",
        "wait before deleting a segment file",
    ),
    _topic(
        "flush.messages",
        _L,
        LONG_MAX,
        "log.flush.interval.messages",
        "fsync every this many records",
        Range(1),
    ),
    _topic("flush.ms", _L, LONG_MAX, "log.flush.interval.ms", "fsync this often", Range(0)),
    _topic(
        "max.message.bytes",
        _I,
        1_048_588,
        "message.max.bytes",
        "largest record batch",
        Range(0),
    ),
    _topic(
        "message.timestamp.type",
        ConfigType.STRING,
        "CreateTime",
        "log.message.timestamp.type",
        "CreateTime or LogAppendTime",
        Check(lambda v: v in TIMESTAMP_TYPES, "CreateTime or LogAppendTime"),
    ),
    _topic(
        "message.timestamp.before.max.ms",
        _L,
        LONG_MAX,
        "log.message.timestamp.before.max.ms",
        "how far in the past a CreateTime may be",
    ),
    _topic(
        "message.timestamp.after.max.ms",
        _L,
        3_600_000,
        "log.message.timestamp.after.max.ms",
        "how far in the future a CreateTime may be",
    ),
    _topic(
        "compression.type",
        ConfigType.STRING,
        "producer",
        "compression.type",
        "the codec batches are stored with",
        OneOf(COMPRESSION_TYPES),
    ),
    _topic(
        "min.insync.replicas",
        _I,
        1,
        "min.insync.replicas",
        "ISR members acks=all needs",
        Range(1),
    ),
    _topic(
        "unclean.leader.election.enable",
        ConfigType.BOOLEAN,
        False,
        "unclean.leader.election.enable",
        "elect an out-of-sync replica when no ISR member lives",
    ),
    _topic("preallocate", ConfigType.BOOLEAN, False, "log.preallocate", "preallocate segments"),
    # KIP-73: the replicas whose replication the leader's / the follower's
    # `*.replication.throttled.rate` holds; topic-only, no broker-level synonym (as in Kafka)
    _topic(
        "leader.replication.throttled.replicas",
        ConfigType.LIST,
        "",
        (),
        "replicas (partition:broker, or *) the leader throttles while serving them",
        _THROTTLED_RULE,
        parser=_throttled_replicas,
    ),
    _topic(
        "follower.replication.throttled.replicas",
        ConfigType.LIST,
        "",
        (),
        "replicas (partition:broker, or *) whose follower fetches throttled",
        _THROTTLED_RULE,
        parser=_throttled_replicas,
    ),  # KIP-405 tiered storage (DESIGN D17): the remote tier is a Delta table per topic
    # (sparklog/storage/remote/). Kafka's names and defaults; -2 = follow retention.*.
    _topic(
        "remote.storage.enable",
        ConfigType.BOOLEAN,
        False,
        (),
        "copy this topic's log to its remote tier (a Delta table) and serve old offsets from it",
    ),
    _topic(
        "local.retention.ms",
        _L,
        -2,
        "log.local.retention.ms",
        "keep local segments this long once tiered (-2 = retention.ms)",
        Range(-2, text="at least -2 (-2 = retention.ms, -1 = forever)"),
    ),
    _topic(
        "local.retention.bytes",
        _L,
        -2,
        "log.local.retention.bytes",
        "keep this many local bytes once tiered (-2 = retention.bytes)",
        Range(-2, text="at least -2 (-2 = retention.bytes, -1 = no limit)"),
    ),
    _topic(
        "remote.log.copy.disable",
        ConfigType.BOOLEAN,
        False,
        (),
        "stop copying to the remote tier; tiered data stays readable and expires by retention",
    ),
    _topic(
        "remote.log.delete.on.disable",
        ConfigType.BOOLEAN,
        False,
        (),
        "delete the remote tier (the topic's Delta table rows) when remote.storage.enable is "
        "turned off",
    ),
    # sparklog's own (no Kafka equivalent): the table trails the log by this much, not by a
    # segment roll; -1 = copy closed segments only, as Kafka does
    _topic(
        "remote.table.freshness.ms",
        _L,
        -1,
        (),
        "also copy the stable prefix of the active segment this often (-1 = closed segments only)",
        Range(-1, text="at least -1 (-1 = closed segments only)"),
    ),
    _topic(
        "remote.table.value.format",
        ConfigType.STRING,
        "binary",
        (),
        "decode values into typed columns of the topic table: binary, json or avro",
        OneOf(("binary", "json", "avro")),
    ),
    _topic(
        "remote.table.value.schema",
        ConfigType.STRING,
        "",
        (),
        "the values' schema: Spark DDL for json, an Avro schema (JSON) for avro",
    ),
)
#: Coarser broker spellings and their factor to ms, used only when no finer one is given
#: (Kafka's `KafkaConfig.logRetentionTimeMillis` / `logRollTimeMillis` precedence).
COARSE_SYNONYMS: Mapping[str, int] = {
    "log.retention.minutes": 60_000,
    "log.retention.hours": 3_600_000,
    "log.roll.hours": 3_600_000,
    "log.roll.jitter.hours": 3_600_000,
}
_D = TOPIC_SETTINGS.default


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Settings of one partition log; attribute = Kafka name with dots as underscores."""

    segment_bytes: int = _D("segment.bytes")
    segment_ms: int = _D("segment.ms")
    segment_jitter_ms: int = _D("segment.jitter.ms")
    segment_index_bytes: int = _D("segment.index.bytes")
    index_interval_bytes: int = _D("index.interval.bytes")
    retention_ms: int = _D("retention.ms")
    retention_bytes: int = _D("retention.bytes")
    cleanup_policy: str = _D("cleanup.policy")
    delete_retention_ms: int = _D("delete.retention.ms")
    min_cleanable_dirty_ratio: float = _D("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _D("min.compaction.lag.ms")
    max_compaction_lag_ms: int = _D("max.compaction.lag.ms")
    file_delete_delay_ms: int = _D("file.delete.delay.ms")
    flush_messages: int = _D("flush.messages")
    flush_ms: int = _D("flush.ms")
    max_message_bytes: int = _D("max.message.bytes")
    message_timestamp_type: str = _D("message.timestamp.type")
    message_timestamp_before_max_ms: int = _D("message.timestamp.before.max.ms")
    message_timestamp_after_max_ms: int = _D("message.timestamp.after.max.ms")
    compression_type: str = _D("compression.type")
    min_insync_replicas: int = _D("min.insync.replicas")
    unclean_leader_election_enable: bool = _D("unclean.leader.election.enable")
    preallocate: bool = _D("preallocate")
    leader_replication_throttled_replicas: str = _D("leader.replication.throttled.replicas")
    follower_replication_throttled_replicas: str = _D("follower.replication.throttled.replicas")
    remote_storage_enable: bool = _D("remote.storage.enable")
    local_retention_ms: int = _D("local.retention.ms")
    local_retention_bytes: int = _D("local.retention.bytes")
    remote_log_copy_disable: bool = _D("remote.log.copy.disable")
    remote_log_delete_on_disable: bool = _D("remote.log.delete.on.disable")
    remote_table_freshness_ms: int = _D("remote.table.freshness.ms")
    remote_table_value_format: str = _D("remote.table.value.format")
    remote_table_value_schema: str = _D("remote.table.value.schema")

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def local_retention_ms_effective(self) -> int:
        """`local.retention.ms` with -2 resolved to `retention.ms` (Kafka's
        `LogConfig.localRetentionMs`)."""
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def local_retention_bytes_effective(self) -> int:
        """`local.retention.bytes` with -2 resolved to `retention.bytes`."""
        if self.local_retention_bytes == -2:
            return self.retention_bytes
        return self.local_retention_bytes

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def kafka_names(cls) -> list[str]:
        """Every setting's Kafka name, e.g. "segment.bytes"."""
        return list(TOPIC_SETTINGS)

    @classmethod
    def from_properties(
        cls, props: Mapping[str, object], base: LogConfig | None = None
    ) -> LogConfig:
        """Build from Kafka-named properties, on top of `base` (defaults when None)."""
        changes = TOPIC_SETTINGS.parse(props, what="topic config", by_attr=True)
        return dataclasses.replace(base or cls(), **changes)

    def to_properties(self) -> dict[str, str]:
        """Kafka-named string values (what DescribeConfigs shows)."""
        return TOPIC_SETTINGS.formatted(self)

    def validate(self) -> None:
        """Raise ConfigError naming the first setting out of its range."""
        TOPIC_SETTINGS.check_values(self)
