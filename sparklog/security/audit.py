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

import collections
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from sparklog.security.session import Session
from sparklog.settings import ConfigType, Range, Setting, define

logger = logging.getLogger(__name__)

#: The decision of the row that records a gap in the trail: `detail` says how many events a
#: full buffer dropped, and where (an audit trail that drops must say so in itself).
EVENTS_DROPPED = "EVENTS_DROPPED"

AUDIT_SETTINGS = define(
    Setting(
        "audit.log.allowed",
        ConfigType.BOOLEAN,
        False,
        doc="sparklog's own: audit allowed decisions too, not only denials (Kafka logs them "
        "at DEBUG on kafka.authorizer.logger)",
        group="audit",
    ),
    Setting(
        "audit.buffer.max.events",
        ConfigType.INT,
        10_000,
        Range(1),
        doc="sparklog's own: audit events a server buffers before dropping (and counting) "
        "new ones, so auditing never stalls a request",
        group="audit",
    ),
)


@dataclass(frozen=True, slots=True)
class AuditConfig:
    """The audit settings every server reads (brokers, controller, coordinator)."""

    audit_log_allowed: bool = AUDIT_SETTINGS.default("audit.log.allowed")
    audit_buffer_max_events: int = AUDIT_SETTINGS.default("audit.buffer.max.events")

    @classmethod
    def from_properties(cls, props: Mapping[str, object] | None) -> AuditConfig:
        return cls(**AUDIT_SETTINGS.parse(props or {}, unknown="ignore"))


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One audited decision. `resource_type`/`resource_name`/`operation` are empty for
    authentication events; `decision` is "ALLOWED", "DENIED" or, for authentication,
    "AUTHENTICATION_FAILED" / "AUTHENTICATED", and for changes "ACL_CREATED", "ACL_DELETED",
    "CREDENTIAL_ALTERED", "CREDENTIAL_DELETED", "QUOTA_ALTERED" (a client quota entity's keys set
    or removed: `resource_type` CLIENT_QUOTA)."""

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


class SwitchableAuditSink:
    """A sink that hands each event to `target`, which can be switched at any time: a server
    that starts before the sink it should report to exists (the controller starts before the
    coordinator that owns the driver's audit table) is given this one, so whatever captured it
    (its listeners, its authorize stage) follows the switch."""

    def __init__(self, target: AuditSink | None = None) -> None:
        self.target: AuditSink = target or LOG_ONLY

    def switch_to(self, target: AuditSink) -> None:
        self.target = target

    def record(self, event: AuditEvent) -> None:
        self.target.record(event)


class BufferedAuditSink:
    """A bounded buffer of events for a writer to drain: `record` takes the event (and logs it
    as `LOG_ONLY` does) or, when `max_events` wait already, drops it and counts it; it never
    blocks and never raises, whatever the writer is doing. Any thread may call `record`; one
    writer calls `drain` / `take_dropped`. `wake` is called when an event lands in an empty
    buffer (the writer's signal; it must not block either)."""

    def __init__(self, max_events: int, wake: Callable[[], None] = lambda: None) -> None:
        self.max_events = max_events
        self.wake = wake
        self._events: collections.deque[AuditEvent] = collections.deque()
        self._lock = threading.Lock()
        #: events taken and dropped since the start (statistics)
        self.recorded = 0
        self.dropped = 0
        self._dropped_unreported = 0

    def record(self, event: AuditEvent) -> None:
        LOG_ONLY.record(event)
        self.buffer(event)

    def buffer(self, event: AuditEvent) -> None:
        """`record` without the log line (events another server logged already)."""
        try:
            with self._lock:
                if len(self._events) >= self.max_events:
                    self.dropped += 1
                    self._dropped_unreported += 1
                    return
                self._events.append(event)
                self.recorded += 1
                first = len(self._events) == 1
            if first:
                self.wake()
        except Exception:  # noqa: BLE001 - auditing never fails a request
            logger.exception("recording an audit event failed")

    def add_dropped(self, count: int) -> None:
        """Count `count` events dropped elsewhere (a broker's full buffer), to report them."""
        if count > 0:
            with self._lock:
                self._dropped_unreported += count

    def drain(self, max_events: int) -> list[AuditEvent]:
        """Up to `max_events` buffered events, oldest first (removed from the buffer)."""
        with self._lock:
            count = min(max_events, len(self._events))
            return [self._events.popleft() for _ in range(count)]

    def take_dropped(self) -> int:
        """Events dropped (here or reported by `add_dropped`) since the last call."""
        with self._lock:
            count, self._dropped_unreported = self._dropped_unreported, 0
            return count

    @property
    def buffered(self) -> int:
        """Events waiting. (No `__len__`: an empty sink must stay truthy, since callers write
        `context.audit or LOG_ONLY`.)"""
        return len(self._events)

    def statistics(self) -> dict[str, int]:
        return {"recorded": self.recorded, "dropped": self.dropped, "buffered": self.buffered}


def authentication_failed(
    time_ms: int,
    *,
    client_address: str,
    listener: str,
    mechanism: str,
    reason: str,
    principal: str = "",
    node_id: int = -1,
    api: str = "SASL_AUTHENTICATE",
) -> AuditEvent:
    """The event of a failed authentication (a SASL exchange, a TLS handshake): `principal`
    is the name the client claimed when known ("" otherwise), `reason` Kafka's generic
    failure text. Never put a password, token or client-final message in `reason`."""
    return AuditEvent(
        time_ms=time_ms,
        principal=principal,
        client_address=client_address,
        listener=listener,
        api=api,
        resource_type="",
        resource_name="",
        operation="",
        decision="AUTHENTICATION_FAILED",
        node_id=node_id,
        detail=f"{mechanism}: {reason}" if mechanism else reason,
    )


def change_event(
    time_ms: int,
    session: Session,
    *,
    api: str,
    decision: str,
    resource_type: str,
    resource_name: str,
    detail: str,
    node_id: int = -1,
    operation: str = "",
) -> AuditEvent:
    """The event of a change to security metadata made by `session`'s principal: `decision`
    "ACL_CREATED" / "ACL_DELETED" (`resource_*`: the ACL's resource, `detail`: its pattern
    type, principal, host, operation and permission) or "CREDENTIAL_ALTERED" /
    "CREDENTIAL_DELETED" (`resource_type` "USER", `detail`: the mechanism and iterations;
    never the salted password)."""
    return AuditEvent(
        time_ms=time_ms,
        principal=str(session.principal),
        client_address=session.client_address,
        listener=session.listener_name,
        api=api,
        resource_type=resource_type,
        resource_name=resource_name,
        operation=operation,
        decision=decision,
        node_id=node_id,
        detail=detail,
    )


def dropped_event(time_ms: int, count: int, node_id: int, where: str) -> AuditEvent:
    """The row that records `count` events lost to a full buffer at `where`."""
    return AuditEvent(
        time_ms=time_ms,
        principal="",
        client_address="",
        listener="",
        api="",
        resource_type="",
        resource_name="",
        operation="",
        decision=EVENTS_DROPPED,
        node_id=node_id,
        detail=f"{count} audit events dropped: the {where} audit buffer was full",
    )
