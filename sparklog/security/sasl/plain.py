"""SASL/PLAIN on the server (RFC 4616; Kafka's `PlainSaslServer` with the default
`PlainServerCallbackHandler`).

The client's single message is ``[authzid] NUL authcid NUL passwd`` in UTF-8. Users come from
the listener's JAAS config, `PlainLoginModule`'s options ``user_<name>="<password>"``; the
password is compared in constant time (`hmac.compare_digest`, Kafka's
`Utils.isEqualConstantTime`). An authorization id, if sent, must equal the user name.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Final

from sparklog.security.jaas import LoginModule
from sparklog.security.sasl.mechanism import SaslAuthenticationFailedError, SaslError

MECHANISM: Final = "PLAIN"
#: The JAAS option prefix naming a user (`user_alice="alice-secret"`).
USER_OPTION_PREFIX: Final = "user_"


class PlainUsers:
    """The users a PLAIN listener accepts (name -> password), from its JAAS login module."""

    __slots__ = ("_passwords",)

    def __init__(self, passwords: Mapping[str, str]) -> None:
        self._passwords = {name: password.encode() for name, password in passwords.items()}

    @classmethod
    def from_login_module(cls, module: LoginModule) -> PlainUsers:
        return cls(module.prefixed(USER_OPTION_PREFIX))

    def __repr__(self) -> str:
        return f"PlainUsers({len(self._passwords)} users)"

    def __len__(self) -> int:
        return len(self._passwords)

    def authenticate(self, username: str, password: bytes) -> bool:
        """Whether `password` is `username`'s; constant-time in the password."""
        expected = self._passwords.get(username)
        if expected is None:
            hmac.compare_digest(password, password)  # same work as a known user
            return False
        return hmac.compare_digest(expected, password)


class PlainServer:
    """One PLAIN exchange (a single client message)."""

    mechanism_name: Final = MECHANISM

    def __init__(self, users: PlainUsers) -> None:
        self._users = users
        self._authorization_id: str | None = None

    @property
    def is_complete(self) -> bool:
        return self._authorization_id is not None

    @property
    def authorization_id(self) -> str:
        assert self._authorization_id is not None, "PLAIN exchange not complete"
        return self._authorization_id

    @property
    def credential_expiry_ms(self) -> int | None:
        return None

    def evaluate_response(self, response: bytes, now_ms: int) -> bytes:
        if self._authorization_id is not None:
            raise SaslError("PLAIN exchange already complete")
        parts = response.split(b"\x00")
        if len(parts) != 3:
            raise SaslError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid_bytes, username_bytes, password = parts
        try:
            authzid, username = authzid_bytes.decode(), username_bytes.decode()
        except UnicodeDecodeError:
            raise SaslError("Invalid SASL/PLAIN response: user name is not UTF-8") from None
        if not username:
            raise SaslAuthenticationFailedError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailedError("Authentication failed: password not specified")
        if not self._users.authenticate(username, password):
            raise SaslAuthenticationFailedError(
                "Authentication failed: Invalid username or password"
            )
        if authzid and authzid != username:
            raise SaslAuthenticationFailedError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        self._authorization_id = username
        return b""
