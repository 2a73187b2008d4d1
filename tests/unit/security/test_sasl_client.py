"""The SASL client mechanisms and authenticator, against real servers' halves: scramp's own
SCRAM server (the RFC 5802 side Kafka's ScramSaslServer implements), PLAIN's RFC 4616 message
and Kafka's OAUTHBEARER initial-response format."""

from __future__ import annotations

import base64
import json
import random

import pytest
import scramp

from sparklog.client.request_builder import build_response
from sparklog.errors import (
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from sparklog.security.sasl.client import (
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    AuthState,
    OAuthBearerClient,
    PlainClient,
    SaslClientAuthenticator,
    SaslClientConfig,
    SaslConfigError,
    ScramClient,
    inter_broker_sasl,
    unsecured_jws,
)

NOW_MS = 1_700_000_000_000


def _scram_server(mechanism: str, users: dict[str, str]) -> scramp.core.ScramServer:
    m = scramp.ScramMechanism(mechanism)
    infos = {u: m.make_auth_info(p, iteration_count=4096) for u, p in users.items()}
    return m.make_server(lambda user: infos[user])


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_logs_in_to_scramps_server(mechanism: str) -> None:
    server = _scram_server(mechanism, {"alice": "alice-secret"})
    client = ScramClient(mechanism, "alice", "alice-secret")
    server.set_client_first(client.initial_response().decode())
    final = client.evaluate_challenge(server.get_server_first().encode())
    assert final is not None and not client.complete
    server.set_client_final(final.decode())
    assert client.evaluate_challenge(server.get_server_final().encode()) is None
    assert client.complete


def test_scram_user_names_escape_comma_and_equals() -> None:
    """RFC 5802 §5.1: `,` and `=` in a name travel as `=2C` and `=3D` (Kafka's formatter)."""
    server = _scram_server("SCRAM-SHA-256", {"a,b=c": "pw"})
    client = ScramClient("SCRAM-SHA-256", "a,b=c", "pw")
    first = client.initial_response().decode()
    assert "n=a=2Cb=3Dc," in first
    server.set_client_first(first)
    final = client.evaluate_challenge(server.get_server_first().encode())
    assert final is not None
    server.set_client_final(final.decode())
    client.evaluate_challenge(server.get_server_final().encode())
    assert client.complete


def test_scram_wrong_password_is_refused_by_the_server() -> None:
    server = _scram_server("SCRAM-SHA-512", {"alice": "right"})
    client = ScramClient("SCRAM-SHA-512", "alice", "wrong")
    server.set_client_first(client.initial_response().decode())
    final = client.evaluate_challenge(server.get_server_first().encode())
    assert final is not None
    with pytest.raises(scramp.ScramException):
        server.set_client_final(final.decode())


def test_scram_server_that_does_not_know_the_password_fails_the_client() -> None:
    """A server signature that does not verify means an impostor: the client fails the login
    (mutual authentication, RFC 5802 §3) without leaking the password in the message."""
    honest = _scram_server("SCRAM-SHA-256", {"alice": "secret-pw"})
    client = ScramClient("SCRAM-SHA-256", "alice", "secret-pw")
    honest.set_client_first(client.initial_response().decode())
    final = client.evaluate_challenge(honest.get_server_first().encode())
    assert final is not None
    honest.set_client_final(final.decode())
    forged = "v=" + base64.b64encode(b"\0" * 32).decode()
    with pytest.raises(SaslAuthenticationFailedError) as e:
        client.evaluate_challenge(forged.encode())
    assert "secret-pw" not in str(e.value)


def test_plain_message_is_rfc4616() -> None:
    client = PlainClient("alice", "pw")
    assert client.initial_response() == b"\0alice\0pw"
    assert client.complete and client.evaluate_challenge(b"") is None
    assert "pw" not in repr(client)


def test_oauthbearer_initial_response_and_server_error() -> None:
    client = OAuthBearerClient("h.p.", {"traceId": "123"})
    assert client.initial_response() == b"n,,\x01auth=Bearer h.p.\x01traceId=123\x01\x01"
    assert client.evaluate_challenge(b'{"status":"invalid_token"}') == b"\x01"
    assert not client.complete and client.server_error == '{"status":"invalid_token"}'


def test_oauthbearer_rejects_bad_extension_names() -> None:
    with pytest.raises(SaslConfigError, match="extension name"):
        OAuthBearerClient("h.p.", {"auth": "x"})


def test_unsecured_jws_has_kafkas_claims() -> None:
    token = unsecured_jws(
        {
            "unsecuredLoginStringClaim_sub": "alice",
            "unsecuredLoginListClaim_scope": "|read|write",
            "unsecuredLoginNumberClaim_n": "7",
            "unsecuredLoginLifetimeSeconds": "60",
        },
        NOW_MS,
    )
    header, payload, signature = token.split(".")
    assert signature == ""
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "none"}
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    assert claims["sub"] == "alice" and claims["scope"] == ["read", "write"] and claims["n"] == 7
    assert claims["exp"] - claims["iat"] == 60 and claims["iat"] == NOW_MS / 1000


def test_unsecured_jws_needs_a_principal_and_no_reserved_claims() -> None:
    with pytest.raises(SaslConfigError, match="unsecuredLoginStringClaim_sub"):
        unsecured_jws({"unsecuredLoginLifetimeSeconds": "60"}, NOW_MS)
    with pytest.raises(SaslConfigError, match="'exp'"):
        unsecured_jws(
            {"unsecuredLoginStringClaim_sub": "a", "unsecuredLoginNumberClaim_exp": "1"}, NOW_MS
        )


def test_config_from_jaas_hides_secrets_and_names_the_fix() -> None:
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="s3cr3t";'
    config = SaslClientConfig.from_jaas("scram-sha-512", jaas)
    assert config.mechanism == "SCRAM-SHA-512" and config.username == "alice"
    assert "s3cr3t" not in repr(config)
    with pytest.raises(SaslConfigError, match="needs sasl.jaas.config"):
        SaslClientConfig.from_jaas("PLAIN", None)
    with pytest.raises(SaslConfigError, match="needs password") as e:
        SaslClientConfig.from_jaas("PLAIN", 'x.PlainLoginModule required username="alice";')
    assert "alice" not in str(e.value).split("(e.g.")[0]
    with pytest.raises(SaslConfigError, match="GSSAPI.*Kerberos"):
        SaslClientConfig("GSSAPI", {})
    with pytest.raises(SaslConfigError, match="OAUTHBEARER needs a token"):
        SaslClientConfig("OAUTHBEARER", {})


def test_token_provider_must_return_a_jwt() -> None:
    config = SaslClientConfig.from_jaas("OAUTHBEARER", None, token_provider=lambda: "opaque")
    with pytest.raises(SaslConfigError, match="compact JWT"):
        config.new_mechanism(NOW_MS)


# ----------------------------------------------------------------------- authenticator


def _handshake(error_code: int = 0, mechanisms: tuple[str, ...] = ("PLAIN",)) -> object:
    return build_response(SASL_HANDSHAKE, 1, {"error_code": error_code, "mechanisms": mechanisms})


def _authenticate(
    auth_bytes: bytes = b"", error_code: int = 0, message: str | None = None, lifetime_ms: int = 0
) -> object:
    fields = {
        "error_code": error_code,
        "error_message": message,
        "auth_bytes": auth_bytes,
        "session_lifetime": lifetime_ms,
    }
    return build_response(SASL_AUTHENTICATE, 2, fields)


def test_authenticator_runs_scram_to_completion_with_session_lifetime() -> None:
    server = _scram_server("SCRAM-SHA-256", {"alice": "pw"})
    config = SaslClientConfig("SCRAM-SHA-256", {"username": "alice", "password": "pw"})
    auth = SaslClientAuthenticator(config, 2, NOW_MS, wall_clock_ms=NOW_MS, rng=random.Random(1))
    request = auth.next_request()
    assert request is not None and request.api_key == SASL_HANDSHAKE
    assert request.fields == {"mechanism": "SCRAM-SHA-256"} and auth.next_request() is None
    auth.on_response(_handshake(mechanisms=("SCRAM-SHA-256",)), NOW_MS)
    first = auth.next_request()
    assert first is not None and first.api_key == SASL_AUTHENTICATE and first.version == 2
    server.set_client_first(first.fields["auth_bytes"].decode())
    auth.on_response(_authenticate(server.get_server_first().encode()), NOW_MS)
    final = auth.next_request()
    assert final is not None
    server.set_client_final(final.fields["auth_bytes"].decode())
    auth.on_response(_authenticate(server.get_server_final().encode(), lifetime_ms=10_000), NOW_MS)
    assert auth.complete and auth.next_request() is None
    assert auth.session_lifetime_ms == 10_000
    assert auth.reauthenticate_at_ms is not None
    assert NOW_MS + 8_500 <= auth.reauthenticate_at_ms <= NOW_MS + 9_500


def test_authenticator_reports_the_enabled_mechanisms() -> None:
    config = SaslClientConfig("PLAIN", {"username": "a", "password": "b"})
    auth = SaslClientAuthenticator(config, 1, NOW_MS, wall_clock_ms=NOW_MS)
    auth.next_request()
    with pytest.raises(UnsupportedSaslMechanismError, match="enabled: SCRAM-SHA-512"):
        auth.on_response(_handshake(UnsupportedSaslMechanismError.code, ("SCRAM-SHA-512",)), NOW_MS)
    assert auth.state is AuthState.FAILED


def test_authenticator_raises_the_servers_failure() -> None:
    config = SaslClientConfig("PLAIN", {"username": "a", "password": "hunter2"})
    auth = SaslClientAuthenticator(config, 0, NOW_MS, wall_clock_ms=NOW_MS)
    auth.next_request()
    auth.on_response(_handshake(), NOW_MS)
    request = auth.next_request()
    assert request is not None and request.version == 0
    assert "hunter2" not in repr(request)
    with pytest.raises(SaslAuthenticationFailedError, match="Invalid username or password"):
        auth.on_response(
            _authenticate(
                error_code=SaslAuthenticationFailedError.code,
                message="Authentication failed: Invalid username or password",
            ),
            NOW_MS,
        )
    assert auth.state is AuthState.FAILED and auth.reauthenticate_at_ms is None


def test_authenticator_refuses_a_response_out_of_turn() -> None:
    config = SaslClientConfig("PLAIN", {"username": "a", "password": "b"})
    auth = SaslClientAuthenticator(config, 2, NOW_MS, wall_clock_ms=NOW_MS)
    with pytest.raises(IllegalSaslStateError):
        auth.on_response(_authenticate(), NOW_MS)


def test_inter_broker_credentials_come_from_the_listeners_jaas_entry() -> None:
    """Kafka's broker logs in to other brokers with the username/password of the inter-broker
    listener's JAAS entry for `sasl.mechanism.inter.broker.protocol`."""
    props = {
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="broker" password="broker-pw" user_broker="broker-pw" user_alice="a";'
        ),
    }
    config = inter_broker_sasl(props, "INTERNAL")
    assert (config.mechanism, config.username) == ("PLAIN", "broker")
    assert config.new_mechanism(NOW_MS).initial_response() == b"\0broker\0broker-pw"
    with pytest.raises(SaslConfigError, match=r"listener.name.external.plain.sasl.jaas.config"):
        inter_broker_sasl(props, "EXTERNAL")
