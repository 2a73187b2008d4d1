"""A SASL listener's server side built from its settings (Kafka's `SaslChannelBuilder` reading
`BrokerSecurityConfigs` and the listener's JAAS configurations).

What a SASL_PLAINTEXT / SASL_SSL listener reads, each overridable per listener as
`listener.name.<listener>.<setting>`:

- `sasl.enabled.mechanisms` (Kafka's default GSSAPI, which sparklog does not have: a SASL
  listener must name PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and/or OAUTHBEARER);
- PLAIN's users: `listener.name.<listener>.plain.sasl.jaas.config` =
  `org.apache.kafka.common.security.plain.PlainLoginModule required user_<name>="<password>" ...;`;
- SCRAM's credentials: the cluster's (controller metadata, `UserScramCredentialRecord`); the
  server binds its metadata image's store with `SaslServerConfig.bind_credentials`;
- OAUTHBEARER: signed JWTs when `sasl.oauthbearer.jwks.endpoint.url` is set (with
  `sasl.oauthbearer.expected.audience|issuer`, `...sub.claim.name`, `...scope.claim.name`,
  `...clock.skew.seconds`, `...jwks.endpoint.refresh.ms`), else Kafka's unsecured validator with
  the options of `listener.name.<listener>.oauthbearer.sasl.jaas.config`;
- the limits: `sasl.server.max.receive.size`, `connections.max.reauth.ms`,
  `connection.failed.authentication.delay.ms`, `sparklog.sasl.handshake.timeout.ms`.

`sasl.mechanism.inter.broker.protocol` is declared here too (the client side,
`sasl.client.inter_broker_sasl`, reads it): the mechanism brokers and the driver's servers use
with each other.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from sparklog.security.jaas import (
    OAUTHBEARER_LOGIN_MODULE,
    JaasConfigError,
    LoginModule,
    parse_login_module,
)
from sparklog.security.sasl.enabled import (
    DEFAULT_FAILED_AUTHENTICATION_DELAY_MS,
    DEFAULT_HANDSHAKE_TIMEOUT_MS,
    DEFAULT_MAX_RECEIVE_SIZE,
    SUPPORTED_MECHANISMS,
    SaslMechanisms,
    SaslServerConfig,
)
from sparklog.security.sasl.oauthbearer import (
    JwksValidator,
    TokenValidator,
    UnsecuredJwsValidator,
    load_jwks,
)
from sparklog.security.sasl.plain import PlainUsers
from sparklog.security.sasl.scram import CredentialsSource
from sparklog.settings import ConfigError, ConfigType, Importance, Range, Scope, Setting, define

JAAS_CONFIG: Final = "sasl.jaas.config"


def _sasl(name: str, kind: ConfigType, default: object, doc: str, **extra: Any) -> Setting:
    return Setting(name, kind, default, doc=doc, scope=Scope.BROKER, group="sasl", **extra)


#: Kafka's `BrokerSecurityConfigs` SASL settings and the OAUTHBEARER validator's `SaslConfigs`.
SASL_SERVER_SETTINGS = define(
    _sasl("sasl.enabled.mechanisms", ConfigType.LIST, ("GSSAPI",),
          "SASL mechanisms a SASL listener accepts: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, "
          "OAUTHBEARER (Kafka's default GSSAPI is not available)", importance=Importance.HIGH),
    _sasl("sasl.mechanism.inter.broker.protocol", ConfigType.STRING, "GSSAPI",
          "the SASL mechanism brokers and the driver's servers use with each other"),
    _sasl("sasl.server.max.receive.size", ConfigType.INT, DEFAULT_MAX_RECEIVE_SIZE,
          "the largest request accepted before authentication (bytes)", validator=Range(1)),
    _sasl("connections.max.reauth.ms", ConfigType.LONG, 0,
          "a SASL session's longest life (KIP-368; 0: until its credential expires)",
          validator=Range(0)),
    _sasl("connection.failed.authentication.delay.ms", ConfigType.INT,
          DEFAULT_FAILED_AUTHENTICATION_DELAY_MS,
          "delay before a connection that failed authentication is closed", validator=Range(0)),
    _sasl("sparklog.sasl.handshake.timeout.ms", ConfigType.LONG, DEFAULT_HANDSHAKE_TIMEOUT_MS,
          "a SASL connection not authenticated this long after it opened is closed",
          validator=Range(1)),
    _sasl("sasl.oauthbearer.jwks.endpoint.url", ConfigType.STRING, None,
          "file: or https: URL of the JWKS that signs OAUTHBEARER tokens (unset: unsecured "
          "tokens, for tests only)"),
    _sasl("sasl.oauthbearer.jwks.endpoint.refresh.ms", ConfigType.LONG, 3_600_000,
          "how often an unknown key id may make the JWKS reload", validator=Range(0)),
    _sasl("sasl.oauthbearer.expected.audience", ConfigType.LIST, None,
          "audiences a token's aud must include one of (unset: not checked)"),
    _sasl("sasl.oauthbearer.expected.issuer", ConfigType.STRING, None,
          "the iss a token must have (unset: not checked)"),
    _sasl("sasl.oauthbearer.sub.claim.name", ConfigType.STRING, "sub",
          "the claim naming a token's principal"),
    _sasl("sasl.oauthbearer.scope.claim.name", ConfigType.STRING, "scope",
          "the claim holding a token's scopes"),
    _sasl("sasl.oauthbearer.clock.skew.seconds", ConfigType.INT, 30,
          "clock difference allowed when checking a token's times", validator=Range(0)),
)  # fmt: skip


class SaslListenerSettings(Protocol):
    """What this module reads of a listener's settings (`security.listeners.ListenerSettings`)."""

    @property
    def listener_name(self) -> str: ...

    def get(self, name: str, default: str | None = None) -> str | None: ...

    def for_mechanism(self, mechanism: str, name: str) -> str | None: ...


def _value(settings: SaslListenerSettings, name: str) -> Any:
    setting = SASL_SERVER_SETTINGS[name]
    raw = settings.get(name)
    return setting.default if raw is None else setting.parse(raw)


def _jaas(settings: SaslListenerSettings, mechanism: str) -> LoginModule | None:
    """The listener's JAAS entry for `mechanism`, None when not configured."""
    text = settings.for_mechanism(mechanism, JAAS_CONFIG)
    if text is None:
        return None
    key = f"listener.name.{settings.listener_name.lower()}.{mechanism.lower()}.{JAAS_CONFIG}"
    try:
        return parse_login_module(text, mechanism=mechanism)
    except JaasConfigError as e:
        raise ConfigError(f"{key}: {e}") from None


def sasl_server_config(settings: SaslListenerSettings) -> SaslServerConfig:
    """The SASL server side of the listener `settings` describes; ConfigError naming the
    listener, the setting and the fix when it cannot authenticate anyone as configured."""
    listener = settings.listener_name
    enabled = tuple(
        str(m).strip().upper() for m in _value(settings, "sasl.enabled.mechanisms") or ()
    )
    unsupported = [m for m in enabled if m not in SUPPORTED_MECHANISMS]
    if not enabled or unsupported:
        raise ConfigError(
            f"listener {listener}: sasl.enabled.mechanisms="
            f"{','.join(enabled) or '(empty)'} names no mechanism sparklog serves"
            + (f" ({', '.join(unsupported)} is not available)" if unsupported else "")
            + f": set it to some of {', '.join(SUPPORTED_MECHANISMS)}"
        )
    plain_users = None
    if "PLAIN" in enabled:
        module = _jaas(settings, "PLAIN")
        users = PlainUsers.from_login_module(module) if module is not None else None
        if users is None or not len(users):
            raise ConfigError(
                f"listener {listener} enables PLAIN but "
                f"listener.name.{listener.lower()}.plain.sasl.jaas.config has no users: set it to "
                'org.apache.kafka.common.security.plain.PlainLoginModule required user_<name>="<password>";'
            )
        plain_users = users
    credentials = CredentialsSource() if any(m.startswith("SCRAM-") for m in enabled) else None
    validator = _token_validator(settings) if "OAUTHBEARER" in enabled else None
    mechanisms = SaslMechanisms(
        enabled, plain_users=plain_users, credentials=credentials, token_validator=validator
    )
    return SaslServerConfig(
        mechanisms,
        max_receive_size=int(_value(settings, "sasl.server.max.receive.size")),
        connections_max_reauth_ms=int(_value(settings, "connections.max.reauth.ms")),
        failed_authentication_delay_ms=int(
            _value(settings, "connection.failed.authentication.delay.ms")
        ),
        handshake_timeout_ms=int(_value(settings, "sparklog.sasl.handshake.timeout.ms")),
    )


def _token_validator(settings: SaslListenerSettings) -> TokenValidator:
    url = _value(settings, "sasl.oauthbearer.jwks.endpoint.url")
    if url:
        location = str(url)
        try:
            return JwksValidator(
                lambda: load_jwks(location),
                expected_audience=tuple(
                    _value(settings, "sasl.oauthbearer.expected.audience") or ()
                ),
                expected_issuer=_value(settings, "sasl.oauthbearer.expected.issuer") or None,
                sub_claim_name=str(_value(settings, "sasl.oauthbearer.sub.claim.name")),
                scope_claim_name=str(_value(settings, "sasl.oauthbearer.scope.claim.name")),
                clock_skew_s=int(_value(settings, "sasl.oauthbearer.clock.skew.seconds")),
                refresh_interval_ms=int(
                    _value(settings, "sasl.oauthbearer.jwks.endpoint.refresh.ms")
                ),
            )
        except ValueError as e:
            raise ConfigError(f"listener {settings.listener_name}: {e}") from None
    module = _jaas(settings, "OAUTHBEARER") or parse_login_module(
        f"{OAUTHBEARER_LOGIN_MODULE} required;"
    )
    try:
        return UnsecuredJwsValidator.from_login_module(module)
    except ValueError as e:
        raise ConfigError(f"listener {settings.listener_name}: {e}") from None
