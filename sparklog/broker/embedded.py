"""A controller and N brokers in this process (architecture.md §7).

Each server runs its own asyncio loop on its own thread, bound to 127.0.0.1 on a free port.
Integration tests and `python -m sparklog serve --master none` use it::

    with EmbeddedCluster(brokers=3, config={"num.partitions": "3"}) as cluster:
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})

Settings use Kafka's names; as keyword arguments, underscores stand for dots
(`log_retention_check_interval_ms=100`). `kill_broker(i)` stops a broker as a crash would and
`restart_broker(i)` brings it back on the same data dir (same identity, recovered logs).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparklog.broker.server import BrokerServer

log = logging.getLogger(__name__)


class EmbeddedCluster:
    """Controller + `brokers` brokers on loopback, data under `data_dir` (a temp dir if None)."""

    def __init__(
        self,
        brokers: int = 1,
        data_dir: str | Path | None = None,
        config: Mapping[str, object] | None = None,
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
        self.controller: Any = None
        self.brokers: list[BrokerServer] = []

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> EmbeddedCluster:
        """Start the controller, then each broker; returns once every broker is unfenced."""
        from sparklog.controller.server import ControllerServer

        self.controller = ControllerServer(self.data_dir / "controller", config=self.config)
        self.controller.start_in_thread()
        try:
            for node_id in range(self.broker_count):
                self.brokers.append(self._new_broker(node_id).start_in_thread(timeout_s))
        except BaseException:
            self.stop()
            raise
        return self

    def _new_broker(self, node_id: int) -> BrokerServer:
        return BrokerServer(
            node_id,
            self.broker_dir(node_id),
            self.controller.bootstrap,
            {**self.config, "listeners": self.config.get("listeners", "PLAINTEXT://127.0.0.1:0")},
            executor_id="embedded",
        )

    def broker_dir(self, node_id: int) -> Path:
        return self.data_dir / f"broker-{node_id}"

    def stop(self) -> None:
        """Stop every broker (gracefully), then the controller; removes a temp data dir."""
        for broker in self.brokers:
            try:
                broker.stop()
            except Exception:  # noqa: BLE001 - keep stopping the others
                log.exception("stopping %r failed", broker)
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

    def restart_broker(self, index: int, timeout_s: float = 60.0) -> BrokerServer:
        """Start broker `index` again on its data dir (after `kill_broker` or `stop_broker`)."""
        old = self.brokers[index]
        if old.state.value != "not running":
            old.stop()
        broker = self._new_broker(old.node_id).start_in_thread(timeout_s)
        self.brokers[index] = broker
        return broker
