"""OAUTHBEARER tokens from an OAuth 2 token endpoint (KIP-768, Kafka's
`OAuthBearerLoginCallbackHandler` + `HttpAccessTokenRetriever`).

With `sasl.oauthbearer.token.endpoint.url` set, the client asks the endpoint for a token with
the client-credentials grant: a POST of `grant_type=client_credentials[&scope=...]` with HTTP
Basic authentication from the JAAS options `clientId` / `clientSecret` (RFC 6749 §4.4, the
standard base64 of RFC 7617), and logs in with the response's `access_token`. A `file:` URL
names a file holding the token instead (Kafka 3.7+). The token is kept until 90 % of its
lifetime (its `exp` claim; unsigned read, the broker verifies it) and fetched again after,
as Kafka's login refresh does, so a fleet of connections costs one request per lifetime.

Errors name the endpoint and the HTTP status and the server's `error` / `error_description`,
never the client secret or a token.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from sparklog.errors import SaslAuthenticationFailedError
from sparklog.security.sasl.client import SaslConfigError

logger = logging.getLogger(__name__)

#: Kafka's default when `sasl.login.connect.timeout.ms` / `sasl.login.read.timeout.ms` are
#: unset is the JDK's (no timeout); a bounded wait is kinder to a blocked client.
DEFAULT_TIMEOUT_MS = 10_000
_REFRESH_SHARE = 0.9


def token_endpoint_provider(
    url: str, options: Mapping[str, str], *, timeout_ms: int | None = None
) -> Callable[[], str]:
    """A token provider for `url` (http(s): the client-credentials grant; file: a token
    file), caching each token until 90 % of its lifetime."""
    parsed = urllib.parse.urlparse(url)
    timeout_s = (timeout_ms or DEFAULT_TIMEOUT_MS) / 1000
    if parsed.scheme == "file":
        path = Path(urllib.parse.unquote(parsed.path))
        return _Cached(lambda: _read_token_file(path))
    if parsed.scheme not in ("http", "https"):
        raise SaslConfigError(
            f"sasl.oauthbearer.token.endpoint.url must be an http(s) or file URL, got "
            f"{parsed.scheme or 'no'} scheme"
        )
    client_id = (options.get("clientId") or "").strip()
    client_secret = (options.get("clientSecret") or "").strip()
    if not client_id or not client_secret:
        raise SaslConfigError(
            "sasl.oauthbearer.token.endpoint.url needs clientId and clientSecret in "
            'sasl.jaas.config (OAuthBearerLoginModule required clientId="..." '
            'clientSecret="..." [scope="..."];)'
        )
    scope = (options.get("scope") or "").strip()
    return _Cached(lambda: _fetch(url, client_id, client_secret, scope, timeout_s))


class _Cached:
    """A token source that keeps a token until 90 % of its lifetime (thread-safe)."""

    def __init__(self, fetch: Callable[[], str]) -> None:
        self._fetch = fetch
        self._lock = threading.Lock()
        self._token: str | None = None
        self._refresh_at_s = 0.0

    def __repr__(self) -> str:
        return "TokenEndpointProvider(<redacted>)"

    def __call__(self) -> str:
        with self._lock:
            now_s = time.time()  # compared with the token's exp: wall-clock
            if self._token is None or now_s >= self._refresh_at_s:
                token = self._fetch()
                self._token, self._refresh_at_s = token, _refresh_at_s(token, now_s)
            return self._token


def _refresh_at_s(token: str, now_s: float) -> float:
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        exp = float(claims["exp"])
    except (IndexError, ValueError, KeyError, TypeError):
        return now_s  # no readable expiry: fetch for every login
    return now_s + max(0.0, exp - now_s) * _REFRESH_SHARE


def _read_token_file(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as e:
        raise SaslAuthenticationFailedError(
            f"cannot read the OAUTHBEARER token file {path}: {e}"
        ) from None
    if not token:
        raise SaslAuthenticationFailedError(f"the OAUTHBEARER token file {path} is empty")
    return token


def _fetch(url: str, client_id: str, client_secret: str, scope: str, timeout_s: float) -> str:
    body = "grant_type=client_credentials"
    if scope:
        body += "&scope=" + urllib.parse.quote_plus(scope)
    basic = base64.b64encode(f"{client_id}:{client_secret}".encode()).decode()
    request = urllib.request.Request(
        url,
        data=body.encode(),
        method="POST",
        headers={
            "Authorization": f"Basic {basic}",
            "Accept": "application/json",
            "Content-Type": "application/x-www-form-urlencoded",
            "Cache-Control": "no-cache",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            payload = response.read()
    except urllib.error.HTTPError as e:
        raise SaslAuthenticationFailedError(
            f"the token endpoint {url} answered HTTP {e.code}{_oauth_error(e.read())}"
        ) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise SaslAuthenticationFailedError(
            f"cannot reach the token endpoint {url}: {reason}"
        ) from None
    try:
        token = json.loads(payload)["access_token"]
    except (ValueError, KeyError, TypeError):
        token = None
    if not isinstance(token, str) or not token.strip():
        raise SaslAuthenticationFailedError(
            f"the token endpoint {url} answered without an access_token"
        )
    return token.strip()


def _oauth_error(body: bytes) -> str:
    """RFC 6749 §5.2's `error` / `error_description`, when the body has them."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return ""
    if not isinstance(parsed, dict) or "error" not in parsed:
        return ""
    description = parsed.get("error_description")
    return f": {parsed['error']}" + (f" - {description}" if description else "")
