"""SASL on the wire over TLS, request by request, against Apache Kafka and sparklog secured the
same way (tests/support/secure_clusters.py). Every expectation is Apache Kafka's observed
behaviour (SaslServerAuthenticator); sparklog must answer the same:

- a request other than ApiVersions / SaslHandshake before authentication: no answer, the
  connection is closed;
- SaslHandshake v1 naming a mechanism the listener has not enabled: UNSUPPORTED_SASL_MECHANISM
  (33) with the enabled mechanisms;
- PLAIN and SCRAM-SHA-512 (RFC 5802 via scramp's client) with the right password: error 0 and
  `session_lifetime_ms` 0 (connections.max.reauth.ms defaults to 0), then requests are served
  as that user;
- a wrong password: SASL_AUTHENTICATION_FAILED (58), then the connection is closed;
- SaslHandshake v0 (kafka-python's older clients, KAFKA-18270): the tokens then travel raw,
  each behind a 4-byte length, not in SaslAuthenticate; PLAIN's answer is an empty token, a
  wrong password closes the connection (v0 has no frame to carry an error)."""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any

import pytest
import scramp

from sparklog.protocol import codec, kio_build
from sparklog.protocol.connection import NEED_DATA, ClientConnection
from tests.support.secure_clusters import PLAIN_USERS, SCRAM_USERS, SecureTarget

pytestmark = [pytest.mark.interop, pytest.mark.oracle]

API_VERSIONS, METADATA, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 3, 17, 36
UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED = 33, 58
ENABLED = {"SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"}


class Closed(Exception):
    """The server closed the connection instead of answering."""


class WireClient:
    """One TLS connection speaking Kafka's protocol through sparklog's sans-IO codec."""

    def __init__(self, target: SecureTarget) -> None:
        host, _, port = target.sasl_ssl.split(",")[0].rpartition(":")
        context = ssl.create_default_context(cafile=str(target.ca.ca_path))
        raw = socket.create_connection((host, int(port)), timeout=15)
        self.sock = context.wrap_socket(raw, server_hostname=host)
        self.conn = ClientConnection("proof-wire")

    def ask(self, api_key: int, version: int, **fields: Any) -> Any:
        body = kio_build.build(codec.request_schema(api_key, version), fields)
        _, data = self.conn.send_request(body)
        self.sock.sendall(data)
        while (item := self.conn.next_response()) is NEED_DATA:
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionError, ssl.SSLError) as e:
                raise Closed(str(e)) from None
            if not chunk:
                raise Closed("end of stream")
            self.conn.receive_data(chunk)
        return item[1]

    def is_closed(self) -> bool:
        """True once the server has closed the connection (EOF or reset)."""
        try:
            self.sock.settimeout(10)
            return self.sock.recv(1) == b""
        except (ConnectionError, ssl.SSLError):
            return True

    def close(self) -> None:
        self.sock.close()

    def raw_token(self, token: bytes) -> bytes:
        """A SaslHandshake v0 token exchange: length-prefixed bytes out, the same back."""
        self.sock.sendall(struct.pack(">i", len(token)) + token)
        header = self._read_exactly(4)
        return self._read_exactly(struct.unpack(">i", header)[0])

    def _read_exactly(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            try:
                chunk = self.sock.recv(count - len(data))
            except (ConnectionError, ssl.SSLError) as e:
                raise Closed(str(e)) from None
            if not chunk:
                raise Closed("end of stream")
            data += chunk
        return data

    def handshake(self, mechanism: str) -> Any:
        return self.ask(SASL_HANDSHAKE, 1, mechanism=mechanism)

    def authenticate(self, token: bytes) -> Any:
        return self.ask(SASL_AUTHENTICATE, 2, auth_bytes=token)

    def metadata(self) -> Any:
        return self.ask(
            METADATA, 12, topics=None, allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )  # fmt: skip


def lifetime_ms(answer: Any) -> int:
    """`session_lifetime_ms` (kio gives a timedelta named `session_lifetime`)."""
    return int(answer.session_lifetime.total_seconds() * 1000)


@pytest.fixture
def wire(target: SecureTarget):
    client = WireClient(target)
    yield client
    client.close()


def test_requests_before_authentication_close_the_connection(wire: WireClient) -> None:
    assert wire.ask(API_VERSIONS, 3, client_software_name="proof",
                    client_software_version="1").error_code == 0  # fmt: skip
    with pytest.raises(Closed):
        wire.metadata()


def test_unknown_mechanism_lists_the_enabled_ones(wire: WireClient) -> None:
    answer = wire.handshake("NOPE-MECHANISM")
    assert answer.error_code == UNSUPPORTED_SASL_MECHANISM
    assert set(answer.mechanisms) == ENABLED


def test_plain_login_then_requests_are_served(wire: WireClient) -> None:
    assert wire.handshake("PLAIN").error_code == 0
    answer = wire.authenticate(b"\0alice\0" + PLAIN_USERS["alice"].encode())
    assert (answer.error_code, lifetime_ms(answer)) == (0, 0)
    assert wire.metadata().brokers


def test_plain_wrong_password_fails_then_closes(wire: WireClient) -> None:
    assert wire.handshake("PLAIN").error_code == 0
    answer = wire.authenticate(b"\0alice\0not-the-password")
    assert answer.error_code == SASL_AUTHENTICATION_FAILED
    assert "not-the-password" not in (answer.error_message or "")
    assert wire.is_closed()


@pytest.mark.parametrize("password_ok", [True, False], ids=["right", "wrong"])
def test_scram_sha_512_exchange(wire: WireClient, password_ok: bool) -> None:
    password = SCRAM_USERS["alice"] if password_ok else "not-the-password"
    assert wire.handshake("SCRAM-SHA-512").error_code == 0
    client = scramp.ScramClient(["SCRAM-SHA-512"], "alice", password)
    first = wire.authenticate(client.get_client_first().encode())
    assert first.error_code == 0
    client.set_server_first(first.auth_bytes.decode())
    final = wire.authenticate(client.get_client_final().encode())
    if password_ok:
        assert (final.error_code, lifetime_ms(final)) == (0, 0)
        client.set_server_final(final.auth_bytes.decode())  # verifies the server's signature
        assert wire.metadata().brokers
    else:
        assert final.error_code == SASL_AUTHENTICATION_FAILED
        assert wire.is_closed()


@pytest.mark.parametrize("password_ok", [True, False], ids=["right", "wrong"])
def test_handshake_v0_then_raw_plain_token(wire: WireClient, password_ok: bool) -> None:
    answer = wire.ask(SASL_HANDSHAKE, 0, mechanism="PLAIN")
    assert answer.error_code == 0 and set(answer.mechanisms) == ENABLED
    password = PLAIN_USERS["alice"] if password_ok else "not-the-password"
    if password_ok:
        assert wire.raw_token(b"\0alice\0" + password.encode()) == b""
        assert wire.metadata().brokers
    else:
        with pytest.raises(Closed):
            wire.raw_token(b"\0alice\0" + password.encode())
