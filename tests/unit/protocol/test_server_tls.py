"""A KafkaServer on an SSL listener, over real sockets and real TLS: the principal comes from
the client's certificate, a stalled, plaintext or garbage peer loses its own connection only,
and the outbound factory's TLS (blocking and asyncio) talks to it."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from sparklog.protocol.api_versions import BROKER_APIS
from sparklog.protocol.async_client import AsyncKafkaConnection, api_versions_response
from sparklog.protocol.connection import NEED_DATA, ClientConnection
from sparklog.protocol.outbound import ClientSecurity, Endpoint, open_socket
from sparklog.protocol.server import KafkaServer
from sparklog.security.listeners import ListenerEndpoint, ListenerSettings, listener_security
from sparklog.security.session import SecurityProtocol

VERSIONS = ApiVersionsRequest(client_software_name="t", client_software_version="1")


class Audit:
    def __init__(self) -> None:
        self.events: list = []

    def record(self, event) -> None:
        self.events.append(event)


def tls_server(
    ca, sessions: list, *, rules: str = "DEFAULT", server=None, audit=None, **props
) -> KafkaServer:
    """A KafkaServer on listener SSL built from the listener's settings, as servers build
    theirs (`listener_security`); handshakes bounded at 1 s."""

    async def handler(request):
        sessions.append(request.session)
        return api_versions_response(BROKER_APIS, request.api_version)

    settings = ca.server_props(server=server) | props
    settings |= {
        "ssl.principal.mapping.rules": rules,
        "listener.name.ssl.sparklog.ssl.handshake.timeout.ms": "1000",
    }
    endpoint = ListenerEndpoint("SSL", SecurityProtocol.SSL, "127.0.0.1", 0)
    security = listener_security(endpoint, ListenerSettings("SSL", settings))
    return KafkaServer(handler, BROKER_APIS, security=security, audit=audit or Audit(), node_id=7)


def security(ca, client=None, **props) -> ClientSecurity:
    return ClientSecurity.of("SSL", ca.client_props(client) | props)


def api_versions_over(sock: socket.socket):
    """Send ApiVersions on a connected (TLS) socket and read the response."""
    conn = ClientConnection("t")
    sock.sendall(conn.send_request(VERSIONS)[1])
    while (item := conn.next_response()) is NEED_DATA:
        data = sock.recv(65536)
        assert data, "server closed the connection"
        conn.receive_data(data)
    return item[1]


async def api_versions_async(port: int, sec: ClientSecurity):
    conn = AsyncKafkaConnection("127.0.0.1", port, security=sec)
    await conn.connect(timeout_s=5)
    await conn.close()
    return conn.api_versions


def run(server: KafkaServer, body):
    async def go():
        await server.start()
        try:
            return await body(server)
        finally:
            await server.stop()

    return asyncio.run(go())


def test_mtls_principal_is_the_mapped_subject_over_blocking_and_asyncio_clients(tls_ca):
    sessions: list = []
    server = tls_server(
        tls_ca,
        sessions,
        rules="RULE:^CN=([^,]+),OU=tests,.*$/$1/L,DEFAULT",
        **{"ssl.client.auth": "required"},
    )
    alice, bob = tls_ca.client("Alice"), tls_ca.client("bob", organizational_unit="ops")

    async def body(server):
        endpoint = Endpoint("127.0.0.1", server.port)
        sec = security(tls_ca, alice)
        sock = await asyncio.to_thread(open_socket, endpoint, sec, timeout_s=5)
        with sock:
            assert isinstance(sock, ssl.SSLSocket)
            assert (await asyncio.to_thread(api_versions_over, sock)).error_code == 0
        assert await api_versions_async(server.port, security(tls_ca, bob))

    run(server, body)
    assert [str(s.principal) for s in sessions] == ["User:alice", "User:CN=bob,OU=ops,O=sparklog"]
    assert {s.security_protocol for s in sessions} == {SecurityProtocol.SSL}
    assert {s.listener_name for s in sessions} == {"SSL"}


def test_tls_without_a_client_certificate_is_anonymous(tls_ca):
    sessions: list = []
    server = tls_server(tls_ca, sessions, **{"ssl.client.auth": "requested"})
    run(server, lambda s: api_versions_async(s.port, security(tls_ca)))
    assert [str(s.principal) for s in sessions] == ["User:ANONYMOUS"]


def test_required_client_auth_refuses_a_client_without_a_certificate(tls_ca):
    sessions: list = []
    audit = Audit()
    server = tls_server(tls_ca, sessions, audit=audit, **{"ssl.client.auth": "required"})

    async def body(server):
        with pytest.raises((ConnectionError, ssl.SSLError)):
            await api_versions_async(server.port, security(tls_ca))
        return server.failed_tls_handshakes

    assert run(server, body) == 1
    assert sessions == []
    (event,) = audit.events
    assert (event.decision, event.listener, event.client_address, event.node_id) == (
        "AUTHENTICATION_FAILED",
        "SSL",
        "127.0.0.1",
        7,
    )
    assert "TLS handshake failed" in event.detail


def test_a_subject_no_rule_maps_fails_authentication_and_closes(tls_ca):
    sessions: list = []
    audit = Audit()
    server = tls_server(
        tls_ca,
        sessions,
        rules="RULE:^CN=(.*),OU=ops,.*$/$1/",
        audit=audit,
        **{"ssl.client.auth": "required"},
    )

    async def body(server):
        with pytest.raises(ConnectionError):
            await api_versions_async(server.port, security(tls_ca, tls_ca.client("carol")))
        # a mapped one is still served
        await api_versions_async(
            server.port, security(tls_ca, tls_ca.client("dave", organizational_unit="ops"))
        )
        return server.failed_authentications

    assert run(server, body) == 1
    assert [str(s.principal) for s in sessions] == ["User:dave"]
    (event,) = audit.events
    assert event.decision == "AUTHENTICATION_FAILED"
    assert "CN=carol,OU=tests,O=sparklog" in event.detail


def test_the_client_checks_the_servers_name_and_chain(tls_ca, tmp_path):
    from tests.support.certs import TestCA

    # a certificate for another host name: 127.0.0.1 is not in it
    server = tls_server(tls_ca, [], server=tls_ca.issue("elsewhere", "kafka.example.com"))

    async def body(server):
        other = TestCA(tmp_path / "other")
        with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
            await api_versions_async(server.port, security(other))
        with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
            await api_versions_async(server.port, security(tls_ca))
        # ssl.endpoint.identification.algorithm= (empty): the chain is checked, not the name
        off = security(tls_ca, **{"ssl.endpoint.identification.algorithm": ""})
        await api_versions_async(server.port, off)

    run(server, body)


async def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed `sock` (EOF or reset) within 5 s."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(5):
            while await loop.sock_recv(sock, 65536):
                pass
    except ConnectionResetError:
        pass
    return True


@pytest.mark.parametrize(
    "junk",
    [
        # a plaintext ApiVersions request on the TLS port
        ClientConnection("t").send_request(VERSIONS)[1],
        # a TLS record header announcing garbage
        b"\x16\x03\x01\x00\x10" + b"\xff" * 16,
        struct.pack(">i", 1 << 30) + b"garbage",
    ],
    ids=["plaintext-request", "tls-garbage", "huge-size"],
)
def test_plaintext_or_garbage_closes_that_connection_only(tls_ca, junk):
    sessions: list = []
    server = tls_server(tls_ca, sessions)

    async def body(server):
        loop = asyncio.get_running_loop()
        bad = socket.socket()
        bad.setblocking(False)
        with bad:
            await loop.sock_connect(bad, ("127.0.0.1", server.port))
            await loop.sock_sendall(bad, junk)
            assert await _closed_by_server(bad)
        await api_versions_async(server.port, security(tls_ca))  # others are served
        return server.failed_tls_handshakes

    assert run(server, body) == 1
    assert len(sessions) == 1


def test_a_client_stalling_mid_handshake_is_closed_after_the_bound(tls_ca):
    server = tls_server(tls_ca, [])  # handshakes bounded at 1 s

    async def body(server):
        loop = asyncio.get_running_loop()
        stalled = socket.socket()
        stalled.setblocking(False)
        with stalled:
            await loop.sock_connect(stalled, ("127.0.0.1", server.port))
            # the first bytes of a ClientHello, then nothing
            await loop.sock_sendall(stalled, b"\x16\x03\x01\x02\x00\x01")
            await api_versions_async(server.port, security(tls_ca))  # others are served
            assert await _closed_by_server(stalled)
        return server.failed_tls_handshakes, server.connection_count

    assert run(server, body) == (1, 0)


def test_tls_connections_count_against_max_connections_per_ip(tls_ca):
    sessions: list = []
    server = tls_server(tls_ca, sessions)
    server.max_connections_per_ip = 1

    async def body(server):
        loop = asyncio.get_running_loop()
        idle = socket.socket()
        idle.setblocking(False)
        with idle:  # holds the one slot, mid-handshake
            await loop.sock_connect(idle, ("127.0.0.1", server.port))
            for _ in range(200):
                if server.connection_count:
                    break
                await asyncio.sleep(0.01)
            with pytest.raises((ConnectionError, ssl.SSLError, OSError)):
                await api_versions_async(server.port, security(tls_ca))
        return server.refused_connections

    assert run(server, body) == 1


def test_a_server_refuses_a_tls_protocol_without_a_context():
    with pytest.raises(ValueError, match="needs a TLS context"):
        KafkaServer(lambda r: None, BROKER_APIS, security_protocol=SecurityProtocol.SSL)


def test_hundreds_of_stalled_and_garbage_handshakes_leave_others_served(tls_ca):
    sessions: list = []
    server = tls_server(tls_ca, sessions)

    async def body(server):
        loop = asyncio.get_running_loop()
        bad = []
        for i in range(300):
            s = socket.socket()
            s.setblocking(False)
            await loop.sock_connect(s, ("127.0.0.1", server.port))
            # half stall mid-ClientHello, half send garbage
            await loop.sock_sendall(s, b"\x16\x03\x01\x02\x00\x01" if i % 2 else b"\xff" * 64)
            bad.append(s)
        try:
            for _ in range(3):  # served while all of them are open or being refused
                await api_versions_async(server.port, security(tls_ca))
            closed = await asyncio.gather(*(_closed_by_server(s) for s in bad))
        finally:
            for s in bad:
                s.close()
        return all(closed), server.failed_tls_handshakes

    assert run(server, body) == (True, 300)
    assert len(sessions) == 3
