"""ACLs and SCRAM credentials for the admin client (Kafka's `Admin.createAcls`,
`describeAcls`, `deleteAcls`, `alterUserScramCredentials`, `describeUserScramCredentials`).

Writes go to the controller through any broker (brokers forward them); describes are answered
by any broker from its metadata image. As Kafka's admin client, a password never leaves the
client: it is salted here (a random 32-byte salt, PBKDF2 with the mechanism's HMAC, RFC 5802's
Hi()) and only the salted password is sent.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.protocol.api_versions import ApiKey
from sparklog.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from sparklog.security.acl_filter import ANY_BINDING, AclBindingFilter
from sparklog.security.credentials import ScramMechanism

from .admin_channel import AdminChannel, admin_error, raise_first

_SALT_BYTES = 32


@dataclass(frozen=True, slots=True)
class ScramUpsert:
    """A user's new SCRAM credential, from its password (salted before it is sent)."""

    user: str
    mechanism: ScramMechanism
    password: str
    iterations: int = 4096

    def __repr__(self) -> str:  # the password stays out of logs and tracebacks
        return f"ScramUpsert({self.user!r}, {self.mechanism.mechanism_name}, {self.iterations})"


def create_acls(
    channel: AdminChannel, bindings: Iterable[AclBinding], timeout_ms: int | None
) -> None:
    """Create ACLs; raises the first binding's error (e.g. InvalidRequestError)."""
    bindings = list(bindings)
    creations = [
        {
            "resource_type": int(b.pattern.resource_type),
            "resource_name": b.pattern.name,
            "resource_pattern_type": int(b.pattern.pattern_type),
            "principal": b.entry.principal,
            "host": b.entry.host,
            "operation": int(b.entry.operation),
            "permission_type": int(b.entry.permission_type),
        }
        for b in bindings
    ]

    def results(response: Any) -> Iterable[tuple[str, Any, str | None]]:
        for binding, result in zip(bindings, response.results, strict=True):
            yield _describe(binding), result.error_code, result.error_message

    channel.controller_call(
        ApiKey.CREATE_ACLS, {"creations": creations}, timeout_ms, results, "ACL"
    )


def _filter_fields(f: AclBindingFilter) -> dict[str, Any]:
    return {
        "resource_type_filter": int(f.resource_type),
        "resource_name_filter": f.name,
        "pattern_type_filter": int(f.pattern_type),
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": int(f.operation),
        "permission_type": int(f.permission_type),
    }


def _binding(resource_type: int, name: str, pattern_type: int, acl: Any) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType(resource_type), name, PatternType(pattern_type)),
        AccessControlEntry(
            acl.principal,
            acl.host,
            AclOperation(int(acl.operation)),
            AclPermissionType(int(acl.permission_type)),
        ),
    )


def describe_acls(
    channel: AdminChannel, acl_filter: AclBindingFilter, timeout_ms: int | None
) -> list[AclBinding]:
    """The ACLs `acl_filter` matches."""
    fields = _filter_fields(acl_filter)

    def attempt() -> Any:
        return channel.request(channel.any_node(), ApiKey.DESCRIBE_ACLS, fields, timeout_ms)

    response = channel.retry(channel.deadline(timeout_ms), attempt)
    if int(response.error_code) != 0:
        raise admin_error(int(response.error_code), "DescribeAcls", response.error_message)
    return [
        _binding(int(r.resource_type), r.resource_name, int(r.pattern_type), acl)
        for r in response.resources
        for acl in r.acls
    ]


def delete_acls(
    channel: AdminChannel, filters: Iterable[AclBindingFilter], timeout_ms: int | None
) -> list[AclBinding]:
    """Delete the ACLs the filters match; returns them (each once)."""
    fields = {"filters": [_filter_fields(f) for f in filters]}
    deleted: dict[AclBinding, None] = {}

    def results(response: Any) -> Iterable[tuple[str, Any, str | None]]:
        deleted.clear()
        for index, result in enumerate(response.filter_results):
            yield f"filter {index + 1}", result.error_code, result.error_message
            for m in result.matching_acls:
                deleted[_binding(int(m.resource_type), m.resource_name, int(m.pattern_type), m)] = (
                    None
                )

    channel.controller_call(ApiKey.DELETE_ACLS, fields, timeout_ms, results, "ACL filter")
    return list(deleted)


def alter_user_scram_credentials(
    channel: AdminChannel,
    upserts: Iterable[ScramUpsert],
    deletions: Iterable[tuple[str, ScramMechanism]],
    timeout_ms: int | None,
) -> None:
    """Create or replace (`upserts`) and delete SCRAM credentials; raises the first user's
    error (e.g. UnacceptableCredentialError, ResourceNotFoundError)."""
    upsertions = []
    for u in upserts:
        salt = os.urandom(_SALT_BYTES)
        salted = hashlib.pbkdf2_hmac(u.mechanism.hash_name, u.password.encode(), salt, u.iterations)
        upsertions.append(
            {
                "name": u.user,
                "mechanism": int(u.mechanism),
                "iterations": u.iterations,
                "salt": salt,
                "salted_password": salted,
            }
        )
    fields = {
        "deletions": [{"name": user, "mechanism": int(m)} for user, m in deletions],
        "upsertions": upsertions,
    }

    def results(response: Any) -> Iterable[tuple[str, Any, str | None]]:
        return ((r.user, r.error_code, r.error_message) for r in response.results)

    channel.controller_call(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS, fields, timeout_ms, results, "user"
    )


def describe_user_scram_credentials(
    channel: AdminChannel, users: Iterable[str] | None, timeout_ms: int | None
) -> dict[str, Mapping[ScramMechanism, int]]:
    """user -> mechanism -> iterations (every user with credentials when `users` is None);
    raises ResourceNotFoundError for a named user without any."""
    fields = {"users": None if users is None else [{"name": u} for u in users]}

    def attempt() -> Any:
        return channel.request(
            channel.any_node(), ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, fields, timeout_ms
        )

    response = channel.retry(channel.deadline(timeout_ms), attempt)
    if int(response.error_code) != 0:
        raise admin_error(
            int(response.error_code), "DescribeUserScramCredentials", response.error_message
        )
    raise_first(((r.user, r.error_code, r.error_message) for r in response.results), "user")
    return {
        r.user: {ScramMechanism(int(i.mechanism)): int(i.iterations) for i in r.credential_infos}
        for r in response.results
    }


class AdminSecurityCalls:
    """`AdminClient`'s ACL and SCRAM methods (a base class keeps admin.py's size down)."""

    _channel: AdminChannel

    def create_acls(self, bindings: Iterable[AclBinding], *, timeout_ms: int | None = None) -> None:
        """Create ACLs; raises the first binding's error."""
        create_acls(self._channel, bindings, timeout_ms)

    def describe_acls(
        self, acl_filter: AclBindingFilter = ANY_BINDING, *, timeout_ms: int | None = None
    ) -> list[AclBinding]:
        return describe_acls(self._channel, acl_filter, timeout_ms)

    def delete_acls(
        self, filters: Iterable[AclBindingFilter], *, timeout_ms: int | None = None
    ) -> list[AclBinding]:
        """Delete the ACLs the filters match; returns what was deleted."""
        return delete_acls(self._channel, filters, timeout_ms)

    def alter_user_scram_credentials(
        self,
        upserts: Iterable[ScramUpsert] = (),
        deletions: Iterable[tuple[str, ScramMechanism]] = (),
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Create/replace and delete SCRAM credentials (passwords are salted before sending)."""
        alter_user_scram_credentials(self._channel, upserts, deletions, timeout_ms)

    def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> dict[str, Mapping[ScramMechanism, int]]:
        return describe_user_scram_credentials(self._channel, users, timeout_ms)


def _describe(binding: AclBinding) -> str:
    p, e = binding.pattern, binding.entry
    return (
        f"{e.permission_type.name} {e.principal} {e.operation.name} from {e.host} on "
        f"{p.resource_type.name}:{p.pattern_type.name}:{p.name}"
    )


__all__ = [
    "AdminSecurityCalls",
    "ScramUpsert",
    "alter_user_scram_credentials",
    "create_acls",
    "delete_acls",
    "describe_acls",
    "describe_user_scram_credentials",
]
