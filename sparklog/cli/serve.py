"""`serve` (kafka-server-start): a controller, the group coordinator and N brokers until
SIGINT/SIGTERM, in this process (`--master none`) or as Spark tasks (`sparklog.start`)."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from sparklog.cli.common import (
    SPARK_STOP_TIMEOUT_S,
    CliError,
    progress,
    server_settings,
)
from sparklog.security.listener_config import ListenerConfig

# -- serve -------------------------------------------------------------------------------------


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Set `stop` on SIGINT/SIGTERM while inside (main thread only); restores the handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = lambda signum, frame: stop.set()  # noqa: E731
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def announce(bootstrap_servers: str, out: TextIO | None = None) -> None:
    """The one line scripts wait for (stdout, flushed)."""
    out = out or sys.stdout
    print(f"bootstrap.servers={bootstrap_servers}", file=out, flush=True)


def report_coordinator(cluster: Any) -> None:
    """Say so when the group coordinator serves nothing (its table could not be loaded): the
    brokers keep serving, and the reason names the file and the repair."""
    reason = getattr(cluster.coordinator, "unavailable", None)
    if reason:
        progress(f"the group coordinator is not serving groups or transactions: {reason}")


def report_metrics(cluster: Any) -> None:
    """Where Prometheus scrapes (`metrics.prometheus.port`): the driver's `/metrics`, and its
    `/sd` listing every metrics endpoint of the cluster."""
    endpoints = cluster.metrics_endpoints()
    if endpoints:
        progress(
            f"metrics: http://{endpoints[0]}/metrics (all endpoints: http://{endpoints[0]}/sd)"
        )


def report_listeners(cluster: Any) -> None:
    """With several listeners, where each serves (the bootstrap line names the first's)."""
    names = list(getattr(cluster.brokers[0], "servers", {}))
    if len(names) > 1:
        for name in names:
            where = ",".join(b.bootstrap_of(name) for b in cluster.brokers)
            progress(f"listener {name}: {where}")


def wait_until(stop: threading.Event, alive: Callable[[], bool] = lambda: True) -> None:
    """Block until `stop` is set (a signal) or `alive()` turns false."""
    while not stop.wait(0.2):
        if not alive():
            return


def serve_spark(
    spark: Any,
    brokers: int,
    data_dir: Path,
    settings: dict[str, str],
    stop: threading.Event,
    jvm_alive: Callable[[], bool] = lambda: True,
) -> bool:
    """Run a cluster as Spark tasks of `spark` until `stop` is set (also `jobs/serve.py`).

    Returns False when `jvm_alive()` turned false first: Spark's JVM is gone, and with it every
    broker task; only the controller (in this process) is left to stop.
    """
    import sparklog

    settings = dict(settings)
    settings.setdefault("log.dirs", str(data_dir / "brokers"))
    master = spark.sparkContext.master
    progress(f"starting a controller and {brokers} broker(s) as Spark tasks on {master}")
    cluster = sparklog.start(spark, brokers=brokers, config=settings, data_dir=data_dir)
    try:
        announce(cluster.bootstrap_servers)
        report_coordinator(cluster)
        report_metrics(cluster)
        progress(f"serving (data in {data_dir}); Ctrl-C or SIGTERM stops it")
        wait_until(stop, jvm_alive)
    except BaseException:
        cluster.stop()
        raise
    if not jvm_alive():
        progress("Spark's JVM is gone (and its broker tasks with it); stopping the controller")
        cluster.controller.stop()
        return False
    progress("stopping the brokers and the controller")
    cluster.stop()
    return True


def _serve_embedded(
    brokers: int,
    data_dir: Path,
    settings: dict[str, str],
    stop: threading.Event,
    broker_processes: bool = False,
) -> None:
    from sparklog.cluster.embedded import EmbeddedCluster

    where = "child processes" if broker_processes else "this process"
    progress(f"starting a controller and {brokers} broker(s) in {where}")
    cluster = EmbeddedCluster(
        brokers=brokers, data_dir=data_dir, config=settings, broker_processes=broker_processes
    )
    cluster.start()
    try:
        announce(cluster.bootstrap_servers)
        report_listeners(cluster)
        report_coordinator(cluster)
        report_metrics(cluster)
        progress(f"serving (data in {data_dir}); Ctrl-C or SIGTERM stops it")
        wait_until(stop)
        progress("stopping the brokers and the controller")
    finally:
        cluster.stop()


def _new_spark_session(master: str, brokers: int) -> Any:
    try:
        from pyspark.sql import SparkSession
    except ImportError as e:
        raise CliError(f"--master {master} needs pyspark ({e}); or use --master none") from None
    progress(f"starting Spark ({master})")
    # Spark's Python workers (the brokers) run this interpreter unless told otherwise.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from sparklog.spark.session import with_reference_jars

    spark = (
        with_reference_jars(SparkSession.builder.master(master))
        .appName(f"sparklog serve ({brokers} brokers)")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.speculation", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _stop_spark(spark: Any) -> None:
    """Stop the session and wait for its JVM (it exits when its stdin pipe closes) and for the
    JVM's own children (Python workers), so nothing outlives `serve`."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    children = descendants(proc.pid) if proc is not None else set()
    if proc is None or proc.poll() is None:  # a dead JVM cannot answer spark.stop()
        spark.stop()
    if gateway is not None:
        gateway.shutdown()
    if proc is None:
        return
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(SPARK_STOP_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: do not leave it behind
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + SPARK_STOP_TIMEOUT_S
    while any(_running(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (Linux /proc; empty elsewhere)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            parents[int(entry.name)] = int(
                (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
            )
        except (OSError, ValueError, IndexError):
            continue
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _running(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def check_listener_ports(listeners: ListenerConfig, brokers: int, *, one_host: bool) -> None:
    """Refuse, before anything starts, `listeners` / `advertised.listeners` that cannot work:
    a fixed port that several brokers on one host would all bind or advertise, or one that
    something else holds already. Port 0 needs no check: each broker binds a free port the
    first time and the same one on every restart (kept in its data dir)."""
    fixed = [e for e in listeners.broker_listeners if e.port != 0]
    if brokers > 1 and one_host:
        shared = fixed + [e for e in listeners.advertised if e.port != 0 and e not in fixed]
        if shared:
            raise CliError(
                f"{', '.join(map(str, shared))}: {brokers} brokers on one host cannot all "
                "listen on (or advertise) one port; give port 0 (each broker keeps the port it "
                "first bound across restarts, in its data dir) or run --brokers 1"
            )
    for endpoint in fixed:
        with socket.socket(socket.AF_INET6 if ":" in endpoint.bind_host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
            try:
                s.bind((endpoint.bind_host, endpoint.port))
            except OSError as e:
                raise CliError(
                    f"listeners: cannot listen on {endpoint} ({e.strerror or e}); stop what "
                    "holds that port (another `sparklog serve`?) or choose another one"
                ) from None


def cmd_serve(args: argparse.Namespace) -> int:
    if args.brokers < 1:
        raise CliError(f"--brokers {args.brokers}: a cluster needs at least one broker")
    settings = server_settings(args)
    # a listener layout Kafka refuses is refused before anything (Spark included) starts
    listeners = ListenerConfig.from_properties(settings)
    master = args.master or f"local[{args.brokers + 1}]"
    check_listener_ports(listeners, args.brokers, one_host=master == "none" or
                         master.startswith("local"))  # fmt: skip
    stop = threading.Event()
    with stop_on_signals(stop), _data_dir(args.data_dir) as data_dir:
        if master == "none":
            _serve_embedded(args.brokers, data_dir, settings, stop, args.broker_processes)
            return 0
        if args.broker_processes:
            raise CliError(
                "--broker-processes is for --master none: as Spark tasks, every broker already "
                "runs in an executor's process of its own"
            )
        from sparklog.spark.cluster import ClusterStartError

        spark = _new_spark_session(master, args.brokers)
        proc = getattr(spark.sparkContext._gateway, "proc", None)
        assert proc is not None  # the session above launched its JVM from this process
        try:
            if not serve_spark(
                spark, args.brokers, data_dir, settings, stop, lambda: proc.poll() is None
            ):
                raise CliError(f"Spark's JVM exited (code {proc.returncode}); the brokers are gone")
        except ClusterStartError as e:
            raise CliError(str(e)) from None
        finally:
            _stop_spark(spark)
    return 0


@contextmanager
def _data_dir(path: str | None) -> Iterator[Path]:
    """`path` (kept), or a temp dir removed afterwards."""
    if path is not None:
        Path(path).mkdir(parents=True, exist_ok=True)
        yield Path(path).resolve()
        return
    with tempfile.TemporaryDirectory(prefix="sparklog-serve-") as tmp:
        progress(f"no --data-dir: using {tmp} (removed on exit)")
        yield Path(tmp)
