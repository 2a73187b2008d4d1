"""The group and transaction coordinators as one server on the driver: the sans-IO
`GroupCoordinator` and `TransactionCoordinator` behind Kafka's protocol, their offsets,
membership and transaction decisions in one Delta table (`OffsetsStore`), so a transaction's
decision and its consumer offsets land in one Delta commit (DESIGN D9).

Flow of a write: a handler calls the core, whose `Write`s go to the `CoordinatorRuntime`
(`runtime.py`: pending writes, linger, group commit, replay, fencing, tick). A write that is not
durable within `offsets.commit.timeout.ms` is answered with REQUEST_TIMED_OUT by its handler.
What the coordinators need from the controller is the `CoordinatorContext` (`context.py`).

Decided transactions go to the `TransactionMarkerChannel`, which writes their markers to the
partition leaders and reports back so the coordinator can complete them.

Clients find the coordinator with FindCoordinator (groups and transactions) on any broker, which
names a live broker; that broker forwards the client's group and transaction requests here in
Envelopes (KIP-590), so clients never connect to this listener themselves. Asked directly, it
answers FindCoordinator with itself (node 3001) and Metadata and DescribeCluster from the
controller's image. Starting on the same table
reloads every group and offset, so a driver restart on the same disk loses nothing.

When the table cannot be loaded (damaged: `delta_log`; unreadable), the coordinator still
listens but serves no group or transaction: it answers them COORDINATOR_NOT_AVAILABLE, as a
Kafka coordinator does while it loads, and `unavailable` holds the reason (logged as an ERROR,
naming the file and the repair). The brokers and the controller keep running.

Embedding: `start_in_thread()` runs the loop in a daemon thread; `stop()` joins it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from sparklog.coordinator import authz
from sparklog.coordinator.audit_log import AuditStore, DeltaAuditSink, audit_table_path
from sparklog.coordinator.clock import WALL_CLOCK_FLOOR_MS, CoordinatorClock
from sparklog.coordinator.context import CoordinatorContext, CurrentContext
from sparklog.coordinator.group.apis import GroupCoordinatorApis
from sparklog.coordinator.group.config import GroupConfig
from sparklog.coordinator.group.coordinator import GroupCoordinator
from sparklog.coordinator.lag import ConsumerLagPoller, LagConfig
from sparklog.coordinator.metrics import CoordinatorMetrics
from sparklog.coordinator.offsets_store import OffsetsStore, OffsetsTableDamagedError
from sparklog.coordinator.runtime import CoordinatorRuntime
from sparklog.coordinator.shard import Row
from sparklog.coordinator.store import CoordinatorStore
from sparklog.coordinator.transaction.apis import TransactionApis
from sparklog.coordinator.transaction.config import TransactionConfig
from sparklog.coordinator.transaction.coordinator import TransactionCoordinator
from sparklog.coordinator.transaction.marker_channel import TransactionMarkerChannel
from sparklog.coordinator.transaction.persisted import MarkerJob
from sparklog.errors import ClusterAuthorizationFailedError, CoordinatorNotAvailableError
from sparklog.metrics.config import MetricsConfig
from sparklog.protocol import envelope, kio_build
from sparklog.protocol.api_versions import (
    COORDINATOR_DELEGATED_APIS,
    GROUP_COORDINATOR_APIS,
    GROUP_COORDINATOR_SERVED_APIS,
    ApiKey,
)
from sparklog.protocol.async_client import api_versions_response
from sparklog.protocol.authorization import authorize_stage, stages_with
from sparklog.protocol.connection import ProtocolError, Request
from sparklog.protocol.outbound import server_client_security
from sparklog.protocol.pipeline import authorize, throttle_time_ms
from sparklog.protocol.responses import find_coordinator_response, refusal
from sparklog.protocol.server import KafkaServer
from sparklog.protocol.server_lifecycle import ServerLifecycle
from sparklog.protocol.sparklog_apis import audit_event
from sparklog.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from sparklog.security.audit import AuditConfig, dropped_event
from sparklog.security.listener_config import ListenerConfig
from sparklog.storage.object_store import join_location, storage_options
from sparklog.structs import GROUP_COORDINATOR_NODE_ID, TopicPartition

logger = logging.getLogger(__name__)

T = TypeVar("T")


class GroupCoordinatorServer(ServerLifecycle):
    """Serves the group APIs on (host, port); state in the Delta table at `offsets_table_path`
    (default `<metadata.log.dir or data_dir>/__consumer_offsets`; a path or an object-store
    URI reached with the `storage.options.*` settings)."""

    thread_name = "sparklog-group-coordinator"
    start_timeout_s = 60.0

    def __init__(
        self,
        data_dir: str | Path,
        controller: CoordinatorContext,
        host: str = "127.0.0.1",
        port: int = 0,
        config: Mapping[str, object] | None = None,
        store_factory: Callable[[str, int], CoordinatorStore] | None = None,
        clock: CoordinatorClock | None = None,
    ) -> None:
        super().__init__()
        self.config = GroupConfig.from_properties(config or {})
        self.txn_config = TransactionConfig.from_properties(config or {})
        #: object-store credentials and endpoint (`storage.options.*` settings)
        options = storage_options(config or {}) or None
        #: (path, maintenance commits) -> store; benchmarks swap in an in-memory one
        self.store_factory: Callable[[str, int], CoordinatorStore] = store_factory or (
            lambda path, every: OffsetsStore(
                path, maintenance_commits=every, storage_options=options
            )
        )
        # By default the table sits beside the metadata log (`metadata.log.dir`, else the
        # controller's data dir), so one setting puts all of the driver's state on shared storage.
        home = (config or {}).get("metadata.log.dir") or Path(data_dir)
        self.table_path = self.config.offsets_table_path or join_location(
            str(home), "__consumer_offsets"
        )
        #: `audit.log.allowed` and the buffer bound (the authorize stage reads the former)
        self.audit_config = AuditConfig.from_properties(config)
        #: the group and transaction coordinators' metrics (Kafka's `GroupMetadataManager`,
        #: `group-coordinator-metrics`, `TransactionStateManager` names)
        self.metrics_config = MetricsConfig.from_properties(config)
        self.metrics = self.metrics_config.registry()
        self.coordinator_metrics = CoordinatorMetrics(self.metrics, self)
        #: consumer lag (`lag.py`): the poll interval (0: none) and bound
        self.lag_config = LagConfig.from_properties(config)
        self.lag: ConsumerLagPoller | None = None
        #: the driver's audit sink (`audit_log`): the controller's, this server's and, through
        #: AuditEvents requests, every broker's events land in the audit table beside the
        #: offsets table; started with the server, drained and closed at shutdown
        self.audit = DeltaAuditSink(
            AuditStore(
                audit_table_path(config or {}, str(home)),
                maintenance_commits=self.config.offsets_table_maintenance_commits,
                storage_options=options,
            ),
            linger_ms=self.config.offsets_commit_linger_ms,
            max_events=self.audit_config.audit_buffer_max_events,
            node_id=GROUP_COORDINATOR_NODE_ID,
        )
        #: the authorize stage (`authorizer.class.name`), fed from the controller's image
        self.authorization = authorize_stage(
            config,
            self._acl_image,
            node_id=GROUP_COORDINATOR_NODE_ID,
            audit=self.audit,
            audit_allowed=self.audit_config.audit_log_allowed,
        )
        self.controller = controller
        #: the context handed to the cores and channels: it follows `controller` when a
        #: restarted controller replaces it (`context.CurrentContext`)
        self.context = CurrentContext(lambda: self.controller)
        #: wall-clock ms that never jump in this process (tests inject one; see `clock`)
        self.clock = clock or CoordinatorClock()
        #: the listener it serves: the inter-broker listener's name and protocol (only
        #: brokers reach it), checked before anything starts
        listeners = ListenerConfig.from_properties(config or {})
        listener = listeners.coordinator_listener(host, port)
        self.listener_security = listeners.security(listener)
        if self.listener_security.sasl is not None and controller is not None:
            # SCRAM logins: the controller's credentials
            self.listener_security.sasl.bind_credentials(self.context.scram_credentials)
        #: how the markers reach brokers: their inter-broker listener's security
        self.marker_security = server_client_security(listeners)
        self.host = listener.bind_host
        self.port = listener.port
        self.core: GroupCoordinator | None = None
        self.txn: TransactionCoordinator | None = None
        self._txn_apis: TransactionApis | None = None
        self.markers: TransactionMarkerChannel | None = None
        self._server: KafkaServer | None = None
        self._apis: GroupCoordinatorApis | None = None
        self.runtime = CoordinatorRuntime(
            self.now_ms,
            linger_ms=self.config.offsets_commit_linger_ms,
            table=self.table_path,
            on_collect=self._hand_over_markers,
            on_appended=self.coordinator_metrics.on_table_commit,
        )
        self._producer_ids = [0, 0]  # the current block: [next, end)
        self._stopping = False
        #: why the coordinator serves no group or transaction (None: it does)
        self.unavailable: str | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def store(self) -> CoordinatorStore | None:
        """The open table (None before `start` opened it)."""
        return self.runtime.store

    def now_ms(self) -> int:
        """Wall-clock time: what the coordinator persists and compares with persisted times."""
        return self.clock()

    # -- lifecycle (on the loop) ------------------------------------------------------------

    async def start(self) -> None:
        """Open the table, load every group and offset, then listen (when the table cannot be
        loaded: listen, and refuse groups and transactions)."""
        self._enter_loop()
        self.audit.start()
        try:
            rows = await self.runtime.open(self._open_store)
        except Exception as e:  # noqa: BLE001 - the brokers keep serving; the reason is logged
            await self._start_unavailable(e)
            return
        self.clock.not_before(newest_time_ms(rows))
        self.core = GroupCoordinator(
            self.config,
            self.context.partition_count,
            topic_names=self.context.topic_names,
            group_config=self.context.group_config,
        )
        self.core.load(rows, self.now_ms())
        assert self.store is not None
        version = self.store.version()
        self.txn = TransactionCoordinator(
            self.txn_config,
            coordinator_epoch=max(0, min(version, 2**31 - 1)),
            new_producer_id=self._take_producer_id,
            offsets=self.core,
        )
        self.txn.load(rows, self.now_ms())
        self.core.txn_check = self.txn.check_offset_commit
        self.core.on_offsets_committed = self.coordinator_metrics.on_offsets_committed
        self.txn.on_completed = self.coordinator_metrics.on_transaction_completed
        self._apis = GroupCoordinatorApis(
            self.core, self.now_ms, self._collect_writes, self.context
        )
        self._txn_apis = TransactionApis(
            self.txn,
            self.core,
            self.now_ms,
            self._collect_writes,
            self.context.partition_count,
            self._reserve_producer_ids,
        )
        self.markers = TransactionMarkerChannel(
            self.context.partition_leader,
            self.context.partition_count,
            self._markers_done,
            request_timeout_ms=self.txn_config.transaction_marker_request_timeout_ms,
            security=self.marker_security,
        )
        await self._listen()
        self.runtime.start([self.core, self.txn])
        self._tasks = [asyncio.create_task(self.markers.run(), name="transaction-markers")]
        self._start_lag_poller(self.core)
        self._collect_writes()  # markers of transactions prepared before a restart
        logger.info(
            "group coordinator listening on %s (offsets table %s, %d rows loaded)",
            self.bootstrap,
            self.table_path,
            len(rows),
        )

    def _start_lag_poller(self, core: GroupCoordinator) -> None:
        interval_ms = self.lag_config.sparklog_metrics_lag_poll_interval_ms
        if not interval_ms:
            return

        def committed() -> dict[tuple[str, TopicPartition], int]:
            return {
                (group_id, tp): c.committed_offset
                for group_id, offsets in core.offsets.items()
                for tp, c in offsets.items()
            }

        self.lag = ConsumerLagPoller(
            self.metrics,
            committed,
            self.context.partition_leader,
            interval_ms=interval_ms,
            max_partitions=self.lag_config.sparklog_metrics_lag_max_partitions,
            security=self.marker_security,
        )
        self._tasks.append(asyncio.create_task(self.lag.run(), name="consumer-lag"))

    def _acl_image(self) -> Any:
        return None if self.controller is None else self.controller.acl_image()

    async def _listen(self) -> None:
        self._server = await self._bind_listener(
            self.handle,
            GROUP_COORDINATOR_SERVED_APIS,
            host=self.host,
            port=self.port,
            name="group-coordinator",
            audit=self.audit,
            security=self.listener_security,
            stages=stages_with(self.authorization, *self._measure_stages()),
        )
        self.port = self._server.port

    def _open_store(self) -> CoordinatorStore:
        """Open the table (on the store's thread)."""
        return self.store_factory(self.table_path, self.config.offsets_table_maintenance_commits)

    async def _start_unavailable(self, error: Exception) -> None:
        if isinstance(error, OffsetsTableDamagedError):
            self.unavailable = str(error)
            logger.error("%s", error)
        else:
            self.unavailable = (
                f"The group coordinator's offsets table {self.table_path} cannot be loaded "
                f"({type(error).__name__}: {error}). The group and transaction coordinator does "
                "not start (brokers and controller keep running; group and transaction "
                "requests are answered COORDINATOR_NOT_AVAILABLE); fix the table or point "
                "offsets.table.path elsewhere, then restart."
            )
            logger.error("%s", self.unavailable, exc_info=error)
        await self._listen()
        logger.error(
            "group coordinator on %s answers COORDINATOR_NOT_AVAILABLE until restarted on a "
            "repaired table",
            self.bootstrap,
        )

    async def _refuse(self, request: Request) -> Any:
        """What the coordinator answers while `unavailable`: everything needing the table is
        refused with COORDINATOR_NOT_AVAILABLE (retriable: clients look again)."""
        api = ApiKey(request.api_key)
        code = CoordinatorNotAvailableError.code
        if api == ApiKey.FIND_COORDINATOR:
            message = "the group coordinator cannot load its offsets table (see the driver's log)"
            return find_coordinator_response(request, "", -1, (code, message))
        if api == ApiKey.INIT_PRODUCER_ID and request.body.transactional_id is None:
            return await self._init_producer_id(request)  # idempotence needs no table
        return refusal(request, code)

    async def shutdown(self) -> None:
        """Stop serving, flush what is pending, and stop the flush and tick tasks."""
        if self._stopping:
            return
        self._stopping = True
        if self._server is not None:
            await self._server.stop()
        await self.runtime.close()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.markers is not None:
            await self.markers.close()
        if self.lag is not None:
            await self.lag.close()
        await asyncio.get_running_loop().run_in_executor(None, self.audit.close)
        self._close_metrics()
        logger.info("group coordinator on %s stopped", self.bootstrap)

    # -- requests ---------------------------------------------------------------------------

    async def handle(self, request: Request) -> Any:
        api = ApiKey(request.api_key)
        if api == ApiKey.ENVELOPE:
            return await self._handle_envelope(request)
        if api == ApiKey.API_VERSIONS:
            return api_versions_response(
                GROUP_COORDINATOR_APIS,
                0 if request.body is None else request.api_version,
                throttle_time_ms=throttle_time_ms(request),
            )
        if api in COORDINATOR_DELEGATED_APIS:
            return await self.controller.handle_from_other_loop(request)
        if api == ApiKey.SPARKLOG_AUDIT_EVENTS:  # its own table: served even when unavailable
            return self._audit_events(request)
        if self.unavailable is not None:
            return await self._refuse(request)
        assert self._apis is not None
        if api == ApiKey.FIND_COORDINATOR:
            found = find_coordinator_response(request, self.host, self.port)
            return authz.filter_response(request, found)
        if api == ApiKey.INIT_PRODUCER_ID:
            _, refused = authz.check(request)
            if refused is not None:
                return refused
            if request.body.transactional_id is not None:
                assert self._txn_apis is not None
                return await self._txn_apis.init_producer_id(request)
            return await self._init_producer_id(request)
        handler = self._apis.handlers.get(api)
        if handler is None and self._txn_apis is not None:
            handler = self._txn_apis.handlers.get(api)
        if handler is None:
            raise ProtocolError(f"no handler for api {request.api_key}")
        served, refused = authz.check(request)  # ACLs (coordinator/authz.py)
        if served is None:
            return refused
        try:
            response = await handler(served)
        except TimeoutError:
            raise ProtocolError(f"{api.name} was not answered in time; closing") from None
        return authz.filter_response(request, authz.merge(request, response, refused))

    async def _handle_envelope(self, request: Request) -> Any:
        """A client's request forwarded by a broker (KIP-590's Envelope): served as if the
        client had sent it here, under its own client id and address."""
        # Only brokers may speak for clients: the sender needs CLUSTER_ACTION on the cluster
        # (Kafka's `KafkaApis.handleEnvelope`), else anyone could claim any principal.
        if not authorize(request, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
            return envelope.envelope_response(None, ClusterAuthorizationFailedError.code)
        try:
            inner, client_host = envelope.unwrap(request.body, GROUP_COORDINATOR_SERVED_APIS)
            principal = envelope.principal_of(request.body)
        except envelope.EnvelopeError as e:
            logger.warning("%s", e)
            return envelope.envelope_response(None, e.code)
        # the client's session, as the forwarding broker saw it (Kafka's envelope context);
        # the pipeline's decisions (authorizer, audit) carry over to the inner request
        session = dataclasses.replace(
            request.session,
            principal=principal,
            client_address=client_host.lstrip("/"),
            client_port=-1,
            client_id=inner.client_id,
        )
        # the inner request is decided as the client's, under this listener's authorize-stage
        # bindings (authorizer, audit sink, audit.log.allowed, node id), so a denial of a
        # forwarded group or transaction request is audited like any other
        context = dataclasses.replace(request.context, session=session, throttle_time_ms=0)
        body = await self.handle(dataclasses.replace(inner, context=context))
        return envelope.envelope_response(envelope.response_data(inner, body))

    def _audit_events(self, request: Request) -> Any:
        """A broker's audit events (`sparklog_apis.AuditEventsRequest`) into the driver's sink;
        a broker-only RPC, so it needs CLUSTER_ACTION on the cluster (Kafka's rule for them)."""
        if not authorize(request, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
            return kio_build.response(request, {"error_code": ClusterAuthorizationFailedError.code})
        body = request.body
        for e in body.events:
            self.audit.buffer(audit_event(e))
        if body.dropped > 0:
            self.audit.buffer(
                dropped_event(self.now_ms(), int(body.dropped), int(body.node_id), "broker's")
            )
        return kio_build.response(request, {"error_code": 0})

    async def _init_producer_id(self, request: Request) -> Any:
        """InitProducerId for idempotent producers: ids from a controller block, like a
        broker's."""
        await self._reserve_producer_ids(1)
        answer = {
            "error_code": 0,
            "producer_id": self._take_producer_id(),
            "producer_epoch": 0,
        }
        return kio_build.response(request, answer)

    async def _reserve_producer_ids(self, count: int) -> None:
        """Make sure the current block holds `count` more ids (a controller call if not)."""
        if self._producer_ids[1] - self._producer_ids[0] >= count:
            return
        assert self._loop is not None
        start, size = await self._loop.run_in_executor(
            None, self.context.allocate_producer_ids, GROUP_COORDINATOR_NODE_ID
        )
        self._producer_ids = [start, start + size]

    def _take_producer_id(self) -> int:
        if self._producer_ids[0] >= self._producer_ids[1]:
            raise CoordinatorNotAvailableError("no producer id reserved; retry")
        self._producer_ids[0] += 1
        return self._producer_ids[0] - 1

    # -- writes -----------------------------------------------------------------------------

    def _collect_writes(self) -> None:
        self.runtime.collect()

    def _hand_over_markers(self) -> None:
        """Decided transactions go to the marker channel (after every collect)."""
        if self.txn is not None and self.markers is not None:
            for job in self.txn.take_markers():
                self.markers.add(job)

    def _markers_done(self, job: MarkerJob) -> None:
        assert self.txn is not None
        self.txn.markers_done(self.now_ms(), job)
        self._collect_writes()

    # -- views (any thread) -----------------------------------------------------------------

    def call(self, fn: Callable[[GroupCoordinator | None], T], timeout_s: float = 30.0) -> T:
        """Run `fn(core)` on the coordinator's loop and return its result."""
        loop = self._loop
        if loop is None or self._stopping:
            raise RuntimeError("the group coordinator is not running")
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn(self.core))
            except BaseException as e:  # noqa: BLE001
                future.set_exception(e)

        loop.call_soon_threadsafe(run)
        return future.result(timeout_s)


def newest_time_ms(rows: list[Row]) -> int | None:
    """The newest wall-clock time the table holds (rows written as uptime do not count)."""
    times = [r.get("commit_timestamp_ms") for r in rows]
    return max((t for t in times if t is not None and t >= WALL_CLOCK_FLOOR_MS), default=None)
