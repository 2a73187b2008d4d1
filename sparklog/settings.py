"""The settings registry: every setting sparklog reads, declared once (Kafka's `ConfigDef`).

Theory of operation. A component declares the settings it reads next to the code that reads
them, with `define(Setting(...))`: Kafka's name, type, default, validator, importance, doc,
scope (broker, topic, controller, coordinator, client, spark-option), whether it is sensitive,
and its synonyms (a topic config's broker-level spelling, `log.retention.ms` for
`retention.ms`). `parse(table, props)` turns a component's raw properties into typed values
once, at start, refusing an unknown name (where the component refuses those) or a malformed
value with `ConfigError` naming the setting, the value given and what is allowed, as Kafka's
`ConfigDef.parse` raises `ConfigException`. The typed result is the component's own frozen
dataclass (`LogConfig`, `BrokerConfig`, ...), whose defaults come from the declarations.

What reads the registry besides the parsers: DescribeConfigs (types, read-only flags,
sensitivity, synonyms: `entry()` answers a sensitive setting with a null value, as Kafka's
`ConfigHelper` does), the broker's "is this a setting some part of sparklog knows?" check,
and the unit tests that keep `conf/sparklog-defaults.conf` and the settings tables of
README.md / docs/ equal to the declared defaults.

Cross-setting rules (`broker.session.timeout.ms` > `broker.heartbeat.interval.ms`, a
producer's idempotence rules) stay with their component, as Kafka keeps them in
`KafkaConfig`/`ProducerConfig` rather than in `ConfigDef`.
"""

from __future__ import annotations

import contextlib
import difflib
import enum
import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A setting is unknown or its value is malformed (Kafka's `ConfigException`)."""


class Scope(enum.StrEnum):
    """Who reads a setting."""

    BROKER = "broker"
    TOPIC = "topic"
    CONTROLLER = "controller"
    COORDINATOR = "coordinator"
    CLIENT = "client"
    SPARK_OPTION = "spark-option"
    #: A consumer group's own configs (Kafka's `GroupConfig`, ConfigResource type GROUP)
    GROUP = "group"


#: Scopes whose settings arrive in the cluster's properties (a broker, the controller and the
#: coordinators all read the same dict; topic configs arrive there by their broker synonyms).
SERVER_SCOPES = (Scope.BROKER, Scope.TOPIC, Scope.CONTROLLER, Scope.COORDINATOR)


class Importance(enum.StrEnum):
    """Kafka's `ConfigDef.Importance`."""

    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class ConfigType(enum.IntEnum):
    """Kafka's `ConfigDef.Type`, numbered as DescribeConfigs' `config_type` field."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8  # Python: an object (a callable, a serializer instance)
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """Kafka's `DescribeConfigsResponse.ConfigSource` codes."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class UpdateMode(enum.StrEnum):
    """Whether a broker-level setting can change while the cluster runs, and where (Kafka's
    `DynamicBrokerConfig.dynamicConfigUpdateModes`, the "Dynamic update mode" column of its
    docs): `read-only` settings need a restart; `cluster-wide` ones may be set for one broker
    (resource name = its id) or for every broker (the default resource, name ""); `per-broker`
    ones only for one broker. A topic config's mode is that of its broker-level name."""

    READ_ONLY = "read-only"
    PER_BROKER = "per-broker"
    CLUSTER_WIDE = "cluster-wide"


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


# -- validators ------------------------------------------------------------------------------


class Validator(Protocol):
    def broken_rule(self, value: Any) -> str | None:
        """None when `value` is allowed, else the rule it breaks ("at least 1")."""


@dataclass(frozen=True, slots=True)
class Range:
    """Kafka's `ConfigDef.Range`: `low <= value <= high` (either end open when None).
    `text`, when given, is how the whole rule reads ("a positive integer")."""

    low: float | None = None
    high: float | None = None
    text: str | None = None

    def broken_rule(self, value: Any) -> str | None:
        if value is None:
            return None
        if self.low is not None and value < self.low:
            return self.text or f"at least {self.low}"
        if self.high is not None and value > self.high:
            return self.text or f"at most {self.high}"
        return None

    def __str__(self) -> str:
        if self.text:
            return self.text
        if self.low is not None and self.high is not None:
            return f"between {self.low} and {self.high}"
        return f"at least {self.low}" if self.low is not None else f"at most {self.high}"


@dataclass(frozen=True, slots=True)
class OneOf:
    """Kafka's `ConfigDef.ValidString.in`; `lower` folds the value to lower case first."""

    choices: tuple[str, ...]
    lower: bool = False

    def broken_rule(self, value: Any) -> str | None:
        if value is None or value in self.choices:
            return None
        return str(self)

    def __str__(self) -> str:
        return f"one of {', '.join(self.choices)}"


@dataclass(frozen=True, slots=True)
class Check:
    """Any other rule: `ok(value)` and how the rule reads."""

    ok: Callable[[Any], bool]
    text: str

    def broken_rule(self, value: Any) -> str | None:
        return None if value is None or self.ok(value) else self.text

    def __str__(self) -> str:
        return self.text


# -- settings --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting (Kafka's `ConfigDef.ConfigKey`).

    `group` names the table the setting is parsed with inside its scope ("producer",
    "cleaner", "source", ...), as Kafka's ConfigDef groups do. `synonyms` are other names
    that set it, finest first (a topic config's broker-level name). `parser`, when given,
    replaces the type's conversion (a `ValueError` from it refuses the value). `read_only`
    is DescribeConfigs' flag: static broker settings are read-only, topic configs are not.
    `display` is the spelling messages use (Spark's `failOnDataLoss` for `failondataloss`);
    `attribute` the component dataclass's field when it is not the name with underscores.
    `prefix` declares a family: every name starting with `name` (`storage.options.`).
    `dynamic` is the setting's update mode (`UpdateMode`): a broker setting other than
    read-only is applied by running brokers when IncrementalAlterConfigs sets it on a BROKER
    resource (a topic config: its first broker synonym, `log.retention.ms`, is).
    """

    name: str
    type: ConfigType
    default: Any = None
    validator: Validator | None = None
    importance: Importance = Importance.MEDIUM
    doc: str = ""
    scope: Scope = Scope.BROKER
    sensitive: bool = False
    synonyms: tuple[str, ...] = ()
    group: str = ""
    read_only: bool = True
    parser: Callable[[Any], Any] | None = None
    display: str | None = None
    attribute: str | None = None
    prefix: bool = False
    dynamic: UpdateMode = UpdateMode.READ_ONLY

    @property
    def attr(self) -> str:
        """The attribute of the component's dataclass: dots as underscores unless given."""
        return self.attribute or self.name.replace(".", "_")

    @property
    def subject(self) -> str:
        """How messages name the setting."""
        shown = self.display or self.name
        if self.scope == Scope.SPARK_OPTION:
            return f"option '{shown}'"
        if self.scope == Scope.TOPIC:
            return f"topic config {shown}"
        return shown

    def parse(self, raw: object) -> Any:
        """The typed, validated value of `raw`; ConfigError names setting, value and rule."""
        try:
            value = self.parser(raw) if self.parser is not None else _CONVERT[self.type](raw)
        except (ValueError, TypeError):
            raise ConfigError(self.refusal(raw, self._type_rule())) from None
        if isinstance(value, str) and isinstance(self.validator, OneOf) and self.validator.lower:
            value = value.lower()
        self.check(value, raw)
        return value

    def check(self, value: Any, raw: object = None) -> None:
        """Raise ConfigError when `value` breaks the validator."""
        if self.validator is not None and (rule := self.validator.broken_rule(value)):
            raise ConfigError(self.refusal(value if raw is None else raw, rule))

    def refusal(self, raw: object, rule: str) -> str:
        if self.sensitive or self.type == ConfigType.PASSWORD:  # never echo a secret
            return f"{self.subject} must be {rule} (value hidden: it is a password)"
        return f"{self.subject} must be {rule}, got {raw!r}"

    def format(self, value: object) -> str:
        """The value as Kafka's tools print it (`true`, `1048576`, `compact,delete`)."""
        if value is None:
            return ""
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, tuple | list):
            return ",".join(str(v) for v in value)
        return str(value)

    @property
    def default_text(self) -> str:
        return self.format(self.default)

    def _type_rule(self) -> str:
        if isinstance(self.validator, Range) and self.validator.text:
            return self.validator.text
        if self.type == ConfigType.BOOLEAN and self.scope == Scope.SPARK_OPTION:
            return "'true' or 'false'"
        return _TYPE_RULES.get(self.type, str(self.validator or self.type.name.lower()))


_TYPE_RULES = {
    ConfigType.BOOLEAN: "true or false",
    ConfigType.INT: "an integer",
    ConfigType.SHORT: "an integer",
    ConfigType.LONG: "an integer",
    ConfigType.DOUBLE: "a number",
    ConfigType.STRING: "a string",
    ConfigType.PASSWORD: "a string",
    ConfigType.LIST: "a list or a comma-separated string",
}


def _to_bool(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(raw)
    return text == "true"


def _to_int(raw: object) -> int:
    if raw is None or isinstance(raw, bool | float):
        raise ValueError(raw)
    return raw if isinstance(raw, int) else int(str(raw).strip())


def _to_float(raw: object) -> float:
    if raw is None or isinstance(raw, bool):
        raise ValueError(raw)
    return float(str(raw).strip())


def _to_str(raw: object) -> str | None:
    return None if raw is None else str(raw).strip()


def _to_list(raw: object) -> tuple[object, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str):
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    if isinstance(raw, list | tuple):
        return tuple(raw)
    raise ValueError(raw)


_CONVERT: dict[ConfigType, Callable[[Any], Any]] = {
    ConfigType.BOOLEAN: _to_bool,
    ConfigType.INT: _to_int,
    ConfigType.SHORT: _to_int,
    ConfigType.LONG: _to_int,
    ConfigType.DOUBLE: _to_float,
    ConfigType.STRING: _to_str,
    ConfigType.PASSWORD: _to_str,
    ConfigType.LIST: _to_list,
    ConfigType.CLASS: lambda raw: raw,
}


# -- the registry ----------------------------------------------------------------------------


#: Where each scope's settings are declared. Components declare when imported; a question
#: about a whole scope (is this name any broker's, controller's or coordinator's setting?)
#: imports that scope's declaring modules first, by name, so a broker can tell a coordinator
#: setting from a typo without importing the coordinator (the layering rule: broker,
#: controller and coordinator never import each other). Each module is small and pure.
DECLARED_IN: Mapping[Scope, tuple[str, ...]] = {
    Scope.TOPIC: ("sparklog.storage.config",),
    Scope.BROKER: (
        "sparklog.storage.cleaner",
        "sparklog.broker.config",
        "sparklog.security.listeners",
        "sparklog.security.ssl_factory",
        "sparklog.security.principal",
        "sparklog.security.audit",
        "sparklog.security.sasl.server_config",
        "sparklog.security.authorizer_config",
        "sparklog.metrics.config",
        "sparklog.metrics.replication_quota",
        "sparklog.metrics.cluster_quota",
    ),
    Scope.CONTROLLER: (
        "sparklog.metadata.configs",
        "sparklog.storage.object_store",
        "sparklog.metadata.scram_bootstrap",
    ),
    Scope.COORDINATOR: (
        "sparklog.coordinator.group.config",
        "sparklog.coordinator.transaction.config",
        "sparklog.coordinator.audit_log",
        "sparklog.coordinator.lag",
    ),
    Scope.CLIENT: ("sparklog.client.config", "sparklog.security.ssl_factory"),
    Scope.SPARK_OPTION: ("sparklog.spark.option_values",),
    Scope.GROUP: ("sparklog.metadata.group_configs",),
}


class Registry:
    """Every declared setting, by (scope, group, name)."""

    def __init__(self) -> None:
        self._settings: dict[tuple[Scope, str, str], Setting] = {}
        self._loaded: set[Scope] = set()

    def load(self, scopes: Iterable[Scope] = tuple(Scope)) -> None:
        """Import the modules that declare `scopes` (see `DECLARED_IN`)."""
        for scope in scopes:
            if scope not in self._loaded:
                self._loaded.add(scope)
                for module in DECLARED_IN[scope]:
                    importlib.import_module(module)

    def define(self, *settings: Setting) -> Table:
        """Declare settings (all of one scope and group); returns them as a `Table`."""
        for s in settings:
            key = (s.scope, s.group, s.name)
            if key in self._settings and self._settings[key] != s:
                raise AssertionError(f"setting {s.name} ({s.scope}/{s.group}) declared twice")
            self._settings[key] = s
        return Table(settings)

    def remove(self, setting: Setting) -> None:
        self._settings.pop((setting.scope, setting.group, setting.name), None)

    @contextlib.contextmanager
    def registered(self, *settings: Setting) -> Iterator[Table]:
        """Declare settings for the length of a `with` block (tests)."""
        table = self.define(*settings)
        try:
            yield table
        finally:
            for s in settings:
                self.remove(s)

    def __iter__(self) -> Iterator[Setting]:
        return iter(list(self._settings.values()))

    def settings(self, scope: Scope | None = None, group: str | None = None) -> list[Setting]:
        """Every setting declared in `scope` (all scopes when None), of `group` if given."""
        self.load((scope,) if scope is not None else tuple(Scope))
        return [
            s
            for s in self
            if (scope is None or s.scope == scope) and (group is None or s.group == group)
        ]

    def find(self, name: str, scopes: Iterable[Scope] = SERVER_SCOPES) -> Setting | None:
        """The setting some component of `scopes` reads as `name` (or as a synonym)."""
        wanted = set(scopes)
        self.load(wanted)
        for s in self:
            if s.scope in wanted and (
                s.name == name
                or name in s.synonyms
                or (s.prefix and name.startswith(s.name) and len(name) > len(s.name))
            ):
                return s
        return None

    def counts(self) -> dict[str, int]:
        """How many settings each scope declares."""
        out = {str(scope): 0 for scope in Scope}
        self.load()
        for s in self:
            out[str(s.scope)] += 1
        return out


REGISTRY = Registry()
define = REGISTRY.define


class Table(Mapping[str, Setting]):
    """The settings one component parses together, by name (a ConfigDef instance)."""

    def __init__(self, settings: Iterable[Setting]) -> None:
        self._by_name = {s.name: s for s in settings}

    def __getitem__(self, name: str) -> Setting:
        return self._by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def __or__(self, other: Mapping[str, Setting]) -> Table:
        return Table([*self.values(), *other.values()])

    def default(self, name: str) -> Any:
        """A setting's declared default (dataclass fields take theirs from here)."""
        return self._by_name[name].default

    def defaults_by_attr(self) -> dict[str, Any]:
        return {s.attr: s.default for s in self.values()}

    def parse(
        self,
        props: Mapping[str, object],
        *,
        unknown: str = "raise",
        what: str = "setting",
        by_attr: bool = False,
    ) -> dict[str, Any]:
        """Typed values of the names in `props` this table declares, by attribute.

        `unknown` is what a name the table does not declare gets: "raise" (ConfigError naming
        the closest declared name) or "ignore" (other components read it). `by_attr` also
        accepts the attribute spelling (`segment_bytes`), as sparklog's Python callers may."""
        values: dict[str, Any] = {}
        attrs = {s.attr: s for s in self.values()} if by_attr else {}
        for name, raw in props.items():
            setting = self._by_name.get(name) or attrs.get(name)
            if setting is None:
                if unknown == "raise":
                    raise ConfigError(unknown_message(name, self, what))
                continue
            values[setting.attr] = setting.parse(raw)
        return values

    def check_values(self, obj: object) -> None:
        """Raise ConfigError naming the first attribute of `obj` its setting refuses."""
        for s in self.values():
            s.check(getattr(obj, s.attr))

    def formatted(self, obj: object) -> dict[str, str]:
        """`obj`'s values by Kafka name, as strings (what DescribeConfigs shows)."""
        return {s.name: s.format(getattr(obj, s.attr)) for s in self.values()}


def unknown_message(name: str, known: Iterable[str], what: str) -> str:
    close = difflib.get_close_matches(name.replace("_", "."), list(known), n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown {what} {name!r}{hint}"


def entry(
    setting: Setting | None,
    name: str,
    value: str | None,
    source: ConfigSource,
    synonyms: Iterable[ConfigSynonym] = (),
    *,
    config_type: ConfigType | None = None,
    read_only: bool | None = None,
) -> ConfigEntry:
    """A DescribeConfigs entry for `setting` (None: a name the registry does not know).

    A sensitive setting's value, and its synonyms' values, come back null with
    `is_sensitive` set, whatever their source, as Kafka's `ConfigHelper.createConfigEntry`
    answers `PASSWORD`-typed and other sensitive configs."""
    sensitive = setting is not None and (setting.sensitive or setting.type == ConfigType.PASSWORD)
    if sensitive:
        value = None
        synonyms = [ConfigSynonym(s.name, None, s.source) for s in synonyms]
    return ConfigEntry(
        name=name,
        value=value,
        source=source,
        config_type=config_type
        if config_type is not None
        else (setting.type if setting is not None else ConfigType.UNKNOWN),
        read_only=read_only
        if read_only is not None
        else (setting.read_only if setting is not None else True),
        is_sensitive=sensitive,
        synonyms=tuple(synonyms),
    )


__all__ = [
    "LONG_MAX",
    "REGISTRY",
    "SERVER_SCOPES",
    "Check",
    "ConfigEntry",
    "ConfigError",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "Importance",
    "OneOf",
    "Range",
    "Validator",
    "Registry",
    "Scope",
    "Setting",
    "Table",
    "UpdateMode",
    "define",
    "entry",
    "unknown_message",
]
