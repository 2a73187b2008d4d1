"""ACL and SCRAM credential APIs on a broker (Kafka's `AclApis` and the SCRAM handlers of
`KafkaApis`): CreateAcls, DeleteAcls and AlterUserScramCredentials are checked here (a bad
enum code closes the connection, the cluster ALTER check, SECURITY_DISABLED without an
authorizer as Kafka's `AclApis`, CreateAcls' whole-request quirk) and then forwarded to the controller like every admin write (`AdminApis.handle_forwarded`:
the answer comes once this broker's image holds the change); DescribeAcls and
DescribeUserScramCredentials are answered from this broker's image, as Kafka's brokers
answer from their metadata cache. AlterClientQuotas is checked (ALTER_CONFIGS on the cluster)
and forwarded the same way; DescribeClientQuotas is answered from the image (`quota_wire`). Each ACL and
credential change is reported to the request's audit sink (ACL_CREATED, ACL_DELETED,
CREDENTIAL_ALTERED, CREDENTIAL_DELETED) with the client's principal. Wire details: `sparklog.metadata.security_wire`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from sparklog.broker.admin_apis import AdminApis
from sparklog.broker.metadata import BrokerMetadata
from sparklog.errors import (
    ClusterAuthorizationFailedError,
    SecurityDisabledError,
    UnknownServerError,
)
from sparklog.metadata import quota_wire
from sparklog.metadata import security_wire as wire
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.connection import Request
from sparklog.protocol.pipeline import authorize
from sparklog.security.acl import CLUSTER_NAME, AclBinding, AclOperation, ResourceType
from sparklog.security.audit import LOG_ONLY, change_event

_REFUSED = (ClusterAuthorizationFailedError.code, "Cluster authorization failed.")
_DISABLED = SecurityDisabledError.code


def _cluster_allowed(request: Request, operation: AclOperation) -> bool:
    return authorize(request, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def _audit(request: Request, decision: str, rtype: str, name: str, detail: str) -> None:
    """Report a change the broker made for its client (the client's principal is known here,
    not at the controller, which sees the forwarding broker)."""
    context = request.context
    event = change_event(
        int(time.time() * 1000),
        context.session,
        api=ApiKey(request.api_key).name,
        decision=decision,
        resource_type=rtype,
        resource_name=name,
        detail=detail,
        node_id=context.node_id,
        operation=AclOperation.ALTER.name,
    )
    (context.audit or LOG_ONLY).record(event)


def _audit_acl(request: Request, decision: str, b: AclBinding) -> None:
    e = b.entry
    detail = (
        f"{e.permission_type.name} {e.principal} {e.operation.name} from {e.host} "
        f"({b.pattern.pattern_type.name})"
    )
    _audit(request, decision, b.pattern.resource_type.name, b.pattern.name, detail)


def _audit_user(request: Request, decision: str, user: str, detail: str) -> None:
    _audit(request, decision, ResourceType.USER.name, user, detail)  # never salts or keys


def _ops_by_entity(request: Request) -> dict[frozenset[tuple[str, str | None]], str]:
    """AlterClientQuotas' ops per entity, for the audit: `producer_byte_rate=1024, ...`."""
    return {
        frozenset((e.entity_type, e.entity_name) for e in entry.entity): ", ".join(
            f"{op.key} removed" if op.remove else f"{op.key}={op.value:g}" for op in entry.ops
        )
        for entry in request.body.entries
    }


def security_handlers(
    admin: AdminApis, metadata: BrokerMetadata
) -> dict[ApiKey, Callable[[Request], Awaitable[Any]]]:
    """The five APIs' handlers for a broker's dispatch table."""

    async def create_acls(request: Request) -> Any:
        bindings = wire.acl_creations(request.body)
        if not _cluster_allowed(request, AclOperation.ALTER):
            return wire.create_acls_refused(request, *_REFUSED)
        if request.context.authorizer is None:
            return wire.create_acls_refused(request, _DISABLED, wire.NO_AUTHORIZER)
        if wire.names_any(bindings):
            return wire.create_acls_refused(request, UnknownServerError.code, None)
        response = await admin.handle_forwarded(request)
        for binding, result in zip(bindings, response.results, strict=False):
            if result.error_code == 0:
                _audit_acl(request, "ACL_CREATED", binding)
        return response

    async def delete_acls(request: Request) -> Any:
        for f in request.body.filters:
            wire.acl_filter(f)
        if not _cluster_allowed(request, AclOperation.ALTER):
            return wire.delete_acls_refused(request, *_REFUSED)
        if request.context.authorizer is None:
            return wire.delete_acls_refused(request, _DISABLED, wire.NO_AUTHORIZER)
        response = await admin.handle_forwarded(request)
        for result in response.filter_results:
            for m in result.matching_acls:
                _audit_acl(request, "ACL_DELETED", wire.matching_acl_binding(m))
        return response

    async def describe_acls(request: Request) -> Any:
        wire.acl_filter(request.body)
        if not _cluster_allowed(request, AclOperation.DESCRIBE):
            return wire.describe_acls_refused(request, *_REFUSED)
        if request.context.authorizer is None:
            return wire.describe_acls_refused(request, _DISABLED, wire.NO_AUTHORIZER_DESCRIBE)
        return wire.describe_acls_response(request, metadata.image.acls)

    async def alter_scram(request: Request) -> Any:
        if not _cluster_allowed(request, AclOperation.ALTER):
            return wire.alter_scram_refused(request, *_REFUSED)
        response = await admin.handle_forwarded(request)
        body = request.body
        changed = {r.user for r in response.results if r.error_code == 0}
        for d in body.deletions:
            if d.name in changed:
                _audit_user(request, "CREDENTIAL_DELETED", d.name, f"mechanism {d.mechanism}")
        for u in body.upsertions:
            if u.name in changed:
                detail = f"mechanism {u.mechanism}, {u.iterations} iterations"
                _audit_user(request, "CREDENTIAL_ALTERED", u.name, detail)
        return response

    async def describe_scram(request: Request) -> Any:
        if not _cluster_allowed(request, AclOperation.DESCRIBE):
            return wire.describe_scram_refused(request, *_REFUSED)
        return wire.describe_scram_response(request, metadata.image.credentials)

    async def describe_client_quotas(request: Request) -> Any:
        # Kafka's KafkaApis: DESCRIBE_CONFIGS on the cluster, answered from the image
        if not _cluster_allowed(request, AclOperation.DESCRIBE_CONFIGS):
            return quota_wire.describe_refused(request, *_REFUSED)
        return quota_wire.describe_response(request, metadata.image.quotas)

    async def alter_client_quotas(request: Request) -> Any:
        # Kafka's KafkaApis: ALTER_CONFIGS on the cluster, then forwarded to the controller
        if not _cluster_allowed(request, AclOperation.ALTER_CONFIGS):
            return quota_wire.alter_refused(request, *_REFUSED)
        response = await admin.handle_forwarded(request)
        if not request.body.validate_only:
            ops = _ops_by_entity(request)
            for result in response.entries:
                if result.error_code == 0:
                    entity = frozenset((e.entity_type, e.entity_name) for e in result.entity)
                    name = ", ".join(f"{k}={n or '<default>'}" for k, n in sorted(entity))
                    _audit(request, "QUOTA_ALTERED", "CLIENT_QUOTA", name, ops.get(entity, ""))
        return response

    return {
        ApiKey.DESCRIBE_CLIENT_QUOTAS: describe_client_quotas,
        ApiKey.ALTER_CLIENT_QUOTAS: alter_client_quotas,
        ApiKey.CREATE_ACLS: create_acls,
        ApiKey.DELETE_ACLS: delete_acls,
        ApiKey.DESCRIBE_ACLS: describe_acls,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: alter_scram,
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: describe_scram,
    }
