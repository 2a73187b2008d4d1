"""AlterUserScramCredentials and DescribeUserScramCredentials over the metadata image (Kafka's
`ScramControlManager.alterCredentials` and `ScramImage.describe`, KIP-554).

A client sends a salted password (RFC 5802's SaltedPassword = Hi(password, salt, i)), never
the password; the controller derives and stores StoredKey = H(HMAC(SaltedPassword, "Client
Key")) and ServerKey = HMAC(SaltedPassword, "Server Key") (Kafka's `ScramFormatter`), which
is all a SCRAM server needs. Kafka's rules, in Kafka's order:

- a user named twice in one request (deletion or upsertion, whatever the mechanism) fails
  with DUPLICATE_RESOURCE, and so do all its other alterations in that request;
- an empty name: UNACCEPTABLE_CREDENTIAL; an unknown mechanism: UNSUPPORTED_SASL_MECHANISM;
- iterations outside 4096-16384: UNACCEPTABLE_CREDENTIAL ("Too few" / "Too many iterations");
- deleting a credential that does not exist: RESOURCE_NOT_FOUND.

Results list the deletions, then the upsertions, then the failures (Kafka's order); clients
match them by user. DescribeUserScramCredentials reads the image only:
`metadata.scram.describe_user_scram_credentials`, served by brokers too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sparklog.controller.results import NONE, ApiError
from sparklog.errors import (
    DuplicateResourceError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnknownServerError,
    UnsupportedSaslMechanismError,
)
from sparklog.metadata.image import MetadataImage
from sparklog.metadata.scram import (
    credential_from_salted_password,
    remove_scram_record,
    scram_record,
)
from sparklog.security.credentials import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramMechanism,
)

_DUPLICATE = "A user credential cannot be altered twice in the same request"


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    user: str
    mechanism: int  # the wire code: may be unknown


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes

    def __repr__(self) -> str:  # the salted password stays out of logs
        return f"ScramUpsertion({self.user!r}, mechanism={self.mechanism}, iterations={self.iterations})"


def alter_user_scram_credentials(
    image: MetadataImage,
    deletions: Sequence[ScramDeletion],
    upsertions: Sequence[ScramUpsertion],
) -> tuple[list[tuple[str, ApiError]], list[dict[str, Any]]]:
    """Per user: its result (see the module doc), and the records for the accepted ones."""
    errors: dict[str, ApiError] = {}
    to_delete: dict[str, ScramDeletion] = {}
    to_upsert: dict[str, ScramUpsertion] = {}
    for deletion in deletions:
        if deletion.user in errors:
            continue
        if to_delete.pop(deletion.user, None) is not None:
            errors[deletion.user] = ApiError(DuplicateResourceError.code, _DUPLICATE)
            continue
        error = _name_and_mechanism_error(deletion.user, deletion.mechanism)
        if (
            error is None
            and image.credentials.scram_credential(
                ScramMechanism(deletion.mechanism), deletion.user
            )
            is None
        ):
            error = ApiError(
                ResourceNotFoundError.code,
                "Attempt to delete a user credential that does not exist",
            )
        if error is not None:
            errors[deletion.user] = error
        else:
            to_delete[deletion.user] = deletion
    for upsertion in upsertions:
        if upsertion.user in errors:
            continue
        if (
            to_delete.pop(upsertion.user, None) is not None
            or to_upsert.pop(upsertion.user, None) is not None
        ):
            errors[upsertion.user] = ApiError(DuplicateResourceError.code, _DUPLICATE)
            continue
        error = _upsertion_error(upsertion)
        if error is not None:
            errors[upsertion.user] = error
        else:
            to_upsert[upsertion.user] = upsertion
    results: list[tuple[str, ApiError]] = []
    records: list[dict[str, Any]] = []
    for d in to_delete.values():
        results.append((d.user, NONE))
        records.append(remove_scram_record(d.user, ScramMechanism(d.mechanism)))
    for u in to_upsert.values():
        if not u.salted_password:
            # Kafka's HMAC refuses an empty key ("Empty key"): an unknown server error
            errors[u.user] = ApiError(UnknownServerError.code, None)
            continue
        mechanism = ScramMechanism(u.mechanism)
        credential = credential_from_salted_password(
            mechanism, u.salt, u.salted_password, u.iterations
        )
        results.append((u.user, NONE))
        records.append(scram_record(u.user, mechanism, credential))
    results.extend(errors.items())
    return results, records


def _name_and_mechanism_error(user: str, mechanism: int) -> ApiError | None:
    if not user:
        return ApiError(UnacceptableCredentialError.code, "Username must not be empty")
    if mechanism not in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        return ApiError(UnsupportedSaslMechanismError.code, "Unknown SCRAM mechanism")
    return None


def _upsertion_error(upsertion: ScramUpsertion) -> ApiError | None:
    error = _name_and_mechanism_error(upsertion.user, upsertion.mechanism)
    if error is not None:
        return error
    if upsertion.iterations < MIN_ITERATIONS:
        return ApiError(UnacceptableCredentialError.code, "Too few iterations")
    if upsertion.iterations > MAX_ITERATIONS:
        return ApiError(UnacceptableCredentialError.code, "Too many iterations")
    return None
