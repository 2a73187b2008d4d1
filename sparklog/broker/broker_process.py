"""A broker in a child process of its own (`serve --master none --broker-processes`).

Spark runs each broker in an executor's Python worker, one process per broker. An embedded
cluster runs them as threads of one process instead, where they share one interpreter lock:
with three brokers replicating a thousand partitions, that process sits at one core while the
others idle. `BrokerProcess` starts a `BrokerServer` in a spawned child and talks to it over a
pipe: the child reports its listener once the controller has unfenced it, stops cleanly when
told to, and exits at once, as a crash would, when the pipe breaks (the parent died), so no
broker outlives the process that started it.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
from collections.abc import Mapping
from multiprocessing.connection import Connection
from pathlib import Path

from sparklog.broker.server import BrokerState

logger = logging.getLogger(__name__)

_STOP = "stop"


class BrokerProcessError(RuntimeError):
    """The child process did not come up as a broker."""


class BrokerProcess:
    """One broker in a spawned child process, with the parts of `BrokerServer`'s interface an
    embedded cluster uses (`node_id`, `bootstrap`, `state`, `stop`, `kill_in_thread`)."""

    def __init__(
        self,
        node_id: int,
        data_dir: Path,
        controller_bootstrap: str,
        config: Mapping[str, str],
    ) -> None:
        self.node_id = node_id
        self.data_dir = data_dir
        self.controller_bootstrap = controller_bootstrap
        self.config = dict(config)
        self.host = ""
        self.port = 0
        #: the port the child process serves Prometheus metrics on (0: none)
        self.metrics_port = 0
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None

    def __repr__(self) -> str:
        pid = self._process.pid if self._process is not None else None
        return f"BrokerProcess(node {self.node_id}, pid {pid}, {self.bootstrap})"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def state(self) -> BrokerState:
        started = self._process is not None and self._process.is_alive() and self.port != 0
        return BrokerState.RUNNING if started else BrokerState.NOT_RUNNING

    def start_in_thread(self, timeout_s: float | None = None) -> BrokerProcess:
        """Start the child; returns once its broker is registered and unfenced."""
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        self._process = context.Process(
            target=_child_main,
            args=(
                self.node_id,
                str(self.data_dir),
                self.controller_bootstrap,
                self.config,
                logging.getLogger().level,
                child,
            ),
            name=f"sparklog-broker-{self.node_id}",
        )
        self._process.start()
        child.close()
        self._conn = parent
        if not parent.poll(60.0 if timeout_s is None else timeout_s + 30.0):
            self.kill_in_thread()
            raise BrokerProcessError(f"broker {self.node_id}: the child did not start in time")
        try:
            message = parent.recv()
        except EOFError:
            message = ("error", f"the child exited with code {self._process.exitcode}")
        if message[0] != "ready":
            self.kill_in_thread()
            raise BrokerProcessError(f"broker {self.node_id}: {message[1]}")
        _kind, self.host, self.port, self.metrics_port = message
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Graceful stop (controlled shutdown in the child); kills it if that takes too long."""
        if self._process is None:
            return
        if self._conn is not None:
            with contextlib.suppress(OSError):  # the child is gone already
                self._conn.send(_STOP)
        self._process.join(timeout_s)
        if self._process.is_alive():
            logger.warning("%r did not stop within %.0f s; killing it", self, timeout_s)
            self.kill_in_thread()
        self._close()

    def kill_in_thread(self, timeout_s: float = 30.0) -> None:
        """Stop as a crash would: SIGKILL."""
        if self._process is not None and self._process.is_alive():
            self._process.kill()
            self._process.join(timeout_s)
        self._close()

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self.port = 0
        self.metrics_port = 0


def _child_main(
    node_id: int,
    data_dir: str,
    controller_bootstrap: str,
    config: dict[str, str],
    log_level: int,
    conn: Connection,
) -> None:
    """The child: run the broker until told to stop; exit at once if the parent goes away."""
    from sparklog.broker.server import BrokerServer

    logging.basicConfig(
        level=log_level, format=f"%(asctime)s %(levelname)s broker-{node_id} %(name)s: %(message)s"
    )
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops us
    broker = BrokerServer(
        node_id, Path(data_dir), controller_bootstrap, config, executor_id="process"
    )
    try:
        broker.start_in_thread()
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", broker.host, broker.port, broker.metrics_port))
    try:
        told = conn.recv()
    except (EOFError, OSError):
        told = None
    if told != _STOP:  # the parent died: go as a crash would, leaving no orphan behind
        os._exit(1)
    broker.stop()
