"""A consumer group's own configs: the GROUP config resource (ConfigResource type 32, Kafka's
`GroupConfig`, KIP-848).

Theory of operation. `kafka-configs --entity-type groups --entity-name g --alter --add-config
consumer.session.timeout.ms=50000` reaches the controller as IncrementalAlterConfigs on
resource (GROUP, "g"); the controller validates the change here and writes one `Config`
record per name with resource type `group` (Kafka 4.0 keeps group configs as ConfigRecords in
the metadata log too). Brokers describe them from their metadata image; the group coordinator
reads a group's overrides through its `CoordinatorContext` and lets them replace the broker
defaults `group.consumer.session.timeout.ms` / `group.consumer.heartbeat.interval.ms` for that
group's members.

Validation is Kafka's `GroupConfig.validate`: a name must be a group config (INVALID_CONFIG
"Unknown group config name: x"), a value must parse ("Invalid value x for configuration y:
Not a number of type INT") and lie within the broker's bounds
(`group.consumer.min/max.session.timeout.ms`, `group.consumer.min/max.heartbeat.interval.ms`:
"consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive."). Kafka's
share-group (`share.*`, KIP-932) and streams-group (`streams.*`, KIP-1071) keys are refused
with INVALID_CONFIG naming what is missing, until sparklog has those groups.

The bounds and defaults are the group coordinator's settings; they are read here through the
settings registry by name (the controller does not import the coordinator).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from sparklog.errors import InvalidConfigError, InvalidRequestError
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
    UpdateMode,
    define,
    entry,
)
from sparklog.structs import INT32_MAX


class AlterConfigOp(Protocol):
    """One IncrementalAlterConfigs change (`configs.AlterConfigOp`)."""

    @property
    def name(self) -> str: ...
    @property
    def op(self) -> int: ...
    @property
    def value(self) -> str | None: ...


def _group_config(name: str, broker_name: str, default: int, doc: str) -> Setting:
    return Setting(
        name,
        ConfigType.INT,
        default,
        Range(1, INT32_MAX),
        doc=doc,
        scope=Scope.GROUP,
        synonyms=(broker_name,),
        read_only=False,
        dynamic=UpdateMode.CLUSTER_WIDE,
    )


#: Kafka's `GroupConfig` keys sparklog implements; each falls back to its broker synonym.
GROUP_CONFIG_SETTINGS = define(
    _group_config(
        "consumer.session.timeout.ms",
        "group.consumer.session.timeout.ms",
        45_000,
        "this group's members are removed after this long without a heartbeat",
    ),
    _group_config(
        "consumer.heartbeat.interval.ms",
        "group.consumer.heartbeat.interval.ms",
        5_000,
        "how often this group's members heartbeat (the ConsumerGroupHeartbeat answer's interval)",
    ),
)

#: (min, max) broker settings bounding each group config (Kafka's `GroupConfig.validate`).
BOUNDS: Mapping[str, tuple[str, str]] = {
    "consumer.session.timeout.ms": (
        "group.consumer.min.session.timeout.ms",
        "group.consumer.max.session.timeout.ms",
    ),
    "consumer.heartbeat.interval.ms": (
        "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms",
    ),
}

#: Kafka 4.x group configs of group types sparklog does not have yet, and what they need.
_NOT_YET = {
    "share.": "share groups (KIP-932)",
    "streams.": "streams groups (KIP-1071)",
    "errors.deadletterqueue.": "streams groups (KIP-1071)",
}


@dataclass(frozen=True, slots=True)
class GroupConfigDefaults:
    """The broker settings group configs fall back to and are bounded by, by Kafka name, and
    which of them the cluster's properties set explicitly (DescribeConfigs' STATIC source)."""

    values: Mapping[str, int]
    explicit: frozenset[str] = frozenset()

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> GroupConfigDefaults:
        """Parse the bounds and defaults from the cluster's properties (ConfigError names a
        malformed one, as the coordinator's own parse does)."""
        names = [s.synonyms[0] for s in GROUP_CONFIG_SETTINGS.values()]
        names += [n for pair in BOUNDS.values() for n in pair]
        values: dict[str, int] = {}
        for name in names:
            setting = REGISTRY.find(name, (Scope.COORDINATOR,))
            assert setting is not None, f"{name} is declared by the group coordinator"
            values[name] = setting.parse(props[name]) if name in props else setting.default
        return cls(values, frozenset(n for n in names if n in props))

    def default(self, name: str) -> int:
        """The broker default of group config `name`."""
        return self.values[GROUP_CONFIG_SETTINGS[name].synonyms[0]]


def check_group_resource(name: str) -> None:
    if not name:
        raise InvalidRequestError("Default group resources are not allowed.")


def validate_group_configs(configs: Mapping[str, str | None], bounds: GroupConfigDefaults) -> None:
    """Raise InvalidConfigError unless `configs` are valid overrides of one group."""
    for name, raw in configs.items():
        setting = GROUP_CONFIG_SETTINGS.get(name)
        if setting is None:
            missing = next((what for p, what in _NOT_YET.items() if name.startswith(p)), None)
            if missing is not None:
                raise InvalidConfigError(
                    f"Group config {name} needs {missing}, which sparklog does not have yet; "
                    f"sparklog's group configs are {', '.join(GROUP_CONFIG_SETTINGS)}."
                )
            raise InvalidConfigError(f"Unknown group config name: {name}")
        if raw is None:
            raise InvalidConfigError(f"Null value not supported for group configs: {name}")
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise InvalidConfigError(
                f"Invalid value {raw} for configuration {name}: Not a number of type INT"
            ) from None
        low, high = (bounds.values[n] for n in BOUNDS[name])
        if not low <= value <= high:
            raise InvalidConfigError(f"{name} must be in the range {low} to {high} inclusive.")


def group_changes(
    ops: Sequence[AlterConfigOp], bounds: GroupConfigDefaults
) -> dict[str, str | None]:
    """The overrides to set (value) or delete (None) for IncrementalAlterConfigs `ops` (op as
    Kafka's `AlterConfigOp.OpType`: 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT; group configs are
    not lists, so APPEND/SUBTRACT are refused as Kafka refuses them on non-list configs)."""
    names = [op.name for op in ops]
    if len(set(names)) != len(names):
        raise InvalidRequestError("Error due to duplicate config keys")
    changes: dict[str, str | None] = {}
    for name, op, value in ((o.name, o.op, o.value) for o in ops):
        if op == 1:
            changes[name] = None
        elif op == 0:
            changes[name] = value
        elif op in (2, 3):
            verb = "append" if op == 2 else "subtract"
            raise InvalidConfigError(f"Config value {verb} is not allowed for config key: {name}")
        else:
            raise InvalidRequestError(f"Unknown operations type {op}")
    validate_group_configs({n: v for n, v in changes.items() if v is not None}, bounds)
    return changes


def group_legacy_changes(
    current: Mapping[str, str], configs: Mapping[str, str | None], bounds: GroupConfigDefaults
) -> dict[str, str | None]:
    """AlterConfigs (legacy): `configs` replace every override of the group."""
    validate_group_configs(configs, bounds)
    changes: dict[str, str | None] = {name: None for name in current if name not in configs}
    changes.update(configs)
    return changes


def effective_group_config(
    overrides: Mapping[str, str], defaults: Mapping[str, int]
) -> dict[str, int]:
    """A group's config values by name: its overrides on top of the broker defaults
    (`defaults`: group config name -> broker default). A stored override this version cannot
    read falls back to the default (the controller validated it; a newer one may know more)."""
    values = dict(defaults)
    for name, raw in overrides.items():
        if name in values:
            try:
                values[name] = GROUP_CONFIG_SETTINGS[name].parse(raw)
            except ConfigError:
                continue
    return values


def describe_group_configs(
    overrides: Mapping[str, str],
    defaults: GroupConfigDefaults,
    keys: Sequence[str] | None = None,
    *,
    include_synonyms: bool = False,
) -> list[ConfigEntry]:
    """DescribeConfigs entries of a group, as Kafka's `ConfigHelper.createGroupConfigEntry`:
    the group's own value (GROUP_CONFIG) first, then its broker synonym's sources."""
    wanted = set(keys) if keys else None
    entries = []
    for name, setting in sorted(GROUP_CONFIG_SETTINGS.items()):
        if wanted is not None and name not in wanted:
            continue
        broker_name = setting.synonyms[0]
        synonyms = []
        if name in overrides:
            synonyms.append(ConfigSynonym(name, overrides[name], ConfigSource.GROUP_CONFIG))
        default = str(defaults.values[broker_name])
        if broker_name in defaults.explicit:
            synonyms.append(ConfigSynonym(broker_name, default, ConfigSource.STATIC_BROKER_CONFIG))
        broker_default = REGISTRY.find(broker_name, (Scope.COORDINATOR,))
        assert broker_default is not None
        synonyms.append(
            ConfigSynonym(broker_name, broker_default.default_text, ConfigSource.DEFAULT_CONFIG)
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


__all__ = [
    "BOUNDS",
    "GROUP_CONFIG_SETTINGS",
    "GroupConfigDefaults",
    "check_group_resource",
    "describe_group_configs",
    "effective_group_config",
    "group_changes",
    "group_legacy_changes",
    "validate_group_configs",
]
