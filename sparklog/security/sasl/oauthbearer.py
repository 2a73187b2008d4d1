"""SASL/OAUTHBEARER on the server (RFC 7628; Kafka's `OAuthBearerSaslServer`) with Kafka's two
token validators:

- the unsecured one (`OAuthBearerUnsecuredValidatorCallbackHandler`, Kafka's default, for
  development and tests): an unsigned JWS (``alg: none``, empty signature) whose claims are
  checked like Kafka's `OAuthBearerValidationUtils` (principal claim `sub`, numeric `exp`,
  optional `iat`, required scope), options from the listener's `OAuthBearerLoginModule` JAAS
  config (`unsecuredValidatorPrincipalClaimName`, `unsecuredValidatorScopeClaimName`,
  `unsecuredValidatorRequiredScope`, `unsecuredValidatorAllowableClockSkewMs`);
- the signed one (`OAuthBearerValidatorCallbackHandler`, KIP-768): a JWT verified with PyJWT
  against the keys of `sasl.oauthbearer.jwks.endpoint.url` (a `file:` URL or http(s)),
  `sasl.oauthbearer.expected.audience|issuer`, `sasl.oauthbearer.sub.claim.name`,
  `sasl.oauthbearer.scope.claim.name`, `sasl.oauthbearer.clock.skew.seconds`.

Theory of operation: the client's one message is
``n,[a=<authzid>],^Aauth=Bearer <token>^A[<key>=<value>^A]*^A``. A valid token completes the
exchange with an empty challenge; the token's `exp` becomes the session's credential expiry
(KIP-368 re-authentication bounds the session by it). An invalid token gets RFC 7628's error
challenge ``{"status":"invalid_token"}``; the client answers ``^A`` and the exchange then fails
with that message, as Kafka does. Tokens are never logged or echoed.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import jwt

from sparklog.security.jaas import LoginModule
from sparklog.security.sasl.mechanism import SaslAuthenticationFailedError, SaslError
from sparklog.security.sasl.scram import unescape_username

logger = logging.getLogger(__name__)

MECHANISM: Final = "OAUTHBEARER"
_SEPARATOR: Final = b"\x01"
_RESPONSE_RE: Final = re.compile(
    rb"(?P<gs2>[ny]|p=[^,]*),(?:a=(?P<authzid>[^,\x01]*))?,"
    rb"\x01auth=Bearer (?P<token>[\x21-\x7e]+)\x01(?P<extensions>(?:[A-Za-z]+=[\x21-\x7e \t\r\n]*\x01)*)\x01"
)
#: Signature algorithms a signed token may use (no `none`, no HMAC: the keys are public).
SIGNED_ALGORITHMS: Final = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)


class InvalidToken(Exception):
    """A token the validator refuses; `status` is RFC 7628's error status for the client,
    `reason` is for the server's log (never holds the token)."""

    def __init__(
        self, reason: str, status: str = "invalid_token", scope: str | None = None
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.scope = scope


@dataclass(frozen=True, slots=True)
class ValidatedToken:
    """What a validated token establishes (Kafka's `OAuthBearerToken`)."""

    principal_name: str
    expiry_ms: int
    scope: frozenset[str]


class TokenValidator(Protocol):
    def validate(self, token: str, now_ms: int) -> ValidatedToken: ...


def _b64url_json(part: str) -> dict[str, Any]:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (binascii.Error, ValueError) as e:
        raise InvalidToken(f"token part is not base64url JSON ({type(e).__name__})") from None
    if not isinstance(decoded, dict):
        raise InvalidToken("token part is not a JSON object")
    return decoded


def _scope_of(value: object) -> frozenset[str]:
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return frozenset(value)
    raise InvalidToken("scope claim is neither a string nor a list of strings")


def _number_claim(claims: Mapping[str, object], name: str, *, required: bool) -> float | None:
    value = claims.get(name)
    if value is None:
        if required:
            raise InvalidToken(f"required claim {name!r} missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidToken(f"claim {name!r} is not a number")
    return float(value)


class UnsecuredJwsValidator:
    """Kafka's default server-side validator: unsigned tokens, claims checked, nothing trusted
    cryptographically. For development and tests only (as in Kafka)."""

    def __init__(
        self,
        *,
        principal_claim_name: str = "sub",
        scope_claim_name: str = "scope",
        required_scope: Sequence[str] = (),
        allowable_clock_skew_ms: int = 0,
    ) -> None:
        self._principal_claim = principal_claim_name
        self._scope_claim = scope_claim_name
        self._required_scope = frozenset(required_scope)
        self._skew_ms = allowable_clock_skew_ms

    @classmethod
    def from_login_module(cls, module: LoginModule) -> UnsecuredJwsValidator:
        """From the listener's OAuthBearerLoginModule options (Kafka's option names)."""
        skew = module.option("unsecuredValidatorAllowableClockSkewMs", "0") or "0"
        try:
            skew_ms = int(skew)
        except ValueError:
            raise ValueError(
                "unsecuredValidatorAllowableClockSkewMs must be a non-negative integer"
            ) from None
        required = module.option("unsecuredValidatorRequiredScope", "") or ""
        return cls(
            principal_claim_name=module.option("unsecuredValidatorPrincipalClaimName") or "sub",
            scope_claim_name=module.option("unsecuredValidatorScopeClaimName") or "scope",
            required_scope=[s for s in re.split(r"[,\s]+", required) if s],
            allowable_clock_skew_ms=max(0, skew_ms),
        )

    def validate(self, token: str, now_ms: int) -> ValidatedToken:
        parts = token.split(".")
        if len(parts) != 3:
            raise InvalidToken(f"unsecured JWS has {len(parts)} parts, not 3")
        if parts[2]:
            raise InvalidToken("unsecured JWS has a signature")
        header = _b64url_json(parts[0])
        if header.get("alg", "none") != "none":
            raise InvalidToken("unsecured JWS header's alg is not 'none'")
        claims = _b64url_json(parts[1])
        principal = claims.get(self._principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise InvalidToken(f"principal claim {self._principal_claim!r} missing or not a string")
        exp_s = _number_claim(claims, "exp", required=True)
        assert exp_s is not None
        iat_s = _number_claim(claims, "iat", required=False)
        expiry_ms = int(exp_s * 1000)
        if iat_s is not None:
            if now_ms + self._skew_ms < int(iat_s * 1000):
                raise InvalidToken("token's issued-at time is in the future")
            if int(iat_s * 1000) >= expiry_ms:
                raise InvalidToken("token's expiration time is not after its issued-at time")
        if now_ms > expiry_ms + self._skew_ms:
            raise InvalidToken("token has expired")
        scope = _scope_of(claims.get(self._scope_claim))
        missing = self._required_scope - scope
        if missing:
            raise InvalidToken(
                "token lacks a required scope",
                status="insufficient_scope",
                scope=" ".join(sorted(self._required_scope)),
            )
        return ValidatedToken(principal, expiry_ms, scope)


def load_jwks(url: str, *, timeout_s: float = 10.0) -> jwt.PyJWKSet:
    """The key set at `url` (`file:` or http(s)); ValueError naming the problem."""
    if not url.startswith(("file:", "http://", "https://")):
        raise ValueError(
            f"sasl.oauthbearer.jwks.endpoint.url must be a file:, http: or https: URL, got {url!r}"
        )
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (scheme checked)
            document = json.loads(response.read())
        return jwt.PyJWKSet.from_dict(document)
    except (OSError, ValueError, jwt.PyJWKSetError, jwt.PyJWKError) as e:
        raise ValueError(f"cannot load the JWKS from {url}: {type(e).__name__}: {e}") from None


class JwksValidator:
    """Signed JWTs checked against a JWKS (Kafka's `OAuthBearerValidatorCallbackHandler`).

    `keys` supplies the current key set; it is asked again (at most once per
    `refresh_interval_ms`) when a token names a key id it does not hold (key rotation).
    """

    def __init__(
        self,
        keys: Callable[[], jwt.PyJWKSet],
        *,
        expected_audience: Sequence[str] = (),
        expected_issuer: str | None = None,
        sub_claim_name: str = "sub",
        scope_claim_name: str = "scope",
        clock_skew_s: int = 30,
        refresh_interval_ms: int = 3_600_000,
    ) -> None:
        self._load = keys
        self._keys = keys()
        self._loaded_ms: int | None = None
        self._audience = list(expected_audience)
        self._issuer = expected_issuer
        self._sub_claim = sub_claim_name
        self._scope_claim = scope_claim_name
        self._skew_s = clock_skew_s
        self._refresh_ms = refresh_interval_ms

    def _key_for(self, kid: str | None, now_ms: int) -> jwt.PyJWK:
        for attempt in range(2):
            candidates = [k for k in self._keys.keys if kid is None or k.key_id == kid]
            if len(candidates) == 1 or (candidates and kid is not None):
                return candidates[0]
            stale = self._loaded_ms is None or now_ms - self._loaded_ms >= self._refresh_ms
            if attempt or not stale:
                break
            try:
                self._keys = self._load()
            except ValueError as e:
                logger.warning("JWKS refresh failed: %s", e)
            self._loaded_ms = now_ms
        raise InvalidToken("no key in the JWKS matches the token's key id")

    def validate(self, token: str, now_ms: int) -> ValidatedToken:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise InvalidToken(f"malformed JWT ({type(e).__name__})") from None
        key = self._key_for(header.get("kid"), now_ms)
        try:
            claims = jwt.decode(
                token,
                key=key.key,
                algorithms=list(SIGNED_ALGORITHMS),
                audience=self._audience or None,
                issuer=self._issuer,
                leeway=self._skew_s,
                options={
                    "require": ["exp", self._sub_claim],
                    "verify_aud": bool(self._audience),
                    "verify_iat": False,  # checked below against now_ms, not the clock
                    "verify_exp": False,
                    "verify_nbf": False,
                },
            )
        except jwt.PyJWTError as e:
            raise InvalidToken(f"JWT refused: {type(e).__name__}") from None
        principal = claims.get(self._sub_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise InvalidToken(f"claim {self._sub_claim!r} missing or not a string")
        exp_s = _number_claim(claims, "exp", required=True)
        assert exp_s is not None
        skew_ms = self._skew_s * 1000
        if now_ms > int(exp_s * 1000) + skew_ms:
            raise InvalidToken("token has expired")
        for name in ("nbf", "iat"):
            at_s = _number_claim(claims, name, required=False)
            if at_s is not None and int(at_s * 1000) > now_ms + skew_ms:
                raise InvalidToken(f"token's {name} is in the future")
        return ValidatedToken(
            principal, int(exp_s * 1000), _scope_of(claims.get(self._scope_claim))
        )


class OAuthBearerServer:
    """One OAUTHBEARER exchange."""

    mechanism_name: Final = MECHANISM

    def __init__(self, validator: TokenValidator) -> None:
        self._validator = validator
        self._token: ValidatedToken | None = None
        self._error_message: str | None = None

    @property
    def is_complete(self) -> bool:
        return self._token is not None

    @property
    def authorization_id(self) -> str:
        assert self._token is not None, "OAUTHBEARER exchange not complete"
        return self._token.principal_name

    @property
    def credential_expiry_ms(self) -> int | None:
        return self._token.expiry_ms if self._token is not None else None

    def evaluate_response(self, response: bytes, now_ms: int) -> bytes:
        if response == _SEPARATOR and self._error_message is not None:
            raise SaslAuthenticationFailedError(self._error_message)
        self._error_message = None
        if self._token is not None:
            raise SaslError("OAUTHBEARER exchange already complete")
        match = _RESPONSE_RE.fullmatch(response)
        if match is None:
            raise SaslError("Invalid OAUTHBEARER client first message")
        try:
            authzid = unescape_username((match["authzid"] or b"").decode())
            token = match["token"].decode("ascii")
        except UnicodeDecodeError:
            raise SaslError("Invalid OAUTHBEARER client first message") from None
        try:
            validated = self._validator.validate(token, now_ms)
        except InvalidToken as e:
            logger.debug("OAUTHBEARER token refused: %s", e)
            body: dict[str, str] = {"status": e.status}
            if e.scope is not None:
                body["scope"] = e.scope
            self._error_message = json.dumps(body, separators=(",", ":"))
            return self._error_message.encode()
        if authzid and authzid != validated.principal_name:
            raise SaslAuthenticationFailedError(
                "Authentication failed: Client requested an authorization id that is "
                "different from the token's principal name"
            )
        self._token = validated
        return b""
