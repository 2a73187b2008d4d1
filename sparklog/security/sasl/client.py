"""The client side of SASL: mechanisms and the authenticator that drives them (sans-IO).

Theory of operation (Kafka's `SaslClientAuthenticator`, KIP-43 and KIP-152). After ApiVersions
a client sends SaslHandshake v1 naming its mechanism; the server answers with the mechanisms
it has enabled (UNSUPPORTED_SASL_MECHANISM 33 when ours is not among them). Then the
mechanism's tokens travel inside SaslAuthenticate requests until the mechanism is complete:

    PLAIN        [authzid] NUL user NUL password         -> server: empty          (RFC 4616)
    SCRAM-SHA-*  client-first -> server-first, client-final -> server-final  (RFC 5802/7677)
    OAUTHBEARER  n,,^Aauth=Bearer <jwt>^A[ext=v^A]^A     -> server: empty          (RFC 7628)

A failed login answers SASL_AUTHENTICATION_FAILED 58 with the server's (generic) message.
SaslAuthenticate v1+ carries the session's lifetime (KIP-368): the client must authenticate
again before it ends; Kafka's client picks a point between 85% and 95% of the lifetime.

Nothing here touches a socket or a clock: `SaslClientAuthenticator.next_request()` says what
to send (api key, version, fields) and `on_response(body, now_ms)` takes the answer; the
blocking client (`client/broker_connection.py`) and the asyncio one
(`protocol/async_client.py`) move the bytes. A mechanism object is used for one authentication only (SCRAM's nonce is fresh
each time): `SaslClientConfig.new_mechanism()` makes one per connection.

Secrets (passwords, tokens, JAAS text) never appear in a repr, a log line or an exception.
"""

from __future__ import annotations

import base64
import enum
import importlib
import json
import logging
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import scramp

from sparklog.errors import (
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
    error_for_code,
)

logger = logging.getLogger(__name__)

PLAIN: Final = "PLAIN"
SCRAM_SHA_256: Final = "SCRAM-SHA-256"
SCRAM_SHA_512: Final = "SCRAM-SHA-512"
OAUTHBEARER: Final = "OAUTHBEARER"
#: The mechanisms this client speaks (Kafka's GSSAPI needs Kerberos: not supported).
MECHANISMS: Final = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, OAUTHBEARER)

#: API keys and the versions the authenticator sends (SaslHandshake v1 is what Kafka's
#: clients send since 1.0; SaslAuthenticate up to v2, where v1 added session_lifetime_ms).
SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36
HANDSHAKE_VERSION: Final = 1
AUTHENTICATE_VERSION_MAX: Final = 2

# Kafka's OAuthBearerClientInitialResponse: extension names are letters, values printable.
_EXTENSION_KEY = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")
_SEPARATOR: Final = "\x01"


#: What a failed authentication raises: not retriable by waiting (Kafka's
#: `AuthenticationException` family), so clients surface it instead of retrying until their
#: timeout.
AUTHENTICATION_ERRORS: Final = (
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
    IllegalSaslStateError,
)


class SaslConfigError(ValueError):
    """The client's SASL settings cannot work (missing option, unknown mechanism, ...).

    Messages name the setting and the fix, never a secret."""


# ---------------------------------------------------------------------------- mechanisms


class SaslMechanismClient(Protocol):
    """One authentication's worth of a mechanism's client side (Java's `SaslClient`)."""

    mechanism: str

    @property
    def complete(self) -> bool: ...

    def initial_response(self) -> bytes:
        """The first token (every mechanism here has an initial response)."""
        ...

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        """The token answering the server's `challenge`, or None when there is nothing more to
        send (then `complete` is true). Raises SaslAuthenticationFailedError when the server's
        token is wrong (e.g. a SCRAM server signature that does not verify)."""
        ...


class PlainClient:
    """RFC 4616 PLAIN: the password travels as is (use it over TLS)."""

    mechanism = PLAIN

    def __init__(self, username: str, password: str, authorization_id: str = "") -> None:
        self._message = f"{authorization_id}\0{username}\0{password}".encode()
        self._sent = False

    def __repr__(self) -> str:
        return "PlainClient(<redacted>)"

    @property
    def complete(self) -> bool:
        return self._sent

    def initial_response(self) -> bytes:
        self._sent = True
        return self._message

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        return None  # complete once sent; the server's empty token ends it


class ScramClient:
    """RFC 5802 SCRAM with SHA-256 or SHA-512 (RFC 7677) via scramp, no channel binding
    (Kafka's `ScramSaslClient`: gs2 header `n,,`; user names escape `,`/`=` as `=2C`/`=3D`)."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        if mechanism not in (SCRAM_SHA_256, SCRAM_SHA_512):
            raise SaslConfigError(f"{mechanism!r} is not a SCRAM mechanism")
        self.mechanism = mechanism
        try:
            self._scram = scramp.ScramClient([mechanism], username, password)
        except scramp.ScramException as e:
            raise SaslConfigError(f"the SCRAM user name cannot be used: {e}") from None
        self._step = 0  # 0: nothing sent, 1: client-first sent, 2: client-final sent, 3: done

    def __repr__(self) -> str:
        return f"ScramClient({self.mechanism}, step {self._step})"

    @property
    def complete(self) -> bool:
        return self._step == 3

    def initial_response(self) -> bytes:
        if self._step != 0:
            raise IllegalSaslStateError("the SCRAM client-first message was already sent")
        self._step = 1
        return self._scram.get_client_first().encode()

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        try:
            text = challenge.decode()
        except UnicodeDecodeError:
            raise SaslAuthenticationFailedError("the server's SCRAM message is not UTF-8") from None
        try:
            if self._step == 1:
                self._scram.set_server_first(text)
                self._step = 2
                return self._scram.get_client_final().encode()
            if self._step == 2:
                self._scram.set_server_final(text)
                self._step = 3
                return None
        except scramp.ScramException as e:
            # e.g. a nonce the server did not extend, or a server signature that does not
            # verify (the server does not know the password: not the broker we trust)
            raise SaslAuthenticationFailedError(f"SCRAM exchange failed: {e}") from None
        raise IllegalSaslStateError(
            f"SCRAM message after the exchange completed (step {self._step})"
        )


class OAuthBearerClient:
    """RFC 7628 OAUTHBEARER (Kafka's `OAuthBearerSaslClient`): the client's initial response
    carries the token and SASL extensions; an empty answer completes, an error JSON answer is
    acknowledged with a lone separator, after which the server fails the login."""

    mechanism = OAUTHBEARER

    def __init__(
        self,
        token: str,
        extensions: Mapping[str, str] | None = None,
        authorization_id: str = "",
    ) -> None:
        extensions = dict(extensions or {})
        for key, value in extensions.items():
            if not _EXTENSION_KEY.fullmatch(key) or key == "auth":
                raise SaslConfigError(f"OAUTHBEARER extension name {key!r} is invalid (letters)")
            if not _EXTENSION_VALUE.fullmatch(value):
                raise SaslConfigError(f"OAUTHBEARER extension {key!r} has an invalid value")
        authz = f"a={authorization_id}" if authorization_id else ""
        ext = "".join(f"{k}={v}{_SEPARATOR}" for k, v in extensions.items())
        self._message = (
            f"n,{authz},{_SEPARATOR}auth=Bearer {token}{_SEPARATOR}{ext}{_SEPARATOR}".encode()
        )
        self._state = 0  # 0: nothing sent, 1: sent, 2: complete, 3: failed (error answered)
        #: the server's error JSON when it refused the token (`status`, `scope`, ...)
        self.server_error: str | None = None

    def __repr__(self) -> str:
        return "OAuthBearerClient(<redacted>)"

    @property
    def complete(self) -> bool:
        return self._state == 2

    def initial_response(self) -> bytes:
        self._state = 1
        return self._message

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if self._state != 1:
            raise IllegalSaslStateError("OAUTHBEARER challenge after the exchange ended")
        if not challenge:
            self._state = 2
            return None
        # RFC 7628 §3.2.2: the server's error; the client answers %x01 and the server fails it
        self.server_error = challenge.decode(errors="replace")
        self._state = 3
        return _SEPARATOR.encode()


# ------------------------------------------------------------------- unsecured OAUTHBEARER


def unsecured_jws(options: Mapping[str, str], wall_clock_ms: int) -> str:
    """An unsigned JWT (`alg: none`) from JAAS options, as Kafka's
    `OAuthBearerUnsecuredLoginCallbackHandler` builds one: `unsecuredLoginStringClaim_<n>`,
    `unsecuredLoginNumberClaim_<n>`, `unsecuredLoginListClaim_<n>` (first character is the
    delimiter), `unsecuredLoginLifetimeSeconds` (3600), `unsecuredLoginPrincipalClaimName`
    (`sub`); `iat`/`exp` are seconds as numbers. For tests and development only: anyone can
    mint one, so brokers accept it only with Kafka's unsecured validator."""
    try:
        lifetime_s = int(options.get("unsecuredLoginLifetimeSeconds", "3600"))
    except ValueError:
        raise SaslConfigError("unsecuredLoginLifetimeSeconds must be an integer") from None
    # iat/exp are compared by the server's clock: wall-clock time, never monotonic
    claims: dict[str, Any] = {
        "exp": wall_clock_ms / 1000 + lifetime_s,
        "iat": wall_clock_ms / 1000,
    }
    prefixes: dict[str, Callable[[str], Any]] = {
        "unsecuredLoginStringClaim_": str,
        "unsecuredLoginNumberClaim_": _number,
        "unsecuredLoginListClaim_": _list_claim,
    }
    for key, value in options.items():
        for prefix, convert in prefixes.items():
            if key.startswith(prefix) and len(key) > len(prefix):
                name = key[len(prefix) :]
                if name in ("iat", "exp"):
                    raise SaslConfigError(f"cannot set the {name!r} claim explicitly ({key})")
                claims[name] = convert(value)
    principal_claim = options.get("unsecuredLoginPrincipalClaimName", "").strip() or "sub"
    principal = claims.get(principal_claim)
    if not isinstance(principal, str) or not principal.strip():
        raise SaslConfigError(
            f"the unsecured OAUTHBEARER token needs a principal: set "
            f'unsecuredLoginStringClaim_{principal_claim}="<name>" in sasl.jaas.config'
        )
    header = _b64url(json.dumps({"alg": "none"}, separators=(",", ":")).encode())
    payload = _b64url(json.dumps(claims, separators=(",", ":")).encode())
    return f"{header}.{payload}."


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _number(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise SaslConfigError(f"unsecuredLoginNumberClaim value {value!r} is no number") from None


def _list_claim(value: str) -> list[str]:
    """Kafka's list syntax: the first character is the delimiter (`|a|b` -> [a, b])."""
    if len(value) <= 1:
        return []
    return value[1:].split(value[0])


def extensions_from_options(options: Mapping[str, str]) -> dict[str, str]:
    """SASL extensions from `unsecuredLoginExtension_<name>` options (KIP-342)."""
    prefix = "unsecuredLoginExtension_"
    return {k[len(prefix) :]: v for k, v in options.items() if k.startswith(prefix)}


# ------------------------------------------------------------------------- configuration

#: A token source for OAUTHBEARER: called for each authentication, returns the compact JWT
#: (Kafka's `sasl.login.callback.handler.class` answering an `OAuthBearerTokenCallback`).
TokenProvider = Callable[[], str]

_MODULES: Final = {
    PLAIN: "org.apache.kafka.common.security.plain.PlainLoginModule",
    SCRAM_SHA_256: "org.apache.kafka.common.security.scram.ScramLoginModule",
    SCRAM_SHA_512: "org.apache.kafka.common.security.scram.ScramLoginModule",
    OAUTHBEARER: "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}


@dataclass(frozen=True, slots=True)
class SaslClientConfig:
    """A client's SASL settings (`sasl.mechanism` + the login module's options from
    `sasl.jaas.config`, or a token provider); makes a fresh mechanism per authentication.

    The options hold secrets: the repr shows the mechanism and the option names only."""

    mechanism: str
    options: Mapping[str, str] = field(default_factory=dict)
    token_provider: TokenProvider | None = None

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            hint = " (Kerberos is not supported)" if self.mechanism == "GSSAPI" else ""
            raise SaslConfigError(
                f"sasl.mechanism={self.mechanism!r} is not supported{hint}; use one of "
                + ", ".join(MECHANISMS)
            )
        if self.mechanism != OAUTHBEARER:
            missing = [k for k in ("username", "password") if not self.options.get(k)]
            if missing:
                raise SaslConfigError(
                    f"sasl.jaas.config for {self.mechanism} needs "
                    + " and ".join(missing)
                    + f' (e.g. {_MODULES[self.mechanism]} required username="alice" '
                    'password="...";)'
                )
        elif self.token_provider is None and not any(
            k.startswith("unsecuredLogin") for k in self.options
        ):
            raise SaslConfigError(
                "OAUTHBEARER needs a token: set sasl.login.callback.handler.class to a "
                "callable returning a JWT, or (tests only) unsecuredLoginStringClaim_sub in "
                "sasl.jaas.config"
            )

    def __repr__(self) -> str:
        return f"SaslClientConfig({self.mechanism}, options={sorted(self.options)})"

    @property
    def username(self) -> str | None:
        """The user name PLAIN/SCRAM log in as (not a secret; for messages)."""
        return self.options.get("username")

    def new_mechanism(self, wall_clock_ms: int) -> SaslMechanismClient:
        """A mechanism client for one authentication (`wall_clock_ms` dates an unsecured
        token)."""
        if self.mechanism == PLAIN:
            return PlainClient(self.options["username"], self.options["password"])
        if self.mechanism in (SCRAM_SHA_256, SCRAM_SHA_512):
            return ScramClient(self.mechanism, self.options["username"], self.options["password"])
        if self.token_provider is not None:
            token = self.token_provider()
            if not isinstance(token, str) or token.count(".") != 2:
                raise SaslConfigError(
                    "the OAUTHBEARER token provider must return a compact JWT string "
                    "(header.payload.signature)"
                )
        else:
            token = unsecured_jws(self.options, wall_clock_ms)
        return OAuthBearerClient(token, extensions_from_options(self.options))

    @classmethod
    def from_jaas(
        cls, mechanism: str, jaas_config: str | None, token_provider: TokenProvider | None = None
    ) -> SaslClientConfig:
        """From `sasl.mechanism` and `sasl.jaas.config` (Kafka's JAAS syntax, one login
        module: `<LoginModule> required key="value" ...;`)."""
        mechanism = (mechanism or "").strip().upper()
        if jaas_config is None or not jaas_config.strip():
            if mechanism == OAUTHBEARER and token_provider is not None:
                return cls(mechanism, {}, token_provider)
            module = _MODULES.get(mechanism, "<LoginModule>")
            raise SaslConfigError(
                f"sasl.mechanism={mechanism} needs sasl.jaas.config (e.g. {module} required "
                'username="alice" password="...";)'
            )
        return cls(mechanism, login_options(jaas_config), token_provider)


#: The setting naming the mechanism a server uses towards brokers (replication, the
#: coordinator's markers) and towards the controller (Kafka's KRaft brokers).
INTER_BROKER_MECHANISM: Final = "sasl.mechanism.inter.broker.protocol"
CONTROLLER_MECHANISM: Final = "sasl.mechanism.controller.protocol"


def inter_broker_sasl(
    props: Mapping[str, Any], listener_name: str, mechanism_setting: str = INTER_BROKER_MECHANISM
) -> SaslClientConfig:
    """The credentials a server uses on its own connections to `listener_name` (brokers to
    the controller and to each other, the coordinator to brokers): the mechanism
    `mechanism_setting` names (`sasl.mechanism.inter.broker.protocol`, or
    `sasl.mechanism.controller.protocol` towards the controller; Kafka's default GSSAPI) and
    the `username` / `password` of that listener's JAAS entry for it,
    `listener.name.<listener>.<mechanism>.sasl.jaas.config` (Kafka reads the broker's JAAS
    login for the listener the same way: a PlainLoginModule entry carries both the broker's
    own login and the `user_<name>` table it serves)."""
    mechanism = str(props.get(mechanism_setting) or "GSSAPI").upper()
    key = f"listener.name.{listener_name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    jaas_config = props.get(key)
    if jaas_config is None:
        raise SaslConfigError(
            f"inter-broker SASL on listener {listener_name} needs {key} with the broker's "
            f'username="..." password="..." ({mechanism_setting}={mechanism})'
        )
    return SaslClientConfig.from_jaas(mechanism, str(jaas_config))


def login_options(jaas_config: str) -> dict[str, str]:
    """The options of the single login module in a client's `sasl.jaas.config` (Kafka's
    `JaasContext` demands exactly one). Parsing is the shared JAAS parser's (`security.jaas`),
    whose errors never quote a value. Like Kafka's client, any login module that supplies a
    username and password serves PLAIN and SCRAM (both read the subject's credentials)."""
    # imported here: only SASL clients need it
    jaas = importlib.import_module("sparklog.security.jaas")
    return dict(jaas.parse_login_module(jaas_config).options)


# -------------------------------------------------------------------------- authenticator


class AuthState(enum.Enum):
    """Kafka's `SaslClientAuthenticator.SaslState`, minus the ApiVersions step (the
    connection negotiates versions before it hands over to the authenticator)."""

    SEND_HANDSHAKE = "SEND_HANDSHAKE_REQUEST"
    RECEIVE_HANDSHAKE = "RECEIVE_HANDSHAKE_RESPONSE"
    INTERMEDIATE = "INTERMEDIATE"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True)
class SaslRequest:
    """What to send next: the API key, its version and the request's fields."""

    api_key: int
    version: int
    fields: Mapping[str, Any]

    def __repr__(self) -> str:  # the fields hold tokens
        return f"SaslRequest(api {self.api_key} v{self.version})"


class SaslClientAuthenticator:
    """Drives one mechanism through SaslHandshake and SaslAuthenticate (sans-IO).

    `authenticate_version` is the highest SaslAuthenticate version both sides speak (from
    ApiVersions). `now_ms` is the caller's monotonic clock (re-authentication is scheduled on
    it); `wall_clock_ms` dates tokens the server checks against its own clock. After COMPLETE, `session_lifetime_ms` is the server's (0: none) and
    `reauthenticate_at_ms` when a client should authenticate again (None: never).
    """

    def __init__(
        self,
        config: SaslClientConfig,
        authenticate_version: int,
        now_ms: int,
        *,
        wall_clock_ms: int,
        rng: random.Random | None = None,
    ) -> None:
        if authenticate_version < 0:
            raise UnsupportedSaslMechanismError("the server does not serve SaslAuthenticate")
        self.config = config
        self.authenticate_version = min(authenticate_version, AUTHENTICATE_VERSION_MAX)
        self.state = AuthState.SEND_HANDSHAKE
        self.session_lifetime_ms = 0
        self.reauthenticate_at_ms: int | None = None
        self._mechanism = config.new_mechanism(wall_clock_ms)
        self._pending: bytes | None = None
        self._rng = rng or random.Random()

    def __repr__(self) -> str:
        return f"SaslClientAuthenticator({self.config.mechanism}, {self.state.value})"

    @property
    def complete(self) -> bool:
        return self.state is AuthState.COMPLETE

    def next_request(self) -> SaslRequest | None:
        """The next request to send, or None while waiting for a response or when done."""
        if self.state is AuthState.SEND_HANDSHAKE:
            self.state = AuthState.RECEIVE_HANDSHAKE
            return SaslRequest(
                SASL_HANDSHAKE, HANDSHAKE_VERSION, {"mechanism": self.config.mechanism}
            )
        if self.state is AuthState.INTERMEDIATE and self._pending is not None:
            token, self._pending = self._pending, None
            return SaslRequest(SASL_AUTHENTICATE, self.authenticate_version, {"auth_bytes": token})
        return None

    def on_response(self, body: Any, now_ms: int) -> None:
        """Take the response to the last request; raises the Kafka error the server answered
        (and the state becomes FAILED)."""
        try:
            if self.state is AuthState.RECEIVE_HANDSHAKE:
                self._on_handshake(body)
            elif self.state is AuthState.INTERMEDIATE and self._pending is None:
                self._on_authenticate(body, now_ms)
            else:
                raise IllegalSaslStateError(f"unexpected SASL response in state {self.state.value}")
        except Exception:
            self.state = AuthState.FAILED
            raise

    def _on_handshake(self, body: Any) -> None:
        code = int(body.error_code)
        if code == UnsupportedSaslMechanismError.code:
            enabled = ", ".join(body.mechanisms) or "none"
            raise UnsupportedSaslMechanismError(
                f"the server does not enable sasl.mechanism={self.config.mechanism} "
                f"(enabled: {enabled}); set sasl.mechanism to one of them"
            )
        if code != 0:
            raise _error(code, "SaslHandshake failed")
        self.state = AuthState.INTERMEDIATE
        self._pending = self._mechanism.initial_response()

    def _on_authenticate(self, body: Any, now_ms: int) -> None:
        code = int(body.error_code)
        if code != 0:
            message = body.error_message or "authentication failed"
            raise _error(code, f"{message} (sasl.mechanism={self.config.mechanism})")
        token = self._mechanism.evaluate_challenge(bytes(body.auth_bytes))
        if token is not None:
            self._pending = token
            return
        if not self._mechanism.complete:
            raise IllegalSaslStateError(f"{self.config.mechanism} ended before it completed")
        self.state = AuthState.COMPLETE
        lifetime = getattr(body, "session_lifetime", None)
        self.session_lifetime_ms = _millis(lifetime) if lifetime is not None else 0
        if self.session_lifetime_ms > 0:
            # Kafka's client re-authenticates at a random 85-95% of the session's lifetime
            # (SaslClientAuthenticator.ReauthInfo) so a fleet does not renew all at once.
            share = 0.85 + 0.10 * self._rng.random()
            self.reauthenticate_at_ms = now_ms + int(self.session_lifetime_ms * share)


def _millis(value: Any) -> int:
    if hasattr(value, "total_seconds"):
        return int(value.total_seconds() * 1000)
    return int(value)


def _error(code: int, message: str) -> Exception:
    return error_for_code(code)(message)
