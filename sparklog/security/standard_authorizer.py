"""ACL authorization with Kafka's `StandardAuthorizer` semantics (KIP-801).

Theory of operation. A request's action is (principal, client host, operation, resource type,
literal resource name). The ACLs that apply to it are those of the same resource type whose
pattern covers the name: LITERAL with the same name, LITERAL `*` (the wildcard resource), and
PREFIXED whose name is a prefix of it. Among those, an ACL *matches* when its principal is
the session's (or `User:*`), its host is the client's address (or `*`) and its operation is
the action's, `ALL`, or — for ALLOW ACLs only — one implying it (READ, WRITE, DELETE and
ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS; a DENY on READ does not deny
DESCRIBE). Then, as `StandardAuthorizerData.findAclRule`:

- a super user (`super.users`, `User:a;User:b`) is allowed everything, ACLs unread;
- any matching DENY denies (DENY wins);
- else any matching ALLOW allows;
- else, if some ACL applies to the resource (for anyone), denied;
- else the default: `allow.everyone.if.no.acl.found` (false: denied).

Kafka walks a sorted set in reverse-name order to find the prefix ACLs; here each resource
type keeps a dict of literal names, a dict of prefixes and the distinct prefix lengths, so a
decision costs one dict probe per literal and per distinct prefix length, whatever the number
of ACLs. Decisions are memoised per (principal, host, operation, type, name) in a bounded
cache that lives and dies with the ACL snapshot: a change swaps in a new index (one
reference assignment, so a reader on another thread sees the old or the new set, never half),
and the next request of an open connection decides against it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, KeysView, Mapping
from dataclasses import dataclass
from typing import Final

from sparklog.security.acl import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from sparklog.security.session import Session

logger = logging.getLogger(__name__)

#: The names `authorizer.class.name` accepts for this authorizer: Kafka's KRaft class (so a
#: Kafka server.properties works unchanged) and sparklog's own.
STANDARD_AUTHORIZER_NAMES: Final = frozenset(
    {
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "sparklog.security.standard_authorizer.StandardAuthorizer",
        "StandardAuthorizer",
    }
)
#: ZooKeeper-era authorizers Kafka 4.0 removed: named in the error instead of "unknown".
_ZK_AUTHORIZERS: Final = frozenset(
    {"kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer"}
)

_op = AclOperation
#: Operations an ALLOW ACL on them also grants DESCRIBE for (`IMPLIES_DESCRIBE`).
IMPLIES_DESCRIBE: Final = frozenset({_op.DESCRIBE, _op.READ, _op.WRITE, _op.DELETE, _op.ALTER})
#: ... and DESCRIBE_CONFIGS for (`IMPLIES_DESCRIBE_CONFIGS`).
IMPLIES_DESCRIBE_CONFIGS: Final = frozenset({_op.DESCRIBE_CONFIGS, _op.ALTER_CONFIGS})

#: Bound on memoised decisions per ACL snapshot (cleared, not evicted one by one, when full:
#: a workload touching more distinct actions than this pays the index walk, still cheap).
DECISION_CACHE_SIZE: Final = 65_536


def parse_super_users(value: str | Iterable[str] | None) -> frozenset[str]:
    """`super.users` as Kafka writes it: principals separated by semicolons
    (`User:admin;User:broker`), blanks ignored. Each must be `type:name`."""
    if value is None:
        return frozenset()
    items = value.split(";") if isinstance(value, str) else list(value)
    users = set()
    for item in items:
        item = item.strip()
        if not item:
            continue
        kind, sep, name = item.partition(":")
        if not sep or not kind or not name:
            raise ValueError(
                f"super.users entry {item!r} is not a principal: write principals as "
                "type:name separated by ';', e.g. User:admin;User:broker"
            )
        users.add(item)
    return frozenset(users)


def check_authorizer_class(name: str | None) -> bool:
    """Whether `authorizer.class.name` turns authorization on: False for unset/empty, True for
    the StandardAuthorizer's names, ValueError naming the choices otherwise."""
    if name is None or not name.strip():
        return False
    name = name.strip()
    if name in STANDARD_AUTHORIZER_NAMES:
        return True
    if name in _ZK_AUTHORIZERS:
        raise ValueError(
            f"authorizer.class.name={name} is ZooKeeper's authorizer, removed in Kafka 4.0; "
            "use org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        )
    raise ValueError(
        f"authorizer.class.name={name} is not an authorizer sparklog has; use "
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer (or leave it empty for none)"
    )


def validate_binding(binding: AclBinding) -> None:
    """ValueError unless `binding` can be stored (Kafka's `StandardAcl.fromRecord` and
    `AclControlManager.validateNewAcl`): a concrete resource type, LITERAL or PREFIXED, a
    non-empty name, a concrete operation and permission, a `type:name` principal."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise ValueError(f"ACL resource type must be concrete, not {pattern.resource_type.name}")
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise ValueError(
            f"ACL pattern type must be LITERAL or PREFIXED, not {pattern.pattern_type.name}"
        )
    if not pattern.name:
        raise ValueError("ACL resource name must not be empty")
    if entry.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        raise ValueError(f"ACL operation must be concrete, not {entry.operation.name}")
    if entry.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise ValueError(
            f"ACL permission type must be ALLOW or DENY, not {entry.permission_type.name}"
        )
    kind, sep, name = entry.principal.partition(":")
    if not sep or not kind or not name:
        raise ValueError(f"ACL principal {entry.principal!r} is not type:name (e.g. User:alice)")
    if not entry.host:
        raise ValueError("ACL host must not be empty (use * for any host)")


def acl_matches(
    binding: AclBinding, principal: str, host: str, operation: AclOperation
) -> AclPermissionType | None:
    """The permission `binding` gives the action (its resource already known to apply), or
    None when its principal, host or operation does not match (`findResult`)."""
    entry = binding.entry
    if entry.principal != principal and entry.principal != WILDCARD_PRINCIPAL:
        return None
    if entry.host != WILDCARD_HOST and entry.host != host:
        return None
    acl_op = entry.operation
    if acl_op != AclOperation.ALL and acl_op != operation:
        if entry.permission_type != AclPermissionType.ALLOW:
            return None
        if operation == AclOperation.DESCRIBE:
            if acl_op not in IMPLIES_DESCRIBE:
                return None
        elif operation == AclOperation.DESCRIBE_CONFIGS:
            if acl_op not in IMPLIES_DESCRIBE_CONFIGS:
                return None
        else:
            return None
    return entry.permission_type


@dataclass(frozen=True, slots=True)
class _TypeIndex:
    """The ACLs of one resource type, keyed for lookups by resource name."""

    literal: dict[str, tuple[AclBinding, ...]]
    prefixed: dict[str, tuple[AclBinding, ...]]
    #: distinct lengths of the prefixed names, ascending
    prefix_lengths: tuple[int, ...]

    def applicable(self, name: str) -> list[tuple[AclBinding, ...]]:
        """The groups of ACLs whose pattern covers `name`."""
        found = []
        group = self.literal.get(name)
        if group:
            found.append(group)
        if name != WILDCARD_RESOURCE:
            group = self.literal.get(WILDCARD_RESOURCE)
            if group:
                found.append(group)
        size = len(name)
        prefixed = self.prefixed
        for length in self.prefix_lengths:
            if length > size:
                break
            group = prefixed.get(name[:length])
            if group:
                found.append(group)
        return found


def _build_index(bindings: Iterable[AclBinding]) -> dict[ResourceType, _TypeIndex]:
    literal: dict[ResourceType, dict[str, list[AclBinding]]] = {}
    prefixed: dict[ResourceType, dict[str, list[AclBinding]]] = {}
    for binding in bindings:
        pattern = binding.pattern
        table = literal if pattern.pattern_type == PatternType.LITERAL else prefixed
        table.setdefault(pattern.resource_type, {}).setdefault(pattern.name, []).append(binding)
    index = {}
    for resource_type in set(literal) | set(prefixed):
        lit = {k: tuple(v) for k, v in literal.get(resource_type, {}).items()}
        pre = {k: tuple(v) for k, v in prefixed.get(resource_type, {}).items()}
        index[resource_type] = _TypeIndex(lit, pre, tuple(sorted({len(k) for k in pre})))
    return index


class _Snapshot:
    """One immutable ACL set: the bindings by id, their index and its decision cache."""

    __slots__ = ("bindings", "index", "decisions")

    def __init__(self, bindings: dict[uuid.UUID, AclBinding]) -> None:
        self.bindings = bindings
        self.index = _build_index(bindings.values())
        self.decisions: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}


class StandardAuthorizer:
    """Kafka's StandardAuthorizer over `AclBinding`s keyed by their metadata record ids.

    Feed it the metadata image's ACLs (`load_snapshot(image.acls)`) and follow changes with
    `add_acl`/`remove_acl` or a new snapshot; `authorize` implements the `Authorizer`
    protocol of `sparklog.security.authorizer`.
    """

    def __init__(
        self,
        *,
        super_users: str | Iterable[str] | None = None,
        allow_everyone_if_no_acl_found: bool = False,
        acls: Mapping[uuid.UUID, AclBinding] | Iterable[AclBinding] = (),
    ) -> None:
        self.super_users = parse_super_users(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._snapshot = _Snapshot({})
        self.load_snapshot(acls)

    # -- the ACL set --------------------------------------------------------------------------

    def load_snapshot(self, acls: Mapping[uuid.UUID, AclBinding] | Iterable[AclBinding]) -> None:
        """Replace every ACL (Kafka's `loadSnapshot`). Bindings without ids (an iterable) get
        fresh ones. ValueError, and nothing replaced, if one is invalid."""
        bindings = dict(acls) if isinstance(acls, Mapping) else {uuid.uuid4(): b for b in acls}
        for binding in bindings.values():
            validate_binding(binding)
        self._snapshot = _Snapshot(bindings)

    def add_acl(self, acl_id: uuid.UUID, binding: AclBinding) -> None:
        """Add (or replace) one ACL (Kafka's `addAcl`, an `AccessControlEntryRecord`)."""
        validate_binding(binding)
        bindings = dict(self._snapshot.bindings)
        bindings[acl_id] = binding
        self._snapshot = _Snapshot(bindings)

    def remove_acl(self, acl_id: uuid.UUID) -> None:
        """Remove one ACL (Kafka's `removeAcl`, a `RemoveAccessControlEntryRecord`); an
        unknown id is ignored (the image already dropped it)."""
        if acl_id not in self._snapshot.bindings:
            return
        bindings = dict(self._snapshot.bindings)
        del bindings[acl_id]
        self._snapshot = _Snapshot(bindings)

    def acls(self) -> Mapping[uuid.UUID, AclBinding]:
        """The current ACLs by id (read-only view of one snapshot)."""
        return dict(self._snapshot.bindings)

    def acl_ids(self) -> KeysView[uuid.UUID]:
        """The ids of the current ACLs (a live view of one snapshot: cheap to compare)."""
        return self._snapshot.bindings.keys()

    def __len__(self) -> int:
        return len(self._snapshot.bindings)

    # -- decisions ----------------------------------------------------------------------------

    def authorize(
        self, session: Session, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        """Whether `session` may perform `operation` on the literal resource `name`."""
        principal = str(session.principal)
        if principal in self.super_users:
            return True
        snapshot = self._snapshot
        key = (principal, session.client_address, operation, resource_type, name)
        decision = snapshot.decisions.get(key)
        if decision is None:
            decision = self._decide(snapshot, principal, session.client_address, key)
            decisions = snapshot.decisions
            if len(decisions) >= DECISION_CACHE_SIZE:
                decisions.clear()
            decisions[key] = decision
        return decision

    def _decide(
        self,
        snapshot: _Snapshot,
        principal: str,
        host: str,
        key: tuple[str, str, AclOperation, ResourceType, str],
    ) -> bool:
        _, _, operation, resource_type, name = key
        type_index = snapshot.index.get(resource_type)
        groups = type_index.applicable(name) if type_index is not None else []
        if not groups:
            return self.allow_everyone_if_no_acl_found
        allowed = False
        for group in groups:
            for binding in group:
                permission = acl_matches(binding, principal, host, operation)
                if permission == AclPermissionType.DENY:
                    return False
                if permission == AclPermissionType.ALLOW:
                    allowed = True
        return allowed

    def authorize_by_resource_type(
        self, session: Session, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether `session` may perform `operation` on *some* resource of `resource_type`
        (Kafka's `Authorizer.authorizeByResourceType`, used for InitProducerId without a
        transactional id: IDEMPOTENT_WRITE on the cluster or WRITE on any topic). Allowed when
        an ALLOW (or the wildcard) is not dominated by a DENY of the same literal name, a
        covering DENY prefix, or a wildcard DENY."""
        # a hard-coded name first, as Kafka does: super users and the no-ACL default
        if self.authorize(session, operation, resource_type, "hardcode"):
            return True
        principal = str(session.principal)
        host = session.client_address
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow_literal: set[str] = set()
        allow_prefixed: set[str] = set()
        wildcard_allow = False
        for binding in self._snapshot.bindings.values():
            pattern, entry = binding.pattern, binding.entry
            if pattern.resource_type != resource_type:
                continue
            if entry.host != WILDCARD_HOST and entry.host != host:
                continue
            if entry.principal != principal and entry.principal != WILDCARD_PRINCIPAL:
                continue
            if entry.operation != operation and entry.operation != AclOperation.ALL:
                continue
            literal = pattern.pattern_type == PatternType.LITERAL
            if entry.permission_type == AclPermissionType.DENY:
                if literal and pattern.name == WILDCARD_RESOURCE:
                    return False
                (deny_literal if literal else deny_prefixed).add(pattern.name)
            elif literal and pattern.name == WILDCARD_RESOURCE:
                wildcard_allow = True
            else:
                (allow_literal if literal else allow_prefixed).add(pattern.name)
        if wildcard_allow:
            return True
        for literal, names in ((True, allow_literal), (False, allow_prefixed)):
            for name in names:
                if literal and name in deny_literal:
                    continue
                if any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                    continue
                return True
        return False
