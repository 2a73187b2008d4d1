"""Benchmark: replication on loopback: a controller and three brokers, each in its own process.

The controller and every broker run as child processes of this script (`--child ...`), so
clients, leader and followers never share a GIL, and a broker can be killed with SIGKILL and
started again on its data dir and port, as a crashed Kafka broker would be. The cluster uses the
integration tests' leases (broker.heartbeat.interval.ms=100, broker.session.timeout.ms=1500);
values are 100 bytes (random A-Z, as in jobs/bench_broker.py), lz4, linger.ms=5.

  (a) throughput: `--messages` values into one topic of `--partitions` partitions, RF=3 with
      acks=all (min.insync.replicas=2) against RF=1 with acks=1, with the same producer:
      confluent-kafka's produce_batch and sparklog's send_arrow (no idempotence in either, so
      acks and the replication factor are the only differences); `--repeat` interleaved runs
      of each, the median counts. Each run's topic is deleted once checked, and the next run
      starts when the brokers removed its files. The headline `rf3_vs_rf1` is the ratio of the producer that
      was faster at RF=1.
  (b) produce latency: send -> acknowledgement of each record with acks=all (RF=3) at `--rate`
      msgs/s paced for `--latency-s` seconds after a warm-up second; `acks_all_p50_ms` and
      `acks_all_p99_ms` are the headline producer's, and RF=1 acks=1 is measured as the baseline.
  (c) failover: `--failover-rounds` times, a probe producer (idempotent, acks=all) sends to
      partition 0 of an RF=3 topic at 200 msgs/s; the process of that partition's leader gets
      SIGKILL; the round's figure is the time from the kill to the acknowledgement of the first
      record sent after the killed process was reaped (a record the old leader cannot have
      acknowledged). Its parts: `fenced` (the controller's log line: lease expiry + its tick;
      the election is in the same commit), `leader_seen` (a watcher polling Metadata from the
      surviving brokers sees the new leader: + metadata propagation) and `client_share` (the
      rest: the client's retry back-off and metadata refresh, the new leader's HW advance).
      Then the killed broker restarts on its data dir; `rejoin` is the time until ISR=3 again.

`--json FILE` writes one object with every figure and the run's conditions; a table is printed.
`--profile DIR` writes a cProfile of each broker process's loop thread to DIR (figures from a
profiled run are not the benchmark's). `--quick` runs tiny sizes (the integration smoke test).
`--rf 1` runs the same harness without replication (acks=all on RF=1, failover = restart), for
debugging the harness itself.

Usage: .venv/bin/python jobs/bench_replication.py [--messages N] [--json FILE] [--quick]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_broker
import numpy as np
import pyarrow as pa
from bench_broker import MB, POOL_SIZE, VALUE_BYTES, paced, value_pool

#: tests/integration/conftest.py's leases: a dead broker is fenced within 1.5 s
CLUSTER_CONFIG = {
    "broker.heartbeat.interval.ms": "100",
    "broker.session.timeout.ms": "1500",
}
TARGETS = {"rf3_vs_rf1": 0.4, "acks_all_p99_ms": 20.0, "failover_median_s": 3.0}
TUNING = {"compression.type": "lz4", "linger.ms": 5, "batch.size": 1_000_000}
PRODUCERS = ("confluent", "sparklog")
WARMUP_S = 1.0
PROBE_RATE = 200  # (c) msgs/s of the probe producer
START_TIMEOUT_S = 60.0
ROUND_TIMEOUT_S = 60.0


# -- child processes ---------------------------------------------------------------------------


def child_main(args: argparse.Namespace) -> None:
    """`--child controller|broker`: serve until SIGTERM, after printing `bootstrap.servers=`."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    config = json.loads(args.child_config)
    data_dir = Path(args.child_dir)
    if args.child == "controller":
        from sparklog.controller.server import ControllerServer

        # (c) reads the fencing times from these lines (stderr goes to controller.log)
        logging.basicConfig(level=logging.INFO, format="%(created).6f %(name)s %(message)s")

        controller = ControllerServer(data_dir, config=config).start_in_thread()
        print(f"bootstrap.servers={controller.bootstrap}", flush=True)
        while not stop.wait(0.2):
            pass
        controller.stop()
        return
    from sparklog.broker.server import BrokerServer, BrokerState

    broker = BrokerServer(args.node_id, data_dir, args.controller, config)

    def announce() -> None:
        while broker.state is not BrokerState.RUNNING:
            time.sleep(0.01)
        print(f"bootstrap.servers={broker.bootstrap}", flush=True)

    threading.Thread(target=announce, daemon=True).start()
    profile_dir = os.environ.get("_BENCH_PROFILE_DIR")
    if not profile_dir:
        broker.run_forever(stop)
        return
    import cProfile

    with cProfile.Profile() as profiler:  # the broker's loop thread, its whole life
        broker.run_forever(stop)
    profiler.dump_stats(f"{profile_dir}/broker-{args.node_id}-{os.getpid()}.prof")


class Child:
    """A controller or broker process; it prints `bootstrap.servers=host:port` once serving."""

    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        with open(log_path, "ab") as log_file:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log_file)
        self.bootstrap = ""

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """Block until the child announced its address; fails with its log's tail."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        line = self.proc.stdout.readline().decode().strip() if ready else ""
        if not line.startswith("bootstrap.servers="):
            self.kill()
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.name} did not start within {timeout_s}s:\n{tail}")
        self.bootstrap = line.split("=", 1)[1]
        return self.bootstrap

    def cpu_s(self) -> float:
        """CPU seconds (user + system, all threads) the process used so far; 0 once reaped."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def kill(self) -> None:
        """SIGKILL, and reap it (its sockets are closed when this returns)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()


def free_ports(count: int) -> list[int]:
    """Ports free right now on 127.0.0.1 (held open together so they differ)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class Cluster:
    """Controller + brokers as child processes on fixed ports (a restart keeps its address)."""

    def __init__(self, root: Path, config: dict[str, str], brokers: int = 3) -> None:
        self.root = root
        self.config = config
        self.ports = free_ports(brokers)
        self._admin: Any = None
        self.brokers: list[Child] = []
        self.controller = self._child("controller", root / "controller", config)
        try:
            self.controller.wait_ready()
            self.brokers = [self._spawn(i) for i in range(brokers)]
            for broker in self.brokers:
                broker.wait_ready()
        except BaseException:
            self.stop()
            raise

    def _child(self, name: str, data_dir: Path, config: dict[str, str], *extra: str) -> Child:
        argv = [sys.executable, __file__, "--child", name.split("-")[0], "--child-dir",
                str(data_dir), "--child-config", json.dumps(config), *extra]  # fmt: skip
        return Child(name, argv, self.root / f"{name}.log")

    def _spawn(self, node_id: int) -> Child:
        listener = {"listeners": f"PLAINTEXT://127.0.0.1:{self.ports[node_id]}"}
        extra = ("--node-id", str(node_id), "--controller", self.controller.bootstrap)
        name = f"broker-{node_id}"
        return self._child(name, self.root / name, {**self.config, **listener}, *extra)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def kill(self, node_id: int) -> None:
        self.brokers[node_id].kill()

    def restart(self, node_id: int) -> None:
        """Start a killed broker again on its data dir and port; returns once it is unfenced."""
        self.brokers[node_id] = self._spawn(node_id)
        self.brokers[node_id].wait_ready()

    def fenced_at(self, node_id: int, after: float) -> float | None:
        """Wall-clock time the controller logged fencing `node_id` after `after`, if it did."""
        pattern = re.compile(rf"^(\d+\.\d+) \S+ fenced broker {node_id}:", re.MULTILINE)
        text = (self.root / "controller.log").read_text(errors="replace")
        return next((float(t) for t in pattern.findall(text) if float(t) > after), None)

    def broker_cpu_s(self) -> float:
        return sum(b.cpu_s() for b in self.brokers)

    def admin(self) -> Any:
        from sparklog.client import AdminClient

        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def create_topic(self, name: str, partitions: int, rf: int) -> str:
        from sparklog.client import NewTopic

        configs = {"min.insync.replicas": "2"} if rf >= 2 else {}
        self.admin().create_topics([NewTopic(name, partitions, rf, configs)])
        self.wait_for_isr(name, rf)
        return name

    def delete_topic(self, name: str, timeout_s: float = ROUND_TIMEOUT_S) -> None:
        """Delete a topic whose figures are taken and wait until every broker removed its
        files, so neither its dirty pages nor the deletion run under the next measurement."""
        self.admin().delete_topics([name])
        deadline = time.monotonic() + timeout_s
        while any(self.root.glob(f"broker-*/{name}-*")):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the brokers did not delete {name} within {timeout_s}s")
            time.sleep(0.05)

    def partitions(self, topic: str) -> tuple[Any, ...]:
        """The topic's partitions as the brokers' Metadata describes them (leader, ISR)."""
        return self.admin().describe_topics([topic])[topic].partitions

    def wait_for_isr(self, topic: str, size: int, timeout_s: float = ROUND_TIMEOUT_S) -> None:
        """Until every partition of `topic` has a leader and `size` in-sync replicas."""
        deadline, parts = time.monotonic() + timeout_s, ()
        while time.monotonic() < deadline:
            try:
                parts = self.partitions(topic)
                if parts and all(p.leader >= 0 and len(p.isr) >= size for p in parts):
                    return
            except Exception:  # noqa: BLE001 - a broker may be down while we ask
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{topic}: ISR did not reach {size} within {timeout_s}s: {parts}")

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
        for broker in self.brokers:
            broker.stop()
        self.controller.stop()


def end_offsets_total(bootstrap: str, topic: str, partitions: int) -> int:
    from sparklog.client import KafkaConsumer

    with KafkaConsumer({"bootstrap.servers": bootstrap}) as consumer:
        return sum(consumer.end_offsets([(topic, p) for p in range(partitions)]).values())


# -- (a) throughput ----------------------------------------------------------------------------


def confluent_producer(bootstrap: str, acks: str, **overrides: Any) -> Any:
    """bench_broker's tuned confluent producer with `acks` set."""
    return bench_broker.confluent_producer(bootstrap, acks=acks, **overrides)


def sparklog_producer(bootstrap: str, acks: str, **overrides: Any) -> Any:
    from sparklog.client import KafkaProducer

    return KafkaProducer(
        {
            "bootstrap.servers": bootstrap,
            **TUNING,
            "acks": acks,
            "enable.idempotence": False,
            "buffer.memory": 64 * 1024 * 1024,
            **overrides,
        }
    )


def produce_confluent(bs: str, topic: str, pool: list[bytes], count: int, acks: str) -> float:
    """bench_broker's produce_batch() run (the Python client's cheapest path) with `acks`."""
    return bench_broker.produce_confluent_batch(bs, topic, pool, count, acks=acks)


def produce_sparklog(bs: str, topic: str, pool: list[bytes], count: int, acks: str) -> float:
    """send_arrow() of 65,536-row Arrow chunks prepared beforehand, then flush."""
    values = pa.array(pool, pa.binary())
    chunks = []
    for start in range(0, count, 65_536):
        rows = np.arange(start, min(count, start + 65_536)) % POOL_SIZE
        chunks.append(pa.RecordBatch.from_arrays([values.take(pa.array(rows))], names=["value"]))
    with sparklog_producer(bs, acks) as producer:
        producer.partitions_for(topic)
        started = time.perf_counter()
        futures = [producer.send_arrow(topic, batch) for batch in chunks]
        producer.flush()
        elapsed = time.perf_counter() - started
    assert sum(m.record_count for f in futures for m in f.result()) == count
    return elapsed


def run_throughput(cluster: Cluster, args: argparse.Namespace, out: dict[str, Any]) -> str:
    """(a), `--repeat` rounds of every (producer, RF) run, interleaved so that load from
    elsewhere hits all alike; the median of each. Returns the headline producer: the faster
    one at RF=1."""
    pool, n, parts = value_pool(), args.messages, args.partitions
    work = {"confluent": produce_confluent, "sparklog": produce_sparklog}
    warmup = cluster.create_topic("tput-warmup", parts, 1)
    for client in args.producers:  # connections, imports, the brokers' first segments
        work[client](cluster.bootstrap, warmup, pool, min(n, 50_000), "1")
    cluster.delete_topic(warmup)
    runs = [(c, rf, acks) for c in args.producers for rf, acks in ((1, "1"), (args.rf, "all"))]
    for rep in range(args.repeat):
        for client, rf, acks in runs:
            topic = cluster.create_topic(f"tput-{client}-rf{rf}-acks{acks}-{rep}", parts, rf)
            cpu = cluster.broker_cpu_s()
            seconds = work[client](cluster.bootstrap, topic, pool, n, acks)
            cpu = cluster.broker_cpu_s() - cpu
            assert end_offsets_total(cluster.bootstrap, topic, parts) == n, f"{topic} lost records"
            cluster.delete_topic(topic)
            key = f"{client}_rf{rf}_acks{'all' if acks == 'all' else 1}"
            out.setdefault(f"{key}_runs_mb_s", []).append(n * VALUE_BYTES / MB / seconds)
            out.setdefault(f"{key}_runs_broker_cpu_s", []).append(cpu)
            print(
                f"(a) {client:9s} RF={rf} acks={acks:3s}: {n * VALUE_BYTES / MB / seconds:6.1f} "
                f"MB/s ({n / seconds:,.0f} records/s; brokers' CPU {cpu:.1f} s)",
                flush=True,
            )
    for client, rf, acks in runs:
        key = f"{client}_rf{rf}_acks{'all' if acks == 'all' else 1}"
        out[f"{key}_mb_s"] = statistics.median(out[f"{key}_runs_mb_s"])
    for client in args.producers:
        rf3, rf1 = out[f"{client}_rf{args.rf}_acksall_mb_s"], out[f"{client}_rf1_acks1_mb_s"]
        out[f"{client}_rf3_vs_rf1"] = rf3 / rf1
    best = max(args.producers, key=lambda c: out[f"{c}_rf1_acks1_mb_s"])
    out["producer"] = best
    out["rf3_vs_rf1"] = out[f"{best}_rf3_vs_rf1"]
    out["rf3_mb_s"] = out[f"{best}_rf{args.rf}_acksall_mb_s"]
    out["rf1_mb_s"] = out[f"{best}_rf1_acks1_mb_s"]
    return best


# -- (b) produce latency -----------------------------------------------------------------------


def ack_latencies(
    client: str, bs: str, topic: str, rate: int, seconds: float, acks: str
) -> np.ndarray:
    """Send -> acknowledgement in ms of each record sent after the warm-up second."""
    total = int(rate * (seconds + WARMUP_S))
    sent_ns = np.zeros(total, dtype=np.int64)
    acked_ns = np.zeros(total, dtype=np.int64)
    failures: list[Any] = []
    value = b"x" * VALUE_BYTES

    def acked(i: int, error: Any) -> None:
        acked_ns[i] = time.perf_counter_ns()
        if error:
            failures.append(error)

    if client == "confluent":
        producer = confluent_producer(bs, acks)

        def send(i: int) -> None:
            sent_ns[i] = time.perf_counter_ns()
            producer.produce(topic, value, on_delivery=lambda err, _m, i=i: acked(i, err))

        paced(rate, seconds + WARMUP_S, send, lambda: producer.poll(0))
        assert producer.flush(60) == 0
    else:
        with sparklog_producer(bs, acks) as producer:
            producer.partitions_for(topic)

            def send(i: int) -> None:
                sent_ns[i] = time.perf_counter_ns()
                producer.send(topic, value, on_delivery=lambda _m, err, i=i: acked(i, err))

            paced(rate, seconds + WARMUP_S, send, lambda: None)
            producer.flush()
    assert not failures and acked_ns.all(), f"{client}: {len(failures)} failed: {failures[:3]}"
    warmup = int(rate * WARMUP_S)
    return (acked_ns[warmup:] - sent_ns[warmup:]) / 1e6


def run_latency(cluster: Cluster, args: argparse.Namespace, best: str, out: dict) -> None:
    """(b): acks=all on RF=3 with every producer, and the headline producer's RF=1 acks=1."""
    runs = [(client, args.rf, "all") for client in args.producers] + [(best, 1, "1")]
    for client, rf, acks in runs:
        topic = cluster.create_topic(f"lat-{client}-rf{rf}-acks{acks}", 1, rf)
        ms = ack_latencies(client, cluster.bootstrap, topic, args.rate, args.latency_s, acks)
        p50, p99, worst = np.percentile(ms, [50, 99, 100])
        key = f"{client}_{'acks_all' if acks == 'all' else 'rf1_acks1'}"
        out[f"{key}_p50_ms"], out[f"{key}_p99_ms"] = float(p50), float(p99)
        out[f"{key}_max_ms"] = float(worst)
        print(
            f"(b) {client:9s} RF={rf} acks={acks:3s} at {args.rate} msgs/s: p50 {p50:.2f} ms, "
            f"p99 {p99:.2f} ms, max {worst:.1f} ms ({len(ms)} records)",
            flush=True,
        )
    out["acks_all_p50_ms"] = out[f"{best}_acks_all_p50_ms"]
    out["acks_all_p99_ms"] = out[f"{best}_acks_all_p99_ms"]


# -- (c) failover ------------------------------------------------------------------------------


class ProbeStream:
    """A producer thread sending to partition 0 at PROBE_RATE msgs/s (idempotent, acks=all),
    noting each record's send and acknowledgement time (perf_counter seconds)."""

    def __init__(self, client: str, bootstrap: str, topic: str) -> None:
        self.client, self.bootstrap, self.topic = client, bootstrap, topic
        self.sent: list[float] = []
        self.acked: dict[int, float] = {}
        self.failures: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="probe", daemon=True)
        self._thread.start()

    def _on_ack(self, i: int, error: Any) -> None:
        if error:
            self.failures.append(error)
        else:
            self.acked[i] = time.perf_counter()

    def _run(self) -> None:
        overrides = {"enable.idempotence": True, "linger.ms": 0}
        if self.client == "confluent":  # log_level=0: its connection-refused lines are ours
            producer = confluent_producer(self.bootstrap, "all", **overrides, log_level=0)
            self._pace(
                lambda i: producer.produce(
                    self.topic, b"probe", partition=0, on_delivery=lambda e, _m: self._on_ack(i, e)
                ),
                producer.poll,  # runs the delivery callbacks while it waits
            )
            producer.flush(ROUND_TIMEOUT_S)
            return
        with sparklog_producer(self.bootstrap, "all", **overrides) as producer:
            self._pace(
                lambda i: producer.send(
                    self.topic, b"probe", partition=0, on_delivery=lambda _m, e: self._on_ack(i, e)
                ),
                self._stop.wait,
            )
            producer.flush()

    def _pace(self, send: Callable[[int], Any], wait: Callable[[float], Any]) -> None:
        started = time.perf_counter()
        while not self._stop.is_set():
            self.sent.append(time.perf_counter())
            send(len(self.sent) - 1)
            due = started + len(self.sent) / PROBE_RATE
            while (remaining := due - time.perf_counter()) > 0 and not self._stop.is_set():
                wait(remaining)

    def first_ack_after(self, t: float, timeout_s: float) -> float:
        """Ack time of the first record sent after `t` (waits for it)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            first = next((i for i, s in enumerate(list(self.sent)) if s > t), None)
            if first is not None and first in self.acked:
                return self.acked[first]
            time.sleep(0.002)
        raise TimeoutError(f"no record sent after the kill was acknowledged within {timeout_s}s")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(ROUND_TIMEOUT_S)
        assert not self.failures, f"probe records failed: {self.failures[:3]}"
        assert len(self.acked) == len(self.sent), f"{len(self.sent) - len(self.acked)} unacked"


def watch_leader(cluster: Cluster, topic: str, old_leader: int) -> Callable[[], float | None]:
    """Poll Metadata (a fresh admin client, every 10 ms) until partition 0 names another
    leader; the returned join() gives the perf_counter time it was first seen."""
    from sparklog.client import AdminClient

    seen: list[float] = []

    def poll() -> None:
        with AdminClient({"bootstrap.servers": cluster.bootstrap}) as admin:
            deadline = time.monotonic() + ROUND_TIMEOUT_S
            while time.monotonic() < deadline:
                try:
                    leader = admin.describe_topics([topic])[topic].partitions[0].leader
                except Exception:  # noqa: BLE001 - the killed broker refuses connections
                    leader = old_leader
                if leader not in (old_leader, -1):
                    seen.append(time.perf_counter())
                    return
                time.sleep(0.01)

    thread = threading.Thread(target=poll, name="leader-watch", daemon=True)
    thread.start()
    return lambda: (thread.join(ROUND_TIMEOUT_S), seen[0] if seen else None)[1]


def failover_round(cluster: Cluster, topic: str, client: str, rf: int) -> dict[str, float]:
    """Kill partition 0's leader, time the first acknowledged record, bring it back."""
    victim = cluster.partitions(topic)[0].leader
    stream = ProbeStream(client, cluster.bootstrap, topic)
    try:
        stream.first_ack_after(time.perf_counter(), ROUND_TIMEOUT_S)  # warm: connected, acked
        elected = watch_leader(cluster, topic, victim) if rf > 1 else lambda: None
        t_kill, wall_kill = time.perf_counter(), time.time()
        cluster.kill(victim)
        t_dead = time.perf_counter()
        if rf == 1:  # no other replica: the partition is back when its broker is
            cluster.restart(victim)
        t_ack = stream.first_ack_after(t_dead, ROUND_TIMEOUT_S)
        t_elected = elected() or float("nan")
    finally:
        stream.stop()
    t_restart = time.perf_counter()
    if rf > 1:
        cluster.restart(victim)
    cluster.wait_for_isr(topic, rf)
    fenced = cluster.fenced_at(victim, wall_kill)
    return {
        "victim": victim,
        "failover": t_ack - t_kill,
        "fenced": fenced - wall_kill if fenced is not None else float("nan"),
        "leader_seen": t_elected - t_kill,
        "client_share": t_ack - t_elected,
        "rejoin": time.perf_counter() - t_restart,
    }


def run_failover(cluster: Cluster, args: argparse.Namespace, out: dict[str, Any]) -> None:
    """(c) with each producer in `--failover-clients`; the first one's median is the headline."""
    for client in args.failover_clients:
        topic = cluster.create_topic(f"failover-{client}", 1, args.rf)
        rounds = []
        for n in range(args.failover_rounds):
            r = failover_round(cluster, topic, client, args.rf)
            rounds.append(r)
            print(
                f"(c) {client:9s} round {n + 1:2d}: killed broker {r['victim']}, first ack after "
                f"{r['failover']:.2f} s (fenced after {r['fenced']:.2f} s, new leader seen "
                f"after {r['leader_seen']:.2f} s, client {r['client_share']:.2f} s; restarted "
                f"and back in the ISR in {r['rejoin']:.2f} s)",
                flush=True,
            )
        for field in ("failover", "fenced", "leader_seen", "client_share", "rejoin"):
            out[f"{client}_{field}_s"] = [r[field] for r in rounds]
            out[f"{client}_{field}_median_s"] = statistics.median(r[field] for r in rounds)
    first = args.failover_clients[0]
    out["failover_client"] = first
    for field in ("failover", "fenced", "leader_seen", "client_share", "rejoin"):
        out[f"{field}_median_s"] = out[f"{first}_{field}_median_s"]


# -- the run -----------------------------------------------------------------------------------


def summarize(out: dict[str, Any]) -> None:
    print(f"\n{'figure':28s} {'value':>10s}  target")
    out["targets_met"] = {}
    for key, target in TARGETS.items():
        if key not in out:
            continue
        lower = key.endswith(("_ms", "_s"))
        ok = out[key] <= target if lower else out[key] >= target
        out["targets_met"][key] = bool(ok)
        sign = "<=" if lower else ">="
        print(f"{key:28s} {out[key]:10.3f}  {sign} {target} ({'met' if ok else 'NOT met'})")
    for key in ("rf1_mb_s", "rf3_mb_s", "acks_all_p50_ms", "fenced_median_s",
                "leader_seen_median_s", "client_share_median_s", "rejoin_median_s"):  # fmt: skip
        if key in out:
            print(f"{key:28s} {out[key]:10.3f}")
    print(f"(producer: {out.get('producer')}; failover client: {out.get('failover_client')})")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="(a) per run")
    parser.add_argument("--partitions", type=int, default=1, help="(a) partitions per topic")
    parser.add_argument("--repeat", type=int, default=3, help="(a) runs of each, median")
    parser.add_argument("--rate", type=int, default=5_000, help="(b) msgs/s")
    parser.add_argument("--latency-s", type=float, default=5.0, help="(b) seconds per run")
    parser.add_argument("--failover-rounds", type=int, default=10)
    parser.add_argument("--producers", default="confluent,sparklog", help="(a), (b)")
    parser.add_argument("--failover-clients", default="sparklog", help="(c), comma-separated")
    parser.add_argument("--phases", default="abc", help="which phases to run")
    parser.add_argument("--rf", type=int, default=3, help="the replicated runs' factor")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--profile", help="cProfile each broker into this dir (slows them)")
    parser.add_argument("--child", choices=("controller", "broker"), help=argparse.SUPPRESS)
    parser.add_argument("--child-dir", help=argparse.SUPPRESS)
    parser.add_argument("--child-config", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--node-id", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--controller", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.messages, args.latency_s, args.failover_rounds, args.repeat = 20_000, 1.0, 1, 1
        args.producers = "sparklog"
    args.producers = [p for p in args.producers.split(",") if p]
    args.failover_clients = [c for c in args.failover_clients.split(",") if c]
    for name in (*args.producers, *args.failover_clients):
        if name not in PRODUCERS:
            parser.error(f"unknown producer {name!r}: pick from {', '.join(PRODUCERS)}")
    return args


def main() -> None:
    args = parse_args()
    if args.child:
        child_main(args)
        return
    out: dict[str, Any] = {}
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
        os.environ["_BENCH_PROFILE_DIR"] = str(Path(args.profile).resolve())
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-repl-") as tmp:
        started, load_start = time.monotonic(), os.getloadavg()[0]
        cluster = Cluster(Path(tmp), CLUSTER_CONFIG)
        try:
            best = args.producers[0]
            if "a" in args.phases:
                best = run_throughput(cluster, args, out)
            if "b" in args.phases:
                run_latency(cluster, args, best, out)
            if "c" in args.phases:
                run_failover(cluster, args, out)
        finally:
            cluster.stop()
        out["wall_s"] = time.monotonic() - started
    out.update(
        messages=args.messages, partitions=args.partitions, repeat=args.repeat, rate=args.rate,
        latency_s=args.latency_s, failover_rounds=args.failover_rounds,
        replication_factor=args.rf, min_insync_replicas=2, value_bytes=VALUE_BYTES,
        compression="lz4", linger_ms=TUNING["linger.ms"], cluster_config=CLUSTER_CONFIG,
        cpus=os.cpu_count(), quick=args.quick, targets=TARGETS,
        load_average_start=load_start, load_average_end=os.getloadavg()[0],
    )  # fmt: skip
    summarize(out)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
