"""A cluster with the StandardAuthorizer on, for ACL tests over PLAINTEXT.

Without SASL every client is `User:ANONYMOUS`, so ACLs on `User:ANONYMOUS` (or none) exercise
allow and deny. The servers' own connections are ANONYMOUS too, so the controller has
`super.users=User:ANONYMOUS` (brokers register and follow the metadata log before any ACL
exists; only the servers talk to the controller here) while brokers and the coordinator have
no super user: clients are checked there. The servers' other inter-server calls (the
brokers' Envelopes to the coordinator, the coordinator's markers, produce-time transaction
verification) need CLUSTER_ACTION, granted by one ACL at start (`BASE_ACLS`).

ACLs are written as the controller's `AccessControlEntry` records (what CreateAcls writes),
and `grant`/`revoke` return once every broker's image has them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.controller.results import ControllerResult
from sparklog.metadata.acls import acl_record, remove_acl_record
from sparklog.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

ANONYMOUS = "User:ANONYMOUS"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def binding(
    resource_type: ResourceType,
    name: str,
    operation: AclOperation,
    permission: AclPermissionType = AclPermissionType.ALLOW,
    *,
    principal: str = ANONYMOUS,
    pattern: PatternType = PatternType.LITERAL,
    host: str = "*",
) -> AclBinding:
    return AclBinding(
        ResourcePattern(resource_type, name, pattern),
        AccessControlEntry(principal, host, operation, permission),
    )


def allow(resource_type: ResourceType, name: str, *operations: AclOperation) -> list[AclBinding]:
    return [binding(resource_type, name, op) for op in operations]


BASE_ACLS = allow(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.CLUSTER_ACTION)


class AclCluster(EmbeddedCluster):
    """`EmbeddedCluster` whose brokers and coordinator check ANONYMOUS (see module doc)."""

    #: `super.users` of the brokers and the coordinator (none: ANONYMOUS is checked there)
    checked_super_users = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.config.setdefault("authorizer.class.name", STANDARD_AUTHORIZER)
        self.config.setdefault("super.users", ANONYMOUS)
        self.base_acl_ids: list[uuid.UUID] = []

    def start(self, timeout_s: float = 60.0) -> AclCluster:
        super().start(timeout_s)
        self.base_acl_ids = self.grant(BASE_ACLS)
        return self

    def _checked(self, make: Any, *args: Any, **kwargs: Any) -> Any:
        saved = self.config
        self.config = {**saved, "super.users": self.checked_super_users}
        try:
            return make(*args, **kwargs)
        finally:
            self.config = saved

    def _new_broker(self, node_id: int) -> Any:
        return self._checked(super()._new_broker, node_id)

    def _new_coordinator(self, port: int, clock: Any = None) -> Any:
        return self._checked(super()._new_coordinator, port, clock)

    # -- ACLs -------------------------------------------------------------------------------

    def grant(self, bindings: Iterable[AclBinding]) -> list[uuid.UUID]:
        ids = {uuid.uuid4(): b for b in bindings}
        records = tuple(acl_record(i, b) for i, b in ids.items())
        self._write(records)
        return list(ids)

    def revoke(self, ids: Iterable[uuid.UUID]) -> None:
        self._write(tuple(remove_acl_record(i) for i in ids))

    def _write(self, records: tuple[dict[str, Any], ...]) -> None:
        if not records:
            return
        self.controller._call_write(lambda: ControllerResult(None, records))
        self.wait_for_brokers()

    def wait_for_brokers(self, timeout_s: float = 10.0) -> None:
        """Until every broker's image reached the controller's end offset."""
        end = self.controller._call(lambda: self.controller.controller.image.offset)
        deadline = time.monotonic() + timeout_s
        for broker in self.brokers:
            while broker.metadata.published_offset < end:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"broker {broker.node_id} did not reach offset {end}")
                time.sleep(0.01)
