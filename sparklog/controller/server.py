"""The controller as a server: the sans-IO `QuorumController` behind Kafka's protocol.

Every write goes: `await commit(operation)` -> under the write lock: the core call, then its
records as ONE batch made durable by the store on the writer thread (an fsynced file, or a
conditional put to the object store), then appended to the working log, `replay`ed into the
image, maybe snapshotted (also on the writer thread), metadata fetchers woken -> response.
Writes are serialized by the lock and the core always computes against the image of every
write before it, with the log end offset equal to the image offset whenever the lock is free;
meanwhile the loop keeps serving reads (Metadata, Fetch, DescribeCluster), connections and the
coordinator's hops, instead of blocking on a PUT or an fsync. One writer thread, one write at a
time: order is the lock's. A tick task fences brokers whose lease expired.

Embedding: `start_in_thread()` runs the loop in a daemon thread and returns once listening;
`stop()` shuts down and joins it. What the launcher and the driver's coordinator call from
any thread (`next_node_id()`, `metadata_image()`, `partition_leader()`, ...) is inherited from
`launcher_api.ControllerLauncherApi`.

The metadata log's durable home is `metadata.log.dir` (default: the controller's data dir): a
directory (local or a shared filesystem's mount) or an `s3://` URI (`storage.options.*`
settings say how to reach it), holding `meta.properties` (`cluster.id`), one object per write
and snapshots (`metadata_store.py`); the data dir holds the working copy brokers fetch.
Restarting on the same location, from any host, restores everything. Registered brokers keep
their state for one session timeout, in which they heartbeat again or are fenced.

Zombies: a starting controller commits a `LeaderChange` record before it listens, claiming the
log's next offset. A controller started earlier on the same location that is still running (a
driver cut off by a network partition, then replaced) loses its next write's conditional
create: it logs one line, answers nothing more (the request that found the fence and every
later one get no response, so nothing is acknowledged that the log does not hold), stops its
tick and its listener, and refuses the launcher's calls. Its image is never changed by the
lost write (records are applied only after they are durable).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from sparklog.controller.apis import ControllerApis
from sparklog.controller.cluster_id import load_or_format_cluster_id
from sparklog.controller.launcher_api import ControllerLauncherApi
from sparklog.controller.metadata_log import MetadataLog
from sparklog.controller.metadata_store import (
    MetadataLogFencedError,
    open_metadata_store,
)
from sparklog.controller.metrics import ControllerMetrics
from sparklog.controller.quorum_controller import QuorumController
from sparklog.controller.results import ControllerResult
from sparklog.metadata.configs import ControllerConfig
from sparklog.metadata.scram_bootstrap import bootstrap_credentials, missing_credential_records
from sparklog.metrics.config import MetricsConfig
from sparklog.protocol.api_versions import CONTROLLER_SERVED_APIS
from sparklog.protocol.connection import Request
from sparklog.protocol.server import KafkaServer
from sparklog.security.audit import AuditConfig, SwitchableAuditSink
from sparklog.security.credentials import CredentialStore
from sparklog.security.listener_config import ListenerConfig
from sparklog.storage.object_store import storage_options
from sparklog.structs import CONTROLLER_NODE_ID

logger = logging.getLogger(__name__)

T = TypeVar("T")
#: Kafka's setting for where the metadata log lives
METADATA_LOG_DIR = "metadata.log.dir"
#: how often an idle controller checks that no newer controller wrote the log (Kafka's active
#: controller writes a NoOpRecord every metadata.max.idle.interval.ms = 500 for liveness, KIP-835;
#: a read does here what fencing needs, without growing the log)
_PROBE_INTERVAL_MS = 500


class ControllerServer(ControllerLauncherApi):
    """The driver-side controller: Kafka-protocol server over the metadata log."""

    thread_name = "sparklog-controller"

    def __init__(
        self,
        data_dir: str | Path,
        host: str = "127.0.0.1",
        port: int = 0,
        config: ControllerConfig | Mapping[str, object] | None = None,
        *,
        cluster_id: str | None = None,
    ) -> None:
        super().__init__()
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        props: Mapping[str, object] = {}
        if config is None or isinstance(config, ControllerConfig):
            self.config = config or ControllerConfig()
        else:
            props = config
            self.config = ControllerConfig.from_properties(config)
        #: where the metadata log is durable (Kafka's `metadata.log.dir`): the data dir, a
        #: shared filesystem path or an object-store URI (D7)
        self.metadata_log_dir = str(props.get(METADATA_LOG_DIR) or self.data_dir)
        #: the listener it serves (security/listeners.py: `controller.listener.names`, else
        #: the inter-broker listener's name and protocol), checked before anything starts
        listeners = ListenerConfig.from_properties(props)
        listener = listeners.controller_listener(host, port)
        self.listener_security = listeners.security(listener)
        if self.listener_security.sasl is not None:  # SCRAM: the controller's own image
            self.listener_security.sasl.bind_credentials(self.scram_credentials)
        #: the listener the coordinator's markers reach brokers on (`partition_leader`)
        self.inter_broker_listener_name = listeners.inter_broker_listener_name
        self.host = listener.bind_host
        self.port = listener.port
        self.store = open_metadata_store(self.metadata_log_dir, storage_options(props))
        self.cluster_id = load_or_format_cluster_id(self.store, cluster_id)
        #: `sparklog.add.scram`: credentials written at start when the log lacks them
        self.bootstrap_credentials = bootstrap_credentials(props)
        self.controller: QuorumController | None = None
        self.metadata_log: MetadataLog | None = None
        self._server: KafkaServer | None = None
        self.apis: ControllerApis | None = None
        #: (host, port) of the group coordinator, listed as a node in Metadata answers
        self.coordinator_endpoint: tuple[str, int] | None = None
        #: where the controller's authentication failures, denials and ACL / credential
        #: changes go (the authorize stage binds it to `RequestContext.audit`): the log only
        #: until the launcher switches it to the driver's audit table
        #: (`audit.switch_to(GroupCoordinatorServer.audit)`: the coordinator starts after the
        #: controller); a constant object, so what captured it follows the switch
        self.audit = SwitchableAuditSink()
        #: `audit.log.allowed` (the authorize stage reads it) and the buffer bound
        self.audit_config = AuditConfig.from_properties(props)
        #: the controller's metrics (Kafka's `KafkaController`/`ControllerStats` names)
        self.metrics_config = MetricsConfig.from_properties(props)
        self.metrics = self.metrics_config.registry()
        self.controller_metrics = ControllerMetrics(
            self.metrics, lambda: self.controller.image if self.controller is not None else None
        )
        self._tick_task: asyncio.Task | None = None
        self._appended: asyncio.Event | None = None
        self._stopping = False
        #: this process's claim on the log (named in a fenced zombie's message)
        self.incarnation_id = str(uuid.uuid4())
        self._fenced_task: asyncio.Task | None = None
        self._probed_ms = 0
        self._write_lock: asyncio.Lock | None = None
        #: the store's I/O (durable batch writes, snapshots, probes), off the event loop
        self._writer: ThreadPoolExecutor | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    # -- lifecycle (on the loop) ------------------------------------------------------------

    def scram_credentials(self) -> CredentialStore | None:
        """The cluster's SCRAM credentials (the live image's store, read without blocking:
        lookups only), which a SASL controller or coordinator listener checks logins
        against; None before the controller started."""
        return self.controller.image.credentials if self.controller is not None else None

    async def start(self) -> None:
        """Open the metadata log, fence brokers without a lease, and start listening."""
        assert self._loop is None, "a ControllerServer starts once"
        self._enter_loop()
        if self.metrics_source is not None:
            self.metrics_source.service_discovery = self._metrics_targets
        self.metadata_log, image = MetadataLog.open(
            self.store,
            now_ms=_wall_ms(),
            snapshot_records=self.config.metadata_log_snapshot_records,
            cache_dir=self.data_dir,
        )
        self.controller = QuorumController(self.config, self.cluster_id, image)
        self._appended = asyncio.Event()
        self._write_lock = asyncio.Lock()
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="sparklog-controller-writer")
        try:
            self._claim_leadership()
        except BaseException:
            self.metadata_log.close()
            raise
        if not self.controller.image.elr_enabled:
            logger.info(
                "eligible.leader.replicas.version is 0 on cluster %s (created before it): a "
                "power loss of the last in-sync replica may lose acknowledged records",
                self.cluster_id,
            )
        # After a restart every unfenced broker gets a full session to heartbeat again.
        self.controller.activate(self.now_ms())
        self.apis = ControllerApis(self)
        try:
            self._server = await self._bind_listener(
                self._handle,
                CONTROLLER_SERVED_APIS,
                host=self.host,
                port=self.port,
                name="controller",
                audit=self.audit,
                security=self.listener_security,
                stages=self._authorized_stages(
                    self.config.originals, self.acl_image, CONTROLLER_NODE_ID
                ),
            )
        except BaseException:
            self.metadata_log.close()
            raise
        self.port = self._server.port
        self.controller_metrics.active = True
        self._tick_task = self._spawn(self._tick_loop(), "controller-tick")
        logger.info(
            "controller of cluster %s listening on %s (metadata offset %d)",
            self.cluster_id,
            self.bootstrap,
            image.offset,
        )

    def _metrics_targets(self) -> list[dict[str, Any]]:
        """The Prometheus HTTP SD target groups of the unfenced brokers' metrics endpoints
        (from their registrations), one per broker labelled with its id."""
        if self.controller is None:
            return []
        return [
            {"targets": [b.metrics_endpoint], "labels": {"broker_id": str(b.broker_id)}}
            for b in self.controller.image.unfenced_brokers()
            if b.metrics_endpoint
        ]

    def _claim_leadership(self) -> None:
        """Commit the LeaderChange record (see the module doc) before serving, after the
        bootstrap records of a new cluster."""
        assert self.controller is not None and self.metadata_log is not None
        claim = self.controller.claim_leadership(
            CONTROLLER_NODE_ID, self.incarnation_id, socket.gethostname(), os.getpid(), _wall_ms()
        )
        controller = self.controller

        def records() -> tuple[dict[str, Any], ...]:
            # A new cluster finalizes its features first (Kafka's bootstrap metadata): Eligible
            # Leader Replicas (KIP-966) on, as Kafka 4.1+. A log from before them keeps them
            # off. Recomputed when another driver wrote meanwhile (it may have bootstrapped).
            # The first SCRAM users (kafka-storage format --add-scram), those not there yet.
            users = missing_credential_records(
                self.bootstrap_credentials, controller.image.credentials
            )
            return (*controller.bootstrap().records, *users, *claim.records)

        controller.replay(self.metadata_log.claim(records, _wall_ms(), controller.image))
        logger.info(
            "controller %s claimed the metadata log at %s (offset %d)",
            self.incarnation_id,
            self.store.location,
            self.metadata_log.end_offset - 1,
        )

    async def _handle(self, request: Request) -> Any:
        """Serve a request, unless fenced: then answer nothing (see the module doc)."""
        assert self.apis is not None
        if self.fenced:
            return None
        try:
            return await self.apis.handle(request)
        except MetadataLogFencedError:
            return None  # commit() logged it and stops the server

    @property
    def fenced(self) -> bool:
        """Whether a newer controller took the metadata log over (this one serves nothing)."""
        return self.metadata_log is not None and self.metadata_log.fenced

    def _on_fenced(self) -> None:
        """Stop ticking and serving once (the fenced error is logged by the metadata log)."""
        if self._fenced_task is None and not self._stopping:
            self._fenced_task = asyncio.get_running_loop().create_task(self._stop_serving())

    async def _stop_serving(self) -> None:
        self.controller_metrics.active = False
        if self._tick_task is not None and self._tick_task is not asyncio.current_task():
            self._tick_task.cancel()
        self._wake_fetchers()
        if self._server is not None:
            await self._server.stop()

    async def shutdown(self, snapshot: bool = True) -> None:
        """Stop ticking and serving, snapshot the image (unless told not to: a crash takes
        none) and close the metadata log."""
        if self._stopping:
            return
        self._stopping = True
        self.controller_metrics.active = False
        self._wake_fetchers()
        if self._fenced_task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._fenced_task
        if self._tick_task is not None:
            self._tick_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tick_task
        if self._server is not None:
            await self._server.stop()
        async with self._write_lock or contextlib.nullcontext():
            # a write in progress finishes first; later ones see _stopping and refuse
            if self.metadata_log is not None and self.controller is not None:
                if (
                    snapshot
                    and not self.fenced
                    and self.controller.image.offset > self.metadata_log.snapshot_offset
                ):
                    self.metadata_log.write_snapshot(self.controller.image)
                self.metadata_log.close()
        if self._writer is not None:
            self._writer.shutdown(wait=True)
        self._close_metrics()
        logger.info("controller on %s stopped", self.bootstrap)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Shut down from another thread (and join the loop thread of `start_in_thread`)."""
        if self._stop_on_thread(self.shutdown, timeout_s):
            return
        if self._loop is not None and not self._loop.is_closed():  # started on a caller's loop
            assert threading.get_ident() != self._loop_thread_id, "on the loop: await shutdown()"
            asyncio.run_coroutine_threadsafe(self.shutdown(), self._loop).result(timeout_s)

    def kill(self, timeout_s: float = 30.0) -> None:
        """Stop as a crash would for what is durable: no final snapshot (tests)."""
        self._stop_on_thread(lambda: self.shutdown(snapshot=False), timeout_s)

    # -- writes (on the loop) ---------------------------------------------------------------

    async def commit(self, operation: Callable[[], ControllerResult[T]]) -> T:
        """Run `operation` (a core call) under the write lock, persist its records as one batch,
        apply them, then hand back the response (see the module doc). A cancelled caller (its
        connection closed) does not cut a write short: the write completes for the log."""
        assert self._loop_thread_id == threading.get_ident(), "writes happen on the loop"
        task = asyncio.ensure_future(self._commit_locked(operation))
        task.add_done_callback(_consume_exception)
        return await asyncio.shield(task)

    async def _commit_locked(self, operation: Callable[[], ControllerResult[T]]) -> T:
        assert self._write_lock is not None
        queued_ns = time.monotonic_ns()
        async with self._write_lock:
            started_ns = time.monotonic_ns()
            metrics = self.controller_metrics
            metrics.event_queue_time_ms.update((started_ns - queued_ns) / 1e6)
            try:
                if self._stopping:
                    raise RuntimeError("the controller is stopping")
                self._check_not_fenced()
                result = operation()
                if result.records:
                    await self._persist(result.records)
                return result.response
            finally:
                metrics.event_processing_time_ms.update((time.monotonic_ns() - started_ns) / 1e6)

    async def _persist(self, records: tuple[dict[str, Any], ...]) -> None:
        assert self.controller is not None and self.metadata_log is not None
        metadata_log, image = self.metadata_log, self.controller.image
        assert metadata_log.end_offset == image.offset
        now_ms = _wall_ms()
        batch = metadata_log.prepare(records, now_ms)
        written_ns = time.monotonic_ns()
        try:
            await self._on_writer(metadata_log.write_durably, batch)
        except MetadataLogFencedError:
            self._on_fenced()
            raise
        self.controller_metrics.commit_latency.record((time.monotonic_ns() - written_ns) / 1e6)
        metadata_log.appended(batch, now_ms)
        self.controller_metrics.on_records(image, records)
        self.controller.replay(records)
        self._wake_fetchers()
        if metadata_log.snapshot_due(image):
            try:
                offset, data, batches = metadata_log.snapshot_of(image)
                await self._on_writer(metadata_log.store.write_snapshot, offset, data, batches)
                metadata_log.snapshot_offset = offset
            except Exception:  # noqa: BLE001 - the write is durable; the next one retries
                logger.exception(
                    "metadata snapshot at offset %d failed; retrying later", image.offset
                )

    async def _on_writer(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the writer thread (the store's blocking I/O)."""
        assert self._writer is not None
        return await asyncio.get_running_loop().run_in_executor(self._writer, fn, *args)

    async def fence_expired_brokers(self) -> list[int]:
        """The controller's tick: fence every unfenced broker whose lease expired (one write
        each), then persist the periodic work (reassignment completion, leader balancing);
        returns the fenced ids."""
        assert self.controller is not None
        controller = self.controller
        fenced: list[int] = []
        while True:
            broker_id = await self.commit(lambda: controller.tick(self.now_ms()))
            if broker_id is None:
                return fenced
            fenced.append(broker_id)
            logger.info("fenced broker %d: no heartbeat within the session timeout", broker_id)

    async def _tick_loop(self) -> None:
        """Tick at the earliest lease expiry (so fencing is not late by a polling interval),
        and at least every quarter session for the periodic work."""
        interval_ms = max(10, min(500, self.config.broker_session_timeout_ms // 4))
        while True:
            await asyncio.sleep(self._next_tick_delay_ms(interval_ms) / 1000)
            try:
                await self.fence_expired_brokers()
                await self._maybe_probe_store()
            except MetadataLogFencedError:
                self._on_fenced()
                return
            except Exception:
                logger.exception("controller tick failed; retrying")

    async def _maybe_probe_store(self) -> None:
        """Look for a successor's write at the log's end once per `_PROBE_INTERVAL_MS`, so an
        idle zombie (no write to lose) also stops within a tick or two of its successor's
        start, instead of granting leases and serving stale metadata until its next write. One
        read (a GET on an object store: ~2 per second)."""
        assert self.metadata_log is not None
        now_ms = self.now_ms()
        if now_ms - self._probed_ms >= _PROBE_INTERVAL_MS:
            self._probed_ms = now_ms
            assert self._write_lock is not None
            async with self._write_lock:  # the log's end does not move meanwhile
                await self._on_writer(self.metadata_log.check_next_offset_free)

    def _next_tick_delay_ms(self, interval_ms: int) -> int:
        assert self.controller is not None
        unfenced = [b.broker_id for b in self.controller.image.unfenced_brokers()]
        expiry_ms = self.controller.heartbeats.next_expiry_ms(unfenced)
        if expiry_ms is None:
            return interval_ms
        return max(1, min(interval_ms, expiry_ms - self.now_ms()))

    def now_ms(self) -> int:
        """The lease clock (monotonic)."""
        return time.monotonic_ns() // 1_000_000

    # -- metadata fetchers ------------------------------------------------------------------

    async def wait_for_metadata(self, offset: int, timeout_s: float) -> bool:
        """Wait until the metadata log holds `offset` (or `timeout_s`); whether it does."""
        assert self.metadata_log is not None
        try:
            async with asyncio.timeout(timeout_s):
                while self.metadata_log.end_offset <= offset and not self._stopping:
                    assert self._appended is not None
                    await self._appended.wait()
        except TimeoutError:
            pass
        return self.metadata_log.end_offset > offset

    def _wake_fetchers(self) -> None:
        if self._appended is not None:
            self._appended.set()
            self._appended = asyncio.Event()


def _consume_exception(task: asyncio.Future[Any]) -> None:
    """A shielded write whose caller went away still fails quietly for the loop (the caller,
    if still there, gets the exception)."""
    if not task.cancelled():
        task.exception()


def _wall_ms() -> int:
    """Record timestamps in the metadata log (wall clock)."""
    return time.time_ns() // 1_000_000
