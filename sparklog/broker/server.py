"""A sparklog broker: Kafka's protocol on its listeners, logs on one data dir (Kafka's
`BrokerServer`).

Listeners (`security/listeners.py`): one `KafkaServer` per broker listener of `listeners`, each
with its `ListenerSecurity` (built before anything binds, so a listener that cannot be served
stops the start), all serving the same APIs; every advertised endpoint is registered, the first
being the broker's default address; requests learn their listener from their session, and
answers naming brokers (Metadata, FindCoordinator, DescribeCluster, Produce's node endpoints)
give each broker's endpoint on that listener, as Kafka's do. Followers fetch from leaders'
`inter.broker.listener.name` endpoints.

Startup (Kafka's order, KRaft): ask the controller for the cluster id, claim the data dir
(`meta.properties` + lock), bind the listeners, catch the metadata image up with the controller's
log, register (BrokerRegistration; the controller takes the leaderships of an older
incarnation away in the same commit) and catch up past the registration, so the first image
the logs see no longer names a crashed incarnation as leader. Then load (and recover) the logs
the image assigns here, publish it (followers start fetching: truncate by leader epoch, then
catch up), start following the metadata log, the background threads, the ISR-shrink task and
AlterPartition sender, and heartbeat until the controller unfences the broker. `start()` returns
then. A heartbeat answer `should_shut_down` (the launcher stopped the cluster, or a newer
incarnation took this id) stops the broker gracefully.

Shutdown (Kafka's KRaft controlled shutdown): heartbeats with `want_shut_down` while still
serving and fetching, until the controller answers `should_shut_down` (it moved our leaderships
first) or one session timeout passes (after which it fences us anyway). Then stop the fetchers,
stop serving (waiting requests are woken and answered), stop the threads, flush and close every
log, write the checkpoints and the clean shutdown marker (`.kafka_cleanshutdown`, whose epoch the
next start sends as BrokerRegistration's PreviousBrokerEpoch, KIP-966) and release the data dir.
`kill()` skips the goodbye, the flush and the marker, as a crash would (tests use it to
exercise recovery).

The lease with the controller (registration, heartbeats, the controlled-shutdown handshake) is
`lifecycle_manager.BrokerLifecycleManager`'s, as in Kafka; this module keeps the start and stop
order and the broker's parts.

Hosting: `await start()` / `await shutdown()` on a running loop; `start_in_thread()` / `stop()`
run the broker on its own loop thread (tests, the embedded cluster); `sparklog.broker.run.run_broker(...)` blocks until
the broker stops (the Spark task, `python -m sparklog serve`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sparklog.broker.admin_apis import AdminApis
from sparklog.broker.audit_forwarder import ForwardingAuditSink
from sparklog.broker.broker_metrics import LogFlushTimer
from sparklog.broker.broker_state import BROKER_STATE_VALUES, BrokerState
from sparklog.broker.cluster_quotas import ClusterQuotaReporter, quota_managers
from sparklog.broker.config import BrokerConfig
from sparklog.broker.controller_client import (
    ControllerClient,
    ProducerIdManager,
    launcher_client_id,
)
from sparklog.broker.isr_manager import AlterPartitionManager
from sparklog.broker.kafka_apis import KafkaApis
from sparklog.broker.lifecycle_manager import BrokerLifecycleManager
from sparklog.broker.listener_ports import bind_listeners
from sparklog.broker.log_manager import LogManager, wall_clock_ms
from sparklog.broker.meta_properties import (
    DataDirLock,
    MetaProperties,
    claim_data_dir,
    read_meta_properties,
)
from sparklog.broker.metadata import (
    BrokerMetadata,
    MetadataFollower,
    apply_replication_throttles,
    dynamic_layers,
    topics_from_image,
)
from sparklog.broker.quota_factory import instantiate, quota_scope
from sparklog.broker.remote_fetch import RemoteLogReader
from sparklog.broker.remote_log_tasks import build_remote_tier
from sparklog.broker.replica_fetcher_manager import ReplicaFetcherManager
from sparklog.broker.replica_manager import ReplicaManager
from sparklog.metadata.broker_configs import dynamic_cleaner_config
from sparklog.metadata.image import MetadataImage
from sparklog.metrics.config import MetricsConfig
from sparklog.metrics.metric import MetricName
from sparklog.protocol.api_versions import BROKER_SERVED_APIS
from sparklog.protocol.authorization import authorize_stage, stages_with
from sparklog.protocol.outbound import controller_client_security
from sparklog.protocol.server import KafkaServer
from sparklog.protocol.server_lifecycle import ServerLifecycle
from sparklog.security.audit import LOG_ONLY, AuditConfig, AuditSink
from sparklog.security.listeners import ListenerEndpoint, listener_int, normalised

logger = logging.getLogger(__name__)


class BrokerServer(BrokerLifecycleManager, ServerLifecycle):
    """One broker. `node_id=None` takes the id stored in `data_dir`'s meta.properties.

    Its lease with the controller (registration, heartbeats, controlled shutdown) is
    `lifecycle_manager.BrokerLifecycleManager`'s; loop-thread hosting and background tasks are
    `ServerLifecycle`'s."""

    start_timeout_s = None  # `start()` bounds itself (initial.broker.registration.timeout.ms)

    metrics_port_fallback = True  # executors sharing a host cannot share the port

    def __init__(
        self,
        node_id: int | None,
        data_dir: str | Path,
        controller_bootstrap: str,
        config: Mapping[str, object] | None = None,
        *,
        cluster_id: str | None = None,
        executor_id: str | None = None,
        task_attempt: int = 0,
        claimed: tuple[MetaProperties, DataDirLock] | None = None,
    ) -> None:
        super().__init__()
        self.data_dir = Path(data_dir)
        self.controller_bootstrap = controller_bootstrap
        self.config = BrokerConfig.from_properties(config)
        #: `audit.log.allowed` (the authorize stage reads it) and the buffer bound
        self.audit_config = AuditConfig.from_properties(config)
        #: this broker's metrics (`sparklog.metrics`: Kafka's names; served by the process's
        #: Prometheus endpoint) and the settings of their windows and of quota windows
        self.metrics_config = MetricsConfig.from_properties(config)
        self.metrics = self.metrics_config.registry()
        self.metrics.gauge(
            MetricName.of("kafka.server", "KafkaServer", "BrokerState"),
            lambda: BROKER_STATE_VALUES[self.state],
        )
        #: `quota.scope`: "cluster" has the driver split client quotas among the brokers
        self.quota_scope = quota_scope(config)
        self.cluster_quotas: ClusterQuotaReporter | None = None
        self.node_id = node_id if node_id is not None else _stored_node_id(self.data_dir)
        self.thread_name = f"sparklog-broker-{self.node_id}"
        self.expected_cluster_id = cluster_id
        self.executor_id = executor_id
        self.task_attempt = task_attempt
        self.state = BrokerState.NOT_RUNNING
        self.broker_epoch = -1
        self._previous_broker_epoch = -1  # from the clean shutdown marker, read at start
        self.incarnation_id = uuid.uuid4()
        self.stop_reason: str | None = None
        self._claimed = claimed
        self._lock: DataDirLock | None = None
        self._unfenced: asyncio.Event | None = None
        self._shutdown_requested: asyncio.Event | None = None
        self._logs_loaded = False
        self._stop_task: asyncio.Task | None = None
        self._want_shut_down = False
        self._heartbeat_now: asyncio.Event | None = None
        self._shut_down_granted: asyncio.Event | None = None
        self._build()

    def _build(self) -> None:
        client_id = launcher_client_id(self.executor_id, self.task_attempt, str(self.data_dir))
        self.controller = ControllerClient(
            self.controller_bootstrap,
            client_id=client_id,
            timeout_ms=self.config.controller_socket_timeout_ms,
            security=controller_client_security(self.config.listener_config),
        )
        self.metadata = BrokerMetadata()
        self.log_manager = LogManager(self.data_dir, self.config)
        self.log_manager.flush_timer = LogFlushTimer(self.metrics, self._post_to_loop)
        self.replica_manager = ReplicaManager(
            self.node_id,
            self.log_manager,
            clock_ms=wall_clock_ms,
            fetch_max_bytes=self.config.fetch_max_bytes,
            metrics=self.metrics,
            data_path_metrics=self.metrics_config.sparklog_metrics_enabled,
        )
        self.fetchers = ReplicaFetcherManager(
            self.node_id,
            self.replica_manager,
            self.config,
            self._endpoint_of,
            clock_ms=wall_clock_ms,
            metrics=self.metrics,
        )
        quotas = instantiate(
            self.metrics, self.metrics_config, self.config.originals, lambda: self.metadata.image
        )
        # KIP-73 replication throttles: rates and throttled replicas follow the image
        self.replica_manager.leader_quota = quotas.leader
        self.fetchers.quota = quotas.follower
        self.alter_partition = AlterPartitionManager(
            self.controller,
            self.node_id,
            lambda: self.broker_epoch,
            self.replica_manager.on_isr_outcome,
        )
        self.replica_manager.fetchers = self.fetchers
        self.replica_manager.alter_partition = self.alter_partition
        self._build_remote_tier()
        if self.remote_tables is not None:  # tiered offsets are read from the topic tables
            self.replica_manager.remote_reader = RemoteLogReader(
                self.config.remote,
                self.remote_tables.table_for,
                clock_ms=wall_clock_ms,
                metrics=self.metrics,
            )
        self.follower = MetadataFollower(
            self.metadata, self.controller, self._publish_cooperatively
        )
        self.producer_ids = ProducerIdManager(self.controller, self.node_id)
        self.admin = admin = AdminApis(
            config=self.config,
            metadata=self.metadata,
            controller=self.controller,
            node_id=self.node_id,
        )
        self.apis = KafkaApis(
            node_id=self.node_id,
            config=self.config,
            metadata=self.metadata,
            replica_manager=self.replica_manager,
            admin=admin,
            producer_ids=self.producer_ids,
        )
        #: where this broker's authentication failures and authorization decisions go (the
        #: authorize stage binds it to `RequestContext.audit`): to the driver's audit table
        #: when there is a coordinator, else the log only
        self.audit: AuditSink = LOG_ONLY
        if self.apis.forwarding is not None:
            self.audit = ForwardingAuditSink(
                self.node_id,
                self.apis.forwarding.channel,
                max_events=self.audit_config.audit_buffer_max_events,
            )
        #: client quotas (the pipeline's throttle stage), read from this broker's image
        self.quotas = quotas.client
        self.throttle = quotas.throttle
        #: the authorize stage (`authorizer.class.name`), fed from this broker's image
        self.authorization = authorize_stage(
            self.config.originals,
            lambda: self.metadata.image,
            node_id=self.node_id,
            audit=self.audit,
            audit_allowed=self.audit_config.audit_log_allowed,
            ready=lambda: self._logs_loaded,  # the initial catch-up published an image
        )
        self.listener_config = self.config.listener_config
        #: one server per broker listener, by listener name, in `listeners` order
        self.servers: dict[str, KafkaServer] = {
            e.listener_name: self._listener_server(e) for e in self.listener_config.broker_listeners
        }
        #: the first listener's: the broker's default address
        self.server = next(iter(self.servers.values()))
        for server in self.servers.values():
            server.bind_metrics(self.metrics)

    def _build_remote_tier(self) -> None:
        """KIP-405 (DESIGN D17): the open topic tables (the remote log manager's and the
        remote fetch path's) and the copy task, when the broker has a remote tier."""
        self.remote_tables, self.remote_log_tasks = build_remote_tier(
            self.node_id, self.config, self.replica_manager, self.metadata, self.metrics
        )

    def _post_to_loop(self, fn: Callable[[float], None], value: float) -> None:
        """`fn(value)` on the broker's loop soon (RuntimeError when it runs no loop)."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("the broker runs no loop")
        loop.call_soon_threadsafe(fn, value)

    def _listener_server(self, endpoint: ListenerEndpoint) -> KafkaServer:
        """The (unbound) server of one listener; ConfigError when it cannot be secured.
        `listener.name.<l>.max.connections` bounds that listener's connections (Kafka's
        listener-level limit); without it the listener takes `max.connections`."""
        settings = self.listener_config.settings(endpoint.listener_name)
        max_connections = self.config.max_connections
        if settings.is_overridden("max.connections"):
            max_connections = listener_int(settings, "max.connections")
        security = self.listener_config.security(endpoint)
        if security.sasl is not None:  # SCRAM logins read the cluster's credentials as they move
            security.sasl.bind_credentials(lambda: self.metadata.image.credentials)
        return KafkaServer(
            self.apis.handle,
            BROKER_SERVED_APIS,
            host=endpoint.bind_host,
            port=endpoint.port,
            max_request_bytes=self.config.socket_request_max_bytes,
            name=f"broker-{self.node_id}-{endpoint.listener_name}",
            max_connections=max_connections,
            max_connections_per_ip=self.config.max_connections_per_ip,
            max_connections_per_ip_overrides=self.config.connection_limit_overrides(),
            connections_max_idle_ms=self.config.connections_max_idle_ms,
            queued_max_requests=self.config.queued_max_requests,
            queued_max_request_bytes=self.config.queued_max_request_bytes,
            audit=self.audit,
            security=security,
            stages=stages_with(self.authorization, self.throttle, *self._measure_stages()),
            connection_throttle=self.quotas.connection_throttle_ms,
        )

    def _metrics_endpoint(self) -> str:
        """`host:port` Prometheus reaches this broker's process metrics at (a wildcard bind
        is reached at the broker's own host)."""
        assert self.metrics_source is not None and self.metrics_source.endpoint is not None
        host = self.metrics_source.endpoint.host
        if host in ("", "0.0.0.0", "::"):
            host = self.listener_config.advertised[0].host or self.server.host
        return f"{host}:{self.metrics_port}"

    def __repr__(self) -> str:
        return f"BrokerServer(node_id={self.node_id}, {self.state.value}, {self.bootstrap})"

    @property
    def host(self) -> str:
        return self.server.host

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def bootstrap(self) -> str:
        """`host:port` of this broker's first listener (valid once started)."""
        return f"{self.server.host}:{self.server.port}"

    def bootstrap_of(self, listener_name: str) -> str:
        """`host:port` this broker bound for `listener_name` (valid once started)."""
        server = self.servers[normalised(listener_name)]
        return f"{server.host}:{server.port}"

    def advertised_endpoints(self) -> tuple[ListenerEndpoint, ...]:
        """What registration advertises: `advertised.listeners` (else the listeners), a
        missing host or port 0 filled with what the listener of that name bound."""
        out = []
        for e in self.listener_config.advertised:
            server = self.servers.get(e.listener_name)
            host = e.host or (server.host if server is not None else e.bind_host)
            port = e.port or (server.port if server is not None else 0)
            out.append(e.with_address(host, port))
        return tuple(out)

    @property
    def cluster_id(self) -> str | None:
        return self.metadata.cluster_id

    @property
    def is_fenced(self) -> bool:
        return not self.metadata.image.is_unfenced(self.node_id)

    # -- start ------------------------------------------------------------------------------

    async def start(self, timeout_s: float | None = None) -> None:
        """Start and return once registered and unfenced (see module doc)."""
        assert self.state is BrokerState.NOT_RUNNING, f"{self!r} started twice"
        self.state = BrokerState.STARTING
        loop = self._enter_loop()
        if self.metrics_source is not None and self.metrics_source.address:
            self.controller.client_id = launcher_client_id(  # registration tells the driver
                self.executor_id, self.task_attempt, str(self.data_dir), self._metrics_endpoint()
            )
        self._unfenced = asyncio.Event()
        self._shutdown_requested = asyncio.Event()
        self._heartbeat_now = asyncio.Event()
        self._shut_down_granted = asyncio.Event()
        self.log_manager.dir_failures.add_listener(
            lambda: loop.call_soon_threadsafe(self._on_log_dir_offline)
        )
        timeout_s = timeout_s or self.config.initial_broker_registration_timeout_ms / 1000
        try:
            async with asyncio.timeout(timeout_s):
                await self._start_steps()
        except BaseException:
            await self._teardown(clean=False)
            raise

    async def _start_steps(self) -> None:
        cluster_id, _controller_id = await self._retry(self.controller.describe_cluster)
        if self.expected_cluster_id is not None and cluster_id != self.expected_cluster_id:
            raise RuntimeError(
                f"controller {self.controller_bootstrap} runs cluster {cluster_id!r}, "
                f"expected {self.expected_cluster_id!r}"
            )
        self.metadata.cluster_id = cluster_id
        _meta, self._lock = self._claimed or claim_data_dir(self.data_dir, cluster_id, self.node_id)
        self._previous_broker_epoch = self.log_manager.take_clean_shutdown_epoch()
        await bind_listeners(self.servers, self.data_dir, self.node_id)
        if isinstance(self.audit, ForwardingAuditSink):  # from the first connection on
            self._spawn(self.audit.run(), "audit-forwarder")
        registration_timeout_s = self.config.initial_broker_registration_timeout_ms / 1000
        end_offset = await self._retry(self.controller.metadata_end_offset)
        await self.follower.catch_up(end_offset, registration_timeout_s)
        await self._register()
        # Kafka's initial catch-up: publish only an image that holds our own registration.
        await self.follower.catch_up(self.broker_epoch + 1, registration_timeout_s)
        self.log_manager.load_logs(self._hosted_lookup(self.metadata.image))
        self._logs_loaded = True
        self._publish(self.metadata.image)
        self.log_manager.start_background()
        if self.remote_log_tasks is not None:
            self._spawn(self.remote_log_tasks.run(), "remote-log-manager")
        self._spawn(self.follower.run(), "metadata-follower")
        self._spawn(self.alter_partition.run(), "alter-partition")
        self._spawn(self._isr_shrink_loop(), "isr-shrink")
        if self.apis.txn_recovery is not None:
            self._spawn(self.apis.txn_recovery.run(), "txn-recovery")
        if self.quota_scope == "cluster":
            self.cluster_quotas = ClusterQuotaReporter(
                self.node_id,
                self.controller.report_quota_usage,
                lambda: quota_managers(getattr(self, "quotas", None)),
                self.metrics_config.quota_config.time_window_ms,
                self.metrics.now_ms,
            )
            self._spawn(self.cluster_quotas.run(), "cluster-quotas")
        self.state = BrokerState.RECOVERY
        self._spawn(self._heartbeat_loop(), "heartbeat")
        await self._wait_unfenced()
        # The unfencing commit also elected this broker leader where it may lead; serve only
        # once that is applied, so a client's first request does not meet NOT_LEADER.
        await self.admin.wait_for_controller_metadata(
            self.config.initial_broker_registration_timeout_ms / 1000
        )
        self.state = BrokerState.RUNNING
        self._spawn(self._watch_shutdown(), "shutdown-watch")
        logger.info(
            "broker %d running at %s (epoch %d)", self.node_id, self.bootstrap, self.broker_epoch
        )

    def _spawn(self, coro: Any, name: str) -> asyncio.Task:
        return super()._spawn(coro, f"broker-{self.node_id}-{name}")

    def _on_task_failed(self, task: asyncio.Task, error: BaseException) -> None:
        logger.error("broker %d: %s failed: %r; stopping", self.node_id, task.get_name(), error)
        self.stop_reason = f"{task.get_name()} failed: {error!r}"
        if self._shutdown_requested is not None:
            self._shutdown_requested.set()

    def _hosted_lookup(self, image: MetadataImage) -> Any:
        topics = topics_from_image(image, self.config, self.node_id)

        def hosted(topic: str, partition: int) -> Any:
            meta = topics.get(topic)
            registration = meta.partitions.get(partition) if meta else None
            if meta is None or registration is None or self.node_id not in registration.replicas:
                return None
            return meta.topic_id, meta.config

        return hosted

    def _reconfigure(self, image: MetadataImage) -> None:
        """Apply the dynamic broker configs that are not topic defaults (Kafka's
        `BrokerReconfigurable`s): the log cleaner's settings."""
        cleaner = self.log_manager.cleaner
        if cleaner is not None:
            wanted = dynamic_cleaner_config(
                self.config.cleaner, dynamic_layers(image, self.node_id)
            )
            cleaner.reconfigure(wanted)
        apply_replication_throttles(
            image,
            self.node_id,
            dynamic_layers(image, self.node_id),
            self.replica_manager.leader_quota,
            self.fetchers.quota,
        )

    def _publish(self, image: MetadataImage) -> None:
        self._reconfigure(image)
        if self._logs_loaded:
            live = [b.broker_id for b in image.unfenced_brokers()]
            topics = topics_from_image(image, self.config, self.node_id)
            self.replica_manager.apply_metadata(topics, live)
            if self.remote_log_tasks is not None:
                self.remote_log_tasks.on_metadata(topics)

    async def _publish_cooperatively(self, image: MetadataImage) -> None:
        """`_publish` for the metadata follower: long applies let heartbeats through."""
        self._reconfigure(image)
        if self._logs_loaded:
            live = [b.broker_id for b in image.unfenced_brokers()]
            topics = topics_from_image(image, self.config, self.node_id)
            await self.replica_manager.apply_metadata_cooperatively(topics, live)
            if self.remote_log_tasks is not None:
                self.remote_log_tasks.on_metadata(topics)

    def _endpoint_of(self, broker_id: int) -> tuple[str, int] | None:
        """A broker's inter-broker endpoint per the image (where the follower fetchers
        connect); None when it has none."""
        broker = self.metadata.image.broker(broker_id)
        endpoint = (
            None
            if broker is None
            else broker.endpoint(self.listener_config.inter_broker_listener_name)
        )
        return None if endpoint is None else (endpoint.host, endpoint.port)

    async def _isr_shrink_loop(self) -> None:
        """Kafka's `isr-expiration` task: every replica.lag.time.max.ms / 2, propose removing
        followers that stopped catching up."""
        lag_ms = self.config.replica_lag_time_max_ms
        while True:
            await asyncio.sleep(max(0.01, lag_ms / 2000))
            self.replica_manager.maybe_shrink_isr(wall_clock_ms(), lag_ms)

    async def _watch_shutdown(self) -> None:
        assert self._shutdown_requested is not None
        await self._shutdown_requested.wait()
        if self._stop_task is None:
            self._stop_task = asyncio.get_running_loop().create_task(self._stop(clean=True))

    # -- stop -------------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Graceful stop (see module doc); concurrent or repeated calls wait for the first."""
        await self._stop_once(clean=True)

    async def kill(self) -> None:
        """Stop as a crash would: no goodbye, no flush, no checkpoints."""
        await self._stop_once(clean=False)

    async def _stop_once(self, *, clean: bool) -> None:
        if self._stop_task is None:
            if self.state is BrokerState.NOT_RUNNING:
                return
            self._stop_task = asyncio.get_running_loop().create_task(self._stop(clean))
        await asyncio.shield(self._stop_task)

    async def _stop(self, clean: bool) -> None:
        if clean:
            self.state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
            await self._controlled_shutdown()
        await self._teardown(clean=clean)

    async def _teardown(self, *, clean: bool) -> None:
        self.state = BrokerState.SHUTTING_DOWN
        await self._cancel_tasks()
        await self.fetchers.shutdown()  # before the logs close: no append after this
        self.replica_manager.close()  # waiting fetches and produces answer now
        if self.replica_manager.remote_reader is not None:
            self.replica_manager.remote_reader.close()
        await self.controller.close()  # forwarded requests fail fast instead of waiting
        if clean and isinstance(self.audit, ForwardingAuditSink):
            await self.audit.close()  # the last events, while the channel is still open
        if self.apis.forwarding is not None:  # so do those forwarded to the coordinator
            await self.apis.forwarding.close()
        for server in self.servers.values():
            await server.stop()
        if self.apis.txn_verifier is not None:
            await self.apis.txn_verifier.close()
        if self.remote_log_tasks is not None:  # a round in flight ends before the logs close
            await self.remote_log_tasks.close()
        self.log_manager.shutdown(clean=clean, broker_epoch=self.broker_epoch)
        if self._lock is not None:
            self._lock.release()
        self._close_metrics()
        self.state = BrokerState.NOT_RUNNING
        if self._shutdown_requested is not None:
            self._shutdown_requested.set()
        logger.info("broker %d stopped (%s)", self.node_id, "clean" if clean else "killed")

    # -- hosting on a thread ----------------------------------------------------------------

    def start_in_thread(self, timeout_s: float | None = None) -> BrokerServer:
        """Run the broker on its own loop thread; returns once it is registered and unfenced."""
        return self._start_on_thread(lambda: self.start(timeout_s), None)

    def kill_in_thread(self, timeout_s: float = 30.0) -> None:
        """`kill()` a broker started with `start_in_thread`, joining its thread."""
        self._stop_on_thread(self.kill, timeout_s)

    def run_forever(self, stop_event: threading.Event | None = None) -> str:
        """Start, serve until `stop_event` is set or the controller says stop; returns why."""
        return asyncio.run(self._serve(stop_event))

    async def _serve(self, stop_event: threading.Event | None) -> str:
        await self.start()
        assert self._shutdown_requested is not None
        while not self._shutdown_requested.is_set():
            if stop_event is not None and stop_event.is_set():
                self.stop_reason = "stop_event set"
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.1):
                    await self._shutdown_requested.wait()
        await self.shutdown()
        return self.stop_reason or "stopped"


def _stored_node_id(data_dir: Path) -> int:
    meta = read_meta_properties(data_dir)
    if meta is None:
        raise ValueError(
            f"node_id=None needs an existing identity, but {data_dir} has no meta.properties"
        )
    return meta.node_id
