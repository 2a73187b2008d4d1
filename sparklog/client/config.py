"""Client settings with Kafka's names and defaults (the Java client's `ProducerConfig`,
`ConsumerConfig`, `AdminClientConfig`, `CommonClientConfigs`, Kafka 4.0).

Settings arrive as a dict with dotted names; values may be typed or strings (Spark passes
`kafka.*` options as strings). `producer_config(...)`, `consumer_config(...)` and
`admin_config(...)` validate and fill defaults; a bad setting raises `ConfigError` naming it,
the value and what it accepts, and an unknown one names the closest known setting. The
settings are declared into the registry (`sparklog.settings`, client scope).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from sparklog.security.sasl.client import MECHANISMS
from sparklog.security.ssl_factory import CLIENT_SSL_SETTINGS
from sparklog.settings import (
    ConfigError,
    ConfigType,
    OneOf,
    Range,
    Scope,
    Setting,
    Table,
    define,
    unknown_message,
)
from sparklog.structs import INT32_MAX


def _int(name: str, default: int | None, low: int = 0, high: int | None = INT32_MAX) -> Setting:
    return Setting(name, ConfigType.INT, default, Range(low, high), scope=Scope.CLIENT)


def _str(name: str, default: str | None, choices: tuple[str, ...] | None = None) -> Setting:
    # Kafka's clients match enumerated values case-insensitively (all but security.protocol)
    rule = OneOf(choices, lower=name != "security.protocol") if choices else None
    return Setting(name, ConfigType.STRING, default, rule, scope=Scope.CLIENT, parser=_to_str)


def _other(name: str, kind: ConfigType, default: Any, **extra: Any) -> Setting:
    return Setting(name, kind, default, scope=Scope.CLIENT, **extra)


def _to_str(raw: Any) -> str | None:
    if raw is None:
        return None
    if isinstance(raw, int) and not isinstance(raw, bool):  # acks=1
        return str(raw)
    if not isinstance(raw, str):
        raise ValueError(raw)
    return raw.strip()


def _to_classes(raw: Any) -> tuple[Any, ...]:
    """`interceptor.classes`: a list, a comma-separated string or one interceptor object."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    return tuple(raw) if isinstance(raw, list | tuple) else (raw,)


_COMMON = (
    _other("bootstrap.servers", ConfigType.LIST, None),
    _str("client.id", ""),
    _str(
        "client.dns.lookup",
        "use_all_dns_ips",
        ("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only"),
    ),
    _str("security.protocol", "PLAINTEXT", ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    # SASL (Kafka's SaslConfigs): the mechanism and its login module's options in JAAS syntax;
    # the JAAS text holds the password, so it is a PASSWORD (redacted wherever shown).
    Setting(
        "sasl.mechanism",
        ConfigType.STRING,
        "GSSAPI",
        OneOf(("GSSAPI", *MECHANISMS), lower=False),
        scope=Scope.CLIENT,
        parser=lambda raw: None if raw is None else str(raw).strip().upper(),
    ),
    Setting("sasl.jaas.config", ConfigType.PASSWORD, None, scope=Scope.CLIENT, sensitive=True),
    # Python has no login callback handler classes: a callable returning the OAUTHBEARER JWT
    # (compact serialization) takes the place of `sasl.login.callback.handler.class`
    _other("sasl.login.callback.handler.class", ConfigType.CLASS, None),
    # KIP-768: OAUTHBEARER tokens from an OAuth token endpoint (client credentials) or a file
    _str("sasl.oauthbearer.token.endpoint.url", None),
    _int("sasl.login.connect.timeout.ms", None),
    _int("sasl.login.read.timeout.ms", None),
    # TLS (Kafka's SslConfigs, declared once with the TLS contexts they make)
    *CLIENT_SSL_SETTINGS.values(),
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
    # the client's own metrics (throttle times), windowed as Kafka's clients window them
    _int("metrics.num.samples", 2, low=1),
    _int("metrics.sample.window.ms", 30_000, low=1),
)

_PRODUCER = (
    *_COMMON,
    _int("receive.buffer.bytes", 32_768, low=-1),
    _str("acks", "all", ("all", "-1", "0", "1")),
    _int("batch.size", 16_384),
    _int("linger.ms", 5),
    Setting("buffer.memory", ConfigType.LONG, 33_554_432, Range(0), scope=Scope.CLIENT),
    _int("max.block.ms", 60_000),
    _int("delivery.timeout.ms", 120_000),
    _int("retries", INT32_MAX),
    _int("max.in.flight.requests.per.connection", 5, low=1),
    _str("compression.type", "none", ("none", "gzip", "snappy", "lz4", "zstd")),
    _int("max.request.size", 1_048_576, low=1),
    _other("enable.idempotence", ConfigType.BOOLEAN, True),
    _other("partitioner.class", ConfigType.CLASS, None),
    _other("partitioner.ignore.keys", ConfigType.BOOLEAN, False),
    _other("interceptor.classes", ConfigType.LIST, (), parser=_to_classes),
    _other("key.serializer", ConfigType.CLASS, None),
    _other("value.serializer", ConfigType.CLASS, None),
    _str("transactional.id", None),
    _int("transaction.timeout.ms", 60_000),
)

_CONSUMER = (
    *_COMMON,
    _int("receive.buffer.bytes", 65_536, low=-1),
    _str("group.id", None),
    _str("group.instance.id", None),
    _str("group.protocol", "classic", ("classic", "consumer")),
    _other("enable.auto.commit", ConfigType.BOOLEAN, True),
    _int("auto.commit.interval.ms", 5_000),
    _int("session.timeout.ms", 45_000),
    _int("heartbeat.interval.ms", 3_000),
    _int("max.poll.interval.ms", 300_000, low=1),
    _other("partition.assignment.strategy", ConfigType.LIST, ("range", "cooperative-sticky")),
    _str("auto.offset.reset", "latest", ("earliest", "latest", "none")),
    _int("fetch.min.bytes", 1),
    _int("fetch.max.bytes", 52_428_800),
    _int("fetch.max.wait.ms", 500),
    _int("max.partition.fetch.bytes", 1_048_576),
    _int("max.poll.records", 500, low=1),
    _str("isolation.level", "read_uncommitted", ("read_uncommitted", "read_committed")),
    _other("check.crcs", ConfigType.BOOLEAN, True),
    _str("client.rack", ""),
    _int("default.api.timeout.ms", 60_000),
    _other("exclude.internal.topics", ConfigType.BOOLEAN, True),
    _other("allow.auto.create.topics", ConfigType.BOOLEAN, True),
    _other("key.deserializer", ConfigType.CLASS, None),
    _other("value.deserializer", ConfigType.CLASS, None),
)

_ADMIN = (
    *_COMMON,
    _int("receive.buffer.bytes", 65_536, low=-1),
    _int("default.api.timeout.ms", 60_000),
    _int("retries", INT32_MAX),
)

#: Kafka's `ProducerConfig`, `ConsumerConfig` and `AdminClientConfig` (client scope, one
#: group each: a setting both declare, such as receive.buffer.bytes, may differ in default).
PRODUCER_SETTINGS: Table = define(*(replace(s, group="producer") for s in _PRODUCER))
CONSUMER_SETTINGS: Table = define(*(replace(s, group="consumer") for s in _CONSUMER))
ADMIN_SETTINGS: Table = define(*(replace(s, group="admin") for s in _ADMIN))
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
        # passwords, keys and JAAS configs never reach a log line or an exception
        table = _KINDS[self.kind]
        shown = {
            k: "[hidden]" if is_secret(table.get(k)) else self._values[k]
            for k in sorted(self.explicit)
        }
        return f"ClientConfig({self.kind}, {shown})"


def is_secret(setting: Setting | None) -> bool:
    """Whether a setting's value is a secret (Kafka's PASSWORD type, or marked sensitive)."""
    return setting is not None and (setting.sensitive or setting.type == ConfigType.PASSWORD)


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
        values[name] = setting.parse(raw)
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
    return unknown_message(name, _KINDS[kind], f"{kind} setting")


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
