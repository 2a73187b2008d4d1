"""The whole application killed: SIGKILL the driver (its Python process and JVM, with the
controller, the coordinators and the local-cluster executors under it) in the middle of an
acks=all load, then start the same job again on the same data dirs (DESIGN D6, D7).

    python jobs/soak_driver_kill.py --load-seconds 20 --json report.json

Phase `load` (a child process): start three brokers on local-cluster, create a topic with
non-default configs, produce numbered records with an idempotent acks=all producer and append
each acknowledgement to a file, until it is killed. Phase `verify` (a second child, after every
process of the first is gone): start the cluster on the same dirs, check the topic and its
configs came back, and read every partition: each acknowledged record must be at the
partition and offset it was acknowledged with, exactly once. Exit status 1 on a violation.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from sparklog.spark.processes import executors_of, process_tree  # noqa: E402

TOPIC = "restarted"
PARTITIONS = 6
TOPIC_CONFIGS = {
    "min.insync.replicas": "2",
    "retention.ms": "987654321",
    "cleanup.policy": "delete",
}
CLUSTER_CONFIG = {
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "3000",
    "log.flush.offset.checkpoint.interval.ms": "1000",
}


def log(message: str) -> None:
    print(f"[driver-kill {time.strftime('%H:%M:%S')}] {message}", flush=True)


def start_cluster(root: Path) -> tuple[Any, Any]:
    from pyspark.sql import SparkSession

    import sparklog
    from sparklog.spark.session import with_reference_jars

    spark = (
        with_reference_jars(SparkSession.builder.master("local-cluster[3,1,1024]"))
        .appName("sparklog-driver-kill")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    config = {**CLUSTER_CONFIG, "log.dirs": str(root / "brokers")}
    return spark, sparklog.start(spark, brokers=3, config=config, data_dir=root)


def phase_load(root: Path, acked_file: Path) -> None:
    from confluent_kafka import Producer

    from sparklog.client import AdminClient, NewTopic

    spark, cluster = start_cluster(root)
    (root / "app-id").write_text(spark.sparkContext.applicationId)
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, TOPIC_CONFIGS)])
    out = open(acked_file, "a", buffering=1)  # noqa: SIM115 - lives until the kill
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True,
         "acks": "all", "linger.ms": 5}
    )  # fmt: skip

    def report(err: Any, msg: Any) -> None:
        if err is None:
            out.write(f"{int(msg.value())} {msg.partition()} {msg.offset()}\n")

    print("LOADING", flush=True)
    seq = 0
    while True:  # until SIGKILL
        for _ in range(20):
            producer.produce(TOPIC, value=b"%d" % seq, key=b"%d" % (seq % 64), on_delivery=report)
            seq += 1
        producer.poll(0.01)


def phase_verify(root: Path, acked_file: Path) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    from sparklog.client import AdminClient

    acked: dict[int, tuple[int, int]] = {}
    for line in acked_file.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:  # the last line may be cut by the kill
            acked[int(parts[0])] = (int(parts[1]), int(parts[2]))
    spark, cluster = start_cluster(root)
    try:
        with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            described = admin.describe_configs([("topic", TOPIC)])
        entries = next(iter(described.values()))
        found = {k: e.value for k, e in entries.items() if k in TOPIC_CONFIGS}
        consumer = Consumer(
            {"bootstrap.servers": cluster.bootstrap_servers, "group.id": "verify",
             "enable.auto.commit": False}
        )  # fmt: skip
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
            for p in range(PARTITIONS)
        }
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        where: dict[int, list[tuple[int, int]]] = {}
        read = 0
        deadline = time.monotonic() + 120
        while read < sum(ends.values()) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.5):
                if not msg.error():
                    read += 1
                    where.setdefault(int(msg.value()), []).append((msg.partition(), msg.offset()))
        consumer.close()
        lost = [s for s, at in acked.items() if at not in where.get(s, [])]
        duplicated = [s for s, at in where.items() if len(at) > 1]
        return {
            "records_acked_before_kill": len(acked),
            "records_in_log_after_restart": read,
            "lost": len(lost),
            "duplicated": len(duplicated),
            "topic_configs_back": found == TOPIC_CONFIGS,
            "topic_configs": found,
            "examples": {"lost": lost[:5], "duplicated": duplicated[:5]},
        }
    finally:
        cluster.stop()
        spark.stop()


def processes_of(app_id: str) -> list[int]:
    """The executor JVMs of `app_id` and the Python daemons and workers under them."""
    return process_tree(executors_of(app_id))


def orchestrate(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="sparklog-driver-kill-"))
    acked_file = root / "acked.txt"
    me = [sys.executable, os.path.abspath(__file__), "--root", str(root)]
    child = subprocess.Popen([*me, "--phase", "load"], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)  # fmt: skip
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith("LOADING"):
            break
    else:
        raise RuntimeError(f"the load phase ended before loading (exit {child.wait()})")
    time.sleep(args.load_seconds)
    acked_at_kill = len(acked_file.read_text().splitlines()) if acked_file.exists() else 0
    app_id = (root / "app-id").read_text()
    at_kill = len(processes_of(app_id))
    log(f"SIGKILL the driver (pid {child.pid}) and its JVM after {acked_at_kill} acks")
    os.killpg(child.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    child.wait()
    deadline = time.monotonic() + 90
    while processes_of(app_id) and time.monotonic() < deadline:
        time.sleep(1)
    leftovers = processes_of(app_id)
    cleared_s = round(time.monotonic() - killed_at, 1)
    for pid in leftovers:  # executors that outlived their driver: counted, then cleared
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    log(f"first application gone ({len(leftovers)} leftover processes); starting it again")
    done = subprocess.run([*me, "--phase", "verify"], capture_output=True, text=True, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"verify phase failed: {done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    report = json.loads(lines[-1])
    report["executor_processes_at_kill"] = at_kill
    report["leftover_processes_after_kill"] = len(leftovers)
    report["seconds_to_clear_after_kill"] = cleared_s
    report["ok"] = (
        report["lost"] == 0 and report["duplicated"] == 0 and report["topic_configs_back"]
    )
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load-seconds", type=float, default=20.0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--phase", choices=("load", "verify"), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase == "load":
        phase_load(args.root, args.root / "acked.txt")
        return 0
    if args.phase == "verify":
        print(json.dumps(phase_verify(args.root, args.root / "acked.txt")), flush=True)
        return 0
    report = orchestrate(args)
    text = json.dumps(report, indent=2, sort_keys=True)
    print(text)
    if args.json is not None:
        args.json.write_text(text)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
