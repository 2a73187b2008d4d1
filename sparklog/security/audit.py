"""The audit trail's contract: what a server reports about authentication and authorization,
and the sink it reports to (DESIGN D16).

Every authentication failure, every denied request and every ACL or credential change is an
`AuditEvent`; allowed decisions too when `audit.log.allowed` is true. Servers report to an
`AuditSink`; on the driver the sink appends to the audit Delta table (with the coordinator's
group commit), on a broker it forwards to the driver. `record` must never block the event
loop or raise: a sink buffers and drops (counting what it dropped) rather than stall requests.
Kafka's equivalent is the `kafka.authorizer.logger` log4j logger; the log line stays too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One audited decision. `resource_type`/`resource_name`/`operation` are empty for
    authentication events; `decision` is "ALLOWED", "DENIED" or, for authentication,
    "AUTHENTICATION_FAILED" / "AUTHENTICATED", and for changes "ACL_CREATED", "ACL_DELETED",
    "CREDENTIAL_ALTERED", "CREDENTIAL_DELETED"."""

    time_ms: int
    principal: str
    client_address: str
    listener: str
    api: str
    resource_type: str
    resource_name: str
    operation: str
    decision: str
    #: node that decided (broker id; the controller and coordinator use their node ids)
    node_id: int = -1
    #: free text: the SASL mechanism and failure reason, the ACL changed, ...
    detail: str = ""


class AuditSink(Protocol):
    def record(self, event: AuditEvent) -> None:
        """Take one event; never blocks, never raises."""
        ...


class LogOnlyAuditSink:
    """Logs each event (Kafka's authorizer logger) and keeps nothing: the default sink."""

    def record(self, event: AuditEvent) -> None:
        if event.decision != "ALLOWED":
            logger.info(
                "%s %s from %s on %s: %s %s %s:%s %s",
                event.decision,
                event.principal,
                event.client_address,
                event.listener,
                event.api,
                event.operation,
                event.resource_type,
                event.resource_name,
                event.detail,
            )


LOG_ONLY = LogOnlyAuditSink()
