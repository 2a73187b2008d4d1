"""A controller and N brokers in this process (architecture.md §7).

Each server runs its own asyncio loop on its own thread, bound to 127.0.0.1 on a free port;
with `broker_processes=True` each broker runs in a child process of its own instead
(`BrokerProcess`), as Spark executors run them, so the brokers do not share one interpreter
lock (`kill_broker` and `restart_broker` work on them too).
Integration tests and `python -m sparklog serve --master none` use it::

    with EmbeddedCluster(brokers=3, config={"num.partitions": "3"}) as cluster:
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})

Settings use Kafka's names; as keyword arguments, underscores stand for dots
(`log_retention_check_interval_ms=100`). Faults for tests: `kill_broker(i)` stops a broker as a
crash would, `restart_broker(i)` brings it back on the same data dir (same identity, recovered
logs, the same port when it is free) or, with `wipe=True`, on an empty one (same id, everything
re-replicated), and `restart_controller()` restarts the controller on its data dir and port so
brokers reconnect; `restart_coordinator()` restarts the group coordinator, which reloads its
Delta table;
`restart_driver(new_dir)` kills both and starts them on a new, empty controller dir, as a
driver restarted on another host would (what survives is what `metadata.log.dir` and
`offsets.table.path` keep on shared storage).
`leader_of`, `isr_of` and `wait_for_isr` read the controller's image.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparklog.broker.kafka_apis import GROUP_COORDINATOR_ENDPOINT
from sparklog.broker.server import BrokerServer
from sparklog.storage.object_store import without_storage_options

logger = logging.getLogger(__name__)


class EmbeddedCluster:
    """Controller + `brokers` brokers on loopback, data under `data_dir` (a temp dir if None)."""

    def __init__(
        self,
        brokers: int = 1,
        data_dir: str | Path | None = None,
        config: Mapping[str, object] | None = None,
        *,
        broker_processes: bool = False,
        **conf: object,
    ) -> None:
        if brokers < 1:
            raise ValueError(f"brokers={brokers}: a cluster needs at least one broker")
        self.broker_count = brokers
        self._own_dir = data_dir is None
        self.data_dir = (
            Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="sparklog-"))
        )
        self.config: dict[str, str] = {str(k): str(v) for k, v in (config or {}).items()}
        self.config.update({k.replace("_", "."): str(v) for k, v in conf.items()})
        #: the driver's local dir (controller, and coordinator table by default)
        self.controller_dir = self.data_dir / "controller"
        self.controller: Any = None
        self.coordinator: Any = None
        self.broker_processes = broker_processes
        self.brokers: list[Any] = []  # BrokerServer, or BrokerProcess with broker_processes

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> EmbeddedCluster:
        """Start the controller, then each broker; returns once every broker is unfenced."""
        from sparklog.controller.server import ControllerServer

        self.controller = ControllerServer(self.controller_dir, config=self.config)
        self.controller.start_in_thread()
        try:
            self.coordinator = self._new_coordinator(port=0)
            for node_id in range(self.broker_count):
                self.brokers.append(self._new_broker(node_id).start_in_thread(timeout_s))
        except BaseException:
            self.stop()
            raise
        return self

    def _new_broker(self, node_id: int) -> Any:
        config = {
            **without_storage_options(self.config),
            "listeners": self.config.get("listeners", "PLAINTEXT://127.0.0.1:0"),
            GROUP_COORDINATOR_ENDPOINT: self.coordinator.bootstrap,
        }
        if self.broker_processes:
            from sparklog.broker.broker_process import BrokerProcess

            return BrokerProcess(
                node_id, self.broker_dir(node_id), self.controller.bootstrap, config
            )
        return BrokerServer(
            node_id,
            self.broker_dir(node_id),
            self.controller.bootstrap,
            config,
            executor_id="embedded",
        )

    def _new_coordinator(self, port: int, clock: Any = None) -> Any:
        from sparklog.coordinator.server import GroupCoordinatorServer

        coordinator = GroupCoordinatorServer(
            self.controller_dir, self.controller, port=port, config=self.config, clock=clock
        ).start_in_thread()
        self.controller.coordinator_endpoint = (coordinator.host, coordinator.port)
        self.controller.audit.switch_to(coordinator.audit)  # the driver's one audit table
        return coordinator

    def broker_dir(self, node_id: int) -> Path:
        return self.data_dir / f"broker-{node_id}"

    def stop(self) -> None:
        """Stop every broker (gracefully), then the controller; removes a temp data dir."""
        for broker in self.brokers:
            try:
                broker.stop()
            except Exception:  # noqa: BLE001 - keep stopping the others
                logger.exception("stopping %r failed", broker)
        if self.coordinator is not None:
            self.coordinator.stop()
            self.coordinator = None
        if self.controller is not None:
            self.controller.stop()
            self.controller = None
        self.brokers = []
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- addresses --------------------------------------------------------------------------

    @property
    def metrics_port(self) -> int:
        """The port this process serves Prometheus metrics on (`/metrics`, every server of
        the process; `metrics.prometheus.port`, -1: any free one; 0: off)."""
        return self.controller.metrics_port if self.controller is not None else 0

    def metrics_endpoints(self) -> list[str]:
        """`host:port` of every metrics endpoint of the cluster: this process's, then each
        broker process's (`broker_processes=True`), as Prometheus scrapes them."""
        host = self.config.get("metrics.prometheus.host", "127.0.0.1")
        ports = [self.metrics_port] + [
            getattr(b, "metrics_port", 0) for b in self.brokers if self.broker_processes
        ]
        return [f"{host}:{p}" for p in dict.fromkeys(ports) if p]

    @property
    def bootstrap_servers(self) -> str:
        """`host:port,...` of the running brokers (a client's `bootstrap.servers`)."""
        return ",".join(b.bootstrap for b in self.brokers if b.state.value == "running")

    @property
    def controller_bootstrap(self) -> str:
        return self.controller.bootstrap

    # -- faults (tests) ---------------------------------------------------------------------

    def kill_broker(self, index: int) -> None:
        """Stop broker `index` as a crash would (no goodbye to the controller, no flush)."""
        self.brokers[index].kill_in_thread()

    def stop_broker(self, index: int) -> None:
        self.brokers[index].stop()

    def restart_broker(
        self, index: int, wipe: bool = False, timeout_s: float = 60.0
    ) -> BrokerServer:
        """Start broker `index` again (stopping it first if it runs) on its data dir, or with
        `wipe` on an empty one: the same node id on a new disk, which re-replicates (D6)."""
        old = self.brokers[index]
        if old.state.value != "not running":
            old.stop()
        if wipe:
            shutil.rmtree(self.broker_dir(old.node_id), ignore_errors=True)
        broker = self._new_broker(old.node_id).start_in_thread(timeout_s)
        self.brokers[index] = broker
        return broker

    def restart_controller(self) -> None:
        """Stop the controller and start it again on the same data dir and port."""
        from sparklog.controller.server import ControllerServer

        old = self.controller
        port = old.port
        old.stop()
        self.controller = ControllerServer(self.controller_dir, port=port, config=self.config)
        self.controller.start_in_thread()
        if self.coordinator is not None:
            self.coordinator.controller = self.controller
            self.controller.coordinator_endpoint = (self.coordinator.host, self.coordinator.port)
            self.controller.audit.switch_to(self.coordinator.audit)

    def restart_coordinator(self, clock: Any = None) -> None:
        """Stop the group coordinator and start it again on the same table and port: every
        group and committed offset is reloaded from Delta. `clock` (a `CoordinatorClock`)
        lets tests restart it on a host whose clocks differ."""
        port = self.coordinator.port
        self.coordinator.stop()
        self.coordinator = self._new_coordinator(port=port, clock=clock)

    def restart_driver(self, controller_dir: str | Path) -> None:
        """Kill the controller and the group coordinator (no final snapshot, as a lost host
        takes none) and start new ones on `controller_dir` (a new, empty local dir: another
        host) with the same settings and ports, so the running brokers reconnect."""
        from sparklog.controller.server import ControllerServer

        controller_port, coordinator_port = self.controller.port, self.coordinator.port
        self.coordinator.stop()
        self.coordinator = None
        self.controller.kill()
        self.controller_dir = Path(controller_dir)
        self.controller = ControllerServer(
            self.controller_dir, port=controller_port, config=self.config
        )
        self.controller.start_in_thread()
        self.coordinator = self._new_coordinator(port=coordinator_port)

    # -- the controller's view (tests) ------------------------------------------------------

    def _partition(self, topic: str, partition: int) -> Any:
        image = self.controller.metadata_image()
        found = image.topic(topic)
        if found is None or partition not in found.partitions:
            raise KeyError(f"the controller knows no partition {topic}-{partition}")
        return found.partitions[partition]

    def leader_of(self, topic: str, partition: int = 0) -> int:
        """The partition's leader per the controller (-1 when offline)."""
        return self._partition(topic, partition).leader

    def isr_of(self, topic: str, partition: int = 0) -> tuple[int, ...]:
        return tuple(self._partition(topic, partition).isr)

    def broker_index(self, node_id: int) -> int:
        """The index in `brokers` of broker `node_id` (for kill/stop/restart_broker)."""
        return next(i for i, b in enumerate(self.brokers) if b.node_id == node_id)

    def wait_for_isr(
        self, topic: str, partition: int = 0, size: int | None = None, timeout_s: float = 30.0
    ) -> tuple[int, ...]:
        """Wait until the partition's ISR has `size` members (default: every replica) and a
        leader; returns the ISR. Raises TimeoutError naming what it saw."""
        deadline = time.monotonic() + timeout_s
        while True:
            registration = self._partition(topic, partition)
            wanted = len(registration.replicas) if size is None else size
            if len(registration.isr) == wanted and registration.leader >= 0:
                return tuple(registration.isr)
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{topic}-{partition}: ISR {list(registration.isr)} (leader "
                    f"{registration.leader}) did not reach {wanted} members in {timeout_s} s"
                )
            time.sleep(0.02)

    def wait_for_leader(
        self, topic: str, partition: int = 0, not_on: int | None = None, timeout_s: float = 30.0
    ) -> int:
        """Wait until the partition has a leader other than broker `not_on`; returns it."""
        deadline = time.monotonic() + timeout_s
        while True:
            leader = self.leader_of(topic, partition)
            if leader >= 0 and leader != not_on:
                return leader
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}-{partition}: no new leader in {timeout_s} s")
            time.sleep(0.02)
