"""Benchmark: sparklog next to Apache Kafka, same machine, same run, same clients.

Apache Kafka 4.4 (the pinned JARs, KRaft, `-Xmx1g` per broker JVM) and sparklog
(`python -m sparklog serve --master none`: controller and brokers in one process) run side by
side with the same topic settings; every cell is measured on one, then the other:

  produce   Kafka's ProducerPerformance and confluent-kafka, acks=all, lz4, 1 KB and 100 B
            values, topics of 1 and 6 partitions, RF=1 (one broker); RF=3 (three brokers) for
            1 KB / 6 partitions. MB/s, records/s, p50/p99 latency (ProducerPerformance's; for
            confluent-kafka the delivery-report latency). confluent-kafka cells: the fastest
            of --rounds runs (default 3), the systems taking turns.
  consume   confluent-kafka (assign, no group) reading what the confluent producer wrote:
            MB/s. Kafka's ConsumerPerformance and EndToEndLatency need a consumer group and
            run against Kafka only (printed, no ratio).
  e2e       confluent-kafka produce() -> poll() latency at a fixed rate, 1 partition, RF=1.
  cost      broker CPU seconds per GB of values produced (utime+stime of the broker processes
            from /proc during the confluent 1 KB / 6-partition / RF=1 produce) and peak RSS
            (VmHWM) of the broker processes.
  spark     N rows (100 B values) written and read on local[4]: `format("kafka")` on Kafka,
            `format("kafka")` on sparklog, `format("sparklog")` on sparklog: rows/s, after
            a small write and read per cell whose seconds are the first-use figures (one-time
            costs: JVM class loading and JIT, Python workers and imports).

  security  (jobs/bench_security.py) both configured with the same SASL_SSL/mTLS listeners and
            StandardAuthorizer: confluent produce and consume over SASL_SSL SCRAM-SHA-512 with
            1,000 ACLs loaded and with no authorizer, and authentications per second;
            `--no-security` leaves them out.

Headline ratios (sparklog / Kafka; the JSON's "definitions" says which cell each comes from):
`produce_mb_s_vs_kafka`, `consume_mb_s_vs_kafka`, `e2e_p99_vs_kafka` (lower is better),
`cpu_per_gb_vs_kafka` (lower is better), `spark_read_vs_kafka_connector`,
`spark_write_vs_kafka_connector`, `kafka_connector_on_sparklog_vs_kafka`.

Security ratios: see jobs/bench_security.py (`sasl_ssl_produce_mb_s_vs_kafka`, ...).

Usage: .venv/bin/python jobs/bench_vs_kafka.py [--quick] [--no-security] [--json FILE]
       [--kafka-bootstrap HOST:PORT --kafka-pids PID,...]   (reuse a running 1-broker Kafka)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_broker  # noqa: E402

from sparklog.oracle.kafka_server import ApacheKafka, run_tool  # noqa: E402

LIBRDKAFKA = {"broker.address.family": "v4"}
SIZES = {"1KB": 1000, "100B": 100}
DEFINITIONS = {
    "produce_mb_s_vs_kafka": "confluent-kafka producer, 1KB, 6 partitions, RF=1, acks=all, lz4",
    "consume_mb_s_vs_kafka": "confluent-kafka consumer (assign), 1KB, 6 partitions, RF=1",
    "e2e_p99_vs_kafka": "confluent-kafka produce->poll p99 at --rate msgs/s, 1 partition, RF=1",
    "cpu_per_gb_vs_kafka": "broker CPU s per GB during the produce_mb_s cell",
    "spark_read_vs_kafka_connector": "format('sparklog') on sparklog / format('kafka') on Kafka",
    "spark_write_vs_kafka_connector": "format('sparklog') on sparklog / format('kafka') on Kafka",
    "kafka_connector_on_sparklog_vs_kafka": "format('kafka') read+write rows/s on sparklog / on Kafka",
    "spark_first_use_s_vs_kafka_connector": "seconds of the first (warm-up) write+read in the "
    "session: format('sparklog') on sparklog / format('kafka') on Kafka (lower is better)",
}


@dataclass
class System:
    """A running cluster: bootstrap servers and the broker processes (for /proc)."""

    name: str
    bootstrap: str
    pids: list[int]
    stop: Callable[[], None] = field(default=lambda: None)
    client: dict[str, Any] = field(default_factory=dict)  # librdkafka security settings

    def cpu_s(self) -> float:
        total = 0
        for pid in self.pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")

    def peak_rss_mb(self) -> float:
        peak = 0
        for pid in self.pids:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak += int(line.split()[1])
        return peak / 1024


@contextmanager
def apache_kafka(brokers: int, args: argparse.Namespace) -> Iterator[System]:
    if brokers == 1 and args.kafka_bootstrap:
        pids = [int(p) for p in args.kafka_pids.split(",")]
        yield System("kafka", args.kafka_bootstrap, pids)
        return
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as d:
        config = {"num.partitions": "1", "default.replication.factor": str(brokers)}
        with ApacheKafka(d, brokers=brokers, config=config) as kafka:
            yield System("kafka", kafka.bootstrap_servers, kafka.pids)


@contextmanager
def sparklog_serve(brokers: int) -> Iterator[System]:
    with tempfile.TemporaryDirectory(prefix="bench-sparklog-") as d:
        cmd = [sys.executable, "-m", "sparklog", "serve", "--master", "none",
               "--brokers", str(brokers), "--data-dir", d,
               "--config", f"default.replication.factor={brokers}"]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        bootstrap = None
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("bootstrap.servers="):
                bootstrap = line.strip().split("=", 1)[1]
                break
        if bootstrap is None:
            raise SystemExit("sparklog serve did not start")
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        try:
            yield System("sparklog", bootstrap, [proc.pid])
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)


def create_topic(bootstrap: str, partitions: int, rf: int, client: dict | None = None) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"bench-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **LIBRDKAFKA, **(client or {})})
    admin.create_topics([NewTopic(name, partitions, rf)])[name].result(60)
    time.sleep(0.5)  # metadata reaches every broker
    return name


def producer_performance(bootstrap: str, topic: str, records: int, size: int) -> dict[str, float]:
    done = run_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic", topic, "--num-records", str(records), "--record-size", str(size),
        "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}",
        "acks=all", "compression.type=lz4", "linger.ms=5", "batch.size=1000000",
        timeout_s=600, heap="1g",
    )  # fmt: skip
    line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    m = re.search(
        r"([\d.]+) records/sec \(([\d.]+) MB/sec\).*?([\d.]+) ms 50th.*?([\d.]+) ms 99th", line
    )
    if done.returncode != 0 or m is None:
        raise SystemExit(f"ProducerPerformance failed: {done.stdout[-1500:]} {done.stderr[-1500:]}")
    rps, mib, p50, p99 = (float(x) for x in m.groups())
    return {"records_s": rps, "mb_s": rps * size / 1e6, "p50_ms": p50, "p99_ms": p99}


def confluent_produce(
    bootstrap: str, topic: str, records: int, size: int, client: dict | None = None
) -> dict[str, float]:
    from confluent_kafka import Producer

    rng = np.random.default_rng(size)
    pool = [rng.integers(65, 91, size, dtype=np.uint8).tobytes() for _ in range(256)]
    latencies: list[float] = []

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        latencies.append(time.time() * 1000 - msg.timestamp()[1])

    producer = Producer(
        {"bootstrap.servers": bootstrap, **LIBRDKAFKA, "acks": "all", "compression.type": "lz4",
         "linger.ms": 5, "batch.size": 1_000_000, "queue.buffering.max.messages": 2_000_000,
         "queue.buffering.max.kbytes": 2_000_000, **(client or {})}
    )  # fmt: skip
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, pool[i & 255], on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    seconds = time.perf_counter() - started
    p50, p99 = np.percentile(latencies, [50, 99])
    return {"records_s": records / seconds, "mb_s": records * size / 1e6 / seconds,
            "p50_ms": float(p50), "p99_ms": float(p99)}  # fmt: skip


def confluent_consume(
    bootstrap: str, topic: str, partitions: int, records: int, size: int, client: dict | None = None
) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, **LIBRDKAFKA, "group.id": "bench-unused",
         "enable.auto.commit": False, "queued.min.messages": 1_000_000,
         "fetch.queue.backoff.ms": 0, **(client or {})}
    )  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    started = time.perf_counter()
    deadline = time.monotonic() + 300
    while got < records and time.monotonic() < deadline:
        # never ask for more than is left: consume() waits its whole timeout for the rest
        for m in consumer.consume(num_messages=min(100_000, records - got), timeout=1.0):
            assert m.error() is None, m.error()
            got += 1
    seconds = time.perf_counter() - started
    consumer.close()
    assert got == records, f"consumed {got} of {records}"
    return {"records_s": records / seconds, "mb_s": records * size / 1e6 / seconds}


def measure_systems(
    systems: tuple[System, ...], args: argparse.Namespace, rf: int, out: dict
) -> None:
    """Every produce/consume cell at one replication factor, on each system in turn.

    Both systems run throughout and each cell is measured on one, then the other, who goes
    first alternating by round: measured one after the other, the second system ran slower
    (here, after Kafka's cells, sparklog's 1 KB / 6-partition produce needed 3 CPU-seconds per
    GB instead of 1.2), whatever the first one left behind in this VM's memory. A cell takes a
    second or two, so one slow second moves it by a third: the fastest of --rounds runs counts.
    """
    cells = [(p, s) for p in (1, 6) for s in SIZES] if rf == 1 else [(6, "1KB")]
    for partitions, size_name in cells:
        size = SIZES[size_name]
        records = int(args.mb * 1e6 / size)
        cell = f"{size_name}_p{partitions}_rf{rf}"
        produced: dict[str, list[dict]] = {s.name: [] for s in systems}
        consumed: dict[str, list[dict]] = {s.name: [] for s in systems}
        for system in systems:
            topic = create_topic(system.bootstrap, partitions, rf)
            os.sync()
            out[f"{system.name}.producer_performance.{cell}"] = producer_performance(
                system.bootstrap, topic, records, size
            )
        topics = {}
        for r in range(args.rounds):
            for system in systems[:: 1 if r % 2 == 0 else -1]:
                topics[system.name] = create_topic(system.bootstrap, partitions, rf)
                produced[system.name].append(
                    _confluent_produce_with_cpu(system, topics[system.name], records, size)
                )
        for r in range(args.rounds):
            for system in systems[:: 1 if r % 2 == 0 else -1]:
                consumed[system.name].append(
                    confluent_consume(
                        system.bootstrap, topics[system.name], partitions, records, size
                    )
                )
        for system in systems:
            fastest = lambda runs: max(runs, key=lambda run: run["mb_s"])  # noqa: E731
            out[f"{system.name}.confluent_produce.{cell}"] = fastest(produced[system.name])
            out[f"{system.name}.confluent_consume.{cell}"] = fastest(consumed[system.name])
            print(f"  {system.name} {cell}: " + ", ".join(
                f"{k.split('.')[1]} {v['mb_s']:.1f} MB/s"
                for k, v in out.items() if k.startswith(system.name) and k.endswith(cell)
            ))  # fmt: skip
    if rf == 1:
        for system in systems:
            topic = create_topic(system.bootstrap, 1, 1)
            lat = bench_broker.latency_confluent(
                system.bootstrap, topic, args.rate, args.latency_s, 5
            )
            out[f"{system.name}.e2e"] = {
                "p50_ms": float(np.percentile(lat, 50)),
                "p99_ms": float(np.percentile(lat, 99)),
            }
            out[f"{system.name}.peak_rss_mb"] = system.peak_rss_mb()
            print(f"  {system.name} e2e: p50 {out[f'{system.name}.e2e']['p50_ms']:.2f} ms, "
                  f"p99 {out[f'{system.name}.e2e']['p99_ms']:.2f} ms")  # fmt: skip


def _confluent_produce_with_cpu(system: System, topic: str, records: int, size: int) -> dict:
    """`confluent_produce` plus the broker's CPU seconds per GB of values meanwhile, after the
    dirty pages of earlier runs are written back (no run pays for another one's writeback)."""
    os.sync()
    cpu = system.cpu_s()
    produced = confluent_produce(system.bootstrap, topic, records, size, client=system.client)
    tick = 1 / os.sysconf("SC_CLK_TCK")  # a tiny --quick cell may not use one whole tick
    used = max(system.cpu_s() - cpu, tick)
    produced["broker_cpu_s_per_gb"] = used / (records * size / 1e9)
    return produced


def kafka_only_tools(system: System, args: argparse.Namespace, out: dict) -> None:
    """ConsumerPerformance and EndToEndLatency need a consumer group: Kafka only, no ratio."""
    topic = create_topic(system.bootstrap, 1, 1)
    records = int(args.mb * 1e6 / 1000)
    producer_performance(system.bootstrap, topic, records, 1000)
    done = run_tool("org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server",
                    system.bootstrap, "--topic", topic, "--messages", str(records),
                    timeout_s=300)  # fmt: skip
    header, values = done.stdout.strip().splitlines()[-2:]
    stats = dict(zip((h.strip() for h in header.split(",")), values.split(","), strict=True))
    out["kafka.consumer_performance.1KB_p1_rf1"] = {"mb_s": float(stats["MB.sec"])}
    done = run_tool("org.apache.kafka.tools.EndToEndLatency", "--bootstrap-server",
                    system.bootstrap, "--topic", create_topic(system.bootstrap, 1, 1),
                    "--num-records", "2000", "--producer-acks", "1", "--record-size", "100",
                    timeout_s=300)  # fmt: skip
    m = re.search(r"Percentiles: 50th = ([\d.]+), 99th = ([\d.]+)", done.stdout)
    if m:
        out["kafka.end_to_end_latency"] = {"p50_ms": float(m[1]), "p99_ms": float(m[2])}


def spark_cells(kafka: System, sparklog: System, args: argparse.Namespace, out: dict) -> None:
    from pyspark.sql import SparkSession

    import sparklog as sl
    from sparklog.spark.session import with_reference_jars

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        with_reference_jars(SparkSession.builder.master("local[4]"))
        .appName("bench_vs_kafka")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "3g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    sl.register(spark)
    cells = (
        ("kafka_connector_on_kafka", "kafka", kafka),
        ("kafka_connector_on_sparklog", "kafka", sparklog),
        ("sparklog_on_sparklog", "sparklog", sparklog),
    )
    # First use pays one-time costs on each side (the JVM's class loading and JIT for the
    # connector; Python workers, imports and producers for sparklog's data source): a small
    # write and read per cell before the timed ones, timed apart as the first-use figures.
    warm = _spark_frame(spark, args.spark_warmup_rows)
    for label, fmt, system in cells:
        write_s, read_s = _write_and_read(warm, fmt, system, args.spark_warmup_rows, label)
        out[f"spark.{label}.first_use"] = {"write_s": write_s, "read_s": read_s}
        print(f"  spark {label}: first use, write {write_s:.2f} s, read {read_s:.2f} s")
    warm.unpersist()
    rows = args.spark_rows
    df = _spark_frame(spark, rows)
    for label, fmt, system in cells:
        write_s, read_s = _write_and_read(df, fmt, system, rows, label)
        out[f"spark.{label}"] = {"write_rows_s": rows / write_s, "read_rows_s": rows / read_s}
        print(
            f"  spark {label}: write {rows / write_s:,.0f} rows/s, read {rows / read_s:,.0f} rows/s"
        )
    spark.stop()


def _spark_frame(spark: Any, rows: int) -> Any:
    """`rows` cached rows: a decimal-string key and a 100-byte value."""
    df = (
        spark.range(rows)
        .selectExpr(
            "cast(id as string) as key",
            "cast(repeat(cast(id % 10 as string), 100) as binary) as value",
        )
        .cache()
    )
    df.count()
    return df


def _write_and_read(
    df: Any, fmt: str, system: System, rows: int, label: str
) -> tuple[float, float]:
    """Seconds to write `df` to a new 6-partition topic with `format(fmt)`, and to read it back."""
    topic = create_topic(system.bootstrap, 6, 1)
    os.sync()
    started = time.perf_counter()
    (df.write.format(fmt).option("kafka.bootstrap.servers", system.bootstrap)
       .option("topic", topic).save())  # fmt: skip
    write_s = time.perf_counter() - started
    started = time.perf_counter()
    read = (df.sparkSession.read.format(fmt).option("kafka.bootstrap.servers", system.bootstrap)
            .option("subscribe", topic).load()
            .selectExpr("count(*) as n", "sum(length(value)) as bytes").collect()[0])  # fmt: skip
    read_s = time.perf_counter() - started
    assert read["n"] == rows, (label, read["n"])
    return write_s, read_s


def headline(out: dict) -> dict[str, float]:
    cell = "1KB_p6_rf1"
    k, s = (out[f"{n}.confluent_produce.{cell}"] for n in ("kafka", "sparklog"))
    kc, sc = (out[f"{n}.confluent_consume.{cell}"] for n in ("kafka", "sparklog"))
    ke, se = out["kafka.e2e"], out["sparklog.e2e"]
    kk, ks, ss = (out[f"spark.{n}"] for n in (
        "kafka_connector_on_kafka", "kafka_connector_on_sparklog", "sparklog_on_sparklog"))  # fmt: skip
    both = lambda d: d["read_rows_s"] + d["write_rows_s"]  # noqa: E731
    kf, sf = (
        out[f"spark.{n}.first_use"] for n in ("kafka_connector_on_kafka", "sparklog_on_sparklog")
    )
    first = lambda d: d["read_s"] + d["write_s"]  # noqa: E731
    return {
        "produce_mb_s_vs_kafka": s["mb_s"] / k["mb_s"],
        "consume_mb_s_vs_kafka": sc["mb_s"] / kc["mb_s"],
        "e2e_p99_vs_kafka": se["p99_ms"] / ke["p99_ms"],
        "cpu_per_gb_vs_kafka": s["broker_cpu_s_per_gb"] / k["broker_cpu_s_per_gb"],
        "spark_read_vs_kafka_connector": ss["read_rows_s"] / kk["read_rows_s"],
        "spark_write_vs_kafka_connector": ss["write_rows_s"] / kk["write_rows_s"],
        "kafka_connector_on_sparklog_vs_kafka": both(ks) / both(kk),
        "spark_first_use_s_vs_kafka_connector": first(sf) / first(kf),
    }


def table(out: dict) -> str:
    lines = ["| cell | Apache Kafka | sparklog | ratio |", "|---|---|---|---|"]
    for key in sorted(k for k in out if k.startswith("kafka.") and isinstance(out[k], dict)):
        other = "sparklog." + key.removeprefix("kafka.")
        if other not in out:
            continue
        for metric, value in out[key].items():
            ours = out[other].get(metric)
            if ours is not None and value:
                lines.append(f"| {key.removeprefix('kafka.')} {metric} | {value:,.2f} | "
                             f"{ours:,.2f} | {ours / value:.2f} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, RF=1 only (smoke test)")
    parser.add_argument("--mb", type=float, default=200.0, help="MB of values per produce cell")
    parser.add_argument("--spark-rows", type=int, default=5_000_000)
    parser.add_argument(
        "--rounds", type=int, default=3, help="runs per produce/consume cell; the fastest counts"
    )
    parser.add_argument(
        "--spark-warmup-rows",
        type=int,
        default=100_000,
        help="written and read per Spark cell before the timed runs (the first-use figures)",
    )
    parser.add_argument("--rate", type=int, default=2_000, help="e2e msgs/s")
    parser.add_argument("--latency-s", type=float, default=5.0)
    parser.add_argument("--kafka-bootstrap", help="reuse a running 1-broker Apache Kafka")
    parser.add_argument("--kafka-pids", default="", help="its broker pids (for /proc)")
    parser.add_argument("--json", help="write every figure here")
    parser.add_argument("--no-security", action="store_true", help="leave out the SASL_SSL cells")
    parser.add_argument("--auth-count", type=int, default=300, help="authentications timed")
    parser.add_argument("--auth-threads", type=int, default=4)
    args = parser.parse_args()
    if args.quick:
        args.mb, args.spark_rows, args.rate, args.latency_s = 2.0, 20_000, 500, 1.0
        args.spark_warmup_rows, args.rounds, args.auth_count = 1_000, 1, 20
    out: dict[str, Any] = {}
    for rf in (1,) if args.quick else (1, 3):
        print(f"RF={rf} ({rf} broker(s) each)")
        with apache_kafka(rf, args) as kafka, sparklog_serve(rf) as ours:
            measure_systems((kafka, ours), args, rf, out)
            if rf == 1 and not args.quick:
                kafka_only_tools(kafka, args, out)
            if rf == 1:
                print("Spark")
                spark_cells(kafka, ours, args, out)
    definitions = dict(DEFINITIONS)
    if not args.no_security:
        import bench_security  # imports this module: not at the top

        print("Security (SASL_SSL, SCRAM-SHA-512, StandardAuthorizer)")
        bench_security.security_cells(args, out)
        definitions |= bench_security.DEFINITIONS
    out["headline"] = headline(out) | out.pop("security_headline", {})
    out["definitions"] = definitions
    out.update(out["headline"])
    print(table(out))
    for key, value in out["headline"].items():
        print(f"{key} = {value:.3f}  ({definitions.get(key.removeprefix('kafka.'), 'Kafka')})")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
