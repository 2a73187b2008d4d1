"""The controller's client quota handlers (Kafka's `ControllerApis.handleAlterClientQuotas` and
the describe its brokers answer): AlterClientQuotas commits `ClientQuota` records
(`quota_control.py`); DescribeClientQuotas answers from the image, as brokers do.

Kafka's checks: ALTER_CONFIGS on the cluster to alter, DESCRIBE_CONFIGS to describe
(`pipeline.authorize`, which allows everything until an authorizer is configured); a refusal
answers CLUSTER_AUTHORIZATION_FAILED for every entity. Wire details: `metadata/quota_wire.py`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from sparklog.controller.controller_context import ControllerContext
from sparklog.controller.quota_control import QuotaAlteration, host_names
from sparklog.controller.security_apis import cluster_allowed
from sparklog.errors import ClusterAuthorizationFailedError
from sparklog.metadata import quota_wire
from sparklog.protocol.connection import Request
from sparklog.security.acl import AclOperation

logger = logging.getLogger(__name__)

_REFUSED = (ClusterAuthorizationFailedError.code, "Cluster authorization failed.")
_RESOLVE_TIMEOUT_S = 5.0


async def handle_alter_client_quotas(server: ControllerContext, request: Request) -> Any:
    if not cluster_allowed(request, AclOperation.ALTER_CONFIGS):
        return quota_wire.alter_refused(request, *_REFUSED)
    body = request.body
    alterations = [
        QuotaAlteration(
            entity,
            tuple((op.key, None if op.remove else float(op.value)) for op in entry.ops),
        )
        for entity, entry in zip(quota_wire.request_entities(request), body.entries, strict=True)
    ]
    controller = server.controller
    assert controller is not None  # handlers run once the server started
    validate_only = bool(body.validate_only)
    unresolvable = await _unresolvable(host_names(alterations))
    results = await server.commit(
        lambda: controller.alter_client_quotas(
            alterations, validate_only=validate_only, unresolvable=unresolvable
        )
    )
    logger.info(
        "AlterClientQuotas%s from %s: %s",
        " (validate only)" if validate_only else "",
        request.context.session.principal,
        "; ".join(f"{entity}: {error.code}" for entity, error in results),
    )
    return quota_wire.alter_response(request, [(e, (r.code, r.message)) for e, r in results])


async def _unresolvable(names: set[str]) -> set[str]:
    """The host names that do not resolve (Kafka's `InetAddress.getByName` check on ip
    entities), looked up off the event loop, each within `_RESOLVE_TIMEOUT_S`."""
    loop = asyncio.get_running_loop()

    async def fails(name: str) -> bool:
        try:
            await asyncio.wait_for(loop.getaddrinfo(name, None), _RESOLVE_TIMEOUT_S)
            return False
        except (TimeoutError, OSError, UnicodeError):
            return True

    outcomes = await asyncio.gather(*(fails(n) for n in sorted(names)))
    return {n for n, failed in zip(sorted(names), outcomes, strict=True) if failed}


def handle_describe_client_quotas(server: ControllerContext, request: Request) -> Any:
    if not cluster_allowed(request, AclOperation.DESCRIBE_CONFIGS):
        return quota_wire.describe_refused(request, *_REFUSED)
    controller = server.controller
    assert controller is not None
    return quota_wire.describe_response(request, controller.image.quotas)
