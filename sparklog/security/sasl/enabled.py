"""A SASL listener's server side: its enabled mechanisms, what each authenticates against, and
the limits every connection's authenticator applies (Kafka's `SaslChannelBuilder` state)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from sparklog.security.credentials import CredentialStore, ScramMechanism
from sparklog.security.sasl.mechanism import SaslServer
from sparklog.security.sasl.oauthbearer import OAuthBearerServer, TokenValidator
from sparklog.security.sasl.plain import PlainServer, PlainUsers
from sparklog.security.sasl.scram import CredentialsSource, ScramServer

#: Kafka's `sasl.server.max.receive.size` default (BrokerSecurityConfigs).
DEFAULT_MAX_RECEIVE_SIZE: Final = 524_288
#: Kafka's `connection.failed.authentication.delay.ms` default.
DEFAULT_FAILED_AUTHENTICATION_DELAY_MS: Final = 100
#: How long a connection may take from its first byte to the end of its SASL exchange
#: (`sparklog.sasl.handshake.timeout.ms`; Kafka bounds it by `connections.max.idle.ms` only).
DEFAULT_HANDSHAKE_TIMEOUT_MS: Final = 30_000

#: The mechanisms sparklog's servers implement (Kafka also has GSSAPI, which sparklog has not).
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


@dataclass(frozen=True, slots=True)
class SaslMechanisms:
    """A listener's enabled mechanisms and what they authenticate against.

    Invariant: every enabled mechanism is supported and has what it needs (checked at
    construction, so a misconfigured listener fails at start, not at a client's login).
    """

    enabled: tuple[str, ...]
    plain_users: PlainUsers | None = None
    credentials: CredentialStore | None = None
    token_validator: TokenValidator | None = None

    def __post_init__(self) -> None:
        if not self.enabled:
            raise ValueError(
                "sasl.enabled.mechanisms is empty on a SASL listener: name at least one of "
                + ", ".join(SUPPORTED_MECHANISMS)
            )
        for name in self.enabled:
            if name not in SUPPORTED_MECHANISMS:
                raise ValueError(
                    f"sasl.enabled.mechanisms names {name!r}, which sparklog does not "
                    f"support: use {', '.join(SUPPORTED_MECHANISMS)}"
                )
            if name == "PLAIN" and self.plain_users is None:
                raise ValueError(
                    "SASL mechanism PLAIN is enabled but the listener has no "
                    "PlainLoginModule JAAS config with user_<name> options "
                    "(listener.name.<listener>.plain.sasl.jaas.config)"
                )
            if name.startswith("SCRAM-") and self.credentials is None:
                raise ValueError(
                    f"SASL mechanism {name} is enabled but no credential store is given"
                )
            if name == "OAUTHBEARER" and self.token_validator is None:
                raise ValueError(
                    "SASL mechanism OAUTHBEARER is enabled but no token validator is given"
                )

    def create(self, mechanism: str) -> SaslServer:
        """A fresh exchange for an enabled `mechanism` (the caller checked it is enabled)."""
        assert mechanism in self.enabled, mechanism
        if mechanism == "PLAIN":
            assert self.plain_users is not None
            return PlainServer(self.plain_users)
        if mechanism.startswith("SCRAM-"):
            assert self.credentials is not None
            return ScramServer(ScramMechanism.of(mechanism), self.credentials)
        assert self.token_validator is not None
        return OAuthBearerServer(self.token_validator)


@dataclass(frozen=True, slots=True)
class SaslServerConfig:
    """A SASL listener's server side (Kafka's `SaslChannelBuilder` state): its mechanisms and
    the limits every connection's authenticator applies."""

    mechanisms: SaslMechanisms
    #: `sasl.server.max.receive.size`: the largest frame accepted before authentication
    max_receive_size: int = DEFAULT_MAX_RECEIVE_SIZE
    #: `connections.max.reauth.ms` (0: sessions never expire unless their credential does)
    connections_max_reauth_ms: int = 0
    #: `connection.failed.authentication.delay.ms`
    failed_authentication_delay_ms: int = DEFAULT_FAILED_AUTHENTICATION_DELAY_MS
    #: `sparklog.sasl.handshake.timeout.ms`
    handshake_timeout_ms: int = DEFAULT_HANDSHAKE_TIMEOUT_MS

    def bind_credentials(self, source: Callable[[], CredentialStore | None]) -> None:
        """Point SCRAM at the server's current credentials (its metadata image's
        `credentials`), when this listener's store is a `CredentialsSource` (built from
        settings); a store given directly (tests) is kept."""
        if isinstance(self.mechanisms.credentials, CredentialsSource):
            self.mechanisms.credentials.bind(source)
