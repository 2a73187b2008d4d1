"""Cluster settings and topic configs with Kafka's names (Kafka's `ConfigurationControlManager`).

`ControllerConfig` holds the cluster-wide settings the controller needs (`num.partitions`,
`default.replication.factor`, `auto.create.topics.enable`, `broker.session.timeout.ms`, ...)
and the topic defaults, a `LogConfig` read from the topic names (`retention.ms`) or their
broker-level synonyms (`log.retention.ms`, `message.max.bytes`, ...) as Kafka spells them.

Topic configs are stored as overrides only (what CreateTopics / AlterConfigs set); the
effective config is `LogConfig.from_properties(overrides, base=defaults)`. Validation errors
raise `InvalidConfigError` / `InvalidRequestError` with Kafka's wording where Kafka has one.
`describe_topic_configs` builds a topic's DescribeConfigs entries (a broker's are built in
`broker_configs.py`, a group's in `group_configs.py`); brokers answer DescribeConfigs from their
image with the same functions.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sparklog.errors import InvalidConfigError, InvalidRequestError, UnknownTopicOrPartitionError
from sparklog.metadata.group_configs import GroupConfigDefaults
from sparklog.metadata.image import BROKER_RESOURCE, MetadataImage
from sparklog.settings import (
    REGISTRY,
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    Range,
    Scope,
    Setting,
    define,
    entry,
)
from sparklog.storage.config import COARSE_SYNONYMS, TOPIC_SETTINGS, LogConfig
from sparklog.storage.remote.config import RemoteLogManagerConfig

#: Kafka's broker-level name of each topic config (`LogConfig`'s `ServerTopicConfigSynonyms`),
#: from the declarations in `storage/config.py`.
TOPIC_CONFIG_SYNONYMS: Mapping[str, str] = {
    s.name: s.synonyms[0] for s in TOPIC_SETTINGS.values() if s.synonyms
}
_BROKER_TO_TOPIC = {v: k for k, v in TOPIC_CONFIG_SYNONYMS.items()}
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


class ConfigResourceType(enum.IntEnum):
    """Kafka's `ConfigResource.Type` codes."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    GROUP = 32  # a consumer group's own configs (Kafka 4.0+)


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


def _cluster(
    name: str, kind: ConfigType, default: object, doc: str, rule: Range | None = None
) -> Setting:
    return Setting(name, kind, default, rule, doc=doc, scope=Scope.CONTROLLER)


#: The cluster-wide settings the controller reads (Kafka's `KafkaConfig`/`QuorumConfig`).
CLUSTER_SETTINGS = define(
    _cluster("num.partitions", ConfigType.INT, 1, "partitions of an auto-created topic", Range(1)),
    _cluster(
        "default.replication.factor",
        ConfigType.SHORT,
        1,
        "replicas of an auto-created topic",
        Range(1),
    ),
    _cluster(
        "auto.create.topics.enable", ConfigType.BOOLEAN, True, "Metadata/Produce create topics"
    ),
    _cluster(
        "broker.session.timeout.ms",
        ConfigType.INT,
        9000,
        "a broker silent this long is fenced (must exceed broker.heartbeat.interval.ms)",
    ),
    _cluster(
        "broker.heartbeat.interval.ms",
        ConfigType.INT,
        2000,
        "how often a broker heartbeats to the controller",
        Range(1),
    ),
    _cluster(
        "metadata.log.snapshot.records",
        ConfigType.LONG,
        1000,
        "records between metadata log snapshots",
        Range(1),
    ),
    _cluster(
        "auto.leader.rebalance.enable",
        ConfigType.BOOLEAN,
        True,
        "move leadership back to preferred replicas",
    ),
    _cluster(
        "leader.imbalance.check.interval.seconds",
        ConfigType.LONG,
        300,
        "how often the leader balance runs",
        Range(1),
    ),
    _cluster(
        "leader.imbalance.per.broker.percentage",
        ConfigType.INT,
        10,
        "non-preferred leaders a broker may have before a rebalance",
        Range(0, 100, text="between 0 and 100"),
    ),
    _cluster(
        "controller.max.records.per.batch",
        ConfigType.LONG,
        10_000,
        "records one user operation may write (Kafka's KAFKA-14996/KAFKA-20976 bound)",
        Range(1),
    ),
)
_D = CLUSTER_SETTINGS.default


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Cluster settings (Kafka names, dots as underscores) plus the topic defaults."""

    num_partitions: int = _D("num.partitions")
    default_replication_factor: int = _D("default.replication.factor")
    auto_create_topics_enable: bool = _D("auto.create.topics.enable")
    broker_session_timeout_ms: int = _D("broker.session.timeout.ms")
    broker_heartbeat_interval_ms: int = _D("broker.heartbeat.interval.ms")
    metadata_log_snapshot_records: int = _D("metadata.log.snapshot.records")
    auto_leader_rebalance_enable: bool = _D("auto.leader.rebalance.enable")
    leader_imbalance_check_interval_seconds: int = _D("leader.imbalance.check.interval.seconds")
    leader_imbalance_per_broker_percentage: int = _D("leader.imbalance.per.broker.percentage")
    controller_max_records_per_batch: int = _D("controller.max.records.per.batch")
    topic_defaults: LogConfig = field(default_factory=LogConfig)
    #: Kafka names given explicitly (DescribeConfigs reports them as STATIC_BROKER_CONFIG).
    explicit_names: frozenset[str] = frozenset()
    #: every property as given (the static synonyms DescribeConfigs of a broker lists)
    originals: Mapping[str, str] = field(default_factory=dict, compare=False)
    #: the broker defaults and bounds of group configs (the GROUP config resource)
    group_defaults: GroupConfigDefaults = field(
        default_factory=lambda: GroupConfigDefaults.from_properties({})
    )
    #: the brokers' `remote.log.storage.system.enable` (topics may ask for remote storage)
    remote_log_storage_system_enable: bool = False

    def __post_init__(self) -> None:
        CLUSTER_SETTINGS.check_values(self)
        if self.broker_session_timeout_ms <= self.broker_heartbeat_interval_ms:
            raise ConfigError(
                CLUSTER_SETTINGS["broker.session.timeout.ms"].refusal(
                    self.broker_session_timeout_ms,
                    f"larger than broker.heartbeat.interval.ms ({self.broker_heartbeat_interval_ms})",
                )
            )

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> ControllerConfig:
        """Read Kafka-named settings; names that are not the controller's are ignored (the
        same properties configure brokers and clients). Bad values raise ConfigError."""
        values = CLUSTER_SETTINGS.parse(props, unknown="ignore")
        explicit = {name for name in CLUSTER_SETTINGS if name in props}
        topic_props: dict[str, object] = {}
        for setting in TOPIC_SETTINGS.values():
            broker_name = setting.synonyms[0] if setting.synonyms else setting.name
            for name in (setting.name, broker_name):  # the broker's name wins, as in Kafka
                if name in props:
                    topic_props[setting.name] = props[name]
                    explicit.update((setting.name, broker_name))
            if setting.name in topic_props:
                continue
            for coarse in (n for n in setting.synonyms[1:] if n in props):
                try:
                    count = int(str(props[coarse]).strip())
                except ValueError:
                    raise ConfigError(
                        f"{coarse} must be an integer, got {props[coarse]!r}"
                    ) from None
                topic_props[setting.name] = count * COARSE_SYNONYMS[coarse]
                explicit.update((setting.name, broker_name))
                break
        values["topic_defaults"] = LogConfig.from_properties(topic_props)
        return cls(
            **values,
            explicit_names=frozenset(explicit),
            originals={str(k): str(v) for k, v in props.items()},
            group_defaults=GroupConfigDefaults.from_properties(props),
            remote_log_storage_system_enable=RemoteLogManagerConfig.from_properties(
                props
            ).remote_log_storage_system_enable,
        )

    def cluster_properties(self) -> dict[str, str]:
        """The cluster settings by Kafka name, as strings."""
        return CLUSTER_SETTINGS.formatted(self)


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
        if name in TOPIC_SETTINGS and TOPIC_SETTINGS[name].type == ConfigType.INT:
            _check_int32(name, value)
    try:
        LogConfig.from_properties(configs, base=defaults)
    except ValueError as e:
        raise InvalidConfigError(str(e)) from None


def validate_remote_storage(
    config: LogConfig, *, system_enabled: bool, was_enabled: bool = False
) -> None:
    """Kafka's remote-storage checks of a topic's new effective config
    (`LogConfig.validateTopicLogConfigValues`), with its messages; InvalidConfigError."""
    if not config.remote_storage_enable:
        if was_enabled and not config.remote_log_delete_on_disable:
            raise InvalidConfigError(
                "It is invalid to disable remote storage without deleting remote data. If you "
                "want to keep the remote data and turn to read only, please set "
                "`remote.storage.enable=true,remote.log.copy.disable=true`. If you want to "
                "disable remote storage and delete all remote data, please set "
                "`remote.storage.enable=false,remote.log.delete.on.disable=true`."
            )
        return
    if not system_enabled:
        raise InvalidConfigError(
            "Tiered Storage functionality is disabled in the broker. Topic cannot be "
            "configured with remote log storage."
        )
    policies = [p.strip() for p in str(config.cleanup_policy).split(",") if p.strip()]
    if policies and policies != ["delete"]:
        raise InvalidConfigError(
            "Remote log storage only supports topics with cleanup.policy=delete or "
            "cleanup.policy being an empty list."
        )
    for kind, total, local in (
        ("bytes", config.retention_bytes, config.local_retention_bytes),
        ("ms", config.retention_ms, config.local_retention_ms),
    ):
        _check_local_retention(kind, total, local)
    _check_value_schema(config)
    if config.remote_log_copy_disable:
        for kind, total, local in (
            ("bytes", config.retention_bytes, config.local_retention_bytes),
            ("ms", config.retention_ms, config.local_retention_ms),
        ):
            if local not in (-2, total):
                raise InvalidConfigError(
                    f"When `remote.log.copy.disable` is set to true, the `local.retention.{kind}` "
                    f"and `retention.{kind}` must be set to the identical value because there "
                    "will be no more logs copied to the remote storage."
                )


def _check_value_schema(config: LogConfig) -> None:
    """`remote.table.value.format` json / avro needs a usable `remote.table.value.schema`."""
    if config.remote_table_value_format == "binary":
        return
    from sparklog.storage.remote.values import ValueSchemaError, value_decoder

    try:
        value_decoder(config.remote_table_value_format, config.remote_table_value_schema)
    except (ValueSchemaError, ImportError) as e:
        raise InvalidConfigError(
            f"Invalid value {config.remote_table_value_schema!r} for configuration "
            f"remote.table.value.schema: {e}"
        ) from None


def _check_local_retention(kind: str, total: int, local: int) -> None:
    """`local.retention.<kind>` must not be -1 (unlimited) nor above a bounded
    `retention.<kind>` (-2 follows it); Kafka's ConfigException wording."""
    if total < 0 or local == -2:
        return
    name = f"local.retention.{kind}"
    if local == -1:
        reason = f"Value must not be -1 as retention.{kind} value is set as {total}."
    elif local > total:
        reason = f"Value must not be more than retention.{kind} property value: {total}"
    else:
        return
    raise InvalidConfigError(f"Invalid value {local} for configuration {name}: {reason}")


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
        if TOPIC_SETTINGS[op.name].type != ConfigType.LIST:
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
    dynamic_broker: Mapping[str, str] | None = None,
    dynamic_default: Mapping[str, str] | None = None,
) -> list[ConfigEntry]:
    """DescribeConfigs entries of a topic: every topic config (or just `keys`), sorted.

    Sources in Kafka's order: the topic's override (DYNAMIC_TOPIC_CONFIG), the broker-level
    synonym set dynamically for this broker (DYNAMIC_BROKER_CONFIG) or for every broker
    (DYNAMIC_DEFAULT_BROKER_CONFIG), from the properties (STATIC_BROKER_CONFIG), the built-in
    default."""
    defaults = config.topic_defaults.to_properties()
    wanted = set(keys) if keys is not None else None
    entries = []
    for name in sorted(defaults):
        if wanted is not None and name not in wanted:
            continue
        setting = TOPIC_SETTINGS[name]
        # a topic-only config (`leader.replication.throttled.replicas`) has no broker level
        broker_name = setting.synonyms[0] if setting.synonyms else name
        synonyms = []
        if name in overrides:
            value = overrides[name]
            if setting.type == ConfigType.LIST:  # Kafka shows a list as "a,b", however set
                value = ",".join(_split_list(value))
            synonyms.append(ConfigSynonym(name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        for layer, source in (
            (dynamic_broker or {}, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (dynamic_default or {}, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ):
            if broker_name in layer:
                synonyms.append(ConfigSynonym(broker_name, layer[broker_name], source))
        if name in config.explicit_names:
            synonyms.append(
                ConfigSynonym(broker_name, defaults[name], ConfigSource.STATIC_BROKER_CONFIG)
            )
        synonyms.append(
            ConfigSynonym(broker_name, setting.default_text, ConfigSource.DEFAULT_CONFIG)
        )
        entries.append(
            entry(
                setting,
                name,
                synonyms[0].value,
                synonyms[0].source,
                synonyms if include_synonyms else (),
            )
        )
    return entries


def broker_setting(name: str) -> Setting | None:
    """The declaration of a broker-level name: a cluster or broker setting, or the topic
    config it is the synonym of (typed as that topic config, as Kafka does)."""
    if name in _BROKER_TO_TOPIC:
        return TOPIC_SETTINGS[_BROKER_TO_TOPIC[name]]
    return REGISTRY.find(name, (Scope.CONTROLLER, Scope.BROKER))


def describe_configs(
    image: MetadataImage,
    config: ControllerConfig,
    resource: ConfigResource,
    keys: Sequence[str] | None = None,
    *,
    include_synonyms: bool = False,
) -> list[ConfigEntry]:
    """DescribeConfigs of a TOPIC resource from a metadata image (controller and brokers; the
    BROKER and GROUP resources are described by `broker_configs` and `group_configs`).

    Raises UnknownTopicOrPartitionError for a missing topic and InvalidRequestError for a
    resource type sparklog does not describe here.
    """
    if resource.resource_type == ConfigResourceType.TOPIC:
        if image.topic(resource.resource_name) is None:
            raise UnknownTopicOrPartitionError(
                f"The topic '{resource.resource_name}' does not exist."
            )
        overrides = image.topic_config(resource.resource_name)
        return describe_topic_configs(
            overrides,
            config,
            keys,
            include_synonyms=include_synonyms,
            dynamic_default=image.configs(BROKER_RESOURCE, ""),
        )
    raise InvalidRequestError(f"Unsupported resource type: {resource.resource_type}")


# -- helpers ---------------------------------------------------------------------------------


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


def described_cluster_settings(config: ControllerConfig) -> dict[str, tuple[str, bool]]:
    """The cluster settings and topic defaults by broker name: (static value, given
    explicitly), what DescribeConfigs of a BROKER resource lists besides a broker's own."""
    values = {
        name: (value, name in config.explicit_names)
        for name, value in config.cluster_properties().items()
    }
    topic_defaults = config.topic_defaults.to_properties()
    for topic_name, broker_name in TOPIC_CONFIG_SYNONYMS.items():
        values[broker_name] = (topic_defaults[topic_name], broker_name in config.explicit_names)
    return values


__all__ = [
    "described_cluster_settings",
    "TOPIC_CONFIG_SYNONYMS",
    "AlterConfigOp",
    "broker_setting",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "ControllerConfig",
    "OpType",
    "describe_configs",
    "describe_topic_configs",
    "effective_topic_config",
    "incremental_changes",
    "legacy_changes",
    "read_properties",
    "validate_topic_configs",
]
