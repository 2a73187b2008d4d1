"""Broker registration, heartbeats and leases (Kafka's `ClusterControlManager` and
`BrokerHeartbeatManager`).

Theory of operation: a broker registers (BrokerRegistration) and gets a broker epoch, the
offset of its `RegisterBroker` record; it starts fenced. It then heartbeats every
`broker.heartbeat.interval.ms` with the metadata offset it has applied; once that offset has
passed its own registration record it is unfenced (it knows everything up to its own arrival).
A broker that has not heartbeated for `broker.session.timeout.ms` is fenced again by the
controller's tick. A registration of an id whose lease is still valid from a different
incarnation, or from an older Spark task attempt, is refused with DUPLICATE_BROKER_REGISTRATION.

Leases live in memory only (Kafka's heartbeat manager is not persisted either): after a
controller restart `QuorumController.activate` gives every unfenced broker a fresh lease, like
Kafka's `ClusterControlManager.activate`, so brokers that heartbeat within the session timeout
keep their leaderships and the others are fenced when it expires.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sparklog.errors import (
    BrokerIdNotRegisteredError,
    DuplicateBrokerRegistrationError,
    InconsistentClusterIdError,
    InvalidRequestError,
    StaleBrokerEpochError,
)
from sparklog.metadata.image import MetadataImage
from sparklog.metadata.log_records import REGISTER_BROKER
from sparklog.security.listeners import ListenerEndpoint, endpoints_to_record, normalised
from sparklog.security.session import SecurityProtocol

BROKER_CLIENT_ID_PREFIX = "sparklog-broker"


@dataclass(frozen=True, slots=True)
class BrokerLaunchFacts:
    """What the launcher knows about a broker task; travels in the request's client id."""

    executor_id: str | None = None
    task_attempt: int = -1
    data_dir: str | None = None
    #: `host:port` of the Prometheus endpoint of the broker's process (None: none)
    metrics_endpoint: str | None = None


def broker_client_id(facts: BrokerLaunchFacts) -> str:
    """`sparklog-broker;executor=<id>;attempt=<n>;dir=<data dir>` (the directory goes last so
    it may contain ';')."""
    parts = [BROKER_CLIENT_ID_PREFIX]
    if facts.executor_id is not None:
        parts.append(f"executor={facts.executor_id}")
    parts.append(f"attempt={facts.task_attempt}")
    if facts.metrics_endpoint is not None:
        parts.append(f"metrics={facts.metrics_endpoint}")
    if facts.data_dir is not None:
        parts.append(f"dir={facts.data_dir}")
    return ";".join(parts)


def parse_broker_client_id(client_id: str | None) -> BrokerLaunchFacts:
    """The launch facts in a broker's client id; empty facts for any other client id."""
    if not client_id or not client_id.startswith(BROKER_CLIENT_ID_PREFIX + ";"):
        return BrokerLaunchFacts()
    rest = client_id[len(BROKER_CLIENT_ID_PREFIX) + 1 :]
    head, _sep, data_dir = rest.partition("dir=")
    fields = dict(p.split("=", 1) for p in head.split(";") if "=" in p)
    try:
        attempt = int(fields.get("attempt", "-1"))
    except ValueError:
        attempt = -1
    return BrokerLaunchFacts(
        fields.get("executor"), attempt, data_dir if _sep else None, fields.get("metrics")
    )


@dataclass(frozen=True, slots=True)
class BrokerRegistrationRequest:
    """A BrokerRegistration, with the launcher facts from its client id.

    `previous_broker_epoch` (BrokerRegistration v3+, KIP-966): the epoch the broker wrote in its
    clean-shutdown file when it last stopped cleanly, -1 when it found none (a crash, a power
    loss, a new disk) or the request version cannot carry it.
    """

    broker_id: int
    cluster_id: str
    incarnation_id: str
    host: str
    port: int
    rack: str | None = None
    facts: BrokerLaunchFacts = BrokerLaunchFacts()
    previous_broker_epoch: int = -1
    #: every listener the broker advertises; `host`/`port` are the first's
    endpoints: tuple[ListenerEndpoint, ...] = ()


@dataclass(frozen=True, slots=True)
class BrokerHeartbeat:
    """A BrokerHeartbeat; `current_metadata_offset` is the broker's `MetadataImage.offset`
    (the next offset it will apply)."""

    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool = False
    want_shut_down: bool = False


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatReply:
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False
    error_code: int = 0
    error_message: str | None = None


class BrokerHeartbeatManager:
    """Last contact time per broker; a session is valid for `session_timeout_ms` after it.

    Not thread-safe: owned by the controller's event loop.
    """

    def __init__(self, session_timeout_ms: int) -> None:
        assert session_timeout_ms > 0
        self.session_timeout_ms = session_timeout_ms
        self._last_contact_ms: dict[int, int] = {}

    def touch(self, broker_id: int, now_ms: int) -> None:
        self._last_contact_ms[broker_id] = now_ms

    def remove(self, broker_id: int) -> None:
        self._last_contact_ms.pop(broker_id, None)

    def has_valid_session(self, broker_id: int, now_ms: int) -> bool:
        last = self._last_contact_ms.get(broker_id)
        return last is not None and now_ms - last <= self.session_timeout_ms

    def next_expiry_ms(self, broker_ids: Iterable[int]) -> int | None:
        """When the earliest session among `broker_ids` expires (None: no session to watch);
        the controller schedules its next fencing check then (Kafka's `nextCheckTimeNs`)."""
        expiries = [
            self._last_contact_ms[b] + self.session_timeout_ms + 1
            for b in broker_ids
            if b in self._last_contact_ms
        ]
        return min(expiries, default=None)

    def first_stale(self, now_ms: int, broker_ids: Iterable[int]) -> int | None:
        """The broker among `broker_ids` whose session expired longest ago (or never began)."""
        stale = [b for b in broker_ids if not self.has_valid_session(b, now_ms)]
        if not stale:
            return None
        return min(stale, key=lambda b: (self._last_contact_ms.get(b, -1), b))


def check_registration(
    image: MetadataImage,
    heartbeats: BrokerHeartbeatManager,
    cluster_id: str,
    request: BrokerRegistrationRequest,
    now_ms: int,
    *,
    shut_down: bool = False,
) -> None:
    """Raise when `request` may not register (Kafka's `ClusterControlManager.registerBroker`).

    `shut_down`: the registered broker finished a controlled shutdown, so its lease no longer
    stands in the way of a new process under the same id.
    """
    if request.cluster_id != cluster_id:
        raise InconsistentClusterIdError(
            f"Expected cluster ID {cluster_id}, but got cluster ID {request.cluster_id}"
        )
    if request.broker_id < 0:
        raise BrokerIdNotRegisteredError(
            f"Invalid broker id {request.broker_id}: brokers get an id from the controller "
            "(QuorumController.next_node_id) or from meta.properties before registering"
        )
    existing = image.broker(request.broker_id)
    if existing is None:
        return
    attempt, old_attempt = request.facts.task_attempt, existing.task_attempt
    if 0 <= attempt < old_attempt:
        raise DuplicateBrokerRegistrationError(
            f"Broker {request.broker_id} is registered by task attempt {old_attempt}; "
            f"a registration from the older attempt {attempt} is stale."
        )
    if (
        not shut_down
        and heartbeats.has_valid_session(request.broker_id, now_ms)
        and existing.incarnation_id != request.incarnation_id
    ):
        raise DuplicateBrokerRegistrationError("Another broker is registered with that broker id.")


def register_broker_record(request: BrokerRegistrationRequest, broker_epoch: int) -> dict[str, Any]:
    return {
        "type": REGISTER_BROKER,
        "broker_id": request.broker_id,
        "broker_epoch": broker_epoch,
        "incarnation_id": request.incarnation_id,
        "host": request.host,
        "port": request.port,
        "rack": request.rack,
        "executor_id": request.facts.executor_id,
        "data_dir": request.facts.data_dir,
        "task_attempt": request.facts.task_attempt,
        "metrics_endpoint": request.facts.metrics_endpoint,
        "endpoints": endpoints_to_record(request.endpoints),
    }


def check_broker_epoch(image: MetadataImage, broker_id: int, broker_epoch: int) -> None:
    """Raise StaleBrokerEpochError unless `broker_epoch` is the broker's current one."""
    broker = image.broker(broker_id)
    if broker is None:
        raise StaleBrokerEpochError(f"No broker registration found for broker id {broker_id}")
    if broker.broker_epoch != broker_epoch:
        raise StaleBrokerEpochError(
            f"Expected broker epoch {broker.broker_epoch}, but got broker epoch {broker_epoch}"
        )


def registered_endpoints(listeners: list[Any]) -> tuple[ListenerEndpoint, ...]:
    """A BrokerRegistration's listeners as endpoints, in the broker's order (its first is the
    default address); InvalidRequestError for an unknown protocol id or a repeated name."""
    endpoints = []
    for listener in listeners:
        try:
            protocol = SecurityProtocol(int(listener.security_protocol))
        except ValueError:
            raise InvalidRequestError(
                f"listener {listener.name} has unknown security protocol id "
                f"{listener.security_protocol}"
            ) from None
        endpoints.append(
            ListenerEndpoint(normalised(listener.name), protocol, listener.host, int(listener.port))
        )
    names = [e.listener_name for e in endpoints]
    if len(set(names)) != len(names):
        raise InvalidRequestError(f"BrokerRegistration repeats a listener name: {names}")
    return tuple(endpoints)
