"""Benchmark: topics as Delta tables, the remote tier (issue 32 §5). One in-process sparklog
broker with the tier on (`remote.table.root` a local directory), confluent-kafka clients, and
one local Spark application for (a):

  (a) historical_read  `format("sparklog")` count + sum(length(value)) of --rows rows (100-byte
                       values) served from the topic's table (every offset tiered, local
                       segments gone) vs the same read of the same rows in a topic without the
                       tier, served by the broker, vs a plain Parquet read of the same rows
                       (key, value; pyarrow-written). Targets: table >= 3x brokers, >= 0.8x
                       Parquet. Also the tiered topic read with remoteTableReads=false (the
                       broker serving tiered offsets from the table: `broker_remote`), and
                       `sparklog.read_topic` of the tiered topic (`read_topic`: the same
                       read with the tiered offsets scanned by Spark's Parquet reader).
  (b) upload           the broker's produce MB/s (flat out, acks=1, tier off) vs the tier's
                       copy MB/s of the same bytes (the tier turned on for the topic, timed
                       until the table's app transaction reaches the high watermark: the
                       backfill, which copies as fast as the copy task can). Target >= 0.5.
  (c) freshness        a steady produce at --rate-mb-s (target 50 MB/s; the figure says what
                       this machine reached) of --freshness-value-bytes records (1 KB: a
                       Python producer cannot pace 100-byte records at 50 MB/s) to a topic with remote.table.freshness.ms =
                       --freshness-ms; every 50 ms the table's copied end is read and the lag
                       is now minus the append time of the first record not yet in the table
                       (0 when it holds everything). p50/p99 of the lag over the run, and
                       p99 / freshness.ms (target <= 2).
  (d) tiered_fetch     confluent-kafka consume from offset 0 of the tiered topic of (a)
                       (every offset served from the table through the broker) vs the
                       untiered one (local segments): MB/s and their ratio.

Cells are interleaved ABAB over --rounds rounds (the order flips every round, so a change in
the machine's load hits both alike); each ratio is the median of the per-round ratios of this
one run, with their spread. Rates are wall clock.

  PYTHONPATH=$PWD .venv/bin/python jobs/bench_tiered.py [--rows 5000000] [--rounds 4]
      [--upload-mb 200] [--freshness-ms 1000] [--rate-mb-s 50] [--freshness-seconds 20]
      [--master local[2]] [--only a,b,c,d] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

LIBRDKAFKA = {"broker.address.family": "v4"}
VALUE_BYTES = 100
BROKER_SETTINGS = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "200",
    "remote.log.manager.task.retry.backoff.ms": "200",
    "log.retention.check.interval.ms": "200",
    "num.partitions": "1",
}


# ---------------------------------------------------------------------------- plumbing


class Bench:
    """The cluster, an admin client and the table root every cell uses."""

    def __init__(self, cluster: Any, root: str, args: argparse.Namespace) -> None:
        from sparklog.client.admin import AdminClient

        self.cluster, self.root, self.args = cluster, root, args
        self.bootstrap = cluster.bootstrap_servers
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})

    def new_topic(self, configs: dict[str, str], partitions: int = 1) -> str:
        from sparklog.client.admin import NewTopic

        name = f"bt-{uuid.uuid4().hex[:8]}"
        self.admin.create_topics([NewTopic(name, partitions, 1, configs=configs)])
        deadline = time.monotonic() + 30
        while self.cluster.leader_of(name, 0) < 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: no leader")
            time.sleep(0.05)
        return name

    def alter(self, topic: str, **settings: str) -> None:
        from sparklog.client.admin import ConfigResource

        changes = {k.replace("_", "."): v for k, v in settings.items()}
        self.admin.incremental_alter_configs({ConfigResource("topic", topic): changes})

    def delete(self, topic: str) -> None:
        self.admin.delete_topics([topic])

    def end_offset(self, topic: str, partition: int = 0) -> int:
        return next(iter(self.admin.list_offsets({(topic, partition): -1}).values())).offset

    def earliest_local(self, topic: str, partition: int = 0) -> int:
        return next(iter(self.admin.list_offsets({(topic, partition): -4}).values())).offset

    def topic_id(self, topic: str) -> uuid.UUID:
        return uuid.UUID(str(self.admin.describe_topics([topic])[topic].topic_id))

    def location(self, topic: str) -> str:
        return self.root.rstrip("/") + "/" + topic


class TierProbe:
    """The copied end of one partition per its table's app transaction (`<topic id>-<p>`)."""

    def __init__(self, location: str, topic_id: uuid.UUID, partition: int = 0) -> None:
        self.location = location
        self.app_id = f"{topic_id}-{partition}"
        self._table: Any = None

    def copied_end(self) -> int:
        from deltalake import DeltaTable

        if self._table is None:
            if not DeltaTable.is_deltatable(self.location):
                return 0
            self._table = DeltaTable(self.location)
        else:
            self._table.update_incremental()
        return self._table.transaction_version(self.app_id) or 0

    def wait_for(self, end: int, timeout_s: float) -> float:
        """Seconds until the copied end reaches `end`."""
        start = time.perf_counter()
        while self.copied_end() < end:
            if time.perf_counter() - start > timeout_s:
                raise TimeoutError(f"{self.location}: copied end short of {end} in {timeout_s} s")
            time.sleep(0.02)
        return time.perf_counter() - start


def value_of(i: int) -> bytes:
    return b"%010d" % i + b"x" * (VALUE_BYTES - 10)


def produce_rows(bootstrap: str, topic: str, rows: int, acks: str = "1") -> float:
    """Produce `rows` records (10-byte keys, 100-byte values) flat out; MB/s."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            **LIBRDKAFKA,
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.kbytes": 65536,
        }
    )
    start = time.perf_counter()
    for i in range(rows):
        value = value_of(i)
        while True:
            try:
                producer.produce(topic, value, key=value[:10])
                break
            except BufferError:
                producer.poll(0.005)
    assert producer.flush(300) == 0
    return rows * (VALUE_BYTES + 10) / (time.perf_counter() - start) / 1e6


def consume_mb_s(bootstrap: str, topic: str, rows: int) -> tuple[float, float]:
    """confluent-kafka from offset 0 until `rows` records: MB/s of the whole consume (consumer
    start included) and from its first record on (the transfer alone)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **LIBRDKAFKA,
            "bootstrap.servers": bootstrap,
            "group.id": "bench-tiered",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got, start, first = 0, time.perf_counter(), None
    deadline = start + 600
    while got < rows:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{topic}: {got} of {rows} records in 600 s")
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                if first is None:
                    first = time.perf_counter()
                got += 1
    end = time.perf_counter()
    consumer.close()
    mb = rows * (VALUE_BYTES + 10) / 1e6
    return mb / (end - start), mb / max(end - (first or start), 1e-9)


def _ratios(a: list[float], b: list[float]) -> dict[str, Any]:
    per_round = [x / y for x, y in zip(a, b, strict=True)]
    return {
        "median": round(statistics.median(per_round), 3),
        "spread": [round(min(per_round), 3), round(max(per_round), 3)],
    }


def interleaved(rounds: int, cells: dict[str, Callable[[], float]]) -> dict[str, list[float]]:
    """Run every cell once per round, the order flipped every round (ABAB / BABA)."""
    out: dict[str, list[float]] = {name: [] for name in cells}
    order = list(cells)
    for round_ in range(rounds):
        for name in order if round_ % 2 == 0 else order[::-1]:
            out[name].append(cells[name]())
            print(f"  round {round_} {name}: {out[name][-1]:.3f}", flush=True)
    return out


# ------------------------------------------------------------------ (a) and (d): reads


def segment_bytes_for(rows: int) -> int:
    """About 16 segments for the data, between 64 KiB and 64 MiB."""
    return max(64 * 1024, min(64 * 1024 * 1024, rows * (VALUE_BYTES + 80) // 16))


def historical_topics(bench: Bench, rows: int) -> tuple[str, str]:
    """The same `rows` in a tiered topic whose local segments are gone and in an untiered one."""
    seg = str(segment_bytes_for(rows))
    tiered = bench.new_topic(
        {
            "remote.storage.enable": "true",
            "segment.bytes": seg,
            "local.retention.ms": "1",
            "remote.table.freshness.ms": "500",
        }
    )
    local = bench.new_topic({"segment.bytes": seg})
    produce_rows(bench.bootstrap, tiered, rows)
    produce_rows(bench.bootstrap, local, rows)
    end = bench.end_offset(tiered)
    TierProbe(bench.location(tiered), bench.topic_id(tiered)).wait_for(end, 600)
    deadline = time.monotonic() + 120
    while bench.earliest_local(tiered) < end * 0.8:  # the closed segments left the disk
        if time.monotonic() > deadline:
            raise TimeoutError(f"{tiered}: local segments not deleted after the copy")
        time.sleep(0.2)
    return tiered, local


def write_parquet(directory: Path, rows: int, files: int = 4) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    per = -(-rows // files)
    for f in range(files):
        values = [value_of(i) for i in range(f * per, min(rows, (f + 1) * per))]
        table = pa.table(
            {"key": pa.array([v[:10] for v in values], pa.binary()), "value": values},
            schema=pa.schema([("key", pa.binary()), ("value", pa.binary())]),
        )
        pq.write_table(table, directory / f"part-{f}.parquet")
    return str(directory)


def build_session(master: str) -> Any:
    from pyspark.sql import SparkSession

    from sparklog.spark.session import with_reference_jars

    spark = (
        with_reference_jars(SparkSession.builder.master(master))
        .appName("bench_tiered")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


def count_and_sum(df: Any) -> tuple[int, int]:
    from pyspark.sql import functions as F

    row = df.agg(F.count(F.lit(1)), F.sum(F.length("value"))).first()
    return int(row[0]), int(row[1] or 0)


def historical_read(bench: Bench, tiered: str, local: str, parquet: str) -> dict[str, Any]:
    """(a): rows/s of the four reads, ABAB, each checked."""
    import sparklog

    rows = bench.args.rows
    spark = build_session(bench.args.master)
    sparklog.register(spark, bootstrap_servers=bench.bootstrap)

    def sparklog_read(topic: str, table_reads: bool) -> Callable[[], float]:
        def run() -> float:
            df = (
                spark.read.format("sparklog")
                .option("kafka.bootstrap.servers", bench.bootstrap)
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .option("endingOffsets", "latest")
                .option("remoteTableReads", str(table_reads).lower())
                .load()
            )
            return timed(lambda: count_and_sum(df))

        return run

    def timed(action: Callable[[], tuple[int, int]]) -> float:
        start = time.perf_counter()
        result = action()
        elapsed = time.perf_counter() - start
        if result != (rows, rows * VALUE_BYTES):
            sys.exit(f"read: count and sum(length(value)) {result} != {(rows, rows * VALUE_BYTES)}")
        return rows / elapsed

    cells = {
        "table": sparklog_read(tiered, True),
        "brokers": sparklog_read(local, False),
        "parquet": lambda: timed(lambda: count_and_sum(spark.read.parquet(parquet))),
        "broker_remote": sparklog_read(tiered, False),
        "read_topic": lambda: timed(
            lambda: count_and_sum(
                sparklog.read_topic(spark, tiered, {"kafka.bootstrap.servers": bench.bootstrap})
            )
        ),
    }
    for cell in cells.values():  # warm-up: workers, imports, code generation
        cell()
    runs = interleaved(bench.args.rounds, cells)
    spark.stop()
    out: dict[str, Any] = {f"{k}_rows_per_s": round(statistics.median(v)) for k, v in runs.items()}
    out["table_vs_brokers"] = _ratios(runs["table"], runs["brokers"])
    out["table_vs_parquet"] = _ratios(runs["table"], runs["parquet"])
    out["broker_remote_vs_brokers"] = _ratios(runs["broker_remote"], runs["brokers"])
    out["read_topic_vs_brokers"] = _ratios(runs["read_topic"], runs["brokers"])
    out["read_topic_vs_parquet"] = _ratios(runs["read_topic"], runs["parquet"])
    out["samples"] = {k: [round(x) for x in v] for k, v in runs.items()}
    return out


def tiered_fetch(bench: Bench, tiered: str, local: str) -> dict[str, Any]:
    """(d): confluent-kafka MB/s from offset 0, tiered offsets vs local ones; whole consumes
    and transfers (from the first record on)."""
    rows = bench.args.rows
    transfers: dict[str, list[float]] = {"tiered": [], "local": []}

    def cell(label: str, topic: str) -> Callable[[], float]:
        def run() -> float:
            whole, transfer = consume_mb_s(bench.bootstrap, topic, rows)
            transfers[label].append(transfer)
            return whole

        return run

    runs = interleaved(
        bench.args.rounds, {"tiered": cell("tiered", tiered), "local": cell("local", local)}
    )
    return {
        "tiered_mb_s": round(statistics.median(runs["tiered"]), 1),
        "local_mb_s": round(statistics.median(runs["local"]), 1),
        "tiered_vs_local": _ratios(runs["tiered"], runs["local"]),
        "tiered_transfer_mb_s": round(statistics.median(transfers["tiered"]), 1),
        "local_transfer_mb_s": round(statistics.median(transfers["local"]), 1),
        "tiered_vs_local_transfer": _ratios(transfers["tiered"], transfers["local"]),
    }


# ------------------------------------------------------------------------ (b) upload


def upload_round(bench: Bench, rows: int) -> tuple[float, float]:
    """Produce MB/s into an untiered topic, then the tier's copy MB/s of it (backfill)."""
    topic = bench.new_topic({"segment.bytes": str(segment_bytes_for(rows))})
    produced = produce_rows(bench.bootstrap, topic, rows)
    end = bench.end_offset(topic)
    probe = TierProbe(bench.location(topic), bench.topic_id(topic))
    started = time.perf_counter()
    bench.alter(topic, remote_storage_enable="true", remote_table_freshness_ms="100")
    probe.wait_for(end, 900)
    copied = rows * (VALUE_BYTES + 10) / (time.perf_counter() - started) / 1e6
    bench.delete(topic)
    return produced, copied


def upload(bench: Bench) -> dict[str, Any]:
    rows = max(1, int(bench.args.upload_mb * 1e6 / (VALUE_BYTES + 10)))
    produce_runs: list[float] = []
    copy_runs: list[float] = []
    for round_ in range(bench.args.rounds):
        produced, copied = upload_round(bench, rows)
        produce_runs.append(produced)
        copy_runs.append(copied)
        print(f"  round {round_}: produce {produced:.1f} MB/s, copy {copied:.1f} MB/s", flush=True)
    return {
        "produce_mb_s": round(statistics.median(produce_runs), 1),
        "copy_mb_s": round(statistics.median(copy_runs), 1),
        "copy_vs_produce": _ratios(copy_runs, produce_runs),
    }


# --------------------------------------------------------------------- (c) freshness


def freshness(bench: Bench) -> dict[str, Any]:
    """Lag of the table behind the log under a steady produce (module doc, (c))."""
    from confluent_kafka import Producer

    args = bench.args
    topic = bench.new_topic(
        {
            "remote.storage.enable": "true",
            "remote.table.freshness.ms": str(args.freshness_ms),
            "segment.bytes": str(64 * 1024 * 1024),
        }
    )
    probe = TierProbe(bench.location(topic), bench.topic_id(topic))
    appended: dict[int, float] = {}  # offset -> wall-clock time the broker acknowledged it
    stop = threading.Event()
    producer = Producer({**LIBRDKAFKA, "bootstrap.servers": bench.bootstrap, "linger.ms": 5})

    def acked(err: Any, msg: Any) -> None:
        if err is None:
            appended[msg.offset()] = time.time()

    value = b"f" * args.freshness_value_bytes

    def paced() -> None:
        per_s = args.rate_mb_s * 1e6 / (len(value) + 10)
        start, i = time.perf_counter(), 0
        while not stop.is_set():
            due = start + i / per_s
            now = time.perf_counter()
            if now < due:
                producer.poll(min(0.002, due - now))
                continue
            try:
                producer.produce(topic, value, key=b"%010d" % i, on_delivery=acked)
                i += 1
            except BufferError:
                producer.poll(0.002)
        producer.flush(60)

    thread = threading.Thread(target=paced, name="bench-paced")
    thread.start()
    lags_ms: list[float] = []
    began = time.time()
    try:
        time.sleep(min(2.0, args.freshness_seconds / 4))  # past the first commit
        until = time.monotonic() + args.freshness_seconds
        while time.monotonic() < until:
            copied = probe.copied_end()
            now = time.time()
            first_missing = appended.get(copied)
            lags_ms.append(0.0 if first_missing is None else max(0.0, now - first_missing) * 1000)
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(120)
    elapsed = time.time() - began
    reached = len(appended) * (len(value) + 10) / elapsed / 1e6
    p99 = (
        statistics.quantiles(lags_ms, n=100, method="inclusive")[98]
        if len(lags_ms) >= 2
        else lags_ms[0]
    )
    bench.delete(topic)
    return {
        "freshness_ms": args.freshness_ms,
        "target_mb_s": args.rate_mb_s,
        "value_bytes": len(value),
        "reached_mb_s": round(reached, 1),
        "lag_p50_ms": round(statistics.median(lags_ms), 1),
        "lag_p99_ms": round(p99, 1),
        "lag_max_ms": round(max(lags_ms), 1),
        "p99_vs_freshness": round(p99 / args.freshness_ms, 3),
        "samples": len(lags_ms),
    }


# ------------------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000, help="rows of (a) and (d)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--upload-mb", type=float, default=200.0, help="data of each (b) round")
    parser.add_argument("--freshness-ms", type=int, default=1000)
    parser.add_argument("--rate-mb-s", type=float, default=50.0)
    parser.add_argument("--freshness-seconds", type=float, default=20.0)
    parser.add_argument(
        "--freshness-value-bytes", type=int, default=1000, help="record size of (c)'s produce"
    )
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--only", default="a,b,c,d", help="which of a,b,c,d to run")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    only = set(args.only.split(","))
    from sparklog.cluster.embedded import EmbeddedCluster

    out: dict[str, Any] = {"rows": args.rows, "rounds": args.rounds}
    with tempfile.TemporaryDirectory(prefix="bench-tiered-") as tmp:
        root = str(Path(tmp) / "tables")
        config = {**BROKER_SETTINGS, "remote.table.root": root}
        with EmbeddedCluster(brokers=1, data_dir=Path(tmp) / "cluster", config=config) as cluster:
            bench = Bench(cluster, root, args)
            try:
                if only & {"a", "d"}:
                    print("setting up the historical topics", flush=True)
                    tiered, local = historical_topics(bench, args.rows)
                    if "a" in only:
                        print("(a) historical read", flush=True)
                        parquet = write_parquet(Path(tmp) / "parquet", args.rows)
                        out["historical_read"] = historical_read(bench, tiered, local, parquet)
                    if "d" in only:
                        print("(d) tiered fetch", flush=True)
                        out["tiered_fetch"] = tiered_fetch(bench, tiered, local)
                if "b" in only:
                    print("(b) upload", flush=True)
                    out["upload"] = upload(bench)
                if "c" in only:
                    print("(c) freshness", flush=True)
                    out["freshness"] = freshness(bench)
            finally:
                bench.admin.close()
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text)


if __name__ == "__main__":
    main()
