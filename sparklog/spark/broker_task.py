"""What runs inside a broker's Spark task on an executor (D5, D6).

`broker_task` is the `mapPartitions` function of a one-task job: it finds out which executor
it runs on, then runs a broker until the controller tells it to stop (heartbeat
`should_shut_down`) or the task is killed. Its data lives on the executor's local disk under
the cluster's base dir, so a task relaunched on the same worker adopts its identity and data.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

_JVM_WATCH_INTERVAL_S = 0.5


@dataclass(frozen=True)
class BrokerTaskSpec:
    """Everything a broker task needs (pickled to the executor)."""

    node_id: int
    cluster_id: str
    controller_bootstrap: str
    base_dir: str
    config: dict[str, str] = field(default_factory=dict)
    #: the address to listen on and register; None: this executor's own (`executor_host`)
    bind_host: str | None = "127.0.0.1"
    launch: int = 1  # the launcher's job count for this broker; attempts stay monotonic across jobs


def executor_id() -> str:
    """The Spark executor this process serves: the `--executor-id` of the JVM above us,
    "driver" in local mode (the JVM is the driver)."""
    found = _jvm_above()
    return "unknown" if found is None else found[1]


def executor_host() -> str:
    """The address this executor is known by: the `--hostname` Spark gave its JVM (the worker's
    address on a standalone cluster, the container's on YARN or Kubernetes), else SPARK_LOCAL_IP,
    else loopback. A broker listens on it and registers it, so brokers on other hosts, clients
    and the driver reach it as they reach the executor's block manager."""
    found = _jvm_above()
    if found is not None and found[2]:
        return found[2]
    return os.environ.get("SPARK_LOCAL_IP") or "127.0.0.1"


def _jvm_above() -> tuple[int, str, str | None] | None:
    """(pid, executor id or "driver", its --hostname if any) of the JVM this Python worker
    runs under."""
    pid = os.getppid()
    for _ in range(6):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            break
        if b"--executor-id" in args:
            host = args[args.index(b"--hostname") + 1].decode() if b"--hostname" in args else None
            return pid, args[args.index(b"--executor-id") + 1].decode(), host
        if any(a.endswith(b"java") for a in args[:1]):
            return pid, "driver", None
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if pid <= 1:
            break
    return None


def _stop_when_jvm_dies(stop: threading.Event) -> None:
    """Set `stop` once the JVM above us is gone (an executor killed with SIGKILL leaves its
    Python workers running: this broker would live on as a zombie of an old task attempt)."""
    found = _jvm_above()
    if found is None:
        return
    pid = found[0]
    cmdline = Path(f"/proc/{pid}/cmdline")
    expected = cmdline.read_bytes()

    def watch() -> None:
        while not stop.wait(_JVM_WATCH_INTERVAL_S):
            try:
                alive = cmdline.read_bytes() == expected
            except OSError:
                alive = False
            if not alive:
                logger.error(
                    "the JVM of this broker task (pid %d) is gone; stopping the broker", pid
                )
                stop.set()

    threading.Thread(target=watch, name="sparklog-jvm-watch", daemon=True).start()


def broker_task(specs: Iterable[BrokerTaskSpec]) -> Iterator[dict]:
    """Run one broker per spec (the launcher sends exactly one) and report how it ended."""
    from pyspark import TaskContext

    from sparklog.broker.run import run_broker

    context = TaskContext.get()
    task_attempt = context.attemptNumber() if context is not None else 0
    for spec in specs:
        # The controller refuses a registration from an older attempt than the one it knows;
        # Spark restarts attempt numbers in every new job, so the launch count leads.
        attempt = spec.launch * 1000 + task_attempt
        config = dict(spec.config)
        config.setdefault("listeners.host", spec.bind_host or executor_host())
        # the executor's metrics endpoint (`metrics.prometheus.port`) where Prometheus can
        # reach it: the broker's own address unless the settings name one
        config.setdefault("metrics.prometheus.host", config["listeners.host"])
        stop = threading.Event()
        _stop_when_jvm_dies(stop)
        result = run_broker(
            node_id=spec.node_id,
            base_dir=spec.base_dir,
            controller_bootstrap=spec.controller_bootstrap,
            config=config,
            stop_event=stop,
            cluster_id=spec.cluster_id,
            executor_id=executor_id(),
            task_attempt=attempt,
        )
        yield {"node_id": spec.node_id, "attempt": attempt, "result": str(result)}
