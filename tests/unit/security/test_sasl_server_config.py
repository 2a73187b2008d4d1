"""A SASL listener's server side from its settings: mechanisms, JAAS users, SCRAM credentials
bound to the server's store, OAUTHBEARER validators, limits; misconfigurations refused at
start naming the listener and the fix, never a secret."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from sparklog.security.credentials import ScramMechanism
from sparklog.security.listeners import ListenerEndpoint, ListenerSettings, listener_security
from sparklog.security.sasl.enabled import SaslServerConfig
from sparklog.security.sasl.oauthbearer import JwksValidator, UnsecuredJwsValidator
from sparklog.security.sasl.scram import InMemoryCredentialStore
from sparklog.security.session import SecurityProtocol
from sparklog.settings import REGISTRY, ConfigError

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
)


def _security(props: dict[str, str]) -> SaslServerConfig:
    endpoint = ListenerEndpoint("CLIENTS", SecurityProtocol.SASL_PLAINTEXT, "", 0)
    security = listener_security(endpoint, ListenerSettings("CLIENTS", props))
    assert isinstance(security.sasl, SaslServerConfig)
    return security.sasl


def test_a_sasl_plaintext_listener_from_kafkas_settings() -> None:
    config = _security(
        {
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.clients.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.clients.connections.max.reauth.ms": "60000",
            "sasl.server.max.receive.size": "65536",
            "connection.failed.authentication.delay.ms": "250",
        }
    )
    assert config.mechanisms.enabled == ("PLAIN", "SCRAM-SHA-512")
    assert config.mechanisms.plain_users is not None
    assert config.mechanisms.plain_users.authenticate("alice", b"alice-secret")
    assert (config.max_receive_size, config.connections_max_reauth_ms) == (65536, 60000)
    assert config.failed_authentication_delay_ms == 250
    assert config.handshake_timeout_ms == 30_000
    # SCRAM asks the server's credentials, bound later (the metadata image's store)
    credentials = config.mechanisms.credentials
    assert credentials is not None
    assert credentials.scram_credential(ScramMechanism.SCRAM_SHA_512, "alice") is None
    store = InMemoryCredentialStore()
    store.add_password(ScramMechanism.SCRAM_SHA_512, "alice", "pw")
    config.bind_credentials(lambda: store)
    assert credentials.scram_credential(ScramMechanism.SCRAM_SHA_512, "alice") is not None
    assert "secret" not in repr(config)


def test_oauthbearer_unsecured_by_default_signed_with_a_jwks_url(tmp_path) -> None:
    unsecured = _security(
        {
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.clients.oauthbearer.sasl.jaas.config": (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                'unsecuredValidatorRequiredScope="kafka";'
            ),
        }
    )
    assert isinstance(unsecured.mechanisms.token_validator, UnsecuredJwsValidator)
    jwks = tmp_path / "jwks.json"
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks.write_text(json.dumps({"keys": [json.loads(RSAAlgorithm.to_jwk(key.public_key()))]}))
    signed = _security(
        {
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "sasl.oauthbearer.jwks.endpoint.url": jwks.as_uri(),
            "sasl.oauthbearer.expected.audience": "kafka,other",
            "sasl.oauthbearer.expected.issuer": "https://issuer",
        }
    )
    assert isinstance(signed.mechanisms.token_validator, JwksValidator)


@pytest.mark.parametrize(
    ("props", "named"),
    [
        ({}, "sasl.enabled.mechanisms=GSSAPI names no mechanism sparklog serves"),
        (
            {"sasl.enabled.mechanisms": "PLAIN"},
            "listener.name.clients.plain.sasl.jaas.config has no users",
        ),
        (
            {
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.clients.plain.sasl.jaas.config": 'x required password="admin-secret"',
            },
            "listener.name.clients.plain.sasl.jaas.config: .*not terminated",
        ),
        (
            {
                "sasl.enabled.mechanisms": "OAUTHBEARER",
                "sasl.oauthbearer.jwks.endpoint.url": "/etc/jwks",
            },
            "listener CLIENTS: sasl.oauthbearer.jwks.endpoint.url must be a file:",
        ),
        ({"sasl.enabled.mechanisms": "PLAIN,KERBEROS"}, "KERBEROS is not available"),
        (
            {"sasl.enabled.mechanisms": "SCRAM-SHA-256", "sasl.server.max.receive.size": "0"},
            "sasl.server.max.receive.size",
        ),
    ],
)
def test_misconfigured_listeners_refuse_to_start(props: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named) as info:
        _security(props)
    assert "admin-secret" not in str(info.value)


def test_settings_are_declared_with_kafkas_names_and_defaults() -> None:
    for name, default in [
        ("sasl.enabled.mechanisms", ("GSSAPI",)),
        ("sasl.mechanism.inter.broker.protocol", "GSSAPI"),
        ("sasl.server.max.receive.size", 524288),
        ("connections.max.reauth.ms", 0),
        ("connection.failed.authentication.delay.ms", 100),
        ("sasl.oauthbearer.clock.skew.seconds", 30),
        ("sasl.oauthbearer.sub.claim.name", "sub"),
    ]:
        setting = REGISTRY.find(name)
        assert setting is not None and setting.default == default, name
