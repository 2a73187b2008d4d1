"""The controller's ACL and SCRAM credential handlers (Kafka's `ControllerApis` +
`AclApis`): CreateAcls, DeleteAcls and AlterUserScramCredentials commit records;
DescribeAcls and DescribeUserScramCredentials answer from the image (as brokers do).

Each states what it needs (Kafka's table: ALTER on the cluster to change ACLs or
credentials, DESCRIBE on the cluster to list them) through `pipeline.authorize`, which
allows everything until an authorizer is configured. A refusal answers
CLUSTER_AUTHORIZATION_FAILED in the API's own shape, for every item of the request.

Without `authorizer.class.name` the three ACL APIs answer SECURITY_DISABLED (54), as
Kafka's `AclApis` does: there is nothing to store ACLs for. The SCRAM APIs need no
authorizer (Kafka serves them regardless).
"""

from __future__ import annotations

import logging
from typing import Any

from sparklog.controller.controller_context import ControllerContext
from sparklog.controller.results import ApiError
from sparklog.controller.scram_control import ScramDeletion, ScramUpsertion
from sparklog.errors import (
    ClusterAuthorizationFailedError,
    SecurityDisabledError,
    UnknownServerError,
)
from sparklog.metadata import security_wire as wire
from sparklog.protocol.connection import Request
from sparklog.protocol.pipeline import authorize
from sparklog.security.acl import CLUSTER_NAME, AclOperation, ResourceType

logger = logging.getLogger(__name__)

_REFUSED = (ClusterAuthorizationFailedError.code, "Cluster authorization failed.")
_DISABLED = SecurityDisabledError.code


def cluster_allowed(request: Request, operation: AclOperation) -> bool:
    return authorize(request, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def _outcome(error: ApiError) -> wire.Outcome:
    return error.code, error.message


async def handle_create_acls(server: ControllerContext, request: Request) -> Any:
    bindings = wire.acl_creations(request.body)
    if not cluster_allowed(request, AclOperation.ALTER):
        return wire.create_acls_refused(request, *_REFUSED)
    if request.context.authorizer is None:
        return wire.create_acls_refused(request, _DISABLED, wire.NO_AUTHORIZER)
    if wire.names_any(bindings):
        return wire.create_acls_refused(request, UnknownServerError.code, None)
    controller = server.controller
    assert controller is not None  # handlers run once the server started
    results = await server.commit(lambda: controller.create_acls(bindings))
    logger.info("CreateAcls from %s: %d bindings", request.context.session.principal, len(bindings))
    return wire.create_acls_response(request, [_outcome(r) for r in results])


async def handle_delete_acls(server: ControllerContext, request: Request) -> Any:
    filters = [wire.acl_filter(f) for f in request.body.filters]
    if not cluster_allowed(request, AclOperation.ALTER):
        return wire.delete_acls_refused(request, *_REFUSED)
    if request.context.authorizer is None:
        return wire.delete_acls_refused(request, _DISABLED, wire.NO_AUTHORIZER)
    controller = server.controller
    assert controller is not None
    results = await server.commit(lambda: controller.delete_acls(filters))
    deleted = sum(len(bindings) for _, bindings in results)
    logger.info("DeleteAcls from %s: %d deleted", request.context.session.principal, deleted)
    return wire.delete_acls_response(request, [(_outcome(e), b) for e, b in results])


def handle_describe_acls(server: ControllerContext, request: Request) -> Any:
    acl_filter = wire.acl_filter(request.body)  # a 0 closes the connection first
    del acl_filter
    if not cluster_allowed(request, AclOperation.DESCRIBE):
        return wire.describe_acls_refused(request, *_REFUSED)
    if request.context.authorizer is None:
        return wire.describe_acls_refused(request, _DISABLED, wire.NO_AUTHORIZER_DESCRIBE)
    controller = server.controller
    assert controller is not None
    return wire.describe_acls_response(request, controller.image.acls)


async def handle_alter_user_scram_credentials(server: ControllerContext, request: Request) -> Any:
    if not cluster_allowed(request, AclOperation.ALTER):
        return wire.alter_scram_refused(request, *_REFUSED)
    body = request.body
    deletions = [ScramDeletion(d.name, d.mechanism) for d in body.deletions]
    upsertions = [
        ScramUpsertion(u.name, u.mechanism, u.iterations, u.salt, u.salted_password)
        for u in body.upsertions
    ]
    controller = server.controller
    assert controller is not None
    results = await server.commit(
        lambda: controller.alter_user_scram_credentials(deletions, upsertions)
    )
    logger.info(
        "AlterUserScramCredentials from %s: %s",
        request.context.session.principal,
        ", ".join(f"{user}={error.code}" for user, error in results),
    )
    return wire.alter_scram_response(request, [(u, _outcome(e)) for u, e in results])


def handle_describe_user_scram_credentials(server: ControllerContext, request: Request) -> Any:
    if not cluster_allowed(request, AclOperation.DESCRIBE):
        return wire.describe_scram_refused(request, *_REFUSED)
    controller = server.controller
    assert controller is not None
    return wire.describe_scram_response(request, controller.image.credentials)
