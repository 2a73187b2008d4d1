"""Brokers as Spark tasks: `sparklog.start(spark, brokers=N)` (D5, D6, D7).

The controller runs in the driver. Each broker is a one-task Spark job in its own job group,
launched from a driver thread; when the job ends (the task failed past Spark's retries, or its
executor was lost) the launcher launches it again, so the broker comes back on whatever
executor Spark picks and adopts its identity from that disk. `stop()` asks every broker to shut
down through its heartbeat, waits for the jobs to finish, and cancels job groups as a backstop.

Placement: in `local[N]` every broker shares the driver's executor (dev mode) and the launcher
refuses to take every task slot; on `local-cluster`/standalone it needs one executor per
broker (it waits for them, then refuses with a message naming the fix).

Addresses: the controller and the group coordinator listen on the driver's address
(`driver_host`); on a cluster master each broker listens on, and registers, its own executor's
address, which the executor decides (`broker_task.executor_host`), as Spark's block managers
do. The local masters keep everything on SPARK_LOCAL_IP (loopback by default).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparklog.broker.kafka_apis import GROUP_COORDINATOR_ENDPOINT
from sparklog.spark.broker_task import BrokerTaskSpec, broker_task
from sparklog.storage.object_store import without_storage_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

_LOCAL = re.compile(r"^local(?:\[(\*|\d+)(?:,\d+)?\])?$")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]$")
_JOB_GROUP = "sparklog-broker-{node_id}"
_RELAUNCH_BACKOFF_S = 1.0


class ClusterStartError(RuntimeError):
    """sparklog.start() cannot place or start the brokers; the message names the fix."""


@dataclass
class _Slot:
    node_id: int
    thread: threading.Thread | None = None
    launches: int = 0
    last_error: str | None = None


#: Spark conf entries `spark.sparklog.<setting>` are cluster settings (`spark-submit --conf
#: spark.sparklog.metadata.log.dir=s3://bucket/cluster`); `config=`/kwargs override them.
SPARK_CONF_PREFIX = "spark.sparklog."


def spark_conf_settings(conf_entries: Any) -> dict[str, str]:
    """Kafka-named settings from Spark conf `(key, value)` pairs (`SparkConf.getAll()`)."""
    return {
        key[len(SPARK_CONF_PREFIX) :]: str(value)
        for key, value in conf_entries
        if key.startswith(SPARK_CONF_PREFIX) and len(key) > len(SPARK_CONF_PREFIX)
    }


def _settings(config: dict[str, Any] | None, kwargs: dict[str, Any]) -> dict[str, str]:
    """Kafka-named settings from a dict and from kwargs (`num_partitions=3` -> num.partitions)."""
    out = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in (config or {}).items()}
    for key, value in kwargs.items():
        out[key.replace("_", ".")] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def task_slots(master: str, default_parallelism: int) -> tuple[str, int, int]:
    """(mode, executors, cores per executor) for a master URL; mode local|local-cluster|cluster."""
    if m := _LOCAL.match(master):
        cores = m.group(1)
        slots = (os.cpu_count() or 1) if cores == "*" else int(cores or 1)
        return "local", 1, slots
    if m := _LOCAL_CLUSTER.match(master):
        return "local-cluster", int(m.group(1)), int(m.group(2))
    return "cluster", 0, 0


def _local_ip() -> str:
    return os.environ.get("SPARK_LOCAL_IP") or "127.0.0.1"


def driver_host(sc: Any) -> str:
    """The address the controller and the group coordinator listen on, which brokers and
    clients dial: SPARK_LOCAL_IP when set (the address Spark itself binds), loopback on the
    local masters, else the address Spark's driver gives its executors (`spark.driver.host`).
    Loopback on a cluster master would leave every broker on another host unable to register."""
    if os.environ.get("SPARK_LOCAL_IP"):
        return os.environ["SPARK_LOCAL_IP"]
    mode, _, _ = task_slots(sc.master, 0)
    if mode != "cluster":
        return "127.0.0.1"
    return sc.getConf().get("spark.driver.host") or "127.0.0.1"


class SparkLogCluster:
    """A running sparklog cluster inside this Spark application."""

    def __init__(
        self, spark: SparkSession, brokers: int, settings: dict[str, str], data_dir: Path
    ) -> None:
        from sparklog.controller.server import ControllerServer

        self.spark = spark
        self.sc = spark.sparkContext
        self.settings = settings
        #: `kafka.*` client settings for this application's own clients (`start(config=...)`)
        self.client_settings: dict[str, str] = {}
        self.data_dir = data_dir
        self.broker_count = brokers
        master = self.sc.master
        assert master is not None  # a running SparkContext has one (or would not have started)
        mode, _, _ = task_slots(master, 0)
        #: where the brokers listen: decided here in the local modes, on each executor otherwise
        self.broker_host = _local_ip() if mode != "cluster" else None
        self.controller = ControllerServer(
            data_dir / "controller", host=driver_host(self.sc), config=settings
        )
        self.cluster_id = self.controller.cluster_id
        self.coordinator: Any = None
        self._slots: list[_Slot] = []
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._first_offset = 0

    # -- lifecycle -------------------------------------------------------------------------

    def _start(self, timeout_s: float) -> None:
        from sparklog.coordinator.server import GroupCoordinatorServer

        self.controller.start_in_thread()
        # A restart on the same dirs reloads the brokers of the previous run as unfenced until
        # their leases run out: only registrations from now on are this run's brokers.
        self._first_offset = self.controller.metadata_image().offset
        self.coordinator = GroupCoordinatorServer(
            self.data_dir / "controller",
            self.controller,
            host=self.controller.host,
            config=self.settings,
        ).start_in_thread()
        self.controller.coordinator_endpoint = (self.coordinator.host, self.coordinator.port)
        self.controller.audit.switch_to(self.coordinator.audit)  # the driver's one audit table
        for _ in range(self.broker_count):
            slot = _Slot(self.controller.next_node_id())
            self._slots.append(slot)
            self._launch(slot)
        self._wait_for_brokers(self.broker_count, timeout_s)

    def _launch(self, slot: _Slot) -> None:
        from pyspark import InheritableThread

        slot.thread = InheritableThread(
            target=self._run_slot, args=(slot,), name=f"sparklog-broker-{slot.node_id}", daemon=True
        )
        slot.thread.start()

    def _spec(self, slot: _Slot) -> BrokerTaskSpec:
        base = self.settings.get("log.dirs") or str(
            Path(tempfile.gettempdir()) / "sparklog-data" / self.cluster_id
        )
        return BrokerTaskSpec(
            node_id=slot.node_id,
            cluster_id=self.cluster_id,
            controller_bootstrap=self.controller.bootstrap,
            base_dir=base,
            config={
                **without_storage_options(self.settings),
                GROUP_COORDINATOR_ENDPOINT: self.coordinator.bootstrap,
            },
            bind_host=self.broker_host,
            launch=slot.launches,
        )

    def _run_slot(self, slot: _Slot) -> None:
        """Driver thread: run the broker job, relaunch it whenever it ends, until stop()."""
        group = _JOB_GROUP.format(node_id=slot.node_id)
        # how the job reads in the Spark UI's Jobs tab (and `statusTracker()`)
        description = (
            f"sparklog broker {slot.node_id} of cluster {self.cluster_id} (runs until stop())"
        )
        while not self._stopping.is_set():
            slot.launches += 1
            try:
                self.sc.setJobGroup(group, description, interruptOnCancel=True)
                self.sc.setLocalProperty("spark.job.description", description)
                rdd = self.sc.parallelize([self._spec(slot)], 1)
                result = rdd.mapPartitions(broker_task).collect()
                logger.info("broker %d job ended: %s", slot.node_id, result)
            except Exception as e:  # task failed past spark.task.maxFailures, or cancelled
                slot.last_error = str(e).strip().splitlines()[0][:500] if str(e) else repr(e)
                if self._spark_stopped():
                    self._on_spark_stopped(slot)
                    return
                if not self._stopping.is_set():
                    logger.warning(
                        "broker %d job failed, relaunching: %s", slot.node_id, slot.last_error
                    )
            if self._stopping.wait(_RELAUNCH_BACKOFF_S):
                break

    def _spark_stopped(self) -> bool:
        """Whether the SparkContext is gone (`spark.stop()`, or its JVM died): PySpark drops
        its Java context then, after the JVM's context says it is stopped."""
        jsc = getattr(self.sc, "_jsc", None)
        if jsc is None:
            return True
        try:
            return bool(jsc.sc().isStopped())
        except Exception:  # noqa: BLE001 - the gateway itself is gone
            return True

    def _on_spark_stopped(self, slot: _Slot) -> None:
        """`spark.stop()` before `cluster.stop()` (a notebook's usual order) ended the broker
        jobs with their executors: nothing to relaunch. The first slot to see it stops the
        driver's servers, once, from a thread of its own (stop() joins the slot threads)."""
        logger.info("broker %d: the SparkContext stopped, and its job with it", slot.node_id)
        with self._lock:
            if self._stopping.is_set():
                return
        threading.Thread(target=self.stop, name="sparklog-stop-after-spark", daemon=True).start()

    def _wait_for_brokers(self, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(self._brokers_of_this_run()) >= count:
                return
            time.sleep(0.1)
        errors = "; ".join(
            f"broker {s.node_id}: {s.last_error}" for s in self._slots if s.last_error
        )
        registered = len(self._brokers_of_this_run())  # before stop(): it stops the controller
        self.stop(timeout_s=10)
        raise ClusterStartError(
            f"only {registered} of {count} brokers registered within "
            f"{timeout_s:.0f}s{' (' + errors + ')' if errors else ''}; check the executor logs, "
            "or raise sparklog.start.timeout.ms"
        )

    def stop(self, timeout_s: float = 60) -> None:
        """Ask every broker to shut down, wait for their jobs, cancel leftovers, stop the controller."""
        with self._lock:
            if self._stopping.is_set():
                return
            self._stopping.set()
        self.controller.request_shutdown(None)
        deadline = time.monotonic() + timeout_s
        for slot in self._slots:
            if slot.thread is not None:
                slot.thread.join(max(0.0, deadline - time.monotonic()))
        for slot in self._slots:
            if slot.thread is not None and slot.thread.is_alive():
                logger.warning(
                    "broker %d did not stop in time; cancelling its job group", slot.node_id
                )
                self.sc.cancelJobGroup(_JOB_GROUP.format(node_id=slot.node_id))
                slot.thread.join(10)
        if self.coordinator is not None:
            self.coordinator.stop()
        self.controller.stop()

    def __enter__(self) -> SparkLogCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- views -----------------------------------------------------------------------------

    def _brokers_of_this_run(self) -> list[dict[str, Any]]:
        """Unfenced brokers registered since this cluster object started its controller."""
        return [
            b
            for b in self.controller.describe_brokers()
            if not b["fenced"] and b["broker_epoch"] >= self._first_offset
        ]

    @property
    def bootstrap_servers(self) -> str:
        """`host:port,...` of the live brokers, for `kafka.bootstrap.servers` (those of this
        run first: after a restart the previous run's stay unfenced until their leases end)."""
        live = self._brokers_of_this_run() or self.controller.live_brokers()
        return ",".join(f"{b['host']}:{b['port']}" for b in live)

    @property
    def metrics_port(self) -> int:
        """The port the driver serves Prometheus metrics on (`metrics.prometheus.port`; 0:
        off): the controller's and coordinators' metrics, `/sd` listing the brokers'."""
        return self.controller.metrics_port

    def metrics_endpoints(self) -> list[str]:
        """`host:port` of the driver's metrics endpoint and of each live broker's process
        (from their registrations), as the driver's `/sd` lists them for Prometheus."""
        source = self.controller.metrics_source
        own = source.address if source is not None else ""
        brokers = [b.get("metrics_endpoint") for b in self._brokers_of_this_run()]
        return list(dict.fromkeys(e for e in [own, *brokers] if e))

    def describe(self) -> dict[str, Any]:
        """Brokers (id, host, port, executor, data dir, attempt, fenced), launches and topics."""
        brokers = self.controller.describe_brokers()
        for b in brokers:
            slot = next((s for s in self._slots if s.node_id == b["broker_id"]), None)
            if slot is not None:
                b["launches"] = slot.launches
                b["last_error"] = slot.last_error
        return {
            "cluster_id": self.cluster_id,
            "controller": self.controller.bootstrap,
            "group_coordinator": self.coordinator.bootstrap if self.coordinator else None,
            "bootstrap_servers": self.bootstrap_servers,
            "metrics_endpoints": self.metrics_endpoints(),
            "brokers": brokers,
            "topics": self.controller.describe_topics(),
        }


_active: SparkLogCluster | None = None


def active_cluster() -> SparkLogCluster | None:
    """The cluster `start()` launched in this driver, if it is running."""
    return _active if _active is not None and not _active._stopping.is_set() else None


def start(
    spark: SparkSession,
    brokers: int = 1,
    *,
    config: dict[str, Any] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    timeout_s: float = 120.0,
    **kwargs: Any,
) -> SparkLogCluster:
    """Start a controller in the driver and `brokers` brokers as Spark tasks; returns once
    every broker registered. Settings use Kafka's names (`config={"num.partitions": 6}` or
    `num_partitions=6`), over any `spark.sparklog.<name>` entries of the Spark conf.

    Data: the controller's metadata log and the offsets/transactions tables go to
    `<data_dir>/controller` on the driver, every broker's log to `<data_dir>/brokers/broker-<id>`
    on its executor (`log.dirs` overrides the brokers' base). Without `data_dir`, the driver's
    part goes to a new `sparklog-*` temp dir and the brokers' to `<executor temp
    dir>/sparklog-data/<cluster id>`; neither is removed: delete the directories after `stop()`
    (docs/storage.md, "Where data lives")."""
    global _active
    if brokers < 1:
        raise ClusterStartError(f"brokers={brokers}: a cluster needs at least one broker")
    sc = spark.sparkContext
    if (sc.getConf().get("spark.speculation", "false") or "false").lower() == "true":
        raise ClusterStartError(
            "spark.speculation=true would run a second copy of a broker task; "
            "start Spark with spark.speculation=false to run sparklog brokers"
        )
    _check_secrets_redacted(sc.getConf())
    _check_capacity(sc, brokers, timeout_s)
    check_worker_python(sc)
    settings = {**spark_conf_settings(sc.getConf().getAll()), **_settings(config, kwargs)}
    client_settings = split_client_settings(settings)
    root = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="sparklog-"))
    if data_dir is not None:
        # every broker under the directory the user gave: <data_dir>/brokers/broker-<id> (on
        # each executor's own disk when executors run elsewhere); without one, brokers keep
        # the executor-local default (`_spec`), and `log.dirs` names another place
        settings.setdefault("log.dirs", str(root.resolve() / "brokers"))
    cluster = SparkLogCluster(spark, brokers, settings, root)
    cluster.client_settings = client_settings
    cluster._start(timeout_s)
    _active = cluster
    return cluster


def _check_secrets_redacted(conf: Any) -> None:
    """Spark shows its conf in the UI and the event log: refuse `spark.sparklog.*` secrets
    that `spark.redaction.regex` would show there (keys named, values never)."""
    from sparklog.spark.redaction import SUGGESTED_REDACTION_REGEX, unredacted_secrets

    leaked = unredacted_secrets(
        conf.getAll(), conf.get("spark.redaction.regex", None), SPARK_CONF_PREFIX
    )
    if leaked:
        raise ClusterStartError(
            f"the Spark conf entries {', '.join(leaked)} hold secrets that spark.redaction.regex "
            "does not redact: the Spark UI's Environment tab and the event log would show them. "
            f"Start Spark with --conf spark.redaction.regex='{SUGGESTED_REDACTION_REGEX}' (or "
            "pass them to sparklog.start(config=...) instead of the Spark conf)"
        )


def split_client_settings(settings: dict[str, str]) -> dict[str, str]:
    """Remove and return the `kafka.*` entries: the client settings (the connector's option
    names: `kafka.security.protocol`, `kafka.sasl.*`, `kafka.ssl.*`) this application's own
    clients of the cluster use by default — `format("sparklog")` without
    `kafka.bootstrap.servers`, the notebook helpers — prefix removed. Servers never see them."""
    prefix = "kafka."
    found = {k: v for k, v in settings.items() if k.startswith(prefix)}
    for key in found:
        del settings[key]
    return {k[len(prefix) :]: v for k, v in found.items()}


def check_worker_python(sc: Any) -> None:
    """Fail now, with the fix, when Spark's Python workers cannot import sparklog and pyarrow,
    rather than later inside a broker task with "No module named pyarrow"."""

    def probe(_: Any) -> str | None:  # nested: shipped by value, the worker needs no sparklog
        import sys

        try:
            import pyarrow  # noqa: F401

            import sparklog.broker.run  # noqa: F401
        except ImportError as e:
            return f"{e} (worker Python: {sys.executable})"
        return None

    try:
        problem = sc.parallelize([0], 1).map(probe).first()
    except Exception as e:  # noqa: BLE001 - a worker that cannot start at all
        problem = f"{type(e).__name__}: {str(e)[:500]}"
    if problem is not None:
        raise ClusterStartError(
            f"Spark's Python workers cannot run sparklog brokers: {problem}. Set PYSPARK_PYTHON "
            f"(or spark.pyspark.python) to the interpreter that has sparklog installed, e.g. "
            f"PYSPARK_PYTHON={sys.executable}, before the SparkSession starts"
        )


def _check_capacity(sc: Any, brokers: int, timeout_s: float) -> None:
    mode, executors, cores = task_slots(sc.master, sc.defaultParallelism)
    if mode == "local":
        if brokers >= cores:
            raise ClusterStartError(
                f"{brokers} broker(s) on {sc.master} would take every one of its {cores} task "
                f"slot(s) and leave none for Spark jobs; use local[{brokers + 1}] or more, or "
                "fewer brokers"
            )
        return
    deadline = time.monotonic() + timeout_s
    while True:
        registered = sc._jsc.sc().getExecutorMemoryStatus().size() - 1
        wanted = executors if mode == "local-cluster" else brokers
        if registered >= min(wanted, brokers):
            break
        if time.monotonic() > deadline:
            raise ClusterStartError(
                f"{brokers} broker(s) need {brokers} executor(s), one broker each; only "
                f"{registered} registered within {timeout_s:.0f}s. Start Spark with at least "
                f"{brokers} executors (e.g. local-cluster[{brokers},1,1024]) or fewer brokers"
            )
        time.sleep(0.2)
    if mode == "local-cluster" and executors < brokers:
        raise ClusterStartError(
            f"{brokers} broker(s) need one executor each but {sc.master} has {executors}; "
            f"use local-cluster[{brokers},{cores},1024] or fewer brokers"
        )
