"""Dynamic broker configs: BROKER config resources (KIP-226; Kafka's `DynamicBrokerConfig`).

Theory of operation. A broker setting whose registry declaration is not read-only
(`Setting.dynamic`, Kafka's "dynamic update mode") may be changed while the cluster runs, at
two levels, as in Kafka:

- per broker: resource (BROKER, "<id>"), source DYNAMIC_BROKER_CONFIG;
- cluster-wide default: resource (BROKER, ""), source DYNAMIC_DEFAULT_BROKER_CONFIG.

The controller validates a change here and stores it as `Config` records with resource type
`broker` (as Kafka's `ConfigurationControlManager` writes ConfigRecords); every broker's
metadata image replays them and its `dynamic_topic_defaults` / `dynamic_cleaner_config` turn
them into the settings it applies, without a restart. Precedence, highest first: per-broker,
cluster default, the static properties, the declared default; a topic's own config overrides
them all. The controller applies the cluster-wide level of the topic defaults it reads
(`min.insync.replicas`, `unclean.leader.election.enable`).

What is dynamic in sparklog: every topic config's broker name (`log.retention.ms`,
`log.segment.bytes`, `message.max.bytes`, `log.cleanup.policy`, ...: Kafka's
`DynamicLogConfig`) and the log cleaner's `log.cleaner.*` settings (Kafka's
`LogCleaner.ReconfigurableConfigs`). Every other known setting is refused as Kafka refuses
it: INVALID_REQUEST "Cannot update these configs dynamically: [num.partitions]". A name no
part of sparklog knows is stored and described (type UNKNOWN, read-only), as Kafka keeps
custom broker configs.

DescribeConfigs of a broker lists each setting's synonyms in Kafka's order (per-broker,
cluster default, static, default, over the setting's spellings: `log.retention.ms`,
`log.retention.minutes`, `log.retention.hours`; Kafka's `ConfigHelper.configSynonyms`), and
of the default resource only the cluster-wide dynamic configs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

from sparklog.errors import InvalidConfigError, InvalidRequestError
from sparklog.metadata.configs import (
    TOPIC_CONFIG_SYNONYMS,
    AlterConfigOp,
    ControllerConfig,
    OpType,
    broker_setting,
)
from sparklog.settings import (
    REGISTRY,
    SERVER_SCOPES,
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    Setting,
    UpdateMode,
    entry,
)
from sparklog.storage.cleaner import CLEANER_SETTINGS, CleanerConfig
from sparklog.storage.config import COARSE_SYNONYMS, TOPIC_SETTINGS, LogConfig

logger = logging.getLogger(__name__)

#: The cluster-wide default BROKER resource's name (Kafka's `<default>` entity).
DEFAULT_RESOURCE = ""
#: Dynamic broker name -> the topic config it sets the default of (`log.retention.ms` ->
#: `retention.ms`); the coarser spellings (`log.retention.hours`) are read-only, as in Kafka.
_TOPIC_OF = {broker: topic for topic, broker in TOPIC_CONFIG_SYNONYMS.items()}
_NUMERIC = (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG, ConfigType.DOUBLE)
_DYNAMIC_SOURCES = (ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)


def dynamic_setting(name: str) -> Setting | None:
    """The declaration of broker-level `name` when it can be updated dynamically."""
    topic = _TOPIC_OF.get(name)
    if topic is not None:
        setting = TOPIC_SETTINGS[topic]
        return setting if setting.dynamic != UpdateMode.READ_ONLY else None
    declared = broker_setting(name)
    if declared is None or declared.name != name or declared.dynamic == UpdateMode.READ_ONLY:
        return None
    return declared


def update_mode(name: str) -> UpdateMode | None:
    """`name`'s update mode; None when no part of sparklog declares it."""
    if dynamic_setting(name) is not None:
        return UpdateMode.CLUSTER_WIDE
    return None if REGISTRY.find(name, SERVER_SCOPES) is None else UpdateMode.READ_ONLY


def check_broker_resource(name: str) -> None:
    """A BROKER resource names a broker id or the default ("")."""
    if name and not name.lstrip("-").isdigit():
        raise InvalidRequestError(f"Node id must be an integer, but it is: {name}")


# -- validation ------------------------------------------------------------------------------


def validate_broker_configs(configs: Mapping[str, str | None]) -> None:
    """Raise InvalidRequestError unless `configs` may be set dynamically on a broker resource
    (Kafka's `DynamicBrokerConfig.validateConfigs`, whose failures its `ConfigAdminManager`
    answers as INVALID_REQUEST)."""
    nulls = [name for name, value in configs.items() if value is None]
    if nulls:
        raise InvalidRequestError(f"Null value not supported for : {', '.join(nulls)}")
    static = [name for name in configs if update_mode(name) == UpdateMode.READ_ONLY]
    if static:
        raise InvalidRequestError(f"Cannot update these configs dynamically: [{', '.join(static)}]")
    for name, raw in configs.items():
        setting = dynamic_setting(name)
        if setting is not None:
            _check_value(setting, name, str(raw))
    topic_overrides = {_TOPIC_OF[n]: v for n, v in configs.items() if n in _TOPIC_OF}
    cleaner = {n: v for n, v in configs.items() if n in CLEANER_SETTINGS}
    try:
        LogConfig.from_properties(topic_overrides)
        CleanerConfig.from_properties(cleaner)
    except ValueError as e:
        raise InvalidRequestError(str(e)) from None


def _check_value(setting: Setting, name: str, raw: str) -> None:
    if setting.type in _NUMERIC:
        try:
            float(raw) if setting.type == ConfigType.DOUBLE else int(raw.strip())
        except ValueError:
            raise InvalidRequestError(
                f"Invalid value {raw} for configuration {name}: Not a number of type "
                f"{setting.type.name}"
            ) from None
    try:
        setting.parse(raw)
    except ConfigError as e:
        raise InvalidRequestError(f"Invalid value {raw} for configuration {name}: {e}") from None


def broker_changes(
    resource_name: str, current: Mapping[str, str], ops: Sequence[AlterConfigOp]
) -> dict[str, str | None]:
    """The dynamic configs to set (value) or delete (None) on a BROKER resource for
    IncrementalAlterConfigs `ops`; raises InvalidRequestError / InvalidConfigError as Kafka's
    `ConfigAdminManager.preprocess` does."""
    check_broker_resource(resource_name)
    names = [op.name for op in ops]
    if len(set(names)) != len(names):
        raise InvalidRequestError("Error due to duplicate config keys")
    nulls = [op.name for op in ops if op.op != OpType.DELETE and op.value is None]
    if nulls:
        raise InvalidRequestError(f"Null value not supported for : {', '.join(nulls)}")
    changes: dict[str, str | None] = {}
    for op in ops:
        if op.op == OpType.DELETE:
            changes[op.name] = None
        elif op.op == OpType.SET:
            changes[op.name] = op.value
        elif op.op in (OpType.APPEND, OpType.SUBTRACT):
            changes[op.name] = _list_change(op, current)
        else:
            raise InvalidRequestError(f"Unknown operations type {op.op}")
    merged = {**current, **changes}
    validate_broker_configs({n: v for n, v in merged.items() if v is not None})
    return changes


def _list_change(op: AlterConfigOp, current: Mapping[str, str]) -> str:
    setting = dynamic_setting(op.name)
    if setting is None or setting.type != ConfigType.LIST:
        verb = OpType(op.op).name.lower()
        raise InvalidConfigError(f"Config value {verb} is not allowed for config key: {op.name}")
    old = [v.strip() for v in current.get(op.name, "").split(",") if v.strip()]
    given = [v.strip() for v in str(op.value).split(",") if v.strip()]
    if op.op == OpType.APPEND:
        return ",".join(old + [v for v in given if v not in old])
    return ",".join(v for v in old if v not in given)


def broker_legacy_changes(
    resource_name: str, current: Mapping[str, str], configs: Mapping[str, str | None]
) -> dict[str, str | None]:
    """AlterConfigs (legacy) on a BROKER resource: `configs` replace all its dynamic configs."""
    check_broker_resource(resource_name)
    validate_broker_configs(configs)
    changes: dict[str, str | None] = {name: None for name in current if name not in configs}
    changes.update(configs)
    return changes


# -- what brokers and the controller apply ---------------------------------------------------


def dynamic_topic_defaults(static: LogConfig, layers: Iterable[Mapping[str, str]]) -> LogConfig:
    """The topic defaults with the dynamic broker configs `layers` (lowest precedence first:
    the cluster default, then a broker's own) on top of the static ones. A stored value this
    version cannot apply is skipped with a warning (Kafka's `removeInvalidConfigs`)."""
    overrides: dict[str, str] = {}
    for layer in layers:
        overrides.update({_TOPIC_OF[n]: v for n, v in layer.items() if n in _TOPIC_OF})
    if not overrides:
        return static
    try:
        return LogConfig.from_properties(overrides, base=static)
    except ValueError:
        good: dict[str, str] = {}
        for name, value in overrides.items():
            try:
                LogConfig.from_properties({**good, name: value}, base=static)
            except ValueError as e:
                logger.warning("ignoring dynamic broker config %s=%s: %s", name, value, e)
                continue
            good[name] = value
        return LogConfig.from_properties(good, base=static)


def dynamic_cleaner_config(
    static: CleanerConfig, layers: Iterable[Mapping[str, str]]
) -> CleanerConfig:
    """The cleaner settings with the dynamic `layers` on top of `static` (invalid ones skipped)."""
    values = CLEANER_SETTINGS.formatted(static)
    for layer in layers:
        values.update({n: v for n, v in layer.items() if n in CLEANER_SETTINGS})
    try:
        return CleanerConfig.from_properties(values)
    except ValueError as e:
        logger.warning("ignoring dynamic log cleaner configs %s: %s", values, e)
        return static


# -- DescribeConfigs -------------------------------------------------------------------------


def _spellings(name: str) -> tuple[str, ...]:
    """`name` and the other names that set the same thing, finest first (Kafka's
    `DynamicBrokerConfig.brokerConfigSynonyms`: `log.retention.ms`, `.minutes`, `.hours`)."""
    for setting in TOPIC_SETTINGS.values():
        if name in setting.synonyms and len(setting.synonyms) > 1:
            return setting.synonyms
    return (name,)


def _declared_default(name: str) -> str | None:
    """The DEFAULT_CONFIG value of broker-level `name`, as Kafka's `KafkaConfig` declares it:
    a time family's default sits on its coarse spelling (`log.retention.hours` = 168, with
    no default for `log.retention.ms`)."""
    topic = next((s for s in TOPIC_SETTINGS.values() if name in s.synonyms), None)
    if topic is not None:
        coarse = [n for n in topic.synonyms if n in COARSE_SYNONYMS]
        if coarse:
            factor = COARSE_SYNONYMS[coarse[-1]]
            return str(topic.default // factor) if name == coarse[-1] else None
        return topic.default_text
    setting = REGISTRY.find(name, SERVER_SCOPES)
    if setting is None or setting.default is None or setting.name != name:
        return None
    return setting.default_text


def describe_broker_resource(
    config: ControllerConfig,
    resource_name: str,
    dynamic_default: Mapping[str, str],
    dynamic_broker: Mapping[str, str],
    listed: Mapping[str, tuple[str, bool]],
    keys: Sequence[str] | None = None,
    *,
    include_synonyms: bool = False,
) -> list[ConfigEntry]:
    """DescribeConfigs entries of a BROKER resource (Kafka's `ConfigHelper` for BROKER).

    `listed` is what the broker (or controller) shows by name: (static value, given
    explicitly). The default resource ("") lists only the cluster-wide dynamic configs, each
    with its DYNAMIC_DEFAULT_BROKER_CONFIG synonyms; a broker id lists everything with its
    synonyms over all four sources, the describing name's own first."""
    check_broker_resource(resource_name)
    wanted = set(keys) if keys else None
    per_broker = bool(resource_name)
    names = (
        set(listed) | set(dynamic_default) | set(dynamic_broker)
        if per_broker
        else set(dynamic_default)
    )
    layers = [
        (dynamic_broker if per_broker else {}, ConfigSource.DYNAMIC_BROKER_CONFIG),
        (dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
    ]
    originals = config.originals
    entries = []
    for name in sorted(names):
        if wanted is not None and name not in wanted:
            continue
        static_value, explicit = listed.get(name, (None, False))
        synonyms: list[ConfigSynonym] = []
        spellings = _spellings(name)
        for layer, source in layers:
            synonyms += [ConfigSynonym(n, layer[n], source) for n in spellings if n in layer]
        if per_broker:
            synonyms += [
                ConfigSynonym(n, str(originals[n]), ConfigSource.STATIC_BROKER_CONFIG)
                for n in spellings
                if n in originals
            ]
            for n in spellings:
                default = _declared_default(n)
                if default is not None:
                    synonyms.append(ConfigSynonym(n, default, ConfigSource.DEFAULT_CONFIG))
        else:
            synonyms = [
                s for s in synonyms if s.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
            ]
        # Kafka drops the synonyms ahead of the described spelling (`dropWhile`).
        while synonyms and synonyms[0].name != name:
            synonyms.pop(0)
        if not synonyms and static_value is not None:
            source = ConfigSource.STATIC_BROKER_CONFIG if explicit else ConfigSource.DEFAULT_CONFIG
            synonyms = [ConfigSynonym(name, static_value, source)]
        first = synonyms[0] if synonyms else None
        value = (
            first.value
            if first is not None and (first.source in _DYNAMIC_SOURCES or static_value is None)
            else static_value
        )
        source = first.source if first is not None else ConfigSource.DEFAULT_CONFIG
        setting = dynamic_setting(name) or broker_setting(name)
        entries.append(
            entry(
                setting,
                name,
                value,
                source,
                synonyms if include_synonyms else (),
                config_type=_config_type(name, setting),
                read_only=dynamic_setting(name) is None,
            )
        )
    return entries


def _config_type(name: str, setting: Setting | None) -> ConfigType:
    if setting is None:
        return ConfigType.UNKNOWN
    if setting.name != name and name in COARSE_SYNONYMS:
        return ConfigType.INT  # log.retention.hours & co. are ints in Kafka
    return setting.type


__all__ = [
    "DEFAULT_RESOURCE",
    "broker_changes",
    "broker_legacy_changes",
    "check_broker_resource",
    "describe_broker_resource",
    "dynamic_cleaner_config",
    "dynamic_setting",
    "dynamic_topic_defaults",
    "update_mode",
    "validate_broker_configs",
]
