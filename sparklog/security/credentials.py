"""SCRAM credentials: what the controller stores per user and mechanism, and what the SCRAM
mechanism checks a login against (Kafka's `ScramCredential`, `UserScramCredentialRecord`).

Kafka stores the salted form only (RFC 5802: salt, StoredKey, ServerKey, iteration count),
never the password; so does sparklog. The controller's records carry these fields; brokers
and the coordinator serve SCRAM logins from their metadata image through a `CredentialStore`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol


class ScramMechanism(enum.IntEnum):
    """Kafka's `ScramMechanism`, with the type codes AlterUserScramCredentials and
    DescribeUserScramCredentials carry."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        """The SASL mechanism name (`SCRAM-SHA-256`)."""
        return self.name.replace("_", "-")

    @classmethod
    def of(cls, mechanism_name: str) -> ScramMechanism:
        """From a SASL mechanism name (`SCRAM-SHA-512`); ValueError naming the valid ones."""
        try:
            mechanism = cls[mechanism_name.strip().upper().replace("-", "_")]
        except KeyError:
            mechanism = cls.UNKNOWN
        if mechanism is cls.UNKNOWN:
            raise ValueError(
                f"{mechanism_name!r} is not a SCRAM mechanism (SCRAM-SHA-256, SCRAM-SHA-512)"
            )
        return mechanism

    @property
    def hash_name(self) -> str:
        """The `hashlib` name of its hash (`sha256`)."""
        return "sha256" if self is ScramMechanism.SCRAM_SHA_256 else "sha512"


#: Kafka's bounds on a SCRAM credential's iteration count (`ScramMechanism.minIterations`,
#: `maxIterations`; AlterUserScramCredentials refuses others).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """A user's stored SCRAM credential for one mechanism (RFC 5802's server-side state)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:  # keys stay out of logs and exceptions
        return f"ScramCredential(iterations={self.iterations})"


class CredentialStore(Protocol):
    """Where a SCRAM login looks its user up (the metadata image on brokers and the driver)."""

    def scram_credential(self, mechanism: ScramMechanism, user: str) -> ScramCredential | None: ...
