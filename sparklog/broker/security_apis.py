"""ACL and SCRAM credential APIs on a broker (Kafka's `AclApis` and the SCRAM handlers of
`KafkaApis`): CreateAcls, DeleteAcls and AlterUserScramCredentials are checked here (a bad
enum code closes the connection, the cluster ALTER check, CreateAcls' whole-request quirk)
and then forwarded to the controller like every admin write (`AdminApis.handle_forwarded`:
the answer comes once this broker's image holds the change); DescribeAcls and
DescribeUserScramCredentials are answered from this broker's image, as Kafka's brokers
answer from their metadata cache. DescribeClientQuotas answers none (sparklog stores no client
quotas yet), which `kafka-configs.sh --describe --entity-type users` needs. Wire details: `sparklog.metadata.security_wire`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from sparklog.broker.admin_apis import AdminApis
from sparklog.broker.metadata import BrokerMetadata
from sparklog.errors import ClusterAuthorizationFailedError, UnknownServerError
from sparklog.metadata import security_wire as wire
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.connection import Request
from sparklog.protocol.pipeline import authorize
from sparklog.protocol.responses import Response
from sparklog.security.acl import CLUSTER_NAME, AclOperation, ResourceType

_REFUSED = (ClusterAuthorizationFailedError.code, "Cluster authorization failed.")


def _cluster_allowed(request: Request, operation: AclOperation) -> bool:
    return authorize(request, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def security_handlers(
    admin: AdminApis, metadata: BrokerMetadata
) -> dict[ApiKey, Callable[[Request], Awaitable[Any]]]:
    """The five APIs' handlers for a broker's dispatch table."""

    async def create_acls(request: Request) -> Any:
        bindings = wire.acl_creations(request.body)
        if not _cluster_allowed(request, AclOperation.ALTER):
            return wire.create_acls_refused(request, *_REFUSED)
        if wire.names_any(bindings):
            return wire.create_acls_refused(request, UnknownServerError.code, None)
        return await admin.handle_forwarded(request)

    async def delete_acls(request: Request) -> Any:
        for f in request.body.filters:
            wire.acl_filter(f)
        if not _cluster_allowed(request, AclOperation.ALTER):
            return wire.delete_acls_refused(request, *_REFUSED)
        return await admin.handle_forwarded(request)

    async def describe_acls(request: Request) -> Any:
        wire.acl_filter(request.body)
        if not _cluster_allowed(request, AclOperation.DESCRIBE):
            return wire.describe_acls_refused(request, *_REFUSED)
        return wire.describe_acls_response(request, metadata.image.acls)

    async def alter_scram(request: Request) -> Any:
        if not _cluster_allowed(request, AclOperation.ALTER):
            return wire.alter_scram_refused(request, *_REFUSED)
        return await admin.handle_forwarded(request)

    async def describe_scram(request: Request) -> Any:
        if not _cluster_allowed(request, AclOperation.DESCRIBE):
            return wire.describe_scram_refused(request, *_REFUSED)
        return wire.describe_scram_response(request, metadata.image.credentials)

    async def describe_client_quotas(request: Request) -> Any:
        # Kafka's KafkaApis: DESCRIBE_CONFIGS on the cluster; sparklog stores no client quotas
        if not _cluster_allowed(request, AclOperation.DESCRIBE_CONFIGS):
            code, message = _REFUSED
            return Response(request)(error_code=code, error_message=message, entries=None)
        return Response(request)(error_code=0, error_message=None, entries=())

    return {
        ApiKey.DESCRIBE_CLIENT_QUOTAS: describe_client_quotas,
        ApiKey.CREATE_ACLS: create_acls,
        ApiKey.DELETE_ACLS: delete_acls,
        ApiKey.DESCRIBE_ACLS: describe_acls,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: alter_scram,
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: describe_scram,
    }
