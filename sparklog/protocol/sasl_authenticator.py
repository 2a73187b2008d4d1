"""The server side of a SASL connection's authentication (Kafka's `SaslServerAuthenticator`),
sans-IO: requests in, replies (bytes to send, whether to close, who authenticated) out.

Theory of operation. A SASL_PLAINTEXT / SASL_SSL connection starts PRE_AUTHENTICATION; the
`ServerConnection` hands every request to this authenticator until it is authenticated
(`SaslServerAuthenticator.handles`), and the handshake APIs after that. States:

    INITIAL --ApiVersions (answered by the server's handler)--> INITIAL
    INITIAL --SaslHandshake, mechanism enabled--> AUTHENTICATE (v1: SaslAuthenticate
        requests; v0: raw size-prefixed tokens, as kafka-python still sends, KAFKA-18270)
    INITIAL --SaslHandshake, mechanism not enabled--> FAILED (UNSUPPORTED_SASL_MECHANISM 33
        with the enabled list)
    AUTHENTICATE --token, exchange continues--> AUTHENTICATE (challenge sent)
    AUTHENTICATE --token, exchange complete--> COMPLETE (the connection is authenticated;
        SaslAuthenticate v1+ carries the session lifetime, KIP-368)
    AUTHENTICATE --token, exchange failed--> FAILED (SASL_AUTHENTICATION_FAILED 58 with the
        mechanism's client-safe message or Kafka's generic one)
    COMPLETE --SaslHandshake from a client that re-authenticates (it used SaslAuthenticate
        v1+)--> AUTHENTICATE again, same mechanism and principal required (KIP-368)
    any --anything else--> FAILED (ILLEGAL_SASL_STATE 34)

A FAILED reply closes the connection after `connection.failed.authentication.delay.ms`
(Kafka delays the close so a client retrying a bad password cannot hammer the broker); a
request on a connection whose session expired (`connections.max.reauth.ms`, or the OAUTHBEARER
token's expiry) closes it at once. Tokens over `sasl.server.max.receive.size` never get here:
the connection refuses such frames while unauthenticated.

Differences from Kafka: a request other than ApiVersions and SaslHandshake before the
handshake gets an ILLEGAL_SASL_STATE answer before the close (Kafka closes without one), so a
client configured for PLAINTEXT against a SASL port sees why.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import logging
import types
import typing
from dataclasses import dataclass
from typing import Any, Final

from sparklog.errors import (
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from sparklog.protocol import codec, kio_build
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.connection import (
    RAW_TOKEN_API_KEY,
    ConnectionState,
    Request,
    ServerConnection,
)
from sparklog.security.sasl.enabled import SaslServerConfig
from sparklog.security.sasl.mechanism import SaslError, SaslServer, generic_failure_message
from sparklog.security.session import USER_TYPE, KafkaPrincipal

logger = logging.getLogger(__name__)

SASL_APIS: Final = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


class SaslState(enum.Enum):
    INITIAL = "initial"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class SaslReply:
    """What the server does for one request the authenticator took.

    `body`: a response to encode (None: nothing, or `raw` bytes instead); `close`: close the
    connection once the reply is written, after `close_delay_ms`; `authenticated`: the
    connection is now authenticated as this principal; `failure`: why authentication failed
    (for the log and the audit trail; never holds a secret)."""

    body: Any = None
    raw: bytes | None = None
    close: bool = False
    close_delay_ms: int = 0
    authenticated: KafkaPrincipal | None = None
    failure: str | None = None
    #: the connection's session expired (KIP-368): closed at once, not a failed login
    expired: bool = False


_CLOSE_NOW: Final = SaslReply(close=True)


def _raw_frame(token: bytes) -> bytes:
    return len(token).to_bytes(4, "big") + token


class SaslServerAuthenticator:
    """One connection's SASL authentication and KIP-368 re-authentications.

    Invariant: `principal` is set exactly while the connection has authenticated at least
    once, and never changes afterwards (re-authentication must keep it).
    """

    def __init__(self, config: SaslServerConfig, now_ms: int) -> None:
        self.config = config
        self.state = SaslState.INITIAL
        self.principal: KafkaPrincipal | None = None
        self.mechanism: str | None = None
        self._server: SaslServer | None = None
        #: after a v0 handshake tokens arrive raw (no Kafka request header)
        self.raw_tokens = False
        self._reauthenticating = False
        #: the client sent SaslAuthenticate v1+, so it re-authenticates (Kafka's
        #: `connectedClientSupportsReauthentication`)
        self.client_reauthenticates = False
        self._bad_reauth_mechanism: str | None = None
        #: when the current exchange must be done by (the stalled-handshake bound)
        self.handshake_deadline_ms: int | None = now_ms + config.handshake_timeout_ms
        #: when the authenticated session expires (None: never)
        self.session_expiry_ms: int | None = None
        #: the last exchange's credential expiry (an OAUTHBEARER token's `exp`)
        self._credential_expiry_ms: int | None = None

    @property
    def max_receive_size(self) -> int:
        return self.config.max_receive_size

    # -- what the connection routes here ---------------------------------------------------

    def handles(self, api_key: int) -> bool:
        """Whether a request with `api_key` is the authenticator's to answer (the others go
        to the server's handler)."""
        if self.state is SaslState.COMPLETE and not self._reauthenticating:
            return api_key in SASL_APIS
        return api_key != ApiKey.API_VERSIONS or self.state is SaslState.AUTHENTICATE

    def session_expired(self, now_ms: int) -> bool:
        """Whether an authenticated session's time is up (its next request closes it)."""
        return self.session_expiry_ms is not None and now_ms >= self.session_expiry_ms

    def handshake_timed_out(self, now_ms: int) -> bool:
        return self.handshake_deadline_ms is not None and now_ms >= self.handshake_deadline_ms

    def on_request(self, api_key: int, version: int, body: Any, now_ms: int) -> SaslReply:
        """The reply to a request `handles` accepted (`body` is the raw token for
        RAW_TOKEN_API_KEY)."""
        if api_key == RAW_TOKEN_API_KEY:
            return self._on_raw_token(bytes(body), now_ms)
        if api_key == ApiKey.SASL_HANDSHAKE:
            return self._on_handshake(version, body, now_ms)
        if api_key == ApiKey.SASL_AUTHENTICATE:
            return self._on_authenticate(version, body, now_ms)
        return self._illegal(api_key, version, "before SASL authentication completed")

    # -- handshake -------------------------------------------------------------------------

    def _on_handshake(self, version: int, body: Any, now_ms: int) -> SaslReply:
        enabled = list(self.config.mechanisms.enabled)
        mechanism = str(body.mechanism)
        logger.debug(
            "SaslHandshake v%d for mechanism %.64r in state %s", version, mechanism, self.state
        )
        if self.state is SaslState.COMPLETE:
            if not self.client_reauthenticates or version < 1:
                # Kafka's KafkaApis: a handshake on an authenticated, non-re-authenticating
                # connection is answered ILLEGAL_SASL_STATE and the connection stays
                return SaslReply(
                    self._response(
                        ApiKey.SASL_HANDSHAKE,
                        version,
                        IllegalSaslStateError.code,
                        mechanisms=enabled,
                    )
                )
            # KIP-368: the new exchange has no expiry until it completes (Kafka makes a new
            # authenticator); the handshake bound covers it meanwhile
            self._reauthenticating = True
            self.session_expiry_ms = None
            self.handshake_deadline_ms = now_ms + self.config.handshake_timeout_ms
        elif self.state is not SaslState.INITIAL:
            return self._illegal(ApiKey.SASL_HANDSHAKE, version, "a second SaslHandshake")
        if mechanism not in enabled:
            self.state = SaslState.FAILED
            return SaslReply(
                self._response(
                    ApiKey.SASL_HANDSHAKE,
                    version,
                    UnsupportedSaslMechanismError.code,
                    mechanisms=enabled,
                ),
                close=True,
                close_delay_ms=self.config.failed_authentication_delay_ms,
                failure=f"unsupported SASL mechanism {mechanism[:64]!r}",
            )
        if self._reauthenticating and mechanism != self.mechanism:
            self._bad_reauth_mechanism = mechanism
        else:
            self.mechanism = mechanism
            self._server = self.config.mechanisms.create(mechanism)
        self.raw_tokens = version == 0
        self.state = SaslState.AUTHENTICATE
        return SaslReply(self._response(ApiKey.SASL_HANDSHAKE, version, 0, mechanisms=enabled))

    # -- tokens ----------------------------------------------------------------------------

    def _on_raw_token(self, token: bytes, now_ms: int) -> SaslReply:
        assert self.raw_tokens and self.state is SaslState.AUTHENTICATE
        try:
            challenge = self._evaluate(token, now_ms)
        except (SaslError, SaslAuthenticationFailedError) as e:
            # v0 has no error response: the client sees the connection close (Kafka)
            return self._failed(None, str(e))
        if self.state is SaslState.COMPLETE:
            self.raw_tokens = False
            self._session_lifetime_ms(now_ms)
            return SaslReply(raw=_raw_frame(challenge), authenticated=self.principal)
        return SaslReply(raw=_raw_frame(challenge))

    def _on_authenticate(self, version: int, body: Any, now_ms: int) -> SaslReply:
        if self.state is SaslState.COMPLETE and not self._reauthenticating:
            return SaslReply(
                self._response(
                    ApiKey.SASL_AUTHENTICATE,
                    version,
                    IllegalSaslStateError.code,
                    error_message="SaslAuthenticate request received after successful authentication",
                )
            )
        if self.state is not SaslState.AUTHENTICATE or self.raw_tokens:
            return self._illegal(
                ApiKey.SASL_AUTHENTICATE, version, "SaslAuthenticate before SaslHandshake"
            )
        self.client_reauthenticates = self.client_reauthenticates or version > 0
        if self._bad_reauth_mechanism is not None:
            message = (
                f"SASL mechanism '{self._bad_reauth_mechanism[:64]}' requested by client is not "
                f"supported for re-authentication of mechanism '{self.mechanism}'"
            )
            return self._failed(
                self._response(
                    ApiKey.SASL_AUTHENTICATE,
                    version,
                    SaslAuthenticationFailedError.code,
                    error_message=message,
                ),
                message,
            )
        try:
            challenge = self._evaluate(bytes(body.auth_bytes), now_ms)
        except SaslAuthenticationFailedError as e:
            response = self._response(
                ApiKey.SASL_AUTHENTICATE,
                version,
                SaslAuthenticationFailedError.code,
                error_message=str(e),
            )
            return self._failed(response, str(e))
        except SaslError as e:
            message = self._generic_message()
            response = self._response(
                ApiKey.SASL_AUTHENTICATE,
                version,
                SaslAuthenticationFailedError.code,
                error_message=message,
            )
            return self._failed(response, str(e))
        lifetime_ms = 0
        authenticated = None
        if self.state is SaslState.COMPLETE:
            lifetime_ms = self._session_lifetime_ms(now_ms)
            authenticated = self.principal
        response = self._response(
            ApiKey.SASL_AUTHENTICATE,
            version,
            0,
            auth_bytes=challenge,
            session_lifetime_ms=lifetime_ms,
        )
        return SaslReply(response, authenticated=authenticated)

    def _evaluate(self, token: bytes, now_ms: int) -> bytes:
        """The mechanism's challenge; completes the exchange when the mechanism is done.
        Raises the mechanism's errors, and SaslAuthenticationFailedError when a
        re-authentication would change the principal."""
        server = self._server
        assert server is not None
        challenge = server.evaluate_response(token, now_ms)
        if server.is_complete:
            principal = KafkaPrincipal(USER_TYPE, server.authorization_id)
            if self.principal is not None and principal != self.principal:
                raise SaslAuthenticationFailedError(
                    f"Cannot change principals during re-authentication from {self.principal}: {principal}"
                )
            self.principal = principal
            self._credential_expiry_ms = server.credential_expiry_ms
            self.state = SaslState.COMPLETE
            self._reauthenticating = False
            self.handshake_deadline_ms = None
            self._server = None
        return challenge

    def _session_lifetime_ms(self, now_ms: int) -> int:
        """KIP-368: min(connections.max.reauth.ms, credential expiry - now), 0 for none
        (Kafka's `calcCompletionTimesAndReturnSessionLifetimeMs`); sets the expiry."""
        max_reauth_ms = self.config.connections_max_reauth_ms
        expiry = self._credential_expiry_ms
        if expiry is None and max_reauth_ms <= 0:
            self.session_expiry_ms = None
            return 0
        candidates = [expiry - now_ms] if expiry is not None else []
        if max_reauth_ms > 0:
            candidates.append(max_reauth_ms)
        lifetime_ms = max(0, min(candidates))
        self.session_expiry_ms = now_ms + lifetime_ms
        return lifetime_ms

    # -- failures --------------------------------------------------------------------------

    def _generic_message(self) -> str:
        if self._reauthenticating:
            return generic_failure_message(self.mechanism or "").replace(
                "during authentication", "during re-authentication"
            )
        return generic_failure_message(self.mechanism or "")

    def _failed(self, response: Any, reason: str) -> SaslReply:
        self.state = SaslState.FAILED
        self._server = None
        return SaslReply(
            response,
            close=True,
            close_delay_ms=self.config.failed_authentication_delay_ms,
            failure=reason,
        )

    def _illegal(self, api_key: int, version: int, what: str) -> SaslReply:
        """ILLEGAL_SASL_STATE (34) for a request the exchange does not allow, then close."""
        self.state = SaslState.FAILED
        self._server = None
        name = ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else str(api_key)
        message = f"Unexpected Kafka request of type {name} during SASL handshake ({what})"
        return SaslReply(
            error_response(api_key, version, IllegalSaslStateError.code, message),
            close=True,
            failure=message,
        )

    def _response(self, api_key: ApiKey, version: int, error_code: int, **fields: Any) -> Any:
        cls = codec.response_schema(api_key, version)
        data: dict[str, Any] = {"error_code": error_code}
        if api_key == ApiKey.SASL_AUTHENTICATE:
            data.update(error_message=None, auth_bytes=b"", session_lifetime=0)
            if "session_lifetime_ms" in fields:
                data["session_lifetime"] = fields.pop("session_lifetime_ms")
        data.update(fields)
        return kio_build.build(cls, data)


def error_response(api_key: int, version: int, error_code: int, message: str) -> Any:
    """A response to any request carrying only a top-level error (and message), its other
    fields empty (Kafka's `AbstractRequest.getErrorResponse`); None when that API's response
    has no top-level error code (Metadata, Produce, ...): the connection then just closes."""
    try:
        cls = codec.response_schema(api_key, version)
        hints = typing.get_type_hints(cls)
        if "error_code" not in hints:
            return None
        data: dict[str, Any] = {
            f.name: _empty(hints[f.name])
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        data["error_code"] = error_code
        if "error_message" in hints:
            data["error_message"] = message
        return kio_build.build(cls, data)
    except Exception:  # noqa: BLE001 (kio raises assorted errors for an API it cannot build)
        return None


def _empty(annotation: Any) -> Any:
    """The plain empty value of a kio field type (kio_build converts it)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        if type(None) in args:
            return None
        annotation = args[0]
    if typing.get_origin(annotation) is tuple:
        return ()
    if isinstance(annotation, type):
        if issubclass(annotation, bool):
            return False
        if issubclass(annotation, int | datetime.timedelta | datetime.datetime):
            return 0
        if issubclass(annotation, str):
            return ""
        if issubclass(annotation, bytes):
            return b""
    raise TypeError(f"no empty value for {annotation}")


def sasl_reply(conn: ServerConnection, request: Request, now_ms: int) -> SaslReply | None:
    """The authenticator's reply when `request` is its to answer (the SASL handshake,
    anything before authentication, any request of an expired session), else None: the
    request goes to the server's handler. `now_ms` is wall-clock (token expiry is)."""
    sasl = conn.sasl
    if sasl is None:
        if request.api_key in SASL_APIS:  # Kafka's KafkaApis on a listener without SASL
            message = "SASL handshake on a listener without SASL"
            body = error_response(
                request.api_key, request.api_version, IllegalSaslStateError.code, message
            )
            return SaslReply(body, close=body is None, failure=message)
        return None
    assert isinstance(sasl, SaslServerAuthenticator)
    if (
        conn.state is ConnectionState.AUTHENTICATED
        and request.api_key != ApiKey.SASL_HANDSHAKE
        and sasl.session_expired(now_ms)
    ):
        return SaslReply(
            close=True, expired=True, failure="session expired (connections.max.reauth.ms)"
        )
    if not sasl.handles(request.api_key):
        return None
    reply = sasl.on_request(request.api_key, request.api_version, request.body, now_ms)
    if reply.authenticated is not None and conn.state is ConnectionState.PRE_AUTHENTICATION:
        conn.authenticated(reply.authenticated)
    return reply
