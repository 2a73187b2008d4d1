"""Kafka's SaslServerAuthenticator as a sans-IO state machine, driven through a real
`ServerConnection` with kio-encoded requests: handshake v0 (raw tokens) and v1, SaslAuthenticate
v0-v2, errors 33/34/58, the receive-size bound, the handshake deadline, KIP-368."""

from __future__ import annotations

import struct
from typing import Any

import pytest
import scramp

from sparklog.client.request_builder import build_request
from sparklog.errors import (
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from sparklog.protocol import codec
from sparklog.protocol.api_versions import BROKER_APIS, ApiKey
from sparklog.protocol.connection import (
    NEED_DATA,
    ClientConnection,
    ConnectionState,
    ProtocolError,
    ServerConnection,
)
from sparklog.protocol.sasl_authenticator import (
    SaslReply,
    SaslServerAuthenticator,
    sasl_reply,
)
from sparklog.security.credentials import ScramMechanism
from sparklog.security.jaas import parse_login_module
from sparklog.security.sasl.enabled import SaslMechanisms, SaslServerConfig
from sparklog.security.sasl.oauthbearer import UnsecuredJwsValidator
from sparklog.security.sasl.plain import PlainUsers
from sparklog.security.sasl.scram import InMemoryCredentialStore
from sparklog.security.session import SecurityProtocol

NOW_MS = 1_800_000_000_000
STORE = InMemoryCredentialStore()
STORE.add_password(ScramMechanism.SCRAM_SHA_512, "alice", "alice-pw")
MECHANISMS = SaslMechanisms(
    ("PLAIN", "SCRAM-SHA-512", "OAUTHBEARER"),
    plain_users=PlainUsers.from_login_module(
        parse_login_module(
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'user_alice="alice-pw" user_bob="bob-pw";'
        )
    ),
    credentials=STORE,
    token_validator=UnsecuredJwsValidator(),
)


class Peer:
    """A SASL_PLAINTEXT connection's server side and a client speaking to it."""

    def __init__(self, **config: Any) -> None:
        self.sasl = SaslServerAuthenticator(SaslServerConfig(MECHANISMS, **config), NOW_MS)
        self.server = ServerConnection(
            BROKER_APIS, security_protocol=SecurityProtocol.SASL_PLAINTEXT, sasl=self.sasl
        )
        self.client = ClientConnection("app")

    def send(
        self, api: ApiKey, version: int, now_ms: int = NOW_MS, **fields: Any
    ) -> SaslReply | None:
        _cid, data = self.client.send_request(build_request(api, version, fields))
        return self.feed(data, now_ms)

    def feed(self, data: bytes, now_ms: int = NOW_MS) -> SaslReply | None:
        self.server.receive_data(data)
        request = self.server.next_request()
        assert request is not NEED_DATA
        reply = sasl_reply(self.server, request, now_ms)
        if reply is not None and reply.body is not None:
            self.client.receive_data(self.server.send_response(request, reply.body))
            _cid, self.response = self.client.next_response()
        elif reply is None or reply.raw is None:
            self.client._in_flight.clear()  # for the handler, or closed without an answer
        return reply

    def raw(self, token: bytes) -> SaslReply | None:
        return self.feed(struct.pack(">i", len(token)) + token)


def test_plain_over_handshake_v1_and_authenticate_v2() -> None:
    peer = Peer(connections_max_reauth_ms=60_000)
    assert peer.server.state is ConnectionState.PRE_AUTHENTICATION
    assert (
        peer.send(ApiKey.API_VERSIONS, 3, client_software_name="x", client_software_version="1")
        is None
    )
    reply = peer.send(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")
    assert reply is not None and not reply.close
    assert peer.response.error_code == 0
    assert list(peer.response.mechanisms) == ["PLAIN", "SCRAM-SHA-512", "OAUTHBEARER"]
    reply = peer.send(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\x00alice\x00alice-pw")
    assert reply is not None and str(reply.authenticated) == "User:alice"
    assert peer.response.error_code == 0
    assert peer.response.session_lifetime.total_seconds() * 1000 == 60_000
    assert peer.server.state is ConnectionState.AUTHENTICATED
    assert str(peer.server.session("app").principal) == "User:alice"
    # what follows goes to the handler; a second SaslAuthenticate is ILLEGAL_SASL_STATE, kept open
    assert (
        peer.send(
            ApiKey.METADATA,
            12,
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        is None
    )
    again = peer.send(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"x")
    assert again is not None and not again.close
    assert peer.response.error_code == IllegalSaslStateError.code


def test_kafka_python_style_handshake_v0_then_raw_tokens() -> None:
    peer = Peer()
    peer.send(ApiKey.SASL_HANDSHAKE, 0, mechanism="PLAIN")
    assert peer.response.error_code == 0 and peer.sasl.raw_tokens
    reply = peer.raw(b"\x00alice\x00alice-pw")
    assert reply is not None and reply.raw == b"\x00\x00\x00\x00"  # empty, size-prefixed
    assert peer.server.state is ConnectionState.AUTHENTICATED and not peer.sasl.raw_tokens
    assert (
        peer.send(
            ApiKey.METADATA,
            12,
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        is None
    )


def test_raw_scram_exchange_and_raw_failure_closes_without_answer() -> None:
    peer = Peer()
    peer.send(ApiKey.SASL_HANDSHAKE, 0, mechanism="SCRAM-SHA-512")
    client = scramp.ScramClient(["SCRAM-SHA-512"], "alice", "alice-pw")
    first = peer.raw(client.get_client_first().encode())
    assert first is not None and first.raw is not None
    client.set_server_first(first.raw[4:].decode())
    final = peer.raw(client.get_client_final().encode())
    assert final is not None and final.raw is not None and final.authenticated is not None
    client.set_server_final(final.raw[4:].decode())

    bad = Peer()
    bad.send(ApiKey.SASL_HANDSHAKE, 0, mechanism="PLAIN")
    reply = bad.raw(b"\x00alice\x00wrong")
    assert reply is not None and reply.close and reply.raw is None and reply.close_delay_ms == 100
    assert "wrong" not in (reply.failure or "")


def test_scram_over_authenticate_v1() -> None:
    peer = Peer()
    peer.send(ApiKey.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-512")
    client = scramp.ScramClient(["SCRAM-SHA-512"], "alice", "alice-pw")
    peer.send(ApiKey.SASL_AUTHENTICATE, 1, auth_bytes=client.get_client_first().encode())
    client.set_server_first(peer.response.auth_bytes.decode())
    reply = peer.send(ApiKey.SASL_AUTHENTICATE, 1, auth_bytes=client.get_client_final().encode())
    client.set_server_final(peer.response.auth_bytes.decode())
    assert reply is not None and str(reply.authenticated) == "User:alice"
    assert peer.response.session_lifetime.total_seconds() == 0  # no reauth configured


def test_unsupported_mechanism_is_33_with_the_enabled_list_then_close() -> None:
    peer = Peer()
    reply = peer.send(ApiKey.SASL_HANDSHAKE, 1, mechanism="GSSAPI")
    assert reply is not None and reply.close and reply.close_delay_ms == 100
    assert peer.response.error_code == UnsupportedSaslMechanismError.code
    assert list(peer.response.mechanisms) == ["PLAIN", "SCRAM-SHA-512", "OAUTHBEARER"]


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\x00alice\x00wrong", "Authentication failed: Invalid username or password"),
        (
            b"garbage",
            "Authentication failed during authentication due to invalid credentials with SASL mechanism PLAIN",
        ),
    ],
)
def test_failed_login_is_58_then_delayed_close(token: bytes, message: str) -> None:
    peer = Peer(failed_authentication_delay_ms=250)
    peer.send(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")
    reply = peer.send(ApiKey.SASL_AUTHENTICATE, 0, auth_bytes=token)
    assert reply is not None and reply.close and reply.close_delay_ms == 250
    assert peer.response.error_code == SaslAuthenticationFailedError.code
    assert peer.response.error_message == message


def test_other_apis_before_authentication_are_illegal_sasl_state_then_close() -> None:
    peer = Peer()
    reply = peer.send(
        ApiKey.METADATA,
        12,
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    assert (
        reply is not None and reply.close and reply.body is None
    )  # Metadata has no top-level error
    peer = Peer()
    reply = peer.send(ApiKey.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False)
    assert reply is not None and reply.close
    assert peer.response.error_code == IllegalSaslStateError.code
    peer = Peer()
    reply = peer.send(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\x00alice\x00alice-pw")
    assert (
        reply is not None and reply.close and peer.response.error_code == IllegalSaslStateError.code
    )
    peer = Peer()  # after the handshake, even ApiVersions is out of place
    peer.send(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")
    reply = peer.send(ApiKey.API_VERSIONS, 3, client_software_name="x", client_software_version="1")
    assert (
        reply is not None and reply.close and peer.response.error_code == IllegalSaslStateError.code
    )


def test_frames_over_the_receive_size_are_refused_until_authenticated() -> None:
    peer = Peer(max_receive_size=1024)
    with pytest.raises(ProtocolError, match="outside"):
        peer.send(ApiKey.SASL_HANDSHAKE, 1, mechanism="P" * 2000)
    peer = Peer(max_receive_size=1024)
    peer.send(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")
    peer.send(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\x00alice\x00alice-pw")
    big = peer.send(
        ApiKey.CREATE_TOPICS,
        7,
        topics=[
            {
                "name": "t" * 200,
                "num_partitions": 1,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
        ]
        * 10,
        timeout_ms=1000,
        validate_only=False,
    )
    assert big is None  # 2 KiB request served once authenticated


def test_handshake_deadline() -> None:
    peer = Peer(handshake_timeout_ms=5_000)
    assert not peer.sasl.handshake_timed_out(NOW_MS + 4_999)
    assert peer.sasl.handshake_timed_out(NOW_MS + 5_000)
    peer.send(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")
    peer.send(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\x00alice\x00alice-pw")
    assert peer.sasl.handshake_deadline_ms is None  # done: no bound but connections.max.idle.ms


def _login(
    peer: Peer, user: str, password: str, now_ms: int = NOW_MS, version: int = 2
) -> SaslReply | None:
    peer.send(ApiKey.SASL_HANDSHAKE, 1, now_ms, mechanism="PLAIN")
    return peer.send(
        ApiKey.SASL_AUTHENTICATE, version, now_ms, auth_bytes=f"\x00{user}\x00{password}".encode()
    )


def test_kip368_expired_session_closes_and_reauthentication_extends_it() -> None:
    peer = Peer(connections_max_reauth_ms=1_000)
    _login(peer, "alice", "alice-pw")
    later = NOW_MS + 999
    assert (
        peer.send(
            ApiKey.METADATA,
            12,
            later,
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        is None
    )
    reply = _login(peer, "alice", "alice-pw", later)  # re-authentication before expiry
    assert reply is not None and reply.authenticated is not None and not reply.close
    assert peer.sasl.session_expiry_ms == later + 1_000
    expired = peer.send(
        ApiKey.METADATA,
        12,
        later + 1_000,
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    assert expired is not None and expired.close and expired.expired and expired.body is None


def test_kip368_principal_and_mechanism_may_not_change() -> None:
    peer = Peer(connections_max_reauth_ms=1_000)
    _login(peer, "alice", "alice-pw")
    reply = _login(peer, "bob", "bob-pw")
    assert reply is not None and reply.close
    assert peer.response.error_code == SaslAuthenticationFailedError.code
    assert "Cannot change principals during re-authentication" in peer.response.error_message
    peer = Peer(connections_max_reauth_ms=1_000)
    _login(peer, "alice", "alice-pw")
    peer.send(ApiKey.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-512")
    reply = peer.send(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"n,,n=alice,r=abc")
    assert reply is not None and reply.close
    assert "not supported for re-authentication of mechanism 'PLAIN'" in peer.response.error_message


def test_handshake_after_authentication_without_reauth_support_is_illegal_but_kept() -> None:
    peer = Peer()
    _login(peer, "alice", "alice-pw", version=0)  # v0 clients do not re-authenticate
    reply = peer.send(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")
    assert reply is not None and not reply.close
    assert peer.response.error_code == IllegalSaslStateError.code


def test_oauthbearer_token_expiry_bounds_the_session() -> None:
    import base64
    import json

    def b64(obj: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    exp_s = NOW_MS // 1000 + 30
    token = f"{b64({'alg': 'none'})}.{b64({'sub': 'svc', 'exp': exp_s})}."
    peer = Peer(connections_max_reauth_ms=3_600_000)
    peer.send(ApiKey.SASL_HANDSHAKE, 1, mechanism="OAUTHBEARER")
    reply = peer.send(
        ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=f"n,,\x01auth=Bearer {token}\x01\x01".encode()
    )
    assert reply is not None and str(reply.authenticated) == "User:svc"
    assert peer.response.session_lifetime.total_seconds() * 1000 == exp_s * 1000 - NOW_MS


def test_handshake_on_a_listener_without_sasl_is_illegal_sasl_state() -> None:
    server = ServerConnection(BROKER_APIS)
    client = ClientConnection("app")
    _cid, data = client.send_request(
        build_request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    )
    server.receive_data(data)
    request = server.next_request()
    assert request is not NEED_DATA
    reply = sasl_reply(server, request, NOW_MS)
    assert reply is not None and not reply.close
    client.receive_data(server.send_response(request, reply.body))
    _cid, response = client.next_response()
    assert response.error_code == IllegalSaslStateError.code and list(response.mechanisms) == []


def test_sasl_listener_needs_an_authenticator() -> None:
    with pytest.raises(ValueError, match="no SASL server side"):
        ServerConnection(BROKER_APIS, security_protocol=SecurityProtocol.SASL_PLAINTEXT)
    assert codec.response_schema(ApiKey.SASL_AUTHENTICATE, 2)


def test_a_request_with_api_key_minus_one_is_not_taken_for_a_raw_token() -> None:
    # found by the sasl_handshake fuzz target: api key -1 before authentication once passed
    # for a raw token (the marker was -1) and crashed the authenticator
    peer = Peer()
    frame = struct.pack(">hhi", -1, 0, 7) + b"\x00\x00"
    reply = peer.feed(struct.pack(">i", len(frame)) + frame)
    assert reply is not None and reply.close and reply.body is None


def test_kip368_a_reauthentication_under_way_is_not_cut_by_the_old_sessions_expiry() -> None:
    peer = Peer(connections_max_reauth_ms=1_000)
    _login(peer, "alice", "alice-pw")
    peer.send(ApiKey.SASL_HANDSHAKE, 1, NOW_MS + 900, mechanism="PLAIN")
    reply = peer.send(
        ApiKey.SASL_AUTHENTICATE, 2, NOW_MS + 1_100, auth_bytes=b"\x00alice\x00alice-pw"
    )
    assert reply is not None and not reply.close and reply.authenticated is not None
    assert peer.sasl.session_expiry_ms == NOW_MS + 2_100
