"""ACLs as cluster metadata (Kafka's `AccessControlEntryRecord` / `RemoveAccessControlEntryRecord`
and the ACL half of `AclControlManager.replay`).

Every ACL has an id (a UUID the controller picks when it creates the ACL); the records carry
the binding's fields as Kafka's record schema names them, with Kafka's enum codes:

    {"type": "AccessControlEntry", "id": "<uuid>", "resource_type": 2, "resource_name": "t",
     "pattern_type": 3, "principal": "User:alice", "host": "*", "operation": 3,
     "permission_type": 3}
    {"type": "RemoveAccessControlEntry", "id": "<uuid>"}

`AclsImage` folds them into id -> `AclBinding`, the view the authorizer is fed from
(`MetadataImage.acls`). Replay checks what a stored ACL must be (Kafka's
`AclControlManager.validateNewAcl`: a concrete resource type, LITERAL or PREFIXED, a concrete
operation, ALLOW or DENY, a non-empty name, a `type:name` principal, a host); the controller validates
requests before it writes, so a record failing here came from a damaged log.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from sparklog.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from sparklog.security.acl_filter import AclBindingFilter

ACCESS_CONTROL_ENTRY = "AccessControlEntry"
REMOVE_ACCESS_CONTROL_ENTRY = "RemoveAccessControlEntry"


class InvalidAclError(ValueError):
    """An ACL binding that cannot be stored; the message is Kafka's (`validateNewAcl`)."""


def check_storable(binding: AclBinding) -> None:
    """Raise InvalidAclError unless `binding` may be stored (Kafka's `validateNewAcl`)."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidAclError(f"Invalid resourceType {pattern.resource_type.name}")
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAclError(f"Invalid patternType {pattern.pattern_type.name}")
    if entry.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidAclError(f"Invalid operation {entry.operation.name}")
    if entry.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise InvalidAclError(f"Invalid permissionType {entry.permission_type.name}")
    if not pattern.name:
        raise InvalidAclError("Resource name should not be empty")
    if ":" not in entry.principal:
        raise InvalidAclError(
            f"Could not parse principal from `{entry.principal}` (no colon is present "
            "separating the principal type from the principal name)"
        )
    if not entry.host:
        raise InvalidAclError("Host pattern cannot be null or empty")


def acl_record(acl_id: uuid.UUID, binding: AclBinding) -> dict[str, Any]:
    """The `AccessControlEntry` record creating ACL `acl_id`."""
    return {
        "type": ACCESS_CONTROL_ENTRY,
        "id": str(acl_id),
        "resource_type": int(binding.pattern.resource_type),
        "resource_name": binding.pattern.name,
        "pattern_type": int(binding.pattern.pattern_type),
        "principal": binding.entry.principal,
        "host": binding.entry.host,
        "operation": int(binding.entry.operation),
        "permission_type": int(binding.entry.permission_type),
    }


def remove_acl_record(acl_id: uuid.UUID) -> dict[str, Any]:
    """The `RemoveAccessControlEntry` record deleting ACL `acl_id`."""
    return {"type": REMOVE_ACCESS_CONTROL_ENTRY, "id": str(acl_id)}


def binding_of(record: Mapping[str, Any]) -> AclBinding:
    """The binding an `AccessControlEntry` record (or snapshot entry) stores; ValueError (an
    unknown enum code) or InvalidAclError when it cannot be one."""
    binding = AclBinding(
        ResourcePattern(
            ResourceType(int(record["resource_type"])),
            str(record["resource_name"]),
            PatternType(int(record["pattern_type"])),
        ),
        AccessControlEntry(
            str(record["principal"]),
            str(record["host"]),
            AclOperation(int(record["operation"])),
            AclPermissionType(int(record["permission_type"])),
        ),
    )
    check_storable(binding)
    return binding


class AclsImage:
    """The ACLs of the metadata image: id -> binding. Mutated only by replay; the controller
    and brokers read it (`bindings`), the authorizer is fed from it."""

    __slots__ = ("_by_id", "_ids")

    def __init__(self) -> None:
        self._by_id: dict[uuid.UUID, AclBinding] = {}
        # binding -> id: a binding is stored once (Kafka's `existingAcls` set), which CreateAcls
        # relies on to answer success without a second record for a duplicate
        self._ids: dict[AclBinding, uuid.UUID] = {}

    @property
    def bindings(self) -> Mapping[uuid.UUID, AclBinding]:
        return MappingProxyType(self._by_id)

    def id_of(self, binding: AclBinding) -> uuid.UUID | None:
        """The id of a stored binding equal to `binding` (None when not stored)."""
        return self._ids.get(binding)

    def __len__(self) -> int:
        return len(self._by_id)

    def replay_create(self, record: Mapping[str, Any]) -> None:
        """Apply an `AccessControlEntry` record; ValueError if the id or binding exists."""
        acl_id = uuid.UUID(str(record["id"]))
        binding = binding_of(record)
        if acl_id in self._by_id:
            raise ValueError(f"an ACL with id {acl_id} already exists")
        if binding in self._ids:
            raise ValueError(f"ACL {acl_id} repeats ACL {self._ids[binding]}")
        self._by_id[acl_id] = binding
        self._ids[binding] = acl_id

    def replay_remove(self, record: Mapping[str, Any]) -> None:
        """Apply a `RemoveAccessControlEntry` record; ValueError if there is no such ACL."""
        acl_id = uuid.UUID(str(record["id"]))
        binding = self._by_id.pop(acl_id, None)
        if binding is None:
            raise ValueError(f"no ACL with id {acl_id} to remove")
        del self._ids[binding]

    def to_list(self) -> list[dict[str, Any]]:
        """The snapshot form: one `AccessControlEntry` record per ACL, sorted by id."""
        return [acl_record(i, b) for i, b in sorted(self._by_id.items(), key=lambda kv: kv[0].hex)]

    @classmethod
    def from_list(cls, records: Iterable[Mapping[str, Any]]) -> AclsImage:
        acls = cls()
        for record in records:
            acls.replay_create(record)
        return acls


def sorted_acls(acls: Mapping[uuid.UUID, AclBinding]) -> list[tuple[uuid.UUID, AclBinding]]:
    """ACLs in a stable order: by resource type, name, pattern type, then entry."""

    def key(item: tuple[uuid.UUID, AclBinding]) -> tuple[Any, ...]:
        p, e = item[1].pattern, item[1].entry
        return (p.resource_type, p.name, p.pattern_type, e.principal, e.host, e.operation,
                e.permission_type)  # fmt: skip

    return sorted(acls.items(), key=key)


def describe_acls(
    acls: Mapping[uuid.UUID, AclBinding], acl_filter: AclBindingFilter
) -> dict[ResourcePattern, list[AclBinding]]:
    """DescribeAcls: the bindings `acl_filter` matches, grouped by resource pattern (the
    response's shape), in `sorted_acls` order (a filter with an UNKNOWN field matches nothing)."""
    by_pattern: dict[ResourcePattern, list[AclBinding]] = {}
    for _, binding in sorted_acls(acls):
        if acl_filter.matches(binding):
            by_pattern.setdefault(binding.pattern, []).append(binding)
    return by_pattern
