"""Jepsen-style soak: three brokers (RF=3) on `local-cluster`, real clients, a seeded nemesis,
and a checker that proves nothing acknowledged was lost, duplicated or rewritten.

    python jobs/soak.py --minutes 30 --seed 7 --json soak.json

Clients: a confluent-kafka producer (idempotent, acks=all) sends numbered records at a steady
rate; two confluent-kafka consumers in one group read them the whole time; a sampler reads
every partition's high watermark twice a second. Transactions (`soak_txn.py`): two
confluent-kafka producers with a `transactional.id` write to `soak-txn`, aborting every 5th
transaction on purpose, while a read_committed consumer reads it from the start.

Nemesis (one fault at a time, drawn from `--seed`; the next waits until all three brokers are
back): `kill` SIGKILLs the executor JVM hosting a broker (Spark relaunches it, the broker
recovers from its disk); `pause` SIGSTOPs an executor and its Python workers for 1-8 s (a GC
pause, the zombie-leader case) then SIGCONTs them; `disk_full` (as root) fills the tmpfs under
one broker's log dir: the broker takes the dir offline and is fenced, then the filler goes and
the executor is killed so the broker restarts on the repaired disk; `link` blackholes or delays
(50-800 ms) the replication traffic to one broker for 2-10 s through a TCP proxy. Followers
reach leaders only through that proxy: a `sitecustomize` hook put on the executors' Python path
redirects the replica fetchers' connections to it; clients and the controller talk directly.
After a fault heals, half the time a preferred-leader move (ElectLeaders PREFERRED) gives a
restarted broker its leaderships back, as Kafka's auto leader rebalance would.

Checks at the end, after healing and a full ISR: every acknowledged record is in the log at
the partition and offset it was acknowledged with, exactly once; offsets are dense from 0; no
offset was ever read with two different values (consumers during the run, the final read);
no partition's high watermark was seen moving backwards. For the transactions: no record of an
aborted transaction visible to read_committed (during the run or at the end), every committed
transaction whole, none lost or read twice; once the brokers stopped, every replica of a
partition holds the same `.txnindex` entries and, at the same log end, the same producer
snapshot. Exit status 1 and the seed on a violation.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from soak_duplicates import classify_duplicates  # noqa: E402
from soak_txn import (  # noqa: E402 - jobs/ is on the path when this file runs
    TXN_PARTITIONS,
    TXN_TOPIC,
    ReadCommittedReader,
    TransactionalProducer,
    check_transactions,
    compare_replicas,
    create_txn_topic,
    elect_preferred_leaders,
    read_committed_final,
)

from sparklog.spark.processes import executor_pid, process_tree  # noqa: E402

TOPIC = "soak"
PARTITIONS = 6
RATE = 400  # records/s
FILLED_BROKER_DIR = "broker-2"
MAX_DUPLICATES_READ = 50  # duplicates whose batches the verdict reads (the rest count as bugs)
CLUSTER_CONFIG = {
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "5000",
    "log.flush.offset.checkpoint.interval.ms": "1000",
    "log.segment.bytes": "4194304",
}


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- clients ------------------------------------------------------------------------------------


class NumberedProducer(threading.Thread):
    """Sends `seq` (key `seq % 64`) at RATE/s; remembers where each acknowledged one went."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="soak-producer", daemon=True)
        self.epoch_bumps = EpochBumps()
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 300_000,
                # librdkafka's idempotence log (a few lines per leader change): the epoch bumps
                # that explain a duplicate across producer epochs (soak_duplicates.py)
                "debug": "eos",
                "logger": self.epoch_bumps.logger,
            }
        )
        self.acked: dict[int, tuple[int, int]] = {}
        self.errors: Counter[str] = Counter()
        self.sent = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        while not self.stopping.is_set():
            due = int((time.monotonic() - started) * RATE)
            for _ in range(due - self.sent):
                seq = self.sent
                self.producer.produce(
                    TOPIC,
                    value=b"%d" % seq,
                    key=b"%d" % (seq % 64),
                    on_delivery=lambda err, msg, seq=seq: self._report(seq, err, msg),
                )
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.02)

    def _report(self, seq: int, err: Any, msg: Any) -> None:
        if err is None:
            self.acked[seq] = (msg.partition(), msg.offset())
        else:
            self.errors[err.name()] += 1

    def finish(self) -> None:
        self.stopping.set()
        self.join(30)
        self.producer.flush(300)


class EpochBumps(logging.Handler):
    """Counts librdkafka's epoch bumps of the idempotent producer, with their reasons."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.reasons: list[str] = []
        self.count = 0
        self.logger = logging.getLogger(f"soak.librdkafka.{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "bumped epoch to" in message:
            self.count += 1
        elif "epoch bump" in message and len(self.reasons) < 20:
            # "Beginning partition drain ... epoch bump for N partition(s) ...: <reason>"
            self.reasons.append(f"{time.strftime('%H:%M:%S')} {message.rsplit(': ', 1)[-1]}")


class Observations:
    """Every (partition, offset) -> value seen by any reader; conflicts are violations."""

    def __init__(self) -> None:
        self.values: dict[tuple[int, int], bytes] = {}
        self.conflicts: list[str] = []
        self.reads = 0
        self.lock = threading.Lock()

    def saw(self, partition: int, offset: int, value: bytes, who: str) -> None:
        with self.lock:
            self.reads += 1
            before = self.values.setdefault((partition, offset), value)
            if before != value and len(self.conflicts) < 20:
                self.conflicts.append(
                    f"{who} read {value!r} at {partition}/{offset}, earlier {before!r}"
                )


class GroupReader(threading.Thread):
    """One member of the consumer group `soak-readers`."""

    def __init__(self, bootstrap: str, name: str, seen: Observations) -> None:
        super().__init__(name=name, daemon=True)
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "soak-readers",
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10_000,
            }
        )
        self.seen = seen
        self.errors: Counter[str] = Counter()
        self.stopping = threading.Event()

    def run(self) -> None:
        self.consumer.subscribe([TOPIC])
        while not self.stopping.is_set():
            for msg in self.consumer.consume(500, timeout=0.2):
                if msg.error():
                    self.errors[msg.error().name()] += 1
                else:
                    self.seen.saw(msg.partition(), msg.offset(), msg.value(), self.name)
        self.consumer.close()


class WatermarkSampler(threading.Thread):
    """Each partition's high watermark, twice a second; a value below the highest seen before
    is a regression."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="soak-hw", daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-hw"})
        self.highest: dict[int, int] = {}
        self.regressions: list[str] = []
        self.samples = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.5):
            for p in range(PARTITIONS):
                try:
                    _low, high = self.consumer.get_watermark_offsets(
                        TopicPartition(TOPIC, p), timeout=2, cached=False
                    )
                except Exception:  # noqa: BLE001 - a fault may make the call fail; not a finding
                    continue
                self.samples += 1
                if high < self.highest.get(p, 0) and len(self.regressions) < 20:
                    self.regressions.append(f"partition {p}: HW {high} after {self.highest[p]}")
                self.highest[p] = max(self.highest.get(p, 0), high)
        self.consumer.close()


def create_topics(bootstrap: str) -> None:
    """The topics the workload uses (the multi-host soak, `soak_net.py`, creates them too)."""
    from sparklog.client import AdminClient, NewTopic

    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})])


# -- processes ----------------------------------------------------------------------------------


def signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


# -- the replication link proxy --------------------------------------------------------------------

HOOK = """
import json, os
_MAP = os.environ.get("SPARKLOG_SOAK_PROXY_MAP")
if _MAP:
    from sparklog.broker import server as _server
    _original = _server.BrokerServer._endpoint_of
    def _endpoint_of(self, broker_id):
        real = _original(self, broker_id)
        try:
            with open(_MAP) as f:
                port = json.load(f).get(str(broker_id))
        except (OSError, ValueError):
            port = None
        return real if real is None or port is None else ("127.0.0.1", port)
    _server.BrokerServer._endpoint_of = _endpoint_of
"""


class LinkProxy:
    """One listening port per broker, forwarding follower fetches to that broker's listener
    (re-read from the controller as brokers restart); per broker a mode: pass, blackhole
    (bytes are swallowed both ways) or a delay per chunk."""

    def __init__(self, map_file: Path, broker_ids: range) -> None:
        self.targets: dict[int, tuple[str, int]] = {}
        self.blackholed: set[int] = set()
        self.delay_ms: dict[int, int] = {}
        self.connections: Counter[int] = Counter()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="soak-proxy", daemon=True).start()
        self.ports = {
            b: asyncio.run_coroutine_threadsafe(self._listen(b), self.loop).result(10)
            for b in broker_ids
        }
        # written before any broker starts, so every follower fetch goes through the proxy
        map_file.write_text(json.dumps({str(k): v for k, v in self.ports.items()}))

    def update(self, brokers: list[dict[str, Any]]) -> None:
        """Point each broker's port at its current listener (brokers restart on new ports)."""
        for b in brokers:
            self.targets[b["broker_id"]] = (b["host"], b["port"])

    async def _listen(self, broker_id: int) -> int:
        server = await asyncio.start_server(
            lambda r, w: self._serve(broker_id, r, w), "127.0.0.1", 0
        )
        return server.sockets[0].getsockname()[1]

    async def _serve(self, broker_id: int, reader: Any, writer: Any) -> None:
        try:
            host, port = self.targets[broker_id]
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except (OSError, KeyError):
            writer.close()
            return
        self.connections[broker_id] += 1
        await asyncio.gather(
            self._pipe(broker_id, reader, up_writer), self._pipe(broker_id, up_reader, writer)
        )

    async def _pipe(self, broker_id: int, reader: Any, writer: Any) -> None:
        try:
            while data := await reader.read(65536):
                if broker_id in self.blackholed:
                    continue  # swallowed: the peer sees a silent link, not a reset
                if delay := self.delay_ms.get(broker_id):
                    await asyncio.sleep(delay / 1000)
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()


# -- the run ------------------------------------------------------------------------------------


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(f"sparklog-soak-{args.seed}")
        self.faults: Counter[str] = Counter()
        self.root = Path(tempfile.mkdtemp(prefix="sparklog-soak-"))
        self.base = self.root / "brokers"
        self.log_dirs = self.base  # every broker's log dirs (the duplicate check reads them)
        self.tmpfs: Path | None = None
        self.proxy = LinkProxy(self.root / "proxy-map.json", range(3))

    def mount_small_disk(self) -> None:
        """Broker dir `broker-2` on its own tmpfs (root only), sized for the run plus room."""
        if os.geteuid() != 0 or self.args.no_disk_faults:
            log("disk_full faults off (needs root)")
            return
        target = self.base / FILLED_BROKER_DIR
        target.mkdir(parents=True)
        size_mb = 64 + int(RATE * 200 * self.args.minutes * 60 * 2 / 1e6)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(target)],
            capture_output=True,
        )
        if done.returncode == 0:
            self.tmpfs = target
            log(f"{target} is a {size_mb} MB tmpfs")
        else:
            log(f"disk_full faults off: {done.stderr.decode().strip()}")

    def run(self) -> dict[str, Any]:
        from pyspark.sql import SparkSession

        import sparklog
        from sparklog.spark.session import with_reference_jars

        self.mount_small_disk()
        hook_dir = self.root / "hook"
        hook_dir.mkdir()
        (hook_dir / "sitecustomize.py").write_text(HOOK)
        spark = (
            with_reference_jars(SparkSession.builder.master("local-cluster[3,1,1024]"))
            # the hook first, then this process's path: the brokers run this tree's sparklog
            .config(
                "spark.executorEnv.PYTHONPATH",
                os.pathsep.join(filter(None, [str(hook_dir), os.environ.get("PYTHONPATH")])),
            )
            .config("spark.executorEnv.SPARKLOG_SOAK_PROXY_MAP", str(self.root / "proxy-map.json"))
            .appName("sparklog-soak")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.speculation", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        self.app_id = spark.sparkContext.applicationId
        config = {**CLUSTER_CONFIG, "log.dirs": str(self.base)}
        self.cluster = cluster = sparklog.start(spark, brokers=3, config=config, data_dir=self.root)
        report = None
        try:
            create_topics(cluster.bootstrap_servers)
            self.wait_healthy(60)
            report = self.load_and_check(cluster.bootstrap_servers)
            return report
        finally:
            cluster.stop()
            spark.stop()
            if report is not None:  # the brokers closed their logs: compare the replicas
                replicas = compare_replicas(self.base, TXN_TOPIC, TXN_PARTITIONS)
                report["replicas"] = replicas
                report["ok"] = report["ok"] and replicas["ok"]
            if self.tmpfs is not None:
                subprocess.run(["umount", "-l", str(self.tmpfs)], check=False)

    def brokers(self) -> list[dict[str, Any]]:
        return self.cluster.describe()["brokers"]

    def healthy(self) -> bool:
        described = self.cluster.describe()
        brokers = described["brokers"]
        self.proxy.update([b for b in brokers if not b["fenced"]])
        if len(brokers) < 3 or any(b["fenced"] for b in brokers):
            return False
        topic = next((t for t in described["topics"] if t["name"] == TOPIC), None)
        return topic is not None and all(
            p["leader"] >= 0 and len(p["isr"]) == 3 for p in topic["partitions"]
        )

    def wait_healthy(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.healthy():
                return True
            time.sleep(0.5)
        return False

    def load_and_check(self, bootstrap: str) -> dict[str, Any]:
        seen = Observations()
        producer = NumberedProducer(bootstrap)
        readers = [GroupReader(bootstrap, f"reader-{i}", seen) for i in range(2)]
        sampler = WatermarkSampler(bootstrap)
        create_txn_topic(bootstrap)
        txn_producers = [TransactionalProducer(bootstrap, f"soak-tx-{i}") for i in range(2)]
        txn_reader = ReadCommittedReader(bootstrap)
        for t in (producer, *readers, sampler, *txn_producers, txn_reader):
            t.start()
        started = time.monotonic()
        deadline = started + self.args.minutes * 60
        # --min-faults keeps the nemesis on past --minutes (a short run that must see some
        # faults on a loaded machine), for at most 5 more minutes
        give_up = deadline + 300
        while self.more_faults(deadline) and time.monotonic() < give_up:
            time.sleep(self.rng.uniform(2, 6))
            if not self.more_faults(deadline):
                break
            self.inject()
            time.sleep(4)  # past broker.session.timeout.ms: the controller has seen the fault
            if not self.wait_healthy(120):
                log("cluster not healthy 120 s after a fault; going on")
            elif self.rng.random() < 0.5:
                self.move_leaders()
        log("nemesis off; healing")
        healed = self.wait_healthy(180)
        producer.finish()
        for p in txn_producers:
            p.finish()
        time.sleep(2)
        for t in (*readers, sampler, txn_reader):
            t.stopping.set()
            t.join(30)
        # the brokers of the start may all have moved to new ports by now
        final = self.final_read(self.cluster.bootstrap_servers, seen)
        report = self.verdict(producer, readers, sampler, seen, final, healed)
        txn_seen = read_committed_final(self.cluster.bootstrap_servers)
        report["transactions"] = check_transactions(txn_producers, txn_seen, txn_reader.seen)
        report["ok"] = report["ok"] and report["transactions"]["ok"]
        report["seconds"] = round(time.monotonic() - started, 1)
        return report

    def more_faults(self, deadline: float) -> bool:
        """Before the deadline, or until the nemesis has injected `--min-faults` faults."""
        injected = sum(n for kind, n in self.faults.items() if kind != "preferred_leader_move")
        return time.monotonic() < deadline or injected < getattr(self.args, "min_faults", 0)

    def inject(self) -> None:
        kinds = ["kill", "pause", "link"] + (["disk_full"] if self.tmpfs is not None else [])
        kind = self.rng.choice(kinds)
        victims = [b for b in self.brokers() if not b["fenced"]]
        if kind == "disk_full":
            victims = [b for b in victims if Path(b["data_dir"]) == self.tmpfs]
        if not victims:
            return
        victim = self.rng.choice(victims)
        try:
            # only this application's executors: other Spark applications may share the host
            executor = executor_pid(victim["executor_id"], getattr(self, "app_id", None))
        except LookupError:  # the controller has not yet noticed an executor that died
            return
        self.faults[kind] += 1
        if kind == "kill":
            log(f"kill: SIGKILL executor {victim['executor_id']} (broker {victim['broker_id']})")
            os.kill(executor, signal.SIGKILL)
        elif kind == "link":
            self.link_fault(victim)
        elif kind == "pause":
            seconds = self.rng.uniform(1, 8)
            pids = process_tree([executor])
            log(
                f"pause: SIGSTOP broker {victim['broker_id']} ({len(pids)} processes) for {seconds:.1f} s"
            )
            signal_all(pids, signal.SIGSTOP)
            time.sleep(seconds)
            signal_all(pids, signal.SIGCONT)
        else:
            self.fill_disk(victim, executor)

    def move_leaders(self) -> None:
        """ElectLeaders PREFERRED: restarted brokers lead their partitions again."""
        topics = {TOPIC: PARTITIONS, TXN_TOPIC: TXN_PARTITIONS}
        moved = elect_preferred_leaders(self.cluster.bootstrap_servers, topics)
        self.faults["preferred_leader_move"] += 1
        log(f"move: preferred-leader election moved {moved} partitions")

    def link_fault(self, victim: dict[str, Any]) -> None:
        broker_id, seconds = victim["broker_id"], self.rng.uniform(2, 10)
        if self.rng.random() < 0.5:
            log(f"link: blackhole replication to broker {broker_id} for {seconds:.1f} s")
            self.proxy.blackholed.add(broker_id)
            time.sleep(seconds)
            self.proxy.blackholed.discard(broker_id)
        else:
            delay = self.rng.choice((50, 200, 800))
            log(f"link: +{delay} ms on replication to broker {broker_id} for {seconds:.1f} s")
            self.proxy.delay_ms[broker_id] = delay
            time.sleep(seconds)
            self.proxy.delay_ms.pop(broker_id, None)

    def fill_disk(self, victim: dict[str, Any], executor: int) -> None:
        assert self.tmpfs is not None
        filler = self.tmpfs / "filler"
        log(f"disk_full: filling the log dir of broker {victim['broker_id']}")
        chunk = b"\0" * (1 << 20)
        try:
            with open(filler, "ab") as f:
                while True:
                    f.write(chunk)
                    f.flush()
        except OSError:
            pass
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(
            b["fenced"] for b in self.brokers() if b["broker_id"] == victim["broker_id"]
        ):
            time.sleep(0.2)
        time.sleep(self.rng.uniform(1, 5))
        filler.unlink()
        log(f"disk_full: space back; restarting broker {victim['broker_id']}'s executor")
        os.kill(executor, signal.SIGKILL)

    def final_read(self, bootstrap: str, seen: Observations) -> dict[int, list[tuple[int, bytes]]]:
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "soak-final", "enable.auto.commit": False}
        )
        tps = [TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)]
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
        consumer.assign(tps)
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 120
        while any(len(got[p]) < ends[p] for p in got) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.5):
                if not msg.error():
                    got[msg.partition()].append((msg.offset(), msg.value()))
                    seen.saw(msg.partition(), msg.offset(), msg.value(), "final read")
        consumer.close()
        return got

    def verdict(self, producer, readers, sampler, seen, final, healed) -> dict[str, Any]:
        where: dict[int, list[tuple[int, int]]] = {}
        gaps = []
        for p, records in final.items():
            offsets = [o for o, _ in records]
            if offsets != list(range(len(offsets))):
                gaps.append(p)
            for offset, value in records:
                where.setdefault(int(value), []).append((p, offset))
        # librdkafka acknowledges without an offset (None) messages it infers the broker had
        # persisted (`rd_kafka_dr_implicit_ack`): a batch failed with an error that left it
        # possibly written (REQUEST_TIMED_OUT once the acks=all wait ran out, a local timeout, a
        # lost connection) and, before its retry, a later batch of the partition was accepted
        # in sequence, so the broker had it. (A DUPLICATE_SEQUENCE_NUMBER answer would do the
        # same; neither sparklog nor Kafka's UnifiedLog sends it: a retry of one of the last 5
        # batches gets NONE with the original offsets.) Such a record must be in its partition,
        # once.
        unplaced = {s for s, (p, offset) in producer.acked.items() if offset is None}
        lost = [
            s
            for s, at in producer.acked.items()
            if at not in where.get(s, [])
            and not (s in unplaced and [p for p, _ in where.get(s, [])] == [at[0]])
        ]
        duplicated = [s for s, at in where.items() if len(at) > 1]
        # which producer epoch wrote each copy: across an epoch bump librdkafka chose to send
        # it again (as it does with Apache Kafka); within one epoch the broker failed to dedupe
        classified = classify_duplicates(
            self.log_dirs, TOPIC, {s: where[s] for s in duplicated[:MAX_DUPLICATES_READ]}
        )
        unexplained = len(duplicated) - classified["across_producer_epochs"]
        report = {
            "seed": self.args.seed,
            "minutes": self.args.minutes,
            "records_sent": producer.sent,
            "records_acked": len(producer.acked),
            "records_in_log": sum(len(r) for r in final.values()),
            "acked_without_offset": len(unplaced),
            "faults": dict(self.faults),
            "lost": len(lost),
            "duplicated": len(duplicated),
            "records_written_again": sum(len(where[s]) - 1 for s in duplicated),
            "duplicated_within_producer_epoch": classified["within_one_producer_epoch"],
            "duplicated_across_producer_epochs": classified["across_producer_epochs"],
            "duplicates_unread": unexplained - classified["within_one_producer_epoch"],
            "producer_epoch_bumps": producer.epoch_bumps.count,
            "producer_epoch_bump_reasons": producer.epoch_bumps.reasons,
            "offsets_with_two_values": len(seen.conflicts),
            "hw_regressions": len(sampler.regressions),
            "partitions_with_gaps": gaps,
            "healed": healed,
            "replication_connections_via_proxy": sum(self.proxy.connections.values()),
            "reads_during_run": seen.reads,
            "hw_samples": sampler.samples,
            "producer_errors": dict(producer.errors),
            "consumer_errors": dict(sum((r.errors for r in readers), Counter())),
            "examples": {
                "lost": lost[:5],
                "duplicated": duplicated[:5],
                "duplicate_copies": classified["copies"],
                "conflicts": seen.conflicts[:5],
                "hw_regressions": sampler.regressions[:5],
            },
        }
        report["ok"] = healed and not (
            lost or unexplained or seen.conflicts or sampler.regressions or gaps
        )
        return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--json", type=Path, default=None, help="write the report here")
    parser.add_argument("--no-disk-faults", action="store_true", help="no tmpfs, no disk_full")
    parser.add_argument(
        "--min-faults", type=int, default=0, help="keep the nemesis on until it made this many"
    )
    args = parser.parse_args()
    log(f"seed {args.seed}, {args.minutes} min (replay: python jobs/soak.py --seed {args.seed})")
    report = Soak(args).run()
    text = json.dumps(report, indent=2, sort_keys=True)
    print(text)
    if args.json is not None:
        args.json.write_text(text)
    if not report["ok"]:
        log(f"VIOLATION with seed {args.seed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
