"""The outbound-connection factory: endpoints, client-side security, and the socket options
every site had before it (TCP_NODELAY, the clients' buffer sizes)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from sparklog.protocol.outbound import (
    PLAINTEXT,
    ClientSecurity,
    Endpoint,
    open_socket,
    open_stream,
    server_client_security,
)
from sparklog.security.sasl.client import SaslClientConfig
from sparklog.security.session import SecurityProtocol


def test_endpoints_parse_and_print():
    assert Endpoint.parse("127.0.0.1:9092") == Endpoint("127.0.0.1", 9092)
    assert Endpoint.parse("::1:9092") == Endpoint("::1", 9092)
    assert str(Endpoint("h", 1)) == "h:1"
    with pytest.raises(ValueError, match="is not host:port"):
        Endpoint.parse("localhost")


def test_client_security_protocols(tls_ca):
    assert ClientSecurity.of("plaintext") == PLAINTEXT
    sasl = SaslClientConfig("PLAIN", {"username": "alice", "password": "pw"})
    assert ClientSecurity.of("sasl_plaintext", sasl=sasl).uses_sasl
    with pytest.raises(ValueError, match="SASL_PLAINTEXT needs sasl.mechanism"):
        ClientSecurity.of("SASL_PLAINTEXT")
    with pytest.raises(ValueError, match="PLAINTEXT takes no SASL settings"):
        ClientSecurity.of("PLAINTEXT", sasl=sasl)
    with pytest.raises(ValueError, match="is not one of PLAINTEXT, SSL"):
        ClientSecurity.of("TLS")
    with pytest.raises(ValueError, match="needs a TLS context"):
        ClientSecurity(SecurityProtocol.SSL)
    tls = ClientSecurity.of("ssl", tls_ca.client_props())
    assert tls.uses_tls and not tls.uses_sasl and tls.ssl_context is not None
    assert tls.ssl_context.check_hostname  # ssl.endpoint.identification.algorithm=https
    both = ClientSecurity.of("SASL_SSL", tls_ca.client_props(), sasl=sasl)
    assert both.uses_tls and both.uses_sasl


@pytest.fixture
def listener():
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield Endpoint("127.0.0.1", server.getsockname()[1])


def test_blocking_sockets_keep_the_options_the_clients_set(listener):
    with open_socket(listener, timeout_s=5, send_buffer_bytes=65536) as sock:
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        assert sock.gettimeout() is None
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) >= 65536


def test_asyncio_streams_have_nodelay(listener):
    async def go() -> int:
        _reader, writer = await open_stream(listener)
        try:
            sock = writer.get_extra_info("socket")
            return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        finally:
            writer.close()

    assert asyncio.run(go())


def test_server_connections_use_the_listeners_protocol_and_the_servers_own_login():
    from sparklog.security.listener_config import ListenerConfig
    from sparklog.security.sasl.client import CONTROLLER_MECHANISM

    listeners = ListenerConfig.from_properties(
        {
            "listeners": "CLIENT://:0,REPLICATION://:0,CONTROLLER://:0",
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:SASL_PLAINTEXT,"
            "CONTROLLER:SASL_PLAINTEXT",
            "inter.broker.listener.name": "REPLICATION",
            "controller.listener.names": "CONTROLLER",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.replication.scram-sha-512.sasl.jaas.config": (
                'x.ScramLoginModule required username="broker" password="b-pw";'
            ),
            "listener.name.controller.plain.sasl.jaas.config": (
                'x.PlainLoginModule required username="ctl" password="c-pw" user_ctl="c-pw";'
            ),
        }
    )
    replication = server_client_security(listeners)
    assert replication.security_protocol is SecurityProtocol.SASL_PLAINTEXT
    assert replication.sasl is not None and replication.sasl.mechanism == "SCRAM-SHA-512"
    assert replication.sasl.username == "broker"
    controller = server_client_security(listeners, "CONTROLLER", CONTROLLER_MECHANISM)
    assert controller.sasl is not None and (
        controller.sasl.mechanism,
        controller.sasl.username,
    ) == (
        "PLAIN",
        "ctl",
    )
    assert server_client_security(listeners, "CLIENT") == PLAINTEXT
    assert "b-pw" not in repr(replication)
