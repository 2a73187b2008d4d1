"""The soak on several "hosts": a Spark standalone master, three workers, the driver and the
clients, each in its own Linux network namespace with its own address, under real network
partitions, loss, delay and a slow link (root only; `make soak-net`).

    python jobs/soak_net.py --minutes 10 --seed 7 --json soak-net.json

Hosts (`netlab.py` builds them on one bridge; nothing touches the machine's own network):
master 10.27.0.2 (`spark-class ...deploy.master.Master`), driver 10.27.0.3 (this job's Spark
application: `sparklog.start` runs the controller and the group coordinator there), clients
10.27.0.4 (the soak's workload), workers w1-w3 10.27.0.11-13 (`...deploy.worker.Worker`, one
1-core executor each, each with a private disk at the same path). Each broker listens on, and
registers, its own worker's address; clients reach brokers and the driver only over the bridge.

Workload and checker are `soak.py`'s (this job subclasses its `Soak` and replaces only the
cluster and the nemesis), so whatever that soak produces, reads and checks runs here too. The
nemesis, one fault at a time for 5-12 s (`--fault-seconds`), every kind (`--kinds`) once per
round in an order drawn from `--seed`:
`cut_controller` drops everything between a broker's host and the driver's (controller,
coordinator, Spark's RPC); `isolate_leader` drops everything between a partition's leader and
the other workers; `cut_clients` drops everything between the clients and one broker; `loss`
drops 20-60 % of one broker's outgoing packets (the other direction is clean); `delay` holds
one broker's outgoing packets for 50-800 ms; `slow` shapes one broker's egress to 256 kbit/s
or 1 Mbit/s. After each fault the job measures the time to heal: from the fault's removal until
every broker is unfenced with every ISR full and every partition's high watermark has moved on.

Figures (JSON, also `--json`): soak.py's (lost, duplicated, offsets read with two values, HW
regressions, gaps; transactions committed/aborted, aborted records visible to read_committed;
replicas whose `.txnindex` or producer snapshot differ, read from the workers' disks once the
brokers stopped), where each lost example was acknowledged and where it is, and, under
`net`, each fault with its time to heal and the addresses every host listens on. Exit status 1
and the seed on a violation; 2 when namespaces cannot be made here (not root, tools missing).
`--log-level INFO` has every process of the lab log sparklog's lines (executor logs under
`<root>/work/w*/app-*/*/stderr`, the driver's under `<root>/logs`; `--root` keeps them).

Roles: the job runs on the machine's namespace and starts itself twice more, inside the
namespaces: `--role driver` (the Spark application; it writes the cluster's description to
`state.json` until `stop` appears) and `--role clients` (workload, nemesis, checker).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import netlab  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NODES = {"master": 2, "driver": 3, "clients": 4, "w1": 11, "w2": 12, "w3": 13}
WORKERS = ("w1", "w2", "w3")
MASTER_PORT = 7077
KINDS = ("cut_controller", "isolate_leader", "cut_clients", "loss", "delay", "slow")
HEAL_TIMEOUT_S = 120


def log(message: str) -> None:
    print(f"[soak-net {time.strftime('%H:%M:%S')}] {message}", flush=True)


def address(node: str) -> str:
    return f"{netlab.SUBNET}.{NODES[node]}"


# -- the lab (the machine's own namespace) -----------------------------------------------------


_LOG_HOOK = """import logging, os
logging.basicConfig(level=os.environ["SPARKLOG_SOAK_NET_LOG_LEVEL"],
                    format="%(asctime)s %(name)s %(levelname)s %(message)s")
"""


def _env(**extra: str) -> dict[str, str]:
    import pyspark

    keep = ("PATH", "HOME", "JAVA_HOME", "LANG", "TMPDIR", "SPARKLOG_SOAK_NET_HOOK",
            "SPARKLOG_SOAK_NET_LOG_LEVEL")  # fmt: skip
    env = {k: os.environ[k] for k in keep if k in os.environ}
    hook = os.environ.get("SPARKLOG_SOAK_NET_HOOK")  # --log-level: a sitecustomize first
    path = [*filter(None, [hook]), str(ROOT)]
    path += filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))
    env.update(
        PYTHONPATH=os.pathsep.join(path),
        SPARK_HOME=str(Path(pyspark.__file__).parent),
        SPARK_CONF_DIR=str(ROOT / "conf"),  # quiet log4j
        SPARK_DAEMON_MEMORY="256m",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def start_spark(lab: netlab.Lab, root: Path) -> list[subprocess.Popen]:
    """The standalone master and three workers, each in its namespace; a worker's executors
    (and the brokers they run) see that worker's own disk at `root/disk`."""
    spark_class = str(Path(_env()["SPARK_HOME"]) / "bin" / "spark-class")
    master = address("master")
    procs = [
        lab.popen(
            "master",
            [spark_class, "org.apache.spark.deploy.master.Master",
             "--host", master, "--port", str(MASTER_PORT), "--webui-port", "8080"],
            env=_env(SPARK_LOCAL_IP=master),
            log_path=root / "logs" / "master.log",
        )
    ]  # fmt: skip
    (root / "disk").mkdir()
    for worker in WORKERS:
        disk, work = root / "disks" / worker, root / "work" / worker
        disk.mkdir(parents=True)
        work.mkdir(parents=True)
        procs.append(
            lab.popen(
                worker,
                [spark_class, "org.apache.spark.deploy.worker.Worker",
                 "--host", address(worker), "--port", "7078", "--webui-port", "8081",
                 "--cores", "1", "--memory", "1g", "--work-dir", str(work),
                 f"spark://{master}:{MASTER_PORT}"],
                env=_env(SPARK_LOCAL_IP=address(worker)),
                log_path=root / "logs" / f"{worker}.log",
                private_dir=(disk, root / "disk"),
            )
        )  # fmt: skip
    return procs


def listening_on(lab: netlab.Lab, node: str) -> list[str]:
    """The TCP addresses a host listens on (`ss`), loopback left out: the proof that Spark's
    master and workers, the brokers and the controller bind their own host's address."""
    out = lab.run(node, "ss", "-Hltn", check=False).stdout
    found = {line.split()[3] for line in out.splitlines() if len(line.split()) > 3}
    # a JVM listens on IPv6 sockets: [::ffff:10.27.0.2]:7077 is 10.27.0.2:7077
    found = {a.replace("[::ffff:", "").replace("]:", ":") for a in found}
    return sorted(a for a in found if not a.startswith(("127.", "[::1]")))


def wait_for_cluster(driver: subprocess.Popen, state: Path, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if driver.poll() is not None:
            raise RuntimeError(f"the driver exited ({driver.returncode}); see its log")
        with contextlib.suppress(OSError, ValueError):
            described = json.loads(state.read_text())
            if described.get("topic_created"):
                return described
        time.sleep(0.5)
    raise RuntimeError(f"no cluster with the soak's topic within {timeout_s:.0f} s")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def compare_replicas_of(root: Path, report: dict[str, Any]) -> None:
    """soak.py's replica check on the workers' disks, once the brokers closed their logs."""
    from soak_txn import TXN_PARTITIONS, TXN_TOPIC, compare_replicas

    replicas = compare_replicas(root / "disks", TXN_TOPIC, TXN_PARTITIONS)
    report["replicas"] = replicas
    report["ok"] = report["ok"] and replicas["ok"]


def run_lab(args: argparse.Namespace) -> int:
    reason = netlab.unavailable_reason()
    if reason is not None:
        log(f"cannot build the namespaces: {reason}")
        return 2
    name = args.name or f"sl27x{os.getpid():x}"
    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="sparklog-soak-net-"))
    (root / "logs").mkdir(parents=True, exist_ok=True)
    lab = netlab.Lab(name)
    if args.log_level:  # every process of the lab logs sparklog's lines at this level
        (root / "hook").mkdir(exist_ok=True)
        (root / "hook" / "sitecustomize.py").write_text(_LOG_HOOK)
        os.environ["SPARKLOG_SOAK_NET_HOOK"] = str(root / "hook")
        os.environ["SPARKLOG_SOAK_NET_LOG_LEVEL"] = args.log_level
    signal.signal(signal.SIGTERM, _interrupt)  # a test's timeout still runs the cleanup below
    log(f"lab {name} under {root} (seed {args.seed}, {args.minutes} min)")
    report: dict[str, Any] | None = None
    driver = None
    try:
        lab.create(NODES)
        start_spark(lab, root)
        me = [sys.executable, str(Path(__file__).resolve()), "--root", str(root)]
        driver = lab.popen(
            "driver",
            [*me, "--role", "driver"],
            env=_env(SPARK_LOCAL_IP=address("driver")),
            log_path=root / "logs" / "driver.log",
        )
        described = wait_for_cluster(driver, root / "state.json", args.start_timeout)
        log("brokers at " + ", ".join(f"{b['host']}:{b['port']}" for b in described["brokers"]))
        listening = {node: listening_on(lab, node) for node in NODES}
        log(f"listening: {listening}")
        clients = lab.popen(
            "clients",
            [*me, "--role", "clients", "--lab", name, "--seed", str(args.seed),
             "--minutes", str(args.minutes), "--fault-seconds", args.fault_seconds,
             "--kinds", args.kinds, "--min-faults", str(args.min_faults)],
            env=_env(SPARK_LOCAL_IP=address("clients")),
            log_path=root / "logs" / "clients.log",
        )  # fmt: skip
        with open(root / "logs" / "clients.log", "rb") as out:
            while clients.poll() is None:
                time.sleep(1)
                sys.stdout.write(out.read().decode(errors="replace"))
            sys.stdout.write(out.read().decode(errors="replace"))
        report = json.loads((root / "report.json").read_text())
        report["net"]["listening"] = listening
    except (RuntimeError, OSError, ValueError, KeyboardInterrupt) as e:
        log(f"the run failed: {e!r}; logs under {root / 'logs'}")
    finally:
        (root / "stop").touch()
        if driver is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                driver.wait(60)
        if report is not None and driver is not None and driver.returncode == 0:
            compare_replicas_of(root, report)
        lab.close()
        log(f"namespaces of {name} removed")
    if report is None:
        for f in sorted((root / "logs").glob("*.log")):
            sys.stdout.write(f"--- {f.name} (last lines)\n")
            sys.stdout.write("\n".join(f.read_text(errors="replace").splitlines()[-25:]) + "\n")
        return 1
    text = json.dumps(report, indent=2, sort_keys=True)
    print(text)
    if args.json is not None:
        args.json.write_text(text)
    if not report["ok"]:
        log(f"VIOLATION with seed {args.seed}; logs under {root / 'logs'}")
        return 1
    if not args.root:
        shutil.rmtree(root, ignore_errors=True)
    return 0


# -- the driver (namespace `driver`) -----------------------------------------------------------


def run_driver(args: argparse.Namespace) -> int:
    from pyspark.sql import SparkSession
    from soak import CLUSTER_CONFIG, create_topics

    import sparklog

    root, host = Path(args.root), address("driver")
    spark = (
        SparkSession.builder.master(f"spark://{address('master')}:{MASTER_PORT}")
        .appName("sparklog-soak-net")
        .config("spark.driver.host", host)
        .config("spark.driver.bindAddress", host)
        .config("spark.driver.memory", "512m")
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "3")
        .config("spark.ui.enabled", "false")
        .config("spark.speculation", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    config = {**CLUSTER_CONFIG, "log.dirs": str(root / "disk")}
    cluster = sparklog.start(spark, brokers=3, config=config, data_dir=root / "driver")
    try:
        create_topics(cluster.bootstrap_servers)
        state, tmp = root / "state.json", root / "state.json.tmp"
        while not (root / "stop").exists():
            described = cluster.describe()
            described.update(topic_created=True, written_at=time.time())
            tmp.write_text(json.dumps(described))
            os.replace(tmp, state)
            time.sleep(0.3)
    finally:
        cluster.stop(timeout_s=30)
        spark.stop()
    return 0


# -- the clients (namespace `clients`): soak.py's workload and checker, this nemesis ------------


class StateFileCluster:
    """The driver's `cluster.describe()`, as it last wrote it (through the shared disk, which
    no network fault touches)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def describe(self) -> dict[str, Any]:
        for _ in range(50):
            with contextlib.suppress(OSError, ValueError):
                described = json.loads(self.path.read_text())
                if time.time() - described["written_at"] < 10:
                    return described
            time.sleep(0.2)
        raise RuntimeError(f"the driver stopped describing the cluster ({self.path})")

    @property
    def bootstrap_servers(self) -> str:
        return self.describe()["bootstrap_servers"]


class _NoProxy:
    """soak.py's replication proxy is not used: followers reach leaders over the bridge."""

    connections: Counter[int] = Counter()

    def update(self, brokers: list[dict[str, Any]]) -> None:
        pass


def _soak_class() -> type:
    from soak import PARTITIONS, TOPIC, Soak

    class NetSoak(Soak):
        """soak.py's run (workload, healing, final read, verdict) on the namespaced cluster,
        with network faults for a nemesis."""

        def __init__(self, args: argparse.Namespace) -> None:
            # not Soak.__init__: its TCP proxy and tmpfs serve the local-cluster soak only
            self.args = args
            self.rng = random.Random(f"sparklog-soak-net-{args.seed}")
            self.faults: Counter[str] = Counter()
            self.root = Path(args.root)
            self.log_dirs = self.root / "disks"  # the workers' disks, read by the dup check
            self.tmpfs = None
            self.proxy = _NoProxy()
            self.cluster = StateFileCluster(self.root / "state.json")
            self.lab = netlab.Lab(args.lab)
            self.lab.addresses = {node: address(node) for node in NODES}
            low, high = (float(s) for s in args.fault_seconds.split("-"))
            self.fault_seconds = (low, high)
            self.heals: list[dict[str, Any]] = []
            self.kinds = args.kinds.split(",")
            self._round: list[str] = []
            self._hw_consumer: Any = None

        def run_clients(self) -> dict[str, Any]:
            if not self.wait_healthy(120):
                log("the cluster is not healthy before the run; going on")
            report = self.load_and_check(self.cluster.bootstrap_servers)
            report.pop("replication_connections_via_proxy", None)  # no proxy here
            unhealed = [h for h in self.heals if h["time_to_heal_s"] is None]
            report["net"] = {
                "lab": self.args.lab,
                "hosts": {node: address(node) for node in NODES},
                "brokers": {b["broker_id"]: b["host"] for b in self.cluster.describe()["brokers"]},
                "faults": self.heals,
                "time_to_heal_s": _heal_summary(self.heals),
                "faults_not_healed": len(unhealed),
            }
            report["ok"] = report["ok"] and not unhealed
            return report

        def verdict(self, producer, readers, sampler, seen, final, healed) -> dict[str, Any]:
            """soak.py's verdict, plus where each example of a lost record was acknowledged,
            where it is now and what sits at its acknowledged offset."""
            report = super().verdict(producer, readers, sampler, seen, final, healed)
            found: dict[int, list[tuple[int, int]]] = {}
            at: dict[tuple[int, int], bytes] = {}
            for p, records in final.items():
                for offset, value in records:
                    at[(p, offset)] = value
                    found.setdefault(int(value), []).append((p, offset))
            report["lost_where"] = [
                {
                    "seq": s,
                    "acked_at": producer.acked.get(s),
                    "found_at": found.get(s, []),
                    "at_acked_offset": (at.get(tuple(producer.acked[s])) or b"").decode()
                    if s in producer.acked
                    else None,
                }
                for s in report["examples"]["lost"]
            ]
            return report

        # -- the nemesis -----------------------------------------------------------------

        def inject(self) -> None:
            if not self._round:  # every kind once per round, in an order drawn from the seed
                self._round = self.rng.sample(self.kinds, len(self.kinds))
            kind = self._round.pop()
            described = self.cluster.describe()
            live = [b for b in described["brokers"] if not b["fenced"]]
            if not live:
                return
            victim = self.rng.choice(live)
            if kind == "isolate_leader":
                topic = next(t for t in described["topics"] if t["name"] == TOPIC)
                partition = self.rng.choice(topic["partitions"])
                victim = next((b for b in live if b["broker_id"] == partition["leader"]), victim)
            node = self.lab.node_of(victim["host"])
            others = [w for w in WORKERS if w != node]
            seconds = self.rng.uniform(*self.fault_seconds)
            what = self._apply(kind, node, others)
            self.faults[kind] += 1
            log(f"{kind}: broker {victim['broker_id']} ({victim['host']}) {what}, {seconds:.1f} s")
            noticed = False
            until = time.monotonic() + seconds
            while time.monotonic() < until:
                noticed = noticed or not self.healthy()
                time.sleep(0.25)
            before = self.watermarks()
            self.lab.heal(node)
            healed_at = time.monotonic()
            took = self.wait_healed(before, healed_at + HEAL_TIMEOUT_S)
            took_s = None if took is None else round(took - healed_at, 2)
            log(f"{kind}: healed in {took_s} s" + ("" if noticed else " (cluster stayed healthy)"))
            self.heals.append(
                {
                    "kind": kind,
                    "broker": victim["broker_id"],
                    "what": what,
                    "seconds": round(seconds, 1),
                    "cluster_noticed": noticed,
                    "time_to_heal_s": took_s,
                }
            )

        def _apply(self, kind: str, node: str, others: list[str]) -> str:
            if kind == "cut_controller":
                self.lab.cut(node, ["driver"])
                return "cut from the driver (controller, coordinator, Spark RPC)"
            if kind == "isolate_leader":
                self.lab.cut(node, others)
                return f"cut from {', '.join(others)}"
            if kind == "cut_clients":
                self.lab.cut(node, ["clients"])
                return "cut from the clients"
            peers = [*others, "driver", "clients"]
            if kind == "loss":
                percent = self.rng.choice((20, 40, 60))
                self.lab.loss(node, peers, percent)
                return f"drops {percent}% of its outgoing packets"
            if kind == "delay":
                delay_ms = self.rng.choice((50, 200, 800))
                self.lab.delay(node, peers, delay_ms)
                return f"sends with +{delay_ms} ms"
            rate_kbit = self.rng.choice((256, 1024))
            self.lab.slow(node, rate_kbit)
            return f"sends at {rate_kbit} kbit/s"

        def watermarks(self) -> dict[int, int]:
            from confluent_kafka import Consumer, TopicPartition

            if self._hw_consumer is None:
                self._hw_consumer = Consumer(
                    {"bootstrap.servers": self.cluster.bootstrap_servers, "group.id": "soak-net"}
                )
            out = {}
            for p in range(PARTITIONS):
                with contextlib.suppress(Exception):  # a fault may make one call fail
                    out[p] = self._hw_consumer.get_watermark_offsets(
                        TopicPartition(TOPIC, p), timeout=2, cached=False
                    )[1]
            return out

        def wait_healed(self, before: dict[int, int], deadline: float) -> float | None:
            """When the cluster is whole again (every broker unfenced, every ISR full) and
            every partition's high watermark passed its value at the fault's removal."""
            moved: set[int] = set()
            before = dict(before)
            while time.monotonic() < deadline:
                now = self.watermarks()
                # a partition the fault hid at removal: its first answer since is the mark
                for p, hw in now.items():
                    before.setdefault(p, hw)
                moved |= {p for p, hw in now.items() if hw > before[p]}
                if len(moved) == PARTITIONS and self.healthy():
                    return time.monotonic()
                time.sleep(0.25)
            return None

    return NetSoak


def _heal_summary(heals: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in KINDS:
        took = [h["time_to_heal_s"] for h in heals if h["kind"] == kind]
        done = sorted(t for t in took if t is not None)
        if took:
            out[kind] = {"count": len(took), "max": max(done, default=None),
                         "median": done[len(done) // 2] if done else None}  # fmt: skip
    return out


def run_clients(args: argparse.Namespace) -> int:
    report = _soak_class()(args).run_clients()
    (Path(args.root) / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--json", type=Path, default=None, help="write the report here")
    parser.add_argument("--fault-seconds", default="5-12", help="each fault lasts LOW-HIGH s")
    parser.add_argument("--kinds", default=",".join(KINDS), help="faults to draw from")
    parser.add_argument(
        "--min-faults", type=int, default=0, help="keep the nemesis on until it made this many"
    )
    parser.add_argument("--name", default=None, help="namespace prefix (unique per run)")
    parser.add_argument("--root", default=None, help="working dir (kept; default: a temp dir)")
    parser.add_argument("--log-level", default=None, help="e.g. INFO: sparklog's log lines")
    parser.add_argument("--start-timeout", type=float, default=420.0)
    parser.add_argument("--role", choices=("lab", "driver", "clients"), default="lab")
    parser.add_argument("--lab", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if unknown := set(args.kinds.split(",")) - set(KINDS):
        parser.error(f"--kinds: unknown {', '.join(sorted(unknown))}; known: {', '.join(KINDS)}")
    if args.role == "driver":
        return run_driver(args)
    if args.role == "clients":
        return run_clients(args)
    return run_lab(args)


if __name__ == "__main__":
    sys.exit(main())
