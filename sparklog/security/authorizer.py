"""The authorizer seam: what a server asks before it acts, and what it answers as a
resource's authorized operations (Kafka's `Authorizer` and `AuthHelper.authorizedOperations`).

A server without an authorizer (`authorizer.class.name` unset, the only case today) allows
everything and answers every supported operation; the security issue supplies a
StandardAuthorizer-like implementation of `Authorizer`.
"""

from __future__ import annotations

from typing import Protocol

from sparklog.security.acl import (
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
    supported_operations,
    to_bitfield,
)
from sparklog.security.session import Session


class Authorizer(Protocol):
    """Decides whether a session may perform an operation on a (literal) resource."""

    def authorize(
        self, session: Session, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool: ...


def authorized_operations(
    authorizer: Authorizer | None, session: Session, resource_type: ResourceType, name: str
) -> int:
    """The `authorized_operations` bit field for one resource: every supported operation
    without an authorizer, else those the authorizer allows `session`."""
    if authorizer is None:
        return _ALL_SUPPORTED[resource_type]
    return to_bitfield(
        op
        for op in supported_operations(resource_type)
        if authorizer.authorize(session, op, resource_type, name)
    )


#: Without an authorizer the answer depends on the resource type only (a Metadata answer
#: about 10,000 topics asks 10,000 times).
_ALL_SUPPORTED: dict[ResourceType, int] = {
    t: to_bitfield(supported_operations(t)) for t in SUPPORTED_OPERATIONS
}
