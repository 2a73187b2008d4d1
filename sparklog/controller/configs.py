"""Cluster settings and topic configs with Kafka's names (Kafka's `ConfigurationControlManager`).

`ControllerConfig` holds the cluster-wide settings the controller needs (`num.partitions`,
`default.replication.factor`, `auto.create.topics.enable`, `broker.session.timeout.ms`, ...)
and the topic defaults, a `LogConfig` read from the topic names (`retention.ms`) or their
broker-level synonyms (`log.retention.ms`, `message.max.bytes`, ...) as Kafka spells them.

Topic configs are stored as overrides only (what CreateTopics / AlterConfigs set); the
effective config is `LogConfig.from_properties(overrides, base=defaults)`. Validation errors
raise `InvalidConfigError` / `InvalidRequestError` with Kafka's wording where Kafka has one.
`describe_topic_configs` and `describe_broker_configs` build DescribeConfigs entries; brokers
answer DescribeConfigs from their image with the same functions.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sparklog.controller.image import MetadataImage
from sparklog.errors import InvalidConfigError, InvalidRequestError, UnknownTopicOrPartitionError
from sparklog.storage.config import LogConfig

#: Kafka's broker-level name of each topic config (`LogConfig`'s `ServerTopicConfigSynonyms`).
TOPIC_CONFIG_SYNONYMS: Mapping[str, str] = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "cleanup.policy": "log.cleanup.policy",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "compression.type": "compression.type",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "preallocate": "log.preallocate",
}
_BROKER_TO_TOPIC = {v: k for k, v in TOPIC_CONFIG_SYNONYMS.items()}
# Coarser Kafka spellings, used only when the finer one is absent (Kafka's precedence).
_COARSE_SYNONYMS = {
    "retention.ms": (("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)),
    "segment.ms": (("log.roll.hours", 3_600_000),),
    "segment.jitter.ms": (("log.roll.jitter.hours", 3_600_000),),
}
#: Topic configs Kafka types as INT (the other integers are LONG).
_INT_CONFIGS = frozenset(
    {
        "segment.bytes",
        "segment.index.bytes",
        "index.interval.bytes",
        "max.message.bytes",
        "min.insync.replicas",
    }
)
_LIST_CONFIGS = frozenset({"cleanup.policy"})
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


class ConfigResourceType(enum.IntEnum):
    """Kafka's `ConfigResource.Type` codes."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4


class ConfigSource(enum.IntEnum):
    """Kafka's `DescribeConfigsResponse.ConfigSource` codes."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(enum.IntEnum):
    """Kafka's `DescribeConfigsResponse.ConfigType` codes."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7


class OpType(enum.IntEnum):
    """IncrementalAlterConfigs operations (Kafka's `AlterConfigOp.OpType`)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class ConfigResource:
    """A resource whose configs are described or altered (Kafka's `ConfigResource`)."""

    resource_type: int
    resource_name: str


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    """One IncrementalAlterConfigs change to one config of one resource."""

    name: str
    op: int
    value: str | None = None


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One DescribeConfigs result entry."""

    name: str
    value: str | None
    source: ConfigSource
    config_type: ConfigType
    read_only: bool = False
    is_sensitive: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()


_CLUSTER_SETTINGS = {
    # Kafka name -> (attribute, type)
    "num.partitions": ("num_partitions", int),
    "default.replication.factor": ("default_replication_factor", int),
    "auto.create.topics.enable": ("auto_create_topics_enable", bool),
    "broker.session.timeout.ms": ("broker_session_timeout_ms", int),
    "broker.heartbeat.interval.ms": ("broker_heartbeat_interval_ms", int),
    "metadata.log.snapshot.records": ("metadata_log_snapshot_records", int),
    "auto.leader.rebalance.enable": ("auto_leader_rebalance_enable", bool),
    "leader.imbalance.check.interval.seconds": ("leader_imbalance_check_interval_seconds", int),
    "leader.imbalance.per.broker.percentage": ("leader_imbalance_per_broker_percentage", int),
    "controller.max.records.per.batch": ("controller_max_records_per_batch", int),
}


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Cluster settings (Kafka names, dots as underscores) plus the topic defaults."""

    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    broker_session_timeout_ms: int = 9000
    broker_heartbeat_interval_ms: int = 2000
    metadata_log_snapshot_records: int = 1000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    #: records one user operation may write (Kafka's KAFKA-14996/KAFKA-20976 bound)
    controller_max_records_per_batch: int = 10_000
    topic_defaults: LogConfig = field(default_factory=LogConfig)
    #: Kafka names given explicitly (DescribeConfigs reports them as STATIC_BROKER_CONFIG).
    explicit_names: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        _check(self.num_partitions >= 1, "num.partitions", "must be at least 1")
        _check(
            self.default_replication_factor >= 1, "default.replication.factor", "must be at least 1"
        )
        _check(
            self.broker_heartbeat_interval_ms >= 1,
            "broker.heartbeat.interval.ms",
            "must be at least 1",
        )
        _check(
            self.broker_session_timeout_ms > self.broker_heartbeat_interval_ms,
            "broker.session.timeout.ms",
            "must be larger than broker.heartbeat.interval.ms",
        )
        _check(
            self.metadata_log_snapshot_records >= 1,
            "metadata.log.snapshot.records",
            "must be at least 1",
        )
        _check(
            self.leader_imbalance_check_interval_seconds >= 1,
            "leader.imbalance.check.interval.seconds",
            "must be at least 1",
        )
        _check(
            self.controller_max_records_per_batch >= 1,
            "controller.max.records.per.batch",
            "must be at least 1",
        )
        _check(
            0 <= self.leader_imbalance_per_broker_percentage <= 100,
            "leader.imbalance.per.broker.percentage",
            "must be between 0 and 100",
        )

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> ControllerConfig:
        """Read Kafka-named settings; names that are not the controller's are ignored (the
        same properties configure brokers and clients). Bad values raise ValueError."""
        values: dict[str, object] = {}
        explicit: set[str] = set()
        for name, (attr, kind) in _CLUSTER_SETTINGS.items():
            if name in props:
                values[attr] = _parse_setting(name, kind, props[name])
                explicit.add(name)
        topic_props: dict[str, object] = {}
        for topic_name in LogConfig.kafka_names():
            broker_name = TOPIC_CONFIG_SYNONYMS[topic_name]
            for name in (topic_name, broker_name):
                if name in props:
                    topic_props[topic_name] = props[name]
                    explicit.update((topic_name, broker_name))
            if topic_name not in topic_props:
                for coarse, factor in _COARSE_SYNONYMS.get(topic_name, ()):
                    if coarse in props:
                        topic_props[topic_name] = int(str(props[coarse]).strip()) * factor
                        explicit.update((topic_name, broker_name))
                        break
        values["topic_defaults"] = LogConfig.from_properties(topic_props)
        return cls(**values, explicit_names=frozenset(explicit))  # type: ignore[arg-type]

    def cluster_properties(self) -> dict[str, str]:
        """The cluster settings by Kafka name, as strings."""
        return {
            name: _format(getattr(self, attr)) for name, (attr, _kind) in _CLUSTER_SETTINGS.items()
        }


def read_properties(path: str | Path) -> dict[str, str]:
    """A Java-style `.properties` file (`name=value`, `#` comments) as a dict."""
    return parse_properties(Path(path).read_text(), str(path))


def parse_properties(text: str, path: str) -> dict[str, str]:
    """`.properties` text as a dict; `path` names it in errors."""
    props: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        name, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path}:{number}: expected name=value, got {line!r}")
        props[name.strip()] = value.strip()
    return props


# -- validation ------------------------------------------------------------------------------


def effective_topic_config(overrides: Mapping[str, str], defaults: LogConfig) -> LogConfig:
    """The topic's `LogConfig`: overrides on top of the cluster defaults."""
    return LogConfig.from_properties(overrides, base=defaults)


def validate_topic_configs(configs: Mapping[str, str | None], defaults: LogConfig) -> None:
    """Raise InvalidConfigError unless `configs` is a valid set of topic overrides."""
    nulls = sorted(name for name, value in configs.items() if value is None)
    if nulls:
        raise InvalidConfigError(f"Null value not supported for topic configs: {','.join(nulls)}")
    for name, value in configs.items():
        if name in _INT_CONFIGS:
            _check_int32(name, value)
    try:
        LogConfig.from_properties(configs, base=defaults)  # type: ignore[arg-type]
    except ValueError as e:
        raise InvalidConfigError(str(e)) from None


def incremental_changes(
    current: Mapping[str, str], ops: Sequence[AlterConfigOp], defaults: LogConfig
) -> dict[str, str | None]:
    """The overrides to set (value) or delete (None) for IncrementalAlterConfigs `ops`.

    Raises InvalidRequestError (duplicate keys, unknown operation) or InvalidConfigError
    (unknown name, APPEND/SUBTRACT on a non-list config, invalid resulting value).
    """
    names = [op.name for op in ops]
    if len(set(names)) != len(names):
        raise InvalidRequestError("Error due to duplicate config keys")
    known = set(LogConfig.kafka_names())
    effective = effective_topic_config(current, defaults).to_properties()
    changes: dict[str, str | None] = {}
    for op in ops:
        if op.name not in known:
            raise InvalidConfigError(f"Unknown topic config name: {op.name}")
        if op.op == OpType.DELETE:
            changes[op.name] = None
            continue
        if op.op not in (OpType.SET, OpType.APPEND, OpType.SUBTRACT):
            raise InvalidRequestError(f"Unknown config operation {op.op} for {op.name}")
        if op.value is None:
            raise InvalidConfigError(f"Null value not supported for topic configs: {op.name}")
        if op.op == OpType.SET:
            changes[op.name] = op.value
            continue
        if op.name not in _LIST_CONFIGS:
            verb = OpType(op.op).name
            raise InvalidConfigError(f"Can't {verb} to key {op.name} because its type is not LIST.")
        old = _split_list(current.get(op.name, effective[op.name]))
        given = _split_list(op.value)
        if op.op == OpType.APPEND:
            changes[op.name] = ",".join(old + [v for v in given if v not in old])
        else:
            changes[op.name] = ",".join(v for v in old if v not in given)
    merged = {**current, **changes}
    validate_topic_configs({k: v for k, v in merged.items() if v is not None}, defaults)
    return changes


def legacy_changes(
    current: Mapping[str, str], configs: Mapping[str, str | None], defaults: LogConfig
) -> dict[str, str | None]:
    """The overrides to set or delete for a (non-incremental) AlterConfigs, which replaces
    every override of the resource with `configs`."""
    validate_topic_configs(configs, defaults)
    changes: dict[str, str | None] = {name: None for name in current if name not in configs}
    changes.update(configs)
    return changes


# -- DescribeConfigs -------------------------------------------------------------------------


def describe_topic_configs(
    overrides: Mapping[str, str],
    config: ControllerConfig,
    keys: Sequence[str] | None = None,
    *,
    include_synonyms: bool = False,
) -> list[ConfigEntry]:
    """DescribeConfigs entries of a topic: every topic config (or just `keys`), sorted."""
    defaults = config.topic_defaults.to_properties()
    built_in = LogConfig().to_properties()
    wanted = set(keys) if keys is not None else None
    entries = []
    for name in sorted(defaults):
        if wanted is not None and name not in wanted:
            continue
        broker_name = TOPIC_CONFIG_SYNONYMS[name]
        synonyms = []
        if name in overrides:
            synonyms.append(ConfigSynonym(name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        if name in config.explicit_names:
            synonyms.append(
                ConfigSynonym(broker_name, defaults[name], ConfigSource.STATIC_BROKER_CONFIG)
            )
        synonyms.append(ConfigSynonym(broker_name, built_in[name], ConfigSource.DEFAULT_CONFIG))
        entries.append(
            ConfigEntry(
                name=name,
                value=synonyms[0].value,
                source=synonyms[0].source,
                config_type=_config_type(name, built_in[name]),
                synonyms=tuple(synonyms) if include_synonyms else (),
            )
        )
    return entries


def describe_broker_configs(
    config: ControllerConfig, keys: Sequence[str] | None = None, *, include_synonyms: bool = False
) -> list[ConfigEntry]:
    """DescribeConfigs entries of a broker resource: the static cluster settings, read-only."""
    values = config.cluster_properties()
    defaults = ControllerConfig().cluster_properties()
    topic_defaults = config.topic_defaults.to_properties()
    built_in = LogConfig().to_properties()
    for topic_name, broker_name in TOPIC_CONFIG_SYNONYMS.items():
        values[broker_name] = topic_defaults[topic_name]
        defaults[broker_name] = built_in[topic_name]
    wanted = set(keys) if keys is not None else None
    entries = []
    for name in sorted(values):
        if wanted is not None and name not in wanted:
            continue
        source = (
            ConfigSource.STATIC_BROKER_CONFIG
            if name in config.explicit_names
            else ConfigSource.DEFAULT_CONFIG
        )
        synonyms = (ConfigSynonym(name, values[name], source),) if include_synonyms else ()
        topic_name = _BROKER_TO_TOPIC.get(name, name)
        entries.append(
            ConfigEntry(
                name=name,
                value=values[name],
                source=source,
                config_type=_config_type(topic_name, defaults[name]),
                read_only=True,
                synonyms=synonyms,
            )
        )
    return entries


def describe_configs(
    image: MetadataImage,
    config: ControllerConfig,
    resource: ConfigResource,
    keys: Sequence[str] | None = None,
    *,
    include_synonyms: bool = False,
) -> list[ConfigEntry]:
    """DescribeConfigs of one resource from a metadata image (controller and brokers).

    Raises UnknownTopicOrPartitionError for a missing topic and InvalidRequestError for a
    resource type or name sparklog does not describe.
    """
    if resource.resource_type == ConfigResourceType.TOPIC:
        if image.topic(resource.resource_name) is None:
            raise UnknownTopicOrPartitionError(
                f"The topic '{resource.resource_name}' does not exist."
            )
        overrides = image.topic_config(resource.resource_name)
        return describe_topic_configs(overrides, config, keys, include_synonyms=include_synonyms)
    if resource.resource_type == ConfigResourceType.BROKER:
        name = resource.resource_name
        if name and not name.lstrip("-").isdigit():
            raise InvalidRequestError(f"Broker id must be an integer, but it is: {name}")
        return describe_broker_configs(config, keys, include_synonyms=include_synonyms)
    raise InvalidRequestError(f"Unsupported resource type {resource.resource_type}")


# -- helpers ---------------------------------------------------------------------------------


def _config_type(name: str, default: str) -> ConfigType:
    if name in _LIST_CONFIGS:
        return ConfigType.LIST
    if name in _INT_CONFIGS or name in (
        "num.partitions",
        "broker.session.timeout.ms",
        "broker.heartbeat.interval.ms",
        "leader.imbalance.per.broker.percentage",
    ):
        return ConfigType.INT
    if name == "default.replication.factor":
        return ConfigType.SHORT
    if default in ("true", "false"):
        return ConfigType.BOOLEAN
    try:
        int(default)
        return ConfigType.LONG
    except ValueError:
        pass
    try:
        float(default)
        return ConfigType.DOUBLE
    except ValueError:
        return ConfigType.STRING


def _split_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _check_int32(name: str, value: object) -> None:
    try:
        number = int(str(value).strip())
    except ValueError:
        return  # LogConfig names the bad value
    if not _INT32_MIN <= number <= _INT32_MAX:
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {name}: Not a number of type INT"
        )


def _parse_setting(name: str, kind: type, raw: object) -> object:
    text = str(raw).strip()
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError(f"invalid value {raw!r} for {name}: expected true or false")
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"invalid value {raw!r} for {name}: expected an integer") from None


def _format(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _check(ok: bool, name: str, rule: str) -> None:
    if not ok:
        raise ValueError(f"invalid setting {name}: {rule}")


__all__ = [
    "TOPIC_CONFIG_SYNONYMS",
    "AlterConfigOp",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "ControllerConfig",
    "OpType",
    "describe_broker_configs",
    "describe_configs",
    "describe_topic_configs",
    "effective_topic_config",
    "incremental_changes",
    "legacy_changes",
    "read_properties",
    "validate_topic_configs",
]
