"""SCRAM-SHA-256 and SCRAM-SHA-512 on the server (RFC 5802 / RFC 7677; Kafka's
`ScramSaslServer`), with `scramp` doing the message formats and the proof arithmetic.

Theory of operation: two round trips.

1. client-first ``n,,n=<user>,r=<client nonce>[,<ext>=<v>]*`` -> the user's stored
   `ScramCredential` (salt, StoredKey, ServerKey, iterations: exactly what Kafka's
   `UserScramCredentialRecord` holds and what scramp's `auth_fn` returns) is looked up in the
   `CredentialStore`; server-first ``r=<nonce>,s=<salt>,i=<iterations>``.
2. client-final ``c=<gs2 header>,r=<nonce>,p=<proof>`` -> scramp checks the nonce and the proof
   (`hmac.compare_digest`, constant time); server-final ``v=<server signature>``.

User names arrive escaped (``=2C`` for ``,`` and ``=3D`` for ``=``, RFC 5802 section 5.1);
scramp decodes them before the lookup. Kafka fails an unknown user, a wrong proof, a malformed
message and a credential under the minimum iteration count with a plain `SaslException`
(generic message to the client); only a differing authorization id gets its own message.

Differences from Kafka, both for features sparklog does not have: a client-first message with
the `tokenauth=true` extension (delegation tokens, KIP-48) is refused, and so is a GS2
authorization id equal to the user name (scramp accepts only an empty one; Kafka's, librdkafka's,
kafka-python's and aiokafka's clients all send it empty).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

import scramp

from sparklog.security.credentials import (
    MIN_ITERATIONS,
    CredentialStore,
    ScramCredential,
    ScramMechanism,
)
from sparklog.security.sasl.mechanism import SaslAuthenticationFailedError, SaslError

logger = logging.getLogger(__name__)

MECHANISMS: Final = tuple(
    m.mechanism_name for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
)


def unescape_username(sasl_name: str) -> str:
    """A SCRAM `saslname` decoded (``=2C`` -> ``,``, ``=3D`` -> ``=``; Kafka's
    `ScramFormatter.username`); SaslError on any other ``=``."""
    pieces = sasl_name.split("=")
    for piece in pieces[1:]:
        if not (piece.startswith("2C") or piece.startswith("3D")):
            raise SaslError("Invalid SCRAM user name: '=' must be followed by 2C or 3D")
    return sasl_name.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise SaslError("Invalid SCRAM client first message: malformed attribute")
        out.setdefault(key, value)
    return out


class ScramServer:
    """One SCRAM exchange for one mechanism against a credential store."""

    def __init__(self, mechanism: ScramMechanism, credentials: CredentialStore) -> None:
        assert mechanism is not ScramMechanism.UNKNOWN
        self._mechanism = mechanism
        self._credentials = credentials
        self._server = scramp.ScramMechanism(mechanism.mechanism_name).make_server(self._stored)
        self._username: str | None = None
        self._credential: ScramCredential | None = None
        self._state = "client-first"  # -> "client-final" -> "complete" | "failed"

    @property
    def mechanism_name(self) -> str:
        return self._mechanism.mechanism_name

    @property
    def is_complete(self) -> bool:
        return self._state == "complete"

    @property
    def authorization_id(self) -> str:
        assert self._state == "complete" and self._username is not None
        return self._username

    @property
    def credential_expiry_ms(self) -> int | None:
        return None

    def _stored(self, _saslprepped_name: str) -> tuple[bytes, bytes, bytes, int]:
        # scramp's auth_fn: the credential was looked up (under Kafka's un-prepped user
        # name) before scramp saw the message.
        credential = self._credential
        assert credential is not None
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def evaluate_response(self, response: bytes, now_ms: int) -> bytes:
        try:
            text = response.decode()
        except UnicodeDecodeError:
            self._state = "failed"
            raise SaslError("Invalid SCRAM message: not UTF-8") from None
        try:
            if self._state == "client-first":
                challenge = self._client_first(text)
                self._state = "client-final"
                return challenge
            if self._state == "client-final":
                self._server.set_client_final(text)
                final = self._server.get_server_final()
                self._state = "complete"
                self._credential = None
                return final.encode()
        except scramp.ScramException as e:
            self._state = "failed"
            self._credential = None
            # scramp's messages describe the protocol step, never a key or password
            raise SaslError(f"SCRAM exchange failed: {e.args[0] if e.args else e}") from None
        except (SaslError, SaslAuthenticationFailedError):
            self._state = "failed"
            self._credential = None
            raise
        raise SaslError(f"Unexpected SCRAM message in state {self._state}")

    def _client_first(self, text: str) -> bytes:
        flag, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep1 and sep2) or flag not in ("n", "y", "p") and not flag.startswith("p="):
            raise SaslError("Invalid SCRAM client first message: bad GS2 header")
        attributes = _attributes(bare)
        if "n" not in attributes or "r" not in attributes:
            raise SaslError("Invalid SCRAM client first message: no user name or nonce")
        username = unescape_username(attributes["n"])
        if attributes.get("tokenauth", "").lower() == "true":
            raise SaslError("SCRAM delegation-token authentication is not supported")
        if authzid:
            if not authzid.startswith("a=") or unescape_username(authzid[2:]) != username:
                raise SaslAuthenticationFailedError(
                    "Authentication failed: Client requested an authorization id that is "
                    "different from username"
                )
            raise SaslError("SCRAM authorization id in the GS2 header is not supported")
        credential = self._credentials.scram_credential(self._mechanism, username)
        if credential is None:
            raise SaslError("Authentication failed: Invalid user credentials")
        if credential.iterations < MIN_ITERATIONS:
            raise SaslError(
                f"Iterations {credential.iterations} is less than the minimum "
                f"{MIN_ITERATIONS} for {self.mechanism_name}"
            )
        self._credential = credential
        # scramp parses only RFC 5802's one-letter attributes; Kafka's SCRAM extensions
        # (`<name>=<value>` after the nonce, KIP-84/KIP-342) are ignored as Kafka ignores the
        # ones it does not support, but they stay in client-first-bare, which the proofs sign.
        core = ",".join(p for p in bare.split(",") if len(p.partition("=")[0]) == 1)
        self._server.set_client_first(f"{flag},,{core}")
        self._server.client_first_bare = bare
        self._username = username
        return self._server.get_server_first().encode()


class CredentialsSource:
    """A `CredentialStore` that asks its source each time: a SASL listener built from settings
    holds one, and its server binds it to its metadata image's credentials (which move as the
    controller's `UserScramCredentialRecord`s are replayed). Unbound, it knows no user."""

    def __init__(self, source: Callable[[], CredentialStore | None] | None = None) -> None:
        self._source = source
        self._warned = False

    def __repr__(self) -> str:
        return f"CredentialsSource({'bound' if self._source is not None else 'unbound'})"

    def bind(self, source: Callable[[], CredentialStore | None]) -> None:
        self._source = source

    def scram_credential(self, mechanism: ScramMechanism, user: str) -> ScramCredential | None:
        if self._source is None:
            if not self._warned:  # a wiring bug, not a client's fault: say so once
                self._warned = True
                logger.warning(
                    "SCRAM login refused: this listener's credential store was never bound "
                    "to the server's metadata (SaslServerConfig.bind_credentials)"
                )
            return None
        store = self._source()
        return store.scram_credential(mechanism, user) if store is not None else None


class InMemoryCredentialStore:
    """A `CredentialStore` held in a dict, filled from passwords with scramp's own credential
    maker (real SCRAM credentials: tests, and listeners configured before the controller's
    credential records exist)."""

    def __init__(self) -> None:
        self._credentials: dict[tuple[ScramMechanism, str], ScramCredential] = {}

    def __repr__(self) -> str:
        return f"InMemoryCredentialStore({len(self._credentials)} credentials)"

    def add_password(
        self, mechanism: ScramMechanism, user: str, password: str, iterations: int = 4096
    ) -> ScramCredential:
        salt, stored_key, server_key, count = scramp.ScramMechanism(
            mechanism.mechanism_name
        ).make_auth_info(password, iteration_count=iterations)
        credential = ScramCredential(salt, stored_key, server_key, count)
        self._credentials[mechanism, user] = credential
        return credential

    def scram_credential(self, mechanism: ScramMechanism, user: str) -> ScramCredential | None:
        return self._credentials.get((mechanism, user))
