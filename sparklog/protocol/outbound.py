"""Outbound connections: the one place a sparklog process opens a connection to a Kafka
protocol server — followers to leaders (replica fetchers), brokers to the controller and to
the driver's coordinator, the transaction coordinator to brokers (markers), clients to brokers.

Each caller names an `Endpoint` and its client-side `ClientSecurity` (Kafka's
`security.protocol` for clients, `security.inter.broker.protocol` between brokers, the
controller listener's protocol towards the controller). Today only PLAINTEXT exists; the
security issue adds the TLS context (`ssl.*`) and the SASL client (`sasl.*`) here, so every
connection gets them at once. `open_socket` serves the blocking clients (a socket), and
`open_stream` the asyncio ones (`async_client.connect`); both keep the socket options the
sites used before: TCP_NODELAY (asyncio sets it on every TCP transport), and the clients'
`send.buffer.bytes` / `receive.buffer.bytes` when set.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from typing import Final

from sparklog.security.session import SecurityProtocol


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
    """The client side of a connection's security (Kafka's `security.protocol` and, with the
    security issue, its `ssl.*` and `sasl.*` settings)."""

    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT

    def __post_init__(self) -> None:
        if self.security_protocol is not SecurityProtocol.PLAINTEXT:
            raise ValueError(
                f"security.protocol={self.security_protocol.name} is not supported yet; "
                "use PLAINTEXT"
            )

    @classmethod
    def of(cls, security_protocol: str) -> ClientSecurity:
        """From a `security.protocol` value (case-insensitive, as Kafka reads it)."""
        try:
            protocol = SecurityProtocol[security_protocol.strip().upper()]
        except KeyError:
            names = ", ".join(p.name for p in SecurityProtocol)
            raise ValueError(
                f"security.protocol={security_protocol!r} is not one of {names}"
            ) from None
        return cls(protocol)


#: Plaintext: no TLS, no SASL (every connection today).
PLAINTEXT: Final = ClientSecurity()


def open_socket(
    endpoint: Endpoint,
    security: ClientSecurity = PLAINTEXT,
    *,
    timeout_s: float,
    send_buffer_bytes: int = -1,
    receive_buffer_bytes: int = -1,
) -> socket.socket:
    """A connected blocking socket (no timeout once connected); raises OSError."""
    assert security.security_protocol is SecurityProtocol.PLAINTEXT
    sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if send_buffer_bytes > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
        if receive_buffer_bytes > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
        sock.settimeout(None)
    except OSError:
        sock.close()
        raise
    return sock


async def open_stream(
    endpoint: Endpoint, security: ClientSecurity = PLAINTEXT
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An asyncio stream pair to `endpoint` (the caller bounds it with its timeout)."""
    assert security.security_protocol is SecurityProtocol.PLAINTEXT
    return await asyncio.open_connection(endpoint.host, endpoint.port)
