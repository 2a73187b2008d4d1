"""Outbound connections: the one place a sparklog process opens a connection to a Kafka
protocol server — followers to leaders (replica fetchers), brokers to the controller and to
the driver's coordinator, the transaction coordinator to brokers (markers), clients to brokers.

Each caller names an `Endpoint` and its client-side `ClientSecurity` (Kafka's
`security.protocol` for clients, `security.inter.broker.protocol` between brokers, the
controller listener's protocol towards the controller), with its TLS context for SSL and
SASL_SSL (`ssl_factory.client_context` from the `ssl.*` settings: the server's chain is
verified, its name too with `ssl.endpoint.identification.algorithm=https`, the key store
answers mTLS), and for SASL_PLAINTEXT and SASL_SSL the SASL client settings (`sasl.*`, run
once the socket is up and versions are negotiated: the connections drive
`security.sasl.client`'s authenticator), so every connection gets them at once.
`open_socket` serves the blocking clients (a socket), and
`open_stream` the asyncio ones (`async_client.connect`); both keep the socket options the
sites used before: TCP_NODELAY (asyncio sets it on every TCP transport), and the clients'
`send.buffer.bytes` / `receive.buffer.bytes` when set.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from sparklog.security.listener_config import ListenerConfig
from sparklog.security.listeners import client_ssl_context, normalised
from sparklog.security.sasl.client import (
    CONTROLLER_MECHANISM,
    INTER_BROKER_MECHANISM,
    SaslClientConfig,
    inter_broker_sasl,
)
from sparklog.security.session import SecurityProtocol
from sparklog.security.ssl_factory import SslConfig, client_context

_TLS: Final = (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)
_SASL: Final = (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a server listens."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        """`host:port` (the last colon splits, so an IPv6 host keeps its own)."""
        host, sep, port = text.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"{text!r} is not host:port (e.g. 127.0.0.1:9092)")
        return cls(host, int(port))


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """The client side of a connection's security (Kafka's `security.protocol`, the TLS
    context its `ssl.*` settings make, and, with the SASL client, its `sasl.*` settings)."""

    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    #: SASL_PLAINTEXT / SASL_SSL: the mechanism and credentials the connection authenticates
    #: with after ApiVersions (`security.sasl.client`); None otherwise
    sasl: SaslClientConfig | None = None
    #: SSL / SASL_SSL: the client TLS context (`ssl_factory.client_context`); None otherwise
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        name = self.security_protocol.name
        if self.uses_sasl != (self.sasl is not None):
            raise ValueError(
                f"security.protocol={name} "
                + (
                    "needs sasl.mechanism and sasl.jaas.config"
                    if self.uses_sasl
                    else "takes no SASL settings: use SASL_PLAINTEXT or SASL_SSL"
                )
            )
        if self.uses_tls != (self.ssl_context is not None):
            raise ValueError(
                f"security.protocol={name} "
                + ("needs a TLS context (ssl.* settings)" if self.uses_tls else "takes no TLS")
            )

    @property
    def uses_tls(self) -> bool:
        """Whether connections speak TLS (Kafka's SSL, SASL_SSL)."""
        return self.security_protocol in _TLS

    @property
    def uses_sasl(self) -> bool:
        """Whether connections authenticate with SASL (Kafka's SASL_PLAINTEXT, SASL_SSL)."""
        return self.security_protocol in _SASL

    @classmethod
    def of(
        cls,
        security_protocol: str,
        settings: Mapping[str, object] | None = None,
        *,
        sasl: SaslClientConfig | None = None,
    ) -> ClientSecurity:
        """From a `security.protocol` value (case-insensitive, as Kafka reads it), for SSL /
        SASL_SSL the client's `ssl.*` settings (`settings`; other names ignored), and for
        SASL_* the SASL client settings."""
        try:
            protocol = SecurityProtocol[security_protocol.strip().upper()]
        except KeyError:
            names = ", ".join(p.name for p in SecurityProtocol)
            raise ValueError(
                f"security.protocol={security_protocol!r} is not one of {names}"
            ) from None
        if protocol not in _TLS:
            return cls(protocol, sasl=sasl)
        context = client_context(SslConfig.of(settings or {}, server=False))
        return cls(protocol, sasl=sasl, ssl_context=context)


#: Plaintext: no TLS, no SASL (every connection today).
PLAINTEXT: Final = ClientSecurity()


def server_client_security(
    listeners: ListenerConfig,
    listener_name: str | None = None,
    mechanism_setting: str = INTER_BROKER_MECHANISM,
) -> ClientSecurity:
    """The client side of a server's own connections to `listener_name` (default: the
    inter-broker listener): replica fetchers, brokers to the coordinator, the coordinator's
    markers to brokers, and, with `mechanism_setting=CONTROLLER_MECHANISM` and the controller
    listener, brokers to the controller. The listener's security protocol, and for SASL the
    server's own login from the listener's JAAS entry (`inter_broker_sasl`), for TLS the
    listener's client context (`listeners.client_ssl_context`)."""
    name = normalised(listener_name or listeners.inter_broker_listener_name)
    protocol = listeners.protocol_map[name]
    sasl = context = None
    if protocol in _SASL:
        sasl = inter_broker_sasl(listeners.properties, name, mechanism_setting)
    if protocol in _TLS:
        context = client_ssl_context(listeners.settings(name))
    return ClientSecurity(protocol, sasl=sasl, ssl_context=context)


def controller_client_security(listeners: ListenerConfig) -> ClientSecurity:
    """A broker's connections to the driver's controller: the controller listener's protocol
    and, with `controller.listener.names` set, `sasl.mechanism.controller.protocol` (Kafka's
    KRaft brokers); without it the controller serves a listener named and secured like the
    inter-broker one, so the inter-broker mechanism and login apply."""
    name = listeners.controller_listener().listener_name
    if listeners.controller_listener_names:
        return server_client_security(listeners, name, CONTROLLER_MECHANISM)
    return server_client_security(listeners, name)


def open_socket(
    endpoint: Endpoint,
    security: ClientSecurity = PLAINTEXT,
    *,
    timeout_s: float,
    send_buffer_bytes: int = -1,
    receive_buffer_bytes: int = -1,
) -> socket.socket:
    """A connected blocking socket (no timeout once connected; over TLS an `ssl.SSLSocket`
    whose handshake ran within `timeout_s`); raises OSError (`ssl.SSLError` included)."""
    sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if send_buffer_bytes > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
        if receive_buffer_bytes > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
        if security.ssl_context is not None:
            sock = security.ssl_context.wrap_socket(sock, server_hostname=endpoint.host)
        sock.settimeout(None)
    except OSError:
        sock.close()
        raise
    return sock


async def open_stream(
    endpoint: Endpoint, security: ClientSecurity = PLAINTEXT
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An asyncio stream pair to `endpoint`, over TLS for SSL / SASL_SSL (the caller bounds
    it, handshake included, with its timeout)."""
    if security.ssl_context is None:
        return await asyncio.open_connection(endpoint.host, endpoint.port)
    return await asyncio.open_connection(
        endpoint.host, endpoint.port, ssl=security.ssl_context, server_hostname=endpoint.host
    )
