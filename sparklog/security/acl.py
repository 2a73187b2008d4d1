"""The ACL vocabulary: operations and resource types with Kafka's codes, and the operations
each resource type supports.

Codes are Kafka's `AclOperation` and `ResourceType` ids (they travel in DescribeAcls,
CreateAcls and as bit positions of the `authorized_operations` fields). Without an authorizer
Kafka answers a resource's authorized operations as every operation its type supports
(`AuthHelper.authorizedOperations`, `AclEntry.supportedOperations`); with one, the supported
operations the principal is allowed.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final


class AclOperation(enum.IntEnum):
    """Kafka's `AclOperation`."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class ResourceType(enum.IntEnum):
    """Kafka's `ResourceType` (ACL resource types; config resources have their own codes)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


#: The cluster resource's name in ACLs (Kafka's `CLUSTER_NAME`).
CLUSTER_NAME: Final = "kafka-cluster"

#: An `authorized_operations` field the client did not ask for (Kafka's schema default).
AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)

_op = AclOperation
#: Kafka 4.x's `AclEntry.supportedOperations` (groups gained DESCRIBE_CONFIGS and
#: ALTER_CONFIGS with the GROUP config resource, KIP-848).
SUPPORTED_OPERATIONS: Final[dict[ResourceType, frozenset[AclOperation]]] = {
    ResourceType.TOPIC: frozenset(
        {
            _op.READ,
            _op.WRITE,
            _op.CREATE,
            _op.DESCRIBE,
            _op.DELETE,
            _op.ALTER,
            _op.DESCRIBE_CONFIGS,
            _op.ALTER_CONFIGS,
        }
    ),
    ResourceType.GROUP: frozenset(
        {_op.READ, _op.DESCRIBE, _op.DELETE, _op.DESCRIBE_CONFIGS, _op.ALTER_CONFIGS}
    ),
    ResourceType.CLUSTER: frozenset(
        {
            _op.CREATE,
            _op.CLUSTER_ACTION,
            _op.DESCRIBE_CONFIGS,
            _op.ALTER_CONFIGS,
            _op.IDEMPOTENT_WRITE,
            _op.ALTER,
            _op.DESCRIBE,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({_op.DESCRIBE, _op.WRITE, _op.TWO_PHASE_COMMIT}),
    ResourceType.DELEGATION_TOKEN: frozenset({_op.DESCRIBE}),
    ResourceType.USER: frozenset({_op.CREATE_TOKENS, _op.DESCRIBE_TOKENS}),
}


def supported_operations(resource_type: ResourceType) -> frozenset[AclOperation]:
    """The operations ACLs can grant on `resource_type` (a concrete type: not ANY/UNKNOWN)."""
    try:
        return SUPPORTED_OPERATIONS[resource_type]
    except KeyError:
        raise ValueError(f"{resource_type!r} is not a concrete resource type") from None


def to_bitfield(operations: Iterable[AclOperation]) -> int:
    """Operations as Kafka's 32-bit field: bit `code` set per operation (`Utils.to32BitField`)."""
    field = 0
    for operation in operations:
        assert 0 <= operation < 32, operation
        field |= 1 << operation
    return field


def from_bitfield(field: int) -> frozenset[AclOperation]:
    """The operations of a 32-bit field (`Utils.from32BitField`); none for the omitted value."""
    if field == AUTHORIZED_OPERATIONS_OMITTED:
        return frozenset()
    return frozenset(op for op in AclOperation if field & (1 << op))


# -- ACL bindings (the security issue's contract: CreateAcls/DescribeAcls/DeleteAcls, the
# controller's ACL records and the StandardAuthorizer all speak these) ----------------------


class PatternType(enum.IntEnum):
    """Kafka's `PatternType`: LITERAL and PREFIXED are stored; ANY and MATCH only filter."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(enum.IntEnum):
    """Kafka's `AclPermissionType`."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: A LITERAL resource name matching every resource of its type (Kafka's `WILDCARD_RESOURCE`).
WILDCARD_RESOURCE: Final = "*"
#: The principal matching every user (`User:*`) and the host matching every address.
WILDCARD_PRINCIPAL: Final = "User:*"
WILDCARD_HOST: Final = "*"


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """Which resources an ACL covers (Kafka's `ResourcePattern`)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who may or may not do what, from where (Kafka's `AccessControlEntry`); `principal` is
    `type:name` as ACLs name it (`User:alice`, `User:*`)."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: an entry bound to a resource pattern (Kafka's `AclBinding`)."""

    pattern: ResourcePattern
    entry: AccessControlEntry
