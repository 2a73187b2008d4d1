"""SCRAM credentials as cluster metadata (Kafka's `UserScramCredentialRecord` /
`RemoveUserScramCredentialRecord` and `ScramControlManager.replay`).

One record per (user, mechanism), carrying only the salted form (RFC 5802: salt, StoredKey,
ServerKey, iterations; bytes as base64), never a password:

    {"type": "UserScramCredential", "name": "alice", "mechanism": 2, "salt": "...",
     "stored_key": "...", "server_key": "...", "iterations": 8192}
    {"type": "RemoveUserScramCredential", "name": "alice", "mechanism": 2}

`ScramCredentials` folds them in and is the `CredentialStore` SCRAM logins look users up in
(`MetadataImage.credentials`), on brokers and on the driver alike.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparklog.errors import DuplicateResourceError, ResourceNotFoundError
from sparklog.security.credentials import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
)

USER_SCRAM_CREDENTIAL = "UserScramCredential"
REMOVE_USER_SCRAM_CREDENTIAL = "RemoveUserScramCredential"


def scram_record(
    user: str, mechanism: ScramMechanism, credential: ScramCredential
) -> dict[str, Any]:
    """The `UserScramCredential` record storing `credential` for (`user`, `mechanism`)."""
    return {
        "type": USER_SCRAM_CREDENTIAL,
        "name": user,
        "mechanism": int(mechanism),
        "salt": _b64(credential.salt),
        "stored_key": _b64(credential.stored_key),
        "server_key": _b64(credential.server_key),
        "iterations": credential.iterations,
    }


def remove_scram_record(user: str, mechanism: ScramMechanism) -> dict[str, Any]:
    """The `RemoveUserScramCredential` record deleting (`user`, `mechanism`)."""
    return {"type": REMOVE_USER_SCRAM_CREDENTIAL, "name": user, "mechanism": int(mechanism)}


def credential_from_salted_password(
    mechanism: ScramMechanism, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """The stored form of a salted password (Kafka's `ScramFormatter.storedKey/serverKey`)."""
    digest = mechanism.hash_name
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    stored_key = hashlib.new(digest, client_key).digest()
    server_key = hmac.new(salted_password, b"Server Key", digest).digest()
    return ScramCredential(salt, stored_key, server_key, iterations)


def salted_password(
    mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
) -> bytes:
    """RFC 5802's Hi(): PBKDF2 with the mechanism's HMAC (what a client sends)."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: object) -> bytes:
    try:
        return base64.b64decode(str(text), validate=True)
    except binascii.Error as e:
        raise ValueError(f"not base64: {e}") from None


def _mechanism(record: Mapping[str, Any]) -> ScramMechanism:
    mechanism = ScramMechanism(int(record["mechanism"]))
    if mechanism is ScramMechanism.UNKNOWN:
        raise ValueError("SCRAM credential record with mechanism UNKNOWN")
    return mechanism


class ScramCredentials:
    """The SCRAM credentials of the metadata image, (user, mechanism) -> credential; a
    `CredentialStore`. Mutated only by replay."""

    __slots__ = ("_credentials",)

    def __init__(self) -> None:
        self._credentials: dict[tuple[str, ScramMechanism], ScramCredential] = {}

    def scram_credential(self, mechanism: ScramMechanism, user: str) -> ScramCredential | None:
        return self._credentials.get((user, mechanism))

    def users(self) -> dict[str, dict[ScramMechanism, int]]:
        """User -> mechanism -> iterations, users sorted (what DescribeUserScramCredentials
        answers: never the keys)."""
        users: dict[str, dict[ScramMechanism, int]] = {}
        for (user, mechanism), credential in sorted(self._credentials.items()):
            users.setdefault(user, {})[mechanism] = credential.iterations
        return users

    def __len__(self) -> int:
        return len(self._credentials)

    def __repr__(self) -> str:  # names and counts only: keys stay out of logs
        return f"ScramCredentials({sorted({u for u, _ in self._credentials})})"

    def replay(self, record: Mapping[str, Any]) -> None:
        """Apply a `UserScramCredential` record (it replaces any credential of the same user
        and mechanism, as Kafka's replay does); ValueError when it cannot be one."""
        user = str(record["name"])
        if not user:
            raise ValueError("SCRAM credential record with an empty user name")
        iterations = int(record["iterations"])
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ValueError(
                f"SCRAM credential of {user} has {iterations} iterations, outside "
                f"{MIN_ITERATIONS}-{MAX_ITERATIONS}"
            )
        credential = ScramCredential(
            salt=_unb64(record["salt"]),
            stored_key=_unb64(record["stored_key"]),
            server_key=_unb64(record["server_key"]),
            iterations=iterations,
        )
        self._credentials[(user, _mechanism(record))] = credential

    def replay_remove(self, record: Mapping[str, Any]) -> None:
        """Apply a `RemoveUserScramCredential` record; ValueError if there is no such one."""
        key = (str(record["name"]), _mechanism(record))
        if self._credentials.pop(key, None) is None:
            raise ValueError(f"no {key[1].mechanism_name} credential of user {key[0]} to remove")

    def to_list(self) -> list[dict[str, Any]]:
        """The snapshot form: one `UserScramCredential` record per credential, sorted."""
        return [scram_record(u, m, c) for (u, m), c in sorted(self._credentials.items())]

    @classmethod
    def from_list(cls, records: Iterable[Mapping[str, Any]]) -> ScramCredentials:
        credentials = cls()
        for record in records:
            credentials.replay(record)
        return credentials


class CurrentCredentials:
    """A `CredentialStore` reading whichever image `image_of()` returns now: for a server that
    holds no image of its own (the driver's coordinator reads the controller's, which a
    controller restart replaces). Lookups are dict reads, safe from another thread."""

    __slots__ = ("_image_of",)

    def __init__(self, image_of: Callable[[], Any]) -> None:
        self._image_of = image_of

    def scram_credential(self, mechanism: ScramMechanism, user: str) -> ScramCredential | None:
        image = self._image_of()
        return None if image is None else image.credentials.scram_credential(mechanism, user)


_DESCRIBE_DUPLICATE = (
    "Cannot describe SCRAM credentials for the same user twice in a single request: "
)
_DESCRIBE_MISSING = "Attempt to describe a user credential that does not exist: "


@dataclass(frozen=True, slots=True)
class DescribedUser:
    """One user of a DescribeUserScramCredentials answer: an error, or its credentials as
    (mechanism, iterations) pairs (never keys)."""

    user: str
    error_code: int = 0
    error_message: str | None = None
    credentials: tuple[tuple[ScramMechanism, int], ...] = ()


def describe_user_scram_credentials(
    credentials: ScramCredentials, users: Sequence[str] | None
) -> list[DescribedUser]:
    """Kafka's `ScramImage.describe`: every user with a credential when `users` is None or
    empty; otherwise each named user once, DUPLICATE_RESOURCE for one named twice and
    RESOURCE_NOT_FOUND for one without credentials."""
    stored = credentials.users()
    named: dict[str, bool] = {}  # user -> named more than once
    for user in users or stored:
        named[user] = user in named
    described = []
    for user, repeated in named.items():
        if repeated:
            described.append(
                DescribedUser(user, DuplicateResourceError.code, _DESCRIBE_DUPLICATE + user)
            )
        elif user not in stored:
            described.append(
                DescribedUser(user, ResourceNotFoundError.code, _DESCRIBE_MISSING + user)
            )
        else:
            described.append(DescribedUser(user, credentials=tuple(sorted(stored[user].items()))))
    return described
