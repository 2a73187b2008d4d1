"""Kafka's listener model: which ports a server binds, what it advertises, and how each one is
secured (Kafka's `SocketServerConfigs`, `KafkaConfig.listeners` / `effectiveAdvertisedBrokerListeners`
/ `interBrokerListenerName` / `valuesWithPrefixOverride`, and `ListenerName`).

Theory of operation. A server's properties name its listeners (`listeners=CLIENT://:9092,
REPLICATION://:9093`), the security protocol of each name (`listener.security.protocol.map`,
whose default maps the four protocol names to themselves), the addresses other processes are
told (`advertised.listeners`, defaulting to `listeners`), the listener brokers use between
themselves (`inter.broker.listener.name`, or the older `security.inter.broker.protocol`: one
of the two, never both) and the controller's listeners (`controller.listener.names`).
`listener_config.ListenerConfig.from_properties` parses and validates all of it once, at start,
refusing a bad combination with Kafka's own message (a `ConfigError`), so a configuration
Kafka refuses is refused here with the same words; this module holds the vocabulary.

Per-listener settings: any setting may be given for one listener only as
`listener.name.<listener, lower case>.<setting>` (`listener.name.internal.ssl.keystore.location`);
`ListenerSettings` is one listener's view of the properties, overrides first, as Kafka's
`valuesWithPrefixOverride(listenerName.configPrefix)`. SASL's mechanism-scoped keys
(`listener.name.<l>.<mechanism>.sasl.jaas.config`) are read with `for_mechanism`.

`ListenerSecurity` is what a server needs to secure one listener's connections: the TLS
server context (SSL, SASL_SSL) and the SASL server side (SASL_PLAINTEXT, SASL_SSL). It is built
by `listener_security(endpoint, settings)`, the one place the connection-level security parts
plug in: `server_ssl_context` (the TLS part) and `sasl_server` (the SASL part) below. Until a
part exists, a listener that needs it refuses to start with a message naming the listener
and the fix, rather than serving plaintext on a port its operator believes secured.

sparklog's servers and their listeners (one property dict serves the whole cluster):

- a broker binds every listener of `listeners` not named in `controller.listener.names`, one
  `KafkaServer` each, and registers every advertised endpoint with the controller;
- the driver's controller serves the listeners named in `controller.listener.names` (their
  `listeners` entries give host and port when present); without that setting it serves one
  listener named and secured like the inter-broker listener, as brokers are its only clients;
- the driver's group/transaction coordinator is reached only by brokers (Envelope forwarding)
  and reaches them (markers): it serves one listener named and secured like the inter-broker
  listener, and connects to brokers' inter-broker endpoints.

Outbound connections are secured like the listener they reach, with that listener's settings
as the client side (Kafka builds its inter-broker clients from the inter-broker listener's
`valuesWithPrefixOverride` too): replica fetchers, brokers to the coordinator and the
coordinator's markers use `inter_broker_listener_name` / `inter_broker_protocol` and
`settings(inter_broker_listener_name)`; brokers to the controller use
`controller_listener_name` / `controller_protocol` and its settings.

Pure: no I/O, no sockets; safe to import anywhere on the floor.
"""

from __future__ import annotations

import ipaddress
import re
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sparklog.security.principal import PRINCIPAL_SETTINGS, PrincipalBuilder
from sparklog.security.session import SecurityProtocol
from sparklog.security.ssl_factory import (
    CLIENT_SSL_SETTINGS,
    SERVER_SSL_SETTINGS,
    SslConfig,
    client_context,
    server_context,
)
from sparklog.settings import (
    REGISTRY,
    ConfigError,
    ConfigType,
    Importance,
    OneOf,
    Scope,
    Setting,
    define,
)

LISTENERS: Final = "listeners"
ADVERTISED_LISTENERS: Final = "advertised.listeners"
PROTOCOL_MAP: Final = "listener.security.protocol.map"
INTER_BROKER_LISTENER_NAME: Final = "inter.broker.listener.name"
INTER_BROKER_PROTOCOL: Final = "security.inter.broker.protocol"
CONTROLLER_LISTENER_NAMES: Final = "controller.listener.names"
#: The prefix of a per-listener setting: `listener.name.<listener lower case>.<setting>`.
LISTENER_PREFIX: Final = "listener.name."

#: sparklog binds loopback when a listener names no host (tests and the embedded cluster
#: must not open ports on every interface by default; Kafka binds the wildcard address).
DEFAULT_BIND_HOST: Final = "127.0.0.1"
DEFAULT_LISTENERS: Final = f"PLAINTEXT://{DEFAULT_BIND_HOST}:0"
#: Kafka's default map: each protocol's name is a listener name of that protocol.
DEFAULT_PROTOCOL_MAP: Final = ",".join(f"{p.name}:{p.name}" for p in SecurityProtocol)


def _listener(name: str, default: object, doc: str, **extra: Any) -> Setting:
    return Setting(
        name,
        ConfigType.STRING,
        default,
        doc=doc,
        scope=Scope.BROKER,
        group="listeners",
        importance=Importance.HIGH,
        **extra,
    )


#: Kafka's `SocketServerConfigs` listener settings and `ReplicationConfigs`' inter-broker ones.
LISTENER_SETTINGS = define(
    _listener(
        LISTENERS,
        DEFAULT_LISTENERS,
        "NAME://host:port,... the server binds (port 0: any free port; no host: 127.0.0.1)",
    ),
    _listener(
        ADVERTISED_LISTENERS,
        None,
        "NAME://host:port,... registered for clients and other brokers (default: listeners)",
    ),
    _listener(
        PROTOCOL_MAP,
        DEFAULT_PROTOCOL_MAP,
        "NAME:PROTOCOL,... the security protocol of each listener name",
    ),
    _listener(
        INTER_BROKER_LISTENER_NAME,
        None,
        "the listener brokers (and the driver's coordinator) use between themselves",
    ),
    _listener(
        INTER_BROKER_PROTOCOL,
        SecurityProtocol.PLAINTEXT.name,
        "the inter-broker listener by protocol name (when inter.broker.listener.name is unset)",
        validator=OneOf(tuple(p.name for p in SecurityProtocol)),
        parser=lambda raw: str(raw).strip().upper(),
    ),
    _listener(
        CONTROLLER_LISTENER_NAMES,
        None,
        "the listeners the driver's controller serves (brokers connect to the first)",
    ),
    Setting(
        LISTENER_PREFIX,
        ConfigType.STRING,
        None,
        doc="listener.name.<listener>.<setting>: a setting for that listener only",
        scope=Scope.BROKER,
        group="listeners",
        importance=Importance.MEDIUM,
        prefix=True,
    ),
)


def normalised(name: str) -> str:
    """A listener name as Kafka compares it (`ListenerName.normalised`: upper case)."""
    return name.strip().upper()


def config_prefix(listener_name: str) -> str:
    """`listener.name.<name lower case>.` (Kafka's `ListenerName.configPrefix`)."""
    return f"{LISTENER_PREFIX}{listener_name.lower()}."


def security_protocol(name: str, config_name: str) -> SecurityProtocol:
    """A protocol name (any case, as Kafka's `SecurityProtocol.forName`); ConfigError names
    the setting it came from."""
    try:
        return SecurityProtocol[name.strip().upper()]
    except KeyError:
        raise ConfigError(
            f"Invalid security protocol `{name.strip()}` defined in {config_name} "
            f"(one of {', '.join(p.name for p in SecurityProtocol)})"
        ) from None


@dataclass(frozen=True, slots=True)
class ListenerEndpoint:
    """One listener: its name, security protocol and address (Kafka's `Endpoint`).

    `host` "" means no host was named: the server binds `DEFAULT_BIND_HOST`."""

    listener_name: str
    security_protocol: SecurityProtocol
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"

    @property
    def bind_host(self) -> str:
        return self.host or DEFAULT_BIND_HOST

    def with_address(self, host: str, port: int) -> ListenerEndpoint:
        return ListenerEndpoint(self.listener_name, self.security_protocol, host, port)


#: Kafka's URI_PARSE_REGEXP: NAME://host:port, the host optionally in [] (IPv6).
ENDPOINT_PATTERN = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


def split_list(value: str | None) -> list[str]:
    """A comma-separated setting's entries, stripped, empty ones dropped."""
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def parse_protocol_map(value: str) -> dict[str, SecurityProtocol]:
    """`listener.security.protocol.map` as {normalised listener name: protocol}."""
    out: dict[str, SecurityProtocol] = {}
    for entry in split_list(value):
        name, sep, protocol = entry.partition(":")
        if not sep or not name.strip() or not protocol.strip():
            raise ConfigError(
                f"Error parsing configuration property '{PROTOCOL_MAP}': entry {entry!r} is "
                "not LISTENER_NAME:SECURITY_PROTOCOL (e.g. INTERNAL:SSL,EXTERNAL:SASL_SSL)"
            )
        key = normalised(name)
        if key in out:
            raise ConfigError(
                f"Error parsing configuration property '{PROTOCOL_MAP}': listener {key} "
                "appears more than once (each listener name should only appear once)"
            )
        out[key] = security_protocol(protocol, PROTOCOL_MAP)
    return out


def parse_listener_list(
    value: str,
    protocol_map: Mapping[str, SecurityProtocol],
    *,
    require_distinct_ports: bool = True,
) -> tuple[ListenerEndpoint, ...]:
    """A `listeners` / `advertised.listeners` value as endpoints, validated as Kafka's
    `listenerListToEndPoints` does (names unique; ports unique but 0, when required)."""
    endpoints = []
    for entry in split_list(value):
        m = ENDPOINT_PATTERN.match(entry)
        if m is None:
            raise ConfigError(
                f"Error creating broker listeners from '{value}': Unable to parse {entry} to "
                "a broker endpoint (expected NAME://host:port, e.g. PLAINTEXT://:9092)"
            )
        name = normalised(m.group(1))
        protocol = protocol_map.get(name)
        if protocol is None:
            raise ConfigError(
                f"Error creating broker listeners from '{value}': No security protocol "
                f"defined for listener {name} (add {name}:<protocol> to {PROTOCOL_MAP})"
            )
        port = int(m.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError(
                f"Error creating broker listeners from '{value}': port {port} of {entry} is "
                "not 0..65535"
            )
        endpoints.append(ListenerEndpoint(name, protocol, m.group(2), port))
    names = [e.listener_name for e in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError(f"Each listener must have a different name, listeners: {value}")
    if require_distinct_ports:
        _check_distinct_ports(endpoints, value)
    return tuple(endpoints)


def _check_distinct_ports(endpoints: list[ListenerEndpoint], value: str) -> None:
    """Ports other than 0 are unique, except one IPv4 and one IPv6 listener may share one
    (KAFKA-13590, as Kafka 4.x allows)."""
    by_port: dict[int, list[ListenerEndpoint]] = {}
    for e in endpoints:
        if e.port != 0:
            by_port.setdefault(e.port, []).append(e)
    for port, group in by_port.items():
        if len(group) == 1:
            continue
        versions = sorted(_ip_version(e.host) for e in group)
        if versions != [4, 6]:
            raise ConfigError(
                "Each listener must have a different port unless exactly one listener has "
                f"an IPv4 address and the other IPv6 address, listeners: {value}, port: {port}"
            )


def _ip_version(host: str) -> int:
    try:
        return ipaddress.ip_address(host).version
    except ValueError:
        return 0


def with_default_host(listeners: str | None, host: str) -> str:
    """`listeners` with `host` for every entry that names none (no `listeners`: one
    PLAINTEXT listener on `host`, port 0). A launcher that picks each broker's address (the
    Spark executor's) uses it; entries naming a host keep it."""
    if listeners is None or not listeners.strip():
        listeners = "PLAINTEXT://:0"
    bracketed = f"[{host}]" if ":" in host else host
    out = []
    for entry in split_list(listeners):
        name, sep, address = entry.partition("://")
        out.append(f"{name}://{bracketed}{address}" if sep and address.startswith(":") else entry)
    return ",".join(out)


@dataclass(frozen=True, slots=True, repr=False)
class ListenerSettings:
    """One listener's view of a server's properties: `listener.name.<l>.<setting>` wins over
    `<setting>` (Kafka's `valuesWithPrefixOverride`). Values may be secrets (keystore
    passwords, JAAS configs): the repr names the listener only."""

    listener_name: str
    properties: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"ListenerSettings({self.listener_name})"

    @property
    def prefix(self) -> str:
        return config_prefix(self.listener_name)

    def get(self, name: str, default: str | None = None) -> str | None:
        """The listener's value of `name`: its override, else the server-wide value."""
        value = self.properties.get(self.prefix + name)
        if value is None:
            value = self.properties.get(name)
        return default if value is None else value

    def is_overridden(self, name: str) -> bool:
        return self.prefix + name in self.properties

    def overrides(self) -> dict[str, str]:
        """The listener's own settings, prefix removed."""
        n = len(self.prefix)
        return {k[n:]: v for k, v in self.properties.items() if k.startswith(self.prefix)}

    def values(self, names: Iterable[str] | None = None) -> dict[str, str]:
        """Every setting as this listener sees it (server-wide values under its overrides);
        only `names` when given."""
        if names is not None:
            return {n: v for n in names if (v := self.get(n)) is not None}
        merged = {k: v for k, v in self.properties.items() if not k.startswith(LISTENER_PREFIX)}
        merged.update(self.overrides())
        return merged

    def for_mechanism(self, mechanism: str, name: str) -> str | None:
        """A SASL mechanism's setting for this listener:
        `listener.name.<l>.<mechanism lower case>.<name>` (how Kafka's brokers read
        `sasl.jaas.config` and the callback handler classes), None when not given."""
        return self.properties.get(f"{self.prefix}{mechanism.lower()}.{name}")


def listener_int(settings: ListenerSettings, name: str) -> int:
    """A listener's integer setting, typed and checked by the registry's declaration of
    `name` (ConfigError naming the prefixed setting when malformed)."""
    setting = REGISTRY.find(name)
    assert setting is not None, f"{name} is not a declared setting"
    raw = settings.get(name, setting.default_text)
    try:
        value = setting.parse(raw)
    except ConfigError as e:
        raise ConfigError(f"{settings.prefix}{e}") from None
    return int(value)


@dataclass(frozen=True, slots=True, repr=False)
class ListenerSecurity:
    """What a server needs to secure one listener's connections (Kafka's per-listener
    `ChannelBuilder`): the TLS server context when the protocol is SSL or SASL_SSL, and the
    SASL server side when it is SASL_PLAINTEXT or SASL_SSL. Built by `listener_security`."""

    endpoint: ListenerEndpoint
    settings: ListenerSettings
    #: the server-side TLS context (`ssl.*` settings); None on PLAINTEXT and SASL_PLAINTEXT
    ssl_context: ssl.SSLContext | None = None
    #: the SASL server side (enabled mechanisms, JAAS options, credential lookups) the
    #: connection's authenticator is made from; None on PLAINTEXT and SSL
    sasl: Any = None
    #: who a connection is (`ssl.principal.mapping.rules` for mTLS peers)
    principal_builder: PrincipalBuilder = field(default_factory=PrincipalBuilder)
    #: `sparklog.ssl.handshake.timeout.ms`: the bound on a TLS handshake
    ssl_handshake_timeout_ms: int = 10_000

    def __repr__(self) -> str:
        return f"ListenerSecurity({self.endpoint.listener_name}, {self.security_protocol.name})"

    @property
    def listener_name(self) -> str:
        return self.endpoint.listener_name

    @property
    def security_protocol(self) -> SecurityProtocol:
        return self.endpoint.security_protocol

    @property
    def uses_tls(self) -> bool:
        return uses_tls(self.security_protocol)

    @property
    def uses_sasl(self) -> bool:
        return uses_sasl(self.security_protocol)


def uses_tls(protocol: SecurityProtocol) -> bool:
    return protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)


def uses_sasl(protocol: SecurityProtocol) -> bool:
    return protocol in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


def _not_served_yet(endpoint: ListenerEndpoint, part: str) -> ConfigError:
    return ConfigError(
        f"listener {endpoint.listener_name} uses {endpoint.security_protocol.name}, and this "
        f"sparklog cannot serve {part} yet: map it to PLAINTEXT in {PROTOCOL_MAP} "
        f"(e.g. {endpoint.listener_name}:PLAINTEXT) or remove it from {LISTENERS}"
    )


def server_ssl_context(endpoint: ListenerEndpoint, settings: ListenerSettings) -> ssl.SSLContext:
    """The TLS part: the server context of an SSL / SASL_SSL listener from its `ssl.*`
    settings, overrides first (Kafka's `DefaultSslEngineFactory`, `ssl_factory`); a
    ConfigError names the listener."""
    try:
        return server_context(SslConfig.of(settings.values(SERVER_SSL_SETTINGS)))
    except ConfigError as e:
        raise ConfigError(
            f"listener {endpoint.listener_name} uses {endpoint.security_protocol.name}: {e}"
        ) from None


def client_ssl_context(settings: ListenerSettings) -> ssl.SSLContext:
    """The client side of a TLS listener, for a server's own connections to it (replication
    on the inter-broker listener, brokers to the controller, the coordinator to brokers): the
    listener's `ssl.*` settings, its key store answering mTLS and its trust store checking the
    peer, as Kafka's inter-broker `SslFactory` in client mode reads the same listener config."""
    return client_context(SslConfig.of(settings.values(CLIENT_SSL_SETTINGS), server=False))


def sasl_server(endpoint: ListenerEndpoint, settings: ListenerSettings) -> Any:
    """The SASL part: the server side of a SASL_PLAINTEXT / SASL_SSL listener from its
    `sasl.enabled.mechanisms` and `listener.name.<l>.<mechanism>.sasl.jaas.config`
    (Kafka's `SaslChannelBuilder`): a `sasl.enabled.SaslServerConfig`, whose SCRAM
    credentials the server binds to its metadata image (`bind_credentials`)."""
    from sparklog.security.sasl.server_config import sasl_server_config

    return sasl_server_config(settings)


def listener_security(endpoint: ListenerEndpoint, settings: ListenerSettings) -> ListenerSecurity:
    """The security of `endpoint`'s connections; ConfigError when a part it needs is missing
    or misconfigured (raised at server start, before any port is bound)."""
    protocol = endpoint.security_protocol
    tls = uses_tls(protocol)
    handshake = SERVER_SSL_SETTINGS["sparklog.ssl.handshake.timeout.ms"]
    return ListenerSecurity(
        endpoint,
        settings,
        ssl_context=server_ssl_context(endpoint, settings) if tls else None,
        sasl=sasl_server(endpoint, settings) if uses_sasl(protocol) else None,
        principal_builder=PrincipalBuilder.of(settings.values(PRINCIPAL_SETTINGS)),
        ssl_handshake_timeout_ms=handshake.parse(settings.get(handshake.name))
        if tls and settings.get(handshake.name) is not None
        else handshake.default,
    )


#: A PLAINTEXT listener's security (in-process servers and tests).
def plaintext(listener_name: str = "PLAINTEXT", host: str = "", port: int = 0) -> ListenerSecurity:
    endpoint = ListenerEndpoint(normalised(listener_name), SecurityProtocol.PLAINTEXT, host, port)
    return ListenerSecurity(endpoint, ListenerSettings(endpoint.listener_name))


def endpoints_to_record(endpoints: Iterable[ListenerEndpoint]) -> list[dict[str, Any]]:
    """Endpoints as a metadata record carries them (Kafka's `BrokerRegistrationRecord`
    `endPoints`: name, host, port, security protocol id)."""
    return [
        {
            "name": e.listener_name,
            "host": e.host,
            "port": e.port,
            "security_protocol": int(e.security_protocol),
        }
        for e in endpoints
    ]


def endpoints_from_record(entries: Iterable[Mapping[str, Any]]) -> tuple[ListenerEndpoint, ...]:
    """`endpoints_to_record`'s inverse (snapshots write the dataclass's field names too)."""
    return tuple(
        ListenerEndpoint(
            normalised(str(e.get("name", e.get("listener_name", "")))),
            SecurityProtocol(int(e["security_protocol"])),
            str(e["host"]),
            int(e["port"]),
        )
        for e in entries
    )
