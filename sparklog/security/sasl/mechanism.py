"""What every server-side SASL mechanism is to the authenticator (Kafka's `SaslServer` as
`SaslServerAuthenticator` drives it), and the two ways one fails.

A mechanism is sans-IO: the authenticator hands it each token the client sent
(`evaluate_response(token, now_ms)`) and sends back the bytes it returns, until
`is_complete`. Time comes in as an argument (wall-clock milliseconds, since token expiry times
are wall-clock claims).

Failing (as Kafka distinguishes `SaslAuthenticationException` from `SaslException`):

- `SaslAuthenticationFailedError(message)` (errors.py, code 58): the message is safe to send to
  the unauthenticated client and is sent as SaslAuthenticate's error message.
- `SaslError(reason)`: anything else (malformed message, unknown user, wrong proof); the client
  gets the generic "Authentication failed during authentication due to invalid credentials
  with SASL mechanism <m>" and the reason is only logged. Reasons never hold secrets.
"""

from __future__ import annotations

from typing import Protocol

from sparklog.errors import SaslAuthenticationFailedError

__all__ = ["SaslAuthenticationFailedError", "SaslError", "SaslServer", "generic_failure_message"]


class SaslError(Exception):
    """A failed exchange whose reason is for the server's log only."""


class SaslServer(Protocol):
    """One authentication exchange on one connection (never reused)."""

    @property
    def mechanism_name(self) -> str: ...

    @property
    def is_complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str:
        """The authenticated user's name; only once `is_complete`."""
        ...

    @property
    def credential_expiry_ms(self) -> int | None:
        """When the credential used expires (an OAUTHBEARER token's `exp`), wall-clock ms;
        None when it does not (Kafka's CREDENTIAL_LIFETIME_MS negotiated property)."""
        ...

    def evaluate_response(self, response: bytes, now_ms: int) -> bytes:
        """The challenge for the client's `response`; raises SaslError or
        SaslAuthenticationFailedError when the exchange failed."""
        ...


def generic_failure_message(mechanism_name: str) -> str:
    """What Kafka tells a client whose exchange failed with a plain `SaslException`."""
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism_name}"
    )
