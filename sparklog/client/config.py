"""Client settings with Kafka's names and defaults (the Java client's `ProducerConfig`,
`ConsumerConfig`, `AdminClientConfig`, `CommonClientConfigs`, Kafka 4.0).

Settings arrive as a dict with dotted names; values may be typed or strings (Spark passes
`kafka.*` options as strings). `producer_config(...)`, `consumer_config(...)` and
`admin_config(...)` validate and fill defaults; a bad setting raises `ConfigError` naming it,
and an unknown one names the closest known setting.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

INT32_MAX = 2_147_483_647


class ConfigError(ValueError):
    """A client setting is unknown or has a bad value (Kafka's `ConfigException`)."""


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting: its Kafka name, kind and default, and the range or choices it accepts."""

    name: str
    kind: str  # "int", "bool", "str", "list", "object"
    default: Any
    low: int | None = None
    high: int | None = None
    choices: tuple[str, ...] | None = None


def _int(name: str, default: int | None, low: int | None = 0, high: int | None = None) -> Setting:
    return Setting(name, "int", default, low, high)


def _str(name: str, default: str | None, choices: tuple[str, ...] | None = None) -> Setting:
    return Setting(name, "str", default, choices=choices)


_COMMON = (
    Setting("bootstrap.servers", "list", None),
    _str("client.id", ""),
    _str(
        "client.dns.lookup",
        "use_all_dns_ips",
        ("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only"),
    ),
    _str("security.protocol", "PLAINTEXT", ("PLAINTEXT",)),
    _int("metadata.max.age.ms", 300_000),
    _int("request.timeout.ms", 30_000),
    _int("retry.backoff.ms", 100),
    _int("retry.backoff.max.ms", 1_000),
    _int("reconnect.backoff.ms", 50),
    _int("reconnect.backoff.max.ms", 1_000),
    _int("socket.connection.setup.timeout.ms", 10_000),
    _int("socket.connection.setup.timeout.max.ms", 30_000),
    _int("connections.max.idle.ms", 540_000),
    _int("send.buffer.bytes", 131_072, low=-1),
)

_PRODUCER = (
    *_COMMON,
    _int("receive.buffer.bytes", 32_768, low=-1),
    _str("acks", "all", ("all", "-1", "0", "1")),
    _int("batch.size", 16_384),
    _int("linger.ms", 5),
    _int("buffer.memory", 33_554_432),
    _int("max.block.ms", 60_000),
    _int("delivery.timeout.ms", 120_000),
    _int("retries", INT32_MAX),
    _int("max.in.flight.requests.per.connection", 5, low=1),
    _str("compression.type", "none", ("none", "gzip", "snappy", "lz4", "zstd")),
    _int("max.request.size", 1_048_576, low=1),
    Setting("enable.idempotence", "bool", True),
    Setting("partitioner.class", "object", None),
    Setting("partitioner.ignore.keys", "bool", False),
    Setting("interceptor.classes", "list", ()),
    Setting("key.serializer", "object", None),
    Setting("value.serializer", "object", None),
    _str("transactional.id", None),
    _int("transaction.timeout.ms", 60_000),
)

_CONSUMER = (
    *_COMMON,
    _int("receive.buffer.bytes", 65_536, low=-1),
    _str("group.id", None),
    _str("group.instance.id", None),
    _str("group.protocol", "classic", ("classic", "consumer")),
    Setting("enable.auto.commit", "bool", True),
    _int("auto.commit.interval.ms", 5_000),
    _int("session.timeout.ms", 45_000),
    _int("heartbeat.interval.ms", 3_000),
    _int("max.poll.interval.ms", 300_000, low=1),
    Setting("partition.assignment.strategy", "list", ("range", "cooperative-sticky")),
    _str("auto.offset.reset", "latest", ("earliest", "latest", "none")),
    _int("fetch.min.bytes", 1),
    _int("fetch.max.bytes", 52_428_800),
    _int("fetch.max.wait.ms", 500),
    _int("max.partition.fetch.bytes", 1_048_576),
    _int("max.poll.records", 500, low=1),
    _str("isolation.level", "read_uncommitted", ("read_uncommitted", "read_committed")),
    Setting("check.crcs", "bool", True),
    _str("client.rack", ""),
    _int("default.api.timeout.ms", 60_000),
    Setting("exclude.internal.topics", "bool", True),
    Setting("allow.auto.create.topics", "bool", True),
    Setting("key.deserializer", "object", None),
    Setting("value.deserializer", "object", None),
)

_ADMIN = (
    *_COMMON,
    _int("receive.buffer.bytes", 65_536, low=-1),
    _int("default.api.timeout.ms", 60_000),
    _int("retries", INT32_MAX),
)

PRODUCER_SETTINGS: Mapping[str, Setting] = {s.name: s for s in _PRODUCER}
CONSUMER_SETTINGS: Mapping[str, Setting] = {s.name: s for s in _CONSUMER}
ADMIN_SETTINGS: Mapping[str, Setting] = {s.name: s for s in _ADMIN}
_KINDS = {"producer": PRODUCER_SETTINGS, "consumer": CONSUMER_SETTINGS, "admin": ADMIN_SETTINGS}


class ClientConfig(Mapping[str, Any]):
    """Validated settings of one client; `explicit` holds the names the user set."""

    def __init__(self, kind: str, values: dict[str, Any], explicit: frozenset[str]) -> None:
        self.kind = kind
        self._values = values
        self.explicit = explicit

    def __getitem__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise KeyError(f"{name!r} is not a {self.kind} setting") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        shown = {k: self._values[k] for k in sorted(self.explicit)}
        return f"ClientConfig({self.kind}, {shown})"


def producer_config(settings: Mapping[str, Any] | None) -> ClientConfig:
    """Validated producer settings; idempotence rules follow Kafka's `ProducerConfig`."""
    config = _parse("producer", settings)
    values = dict(config)
    if values["transactional.id"] is not None and not values["enable.idempotence"]:
        raise ConfigError(
            "transactional.id needs enable.idempotence=true (Kafka's rule): remove "
            "enable.idempotence=false or the transactional.id"
        )
    if values["transactional.id"] == "":
        raise ConfigError("transactional.id must not be empty; leave it unset for no transactions")
    _check_idempotence(values, config.explicit)
    if values["delivery.timeout.ms"] < values["linger.ms"] + values["request.timeout.ms"]:
        raise ConfigError(
            f"delivery.timeout.ms should be equal to or larger than linger.ms + request.timeout.ms "
            f"({values['linger.ms']} + {values['request.timeout.ms']}), "
            f"got {values['delivery.timeout.ms']}"
        )
    return ClientConfig("producer", values, config.explicit)


def consumer_config(settings: Mapping[str, Any] | None) -> ClientConfig:
    """Validated consumer settings."""
    config = _parse("consumer", settings)
    if config["fetch.max.wait.ms"] > config["request.timeout.ms"]:
        raise ConfigError(
            f"fetch.max.wait.ms ({config['fetch.max.wait.ms']}) must not exceed "
            f"request.timeout.ms ({config['request.timeout.ms']})"
        )
    return config


def admin_config(settings: Mapping[str, Any] | None) -> ClientConfig:
    """Validated admin client settings."""
    return _parse("admin", settings)


def _check_idempotence(values: dict[str, Any], explicit: frozenset[str]) -> None:
    """Kafka's rules: an explicit `enable.idempotence=true` demands acks=all, retries > 0 and
    at most 5 requests in flight; a default one is switched off by a conflicting setting."""
    if not values["enable.idempotence"]:
        return
    conflicts = []
    if values["acks"] != -1:
        conflicts.append(f"acks must be all (or -1), got {values['acks']}")
    if values["retries"] == 0:
        conflicts.append("retries must be greater than 0")
    if values["max.in.flight.requests.per.connection"] > 5:
        conflicts.append(
            "max.in.flight.requests.per.connection must be at most 5, "
            f"got {values['max.in.flight.requests.per.connection']}"
        )
    if not conflicts:
        return
    if "enable.idempotence" in explicit:
        raise ConfigError(
            "enable.idempotence=true needs "
            + "; ".join(conflicts)
            + " (or set enable.idempotence=false)"
        )
    values["enable.idempotence"] = False


def _parse(kind: str, settings: Mapping[str, Any] | None) -> ClientConfig:
    known = _KINDS[kind]
    settings = dict(settings or {})
    values = {name: s.default for name, s in known.items()}
    for name, raw in settings.items():
        setting = known.get(name)
        if setting is None:
            raise ConfigError(_unknown_message(kind, name))
        values[name] = _convert(setting, raw)
    if not values["bootstrap.servers"]:
        raise ConfigError(
            "bootstrap.servers is required (a list of host:port, e.g. '127.0.0.1:9092')"
        )
    if kind == "producer":
        values["acks"] = -1 if values["acks"] in ("all", "-1") else int(values["acks"])
    return ClientConfig(kind, values, frozenset(settings))


def _unknown_message(kind: str, name: str) -> str:
    others = [k for k, table in _KINDS.items() if k != kind and name in table]
    if others:
        return f"{name!r} is a {others[0]} setting, not a {kind} setting"
    close = difflib.get_close_matches(name.replace("_", "."), list(_KINDS[kind]), n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown {kind} setting {name!r}{hint}"


def _convert(setting: Setting, raw: Any) -> Any:
    """The typed value of `raw` for `setting`, or ConfigError naming the setting."""
    name = setting.name
    converter: Callable[[Setting, Any], Any] = _CONVERTERS[setting.kind]
    value = converter(setting, raw)
    if setting.kind == "int" and value is not None:
        if setting.low is not None and value < setting.low:
            raise ConfigError(f"{name} must be at least {setting.low}, got {value}")
        high = setting.high if setting.high is not None else INT32_MAX
        if name != "buffer.memory" and value > high:
            raise ConfigError(f"{name} must be at most {high}, got {value}")
    if setting.choices is not None and value is not None and value not in setting.choices:
        raise ConfigError(f"{name} must be one of {', '.join(setting.choices)}; got {raw!r}")
    return value


def _to_int(setting: Setting, raw: Any) -> int | None:
    if raw is None or isinstance(raw, bool):
        raise ConfigError(f"{setting.name} must be an integer, got {raw!r}")
    if isinstance(raw, int):
        return raw
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"{setting.name} must be an integer, got {raw!r}") from None


def _to_bool(setting: Setting, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ConfigError(f"{setting.name} must be true or false, got {raw!r}")


def _to_str(setting: Setting, raw: Any) -> str | None:
    if raw is None:
        return None
    if setting.name == "acks" and isinstance(raw, int) and not isinstance(raw, bool):
        return str(raw)
    if not isinstance(raw, str):
        raise ConfigError(f"{setting.name} must be a string, got {raw!r}")
    text = raw.strip()
    return text.lower() if setting.choices and setting.name != "security.protocol" else text


def _to_list(setting: Setting, raw: Any) -> tuple[Any, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str):
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    if isinstance(raw, list | tuple):
        return tuple(raw)
    if setting.name == "interceptor.classes":
        return (raw,)
    raise ConfigError(f"{setting.name} must be a list or a comma-separated string, got {raw!r}")


def _to_object(setting: Setting, raw: Any) -> Any:
    return raw


_CONVERTERS: dict[str, Callable[[Setting, Any], Any]] = {
    "int": _to_int,
    "bool": _to_bool,
    "str": _to_str,
    "list": _to_list,
    "object": _to_object,
}


def parse_bootstrap_servers(servers: tuple[str, ...]) -> list[tuple[str, int]]:
    """`host:port` strings as (host, port); a bad entry raises ConfigError."""
    out = []
    for server in servers:
        host, sep, port = server.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"bootstrap.servers: invalid address {server!r} (expected host:port)")
        out.append((host, int(port)))
    return out
