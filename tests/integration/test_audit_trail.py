"""The audit trail (issue 30 §3, docs/security.md "Audit trail"): events recorded on a broker
travel to the driver in AuditEvents requests and land, with the driver's own, in the
append-only Delta audit table; a real client's denied request is one of them; a full buffer
(on the driver or on a broker) drops and counts instead of stalling, and the table says how
many were lost; a sender without CLUSTER_ACTION is refused."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

from confluent_kafka.admin import AdminClient

from sparklog.broker.audit_forwarder import ForwardingAuditSink
from sparklog.broker.coordinator_channel import CoordinatorChannel
from sparklog.coordinator.audit_log import AuditReader, AuditStore, DeltaAuditSink
from sparklog.protocol import pipeline
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.pipeline import RequestStage
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
from sparklog.security.audit import EVENTS_DROPPED, AuditEvent
from sparklog.security.session import KafkaPrincipal
from sparklog.security.standard_authorizer import StandardAuthorizer


def event(decision: str = "DENIED", **fields) -> AuditEvent:
    values = {
        "time_ms": 1_764_000_000_000,
        "principal": "User:alice",
        "client_address": "10.0.0.7",
        "listener": "SASL_SSL",
        "api": "PRODUCE",
        "resource_type": "TOPIC",
        "resource_name": "payments",
        "operation": "WRITE",
        "decision": decision,
        "node_id": 0,
        "detail": "",
        **fields,
    }
    return AuditEvent(**values)


def rows_of(path: str) -> list[dict]:
    return AuditReader(path).read().to_pylist()


def wait_for_rows(path: str, match, count: int = 1, timeout_s: float = 30.0) -> list[dict]:
    """The table's rows for which `match(row)` holds, once there are `count` of them."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [r for r in rows_of(path) if match(r)]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def as_event(row: dict) -> AuditEvent:
    fields = {k: v for k, v in row.items() if k != "time"}
    return AuditEvent(time_ms=int(row["time"].timestamp() * 1000), **fields)


def test_events_from_a_broker_and_the_driver_land_in_the_audit_table(cluster):
    broker, coordinator = cluster.brokers[0], cluster.coordinator
    tag = uuid.uuid4().hex[:8]
    on_broker = event(
        "AUTHENTICATION_FAILED",
        principal="",
        api="SASL_AUTHENTICATE",
        resource_type="",
        resource_name="",
        operation="",
        node_id=broker.node_id,
        detail=f"SCRAM-SHA-512: invalid credentials {tag}",
    )
    on_driver = event("ACL_CREATED", api="CREATE_ACLS", node_id=3000, detail=f"acl {tag}")
    assert isinstance(broker.audit, ForwardingAuditSink)
    assert cluster.controller.audit.target is coordinator.audit  # the driver's one table
    # each listener knows its server's sink (authentication failures are audited there)
    assert broker.server.audit is broker.audit
    assert cluster.controller._server.audit is cluster.controller.audit
    assert coordinator._server.audit is coordinator.audit
    broker.audit.record(on_broker)
    cluster.controller.audit.record(on_driver)

    found = wait_for_rows(coordinator.audit.path, lambda r: tag in r["detail"], count=2)
    assert sorted(map(as_event, found), key=lambda e: e.decision) == [on_driver, on_broker]
    assert coordinator.audit.path.endswith("__audit_log")  # beside the offsets table
    assert broker.audit.statistics()["dropped"] == 0


#: everything allowed but topics named secret-* (a prefixed DENY wins)
SECRET_TOPICS_DENIED = StandardAuthorizer(
    allow_everyone_if_no_acl_found=True,
    acls=[
        AclBinding(
            ResourcePattern(ResourceType.TOPIC, "secret-", PatternType.PREFIXED),
            AccessControlEntry("User:*", "*", AclOperation.ALL, AclPermissionType.DENY),
        )
    ],
)


class AuthorizeTopicsInMetadata(RequestStage):
    """The authorize stage as the authz engineer's binds it (authorizer, the server's audit
    sink and `audit.log.allowed`, its node id), checking DESCRIBE on the topics a Metadata
    request names, until the handlers' own checks land."""

    name = "authorize"

    def __init__(self, broker, log_allowed: bool = False) -> None:
        self.broker = broker
        self.log_allowed = log_allowed

    def on_request(self, request):
        context = request.context
        context.authorizer = SECRET_TOPICS_DENIED
        context.audit = self.broker.audit
        context.audit_allowed = self.log_allowed
        context.node_id = self.broker.node_id
        if request.api_key == ApiKey.METADATA and request.body.topics:
            for topic in request.body.topics:
                pipeline.authorize(request, AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name)
        return None


def test_a_real_clients_denied_request_lands_in_the_audit_table(cluster):
    broker, coordinator = cluster.brokers[0], cluster.coordinator
    topic = f"secret-{uuid.uuid4().hex[:8]}"
    before = broker.server.pipeline
    broker.server.pipeline = before.with_stage(AuthorizeTopicsInMetadata(broker))
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.list_topics(topic=topic, timeout=10)
    finally:
        broker.server.pipeline = before

    found = wait_for_rows(coordinator.audit.path, lambda r: r["resource_name"] == topic)
    assert len(found) >= 1
    row = found[0]
    assert row["principal"] == str(KafkaPrincipal("User", "ANONYMOUS"))
    assert row["client_address"] == "127.0.0.1"
    assert (row["listener"], row["api"], row["resource_type"], row["operation"]) == (
        "PLAINTEXT",
        "METADATA",
        "TOPIC",
        "DESCRIBE",
    )
    assert (row["decision"], row["node_id"]) == ("DENIED", broker.node_id)


def test_allowed_decisions_are_audited_only_when_asked(cluster):
    """`audit.log.allowed` (RequestContext.audit_allowed): off, an allowed request leaves no
    row; on, it leaves an ALLOWED one."""
    broker, coordinator = cluster.brokers[0], cluster.coordinator
    quiet, logged = (f"public-{uuid.uuid4().hex[:8]}" for _ in range(2))
    before = broker.server.pipeline
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        for topic, log_allowed in ((quiet, False), (logged, True)):
            broker.server.pipeline = before.with_stage(
                AuthorizeTopicsInMetadata(broker, log_allowed)
            )
            admin.list_topics(topic=topic, timeout=10)
    finally:
        broker.server.pipeline = before
    found = wait_for_rows(coordinator.audit.path, lambda r: r["resource_name"] == logged)
    assert {r["decision"] for r in found} == {"ALLOWED"}
    assert not [r for r in rows_of(coordinator.audit.path) if r["resource_name"] == quiet]


def test_a_full_broker_buffer_drops_and_counts_and_the_table_says_so(cluster):
    """The broker's sink takes no more than its bound while nothing drains it; the driver
    records the loss as an EVENTS_DROPPED row naming the broker."""
    tag = uuid.uuid4().hex[:8]

    async def scenario() -> dict:
        channel = CoordinatorChannel(cluster.coordinator.bootstrap)
        sink = ForwardingAuditSink(77, channel, max_events=5, max_batch=2)
        for i in range(20):  # before its task runs: nothing drains the buffer
            sink.record(event(node_id=77, detail=f"{tag} {i}"))
        assert (sink.buffered, sink.dropped) == (5, 15)
        task = asyncio.create_task(sink.run())
        while sink.sent < 5:
            await asyncio.sleep(0.01)
        task.cancel()
        await channel.close()
        return sink.statistics()

    stats = asyncio.run(scenario())
    assert stats == {"recorded": 5, "dropped": 15, "buffered": 0}
    path = cluster.coordinator.audit.path
    kept = wait_for_rows(path, lambda r: tag in r["detail"], count=5)
    assert sorted(r["detail"] for r in kept) == [f"{tag} {i}" for i in range(5)]
    gaps = wait_for_rows(path, lambda r: r["decision"] == EVENTS_DROPPED and r["node_id"] == 77)
    assert [r["detail"] for r in gaps] == [
        "15 audit events dropped: the broker's audit buffer was full"
    ]


class StalledStore(AuditStore):
    """The audit table on a disk that stalls until `go` is set (a hung NFS mount)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.go = threading.Event()
        self.entered = threading.Event()

    def append(self, events):
        self.entered.set()
        self.go.wait()
        super().append(events)


def test_a_full_driver_sink_drops_and_counts_rather_than_stalls(tmp_path):
    store = StalledStore(str(tmp_path / "audit"))
    sink = DeltaAuditSink(store, linger_ms=0, max_events=10).start()
    try:
        sink.record(event(detail="first"))
        assert store.entered.wait(30)  # the writer holds "first" and waits for the disk
        for i in range(25):  # every call returns at once: 10 buffered, 15 dropped
            sink.record(event(detail=f"then {i}"))
        assert sink.statistics() == {
            "recorded": 11,
            "dropped": 15,
            "buffered": 10,
            "written": 0,
            "lost": 0,
            "commits": 0,
        }
        store.go.set()
        assert sink.flush(30)
    finally:
        store.go.set()
        sink.close()
    rows = rows_of(store.path)
    details = sorted(r["detail"] for r in rows if r["decision"] != EVENTS_DROPPED)
    assert details == sorted(["first"] + [f"then {i}" for i in range(10)])
    assert [r for r in rows if r["decision"] == EVENTS_DROPPED][0]["detail"] == (
        "15 audit events dropped: the driver's audit buffer was full"
    )
    assert sink.statistics()["written"] == 11


class DenyAll:
    def authorize(self, session, operation, resource_type, name) -> bool:
        return False


class DenyEverything(RequestStage):
    name = "authorize"

    def on_request(self, request):
        request.context.authorizer = DenyAll()
        return None


def test_audit_events_from_a_sender_without_cluster_action_are_refused(cluster):
    coordinator = cluster.coordinator
    server = coordinator._server
    tag = uuid.uuid4().hex[:8]
    before = server.pipeline

    async def scenario() -> ForwardingAuditSink:
        channel = CoordinatorChannel(coordinator.bootstrap)
        sink = ForwardingAuditSink(5, channel, max_events=100)
        sink.record(event(detail=tag))
        assert await sink._send_batch()  # answered (refused), so not retried
        await channel.close()
        return sink

    server.pipeline = before.with_stage(DenyEverything())
    try:
        sink = asyncio.run(scenario())
    finally:
        server.pipeline = before
    assert (sink.sent, sink.dropped) == (0, 1)
    assert coordinator.audit.flush(30)
    assert not [r for r in rows_of(coordinator.audit.path) if tag in r["detail"]]


def test_upkeep_runs_beside_the_appends_and_keeps_every_row(tmp_path):
    """Compaction, checkpoint and vacuum every `maintenance_commits` commits, on a thread of
    their own: the table keeps every row, with fewer files and a checkpoint."""
    store = AuditStore(str(tmp_path / "audit"), maintenance_commits=3)
    for i in range(3):
        store.append([event(detail=f"row {i}-{j}") for j in range(4)])
    store.wait_for_maintenance()
    store.append([event(detail="after")])
    rows = rows_of(store.path)
    assert sorted(r["detail"] for r in rows) == sorted(
        [f"row {i}-{j}" for i in range(3) for j in range(4)] + ["after"]
    )
    assert list((tmp_path / "audit" / "_delta_log").glob("*.checkpoint.parquet"))


def test_a_path_holding_another_delta_table_is_refused_with_the_fix(tmp_path, caplog):
    """audit.table.path pointing at, say, the offsets table: nothing is written to it, the
    error names the setting, and the sink keeps taking (and bounding) events."""
    from sparklog.coordinator.offsets_store import OffsetsStore

    OffsetsStore(tmp_path / "offsets")
    store = AuditStore(str(tmp_path / "offsets"))
    sink = DeltaAuditSink(store, linger_ms=0, max_events=2).start()
    try:
        for i in range(5):
            sink.record(event(detail=str(i)))
        assert sink.dropped >= 2  # nothing drains while every append fails
    finally:
        sink.close(timeout_s=10)
    assert "point audit.table.path at another location" in caplog.text
    assert sink.written == 0 and sink.lost >= 1


#: The forwarding broker (on 127.0.0.1) may send Envelopes (CLUSTER_ACTION, as Kafka's
#: handleEnvelope needs); the client it forwards for, elsewhere, may do nothing.
BROKERS_ONLY_FROM_LOOPBACK = StandardAuthorizer(
    acls=[
        AclBinding(
            ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME),
            AccessControlEntry(
                "User:*", "127.0.0.1", AclOperation.CLUSTER_ACTION, AclPermissionType.ALLOW
            ),
        )
    ]
)


class BindDenyingAuthorizer(RequestStage):
    """The coordinator listener's authorize stage: only the broker's own address may act."""

    name = "authorize"

    def __init__(self, coordinator) -> None:
        self.coordinator = coordinator

    def on_request(self, request):
        request.context.authorizer = BROKERS_ONLY_FROM_LOOPBACK
        request.context.audit = self.coordinator.audit
        request.context.node_id = 3001
        return None


def test_a_denial_inside_a_forwarded_request_is_audited_as_the_clients(cluster):
    """A request a broker forwards in an Envelope is decided under the coordinator listener's
    authorize bindings, as its client's: the denial lands with the client's address."""
    from sparklog.protocol.connection import Request
    from sparklog.protocol.sparklog_apis import AuditEventsRequest

    coordinator = cluster.coordinator
    server = coordinator._server
    inner = Request(
        api_key=ApiKey.SPARKLOG_AUDIT_EVENTS,
        api_version=0,
        correlation_id=7,
        client_id="intruder",
        body=AuditEventsRequest(node_id=9, dropped=0, events=()),
        size_bytes=0,
    )

    async def forward() -> None:
        channel = CoordinatorChannel(coordinator.bootstrap)
        try:
            await channel.forward(inner, "/198.51.100.4", timeout_s=10)
        finally:
            await channel.close()

    before = server.pipeline
    server.pipeline = before.with_stage(BindDenyingAuthorizer(coordinator))
    try:
        asyncio.run(forward())
    finally:
        server.pipeline = before
    found = wait_for_rows(coordinator.audit.path, lambda r: r["client_address"] == "198.51.100.4")
    assert [
        (r["api"], r["resource_type"], r["operation"], r["decision"], r["node_id"]) for r in found
    ] == [("SPARKLOG_AUDIT_EVENTS", "CLUSTER", "CLUSTER_ACTION", "DENIED", 3001)]


def test_the_trail_survives_a_coordinator_restart(cluster):
    """(Last in this module: it restarts the module's coordinator.) The new coordinator appends
    to the same table, and the controller reports to the new coordinator's sink."""
    tag = uuid.uuid4().hex[:8]
    cluster.controller.audit.record(event(detail=f"{tag} before"))
    assert cluster.coordinator.audit.flush(30)
    cluster.restart_coordinator()
    assert cluster.controller.audit.target is cluster.coordinator.audit
    cluster.brokers[0].audit.record(event(detail=f"{tag} after"))
    found = wait_for_rows(cluster.coordinator.audit.path, lambda r: tag in r["detail"], count=2)
    assert sorted(r["detail"] for r in found) == [f"{tag} after", f"{tag} before"]
