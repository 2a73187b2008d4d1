"""What transactions cost, measured against the same work without them, in one run.

(a) Produce: `--transactions` (30) transactions of `--txn-mb` (1) MB each (1 KiB records) to a
    3-partition topic, with confluent-kafka and with sparklog's producer: transactional
    (begin, produce, commit) vs idempotent without transactions, same bytes, same topic.
    `txn_vs_idempotent` = transactional MB/s / idempotent MB/s (confluent-kafka; sparklog's
    own in `sparklog_txn_vs_idempotent`).
(b) EndTxn latency: the time of `commit_transaction()` after the records are flushed, i.e.
    EndTxn's round trip including the decision's Delta commit: p50/p99 over the transactions.
(c) Spark sink: a streaming query copies `--sink-rows` (200,000) rows into sparklog,
    exactly-once vs at-least-once (`exactlyOnce=false`), rows/s; `eos_sink_vs_alo` is the
    ratio. `--no-spark` skips it.

Usage: .venv/bin/python jobs/bench_transactions.py [--quick] [--no-spark] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sparklog.client import AdminClient, KafkaProducer, NewTopic
from sparklog.cluster.embedded import EmbeddedCluster

RECORD = b"x" * 1024
PARTITIONS = 3


def new_topic(bootstrap: str, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(name, PARTITIONS)])
    return name


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def confluent_run(bootstrap: str, txns: int, per_txn: int, transactional: bool) -> dict:
    from confluent_kafka import Producer

    topic = new_topic(bootstrap, "bench-ck")
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "linger.ms": 5,
    }
    if transactional:
        config["transactional.id"] = f"bench-{uuid.uuid4().hex[:6]}"
    producer = Producer(config)
    if transactional:
        producer.init_transactions(30)
    commits: list[float] = []
    started = time.perf_counter()
    for _ in range(txns):
        if transactional:
            producer.begin_transaction()
        for i in range(per_txn):
            while True:
                try:
                    producer.produce(topic, RECORD, partition=i % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.flush(60)
        if transactional:
            t0 = time.perf_counter()
            producer.commit_transaction(60)
            commits.append((time.perf_counter() - t0) * 1000)
    elapsed = time.perf_counter() - started
    return {"mb_per_s": txns * per_txn * len(RECORD) / 1e6 / elapsed, "commit_ms": commits}


def sparklog_run(bootstrap: str, txns: int, per_txn: int, transactional: bool) -> dict:
    topic = new_topic(bootstrap, "bench-own")
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    if transactional:
        config["transactional.id"] = f"bench-own-{uuid.uuid4().hex[:6]}"
    commits: list[float] = []
    with KafkaProducer(config) as producer:
        if transactional:
            producer.init_transactions()
        started = time.perf_counter()
        for _ in range(txns):
            if transactional:
                producer.begin_transaction()
            for i in range(per_txn):
                producer.send(topic, value=RECORD, partition=i % PARTITIONS)
            producer.flush()
            if transactional:
                t0 = time.perf_counter()
                producer.commit_transaction()
                commits.append((time.perf_counter() - t0) * 1000)
        elapsed = time.perf_counter() - started
    return {"mb_per_s": txns * per_txn * len(RECORD) / 1e6 / elapsed, "commit_ms": commits}


def sink_figures(rows: int) -> dict[str, float]:
    """Rows/s of a streaming copy into sparklog, exactly-once and at-least-once."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import sparklog

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-transactions")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    cluster = sparklog.start(spark, brokers=1, data_dir=tempfile.mkdtemp(prefix="bench-eos-"))
    try:
        source = new_topic(cluster.bootstrap_servers, "sink-in")
        spark.range(rows).select(
            F.col("id").cast("string").alias("key"), F.lit("y" * 100).alias("value")
        ).write.format("sparklog").option("topic", source).save()
        rates = {}
        for mode in ("false", "true", "false", "true"):  # alternate; keep the better of two
            sink = new_topic(cluster.bootstrap_servers, f"sink-out-{mode}")
            query = (
                spark.readStream.format("sparklog")
                .option("subscribe", source)
                .option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", str(max(1, rows // 4)))
                .load()
                .select("key", "value")
                .writeStream.format("sparklog")
                .option("topic", sink)
                .option("exactlyOnce", mode)
                .option("checkpointLocation", tempfile.mkdtemp(prefix="bench-ck-"))
                .trigger(availableNow=True)
            )
            started = time.perf_counter()
            running = query.start()
            running.awaitTermination()
            rate = rows / (time.perf_counter() - started)
            rates[mode] = max(rates.get(mode, 0.0), rate)
        return {
            "eos_sink_rows_per_s": rates["true"],
            "alo_sink_rows_per_s": rates["false"],
            "eos_sink_vs_alo": rates["true"] / rates["false"],
        }
    finally:
        cluster.stop()
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=30)
    parser.add_argument("--txn-mb", type=float, default=1.0)
    parser.add_argument("--sink-rows", type=int, default=200_000)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark sink figures")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    if args.quick:
        args.transactions, args.txn_mb, args.sink_rows = 5, 0.1, 2000
    per_txn = max(1, int(args.txn_mb * 1024 * 1024 / len(RECORD)))
    figures: dict[str, Any] = {"transactions": args.transactions, "txn_bytes": per_txn * 1024}
    with EmbeddedCluster(brokers=1, data_dir=tempfile.mkdtemp(prefix="bench-txn-")) as cluster:
        bs = cluster.bootstrap_servers
        runs = {}
        for name, fn in (("confluent", confluent_run), ("sparklog", sparklog_run)):
            fn(bs, 2, per_txn, True)  # warm up connections, coordinator, producer ids
            runs[name] = {mode: fn(bs, args.transactions, per_txn, mode) for mode in (False, True)}
        commits = runs["confluent"][True]["commit_ms"] + runs["sparklog"][True]["commit_ms"]
        figures.update(
            {
                "confluent_idempotent_mb_per_s": runs["confluent"][False]["mb_per_s"],
                "confluent_transactional_mb_per_s": runs["confluent"][True]["mb_per_s"],
                "txn_vs_idempotent": runs["confluent"][True]["mb_per_s"]
                / runs["confluent"][False]["mb_per_s"],
                "sparklog_idempotent_mb_per_s": runs["sparklog"][False]["mb_per_s"],
                "sparklog_transactional_mb_per_s": runs["sparklog"][True]["mb_per_s"],
                "sparklog_txn_vs_idempotent": runs["sparklog"][True]["mb_per_s"]
                / runs["sparklog"][False]["mb_per_s"],
                "end_txn_p50_ms": statistics.median(commits),
                "end_txn_p99_ms": percentile(commits, 0.99),
            }
        )
    if not args.no_spark:
        figures.update(sink_figures(args.sink_rows))
    print(json.dumps(figures, indent=2, sort_keys=True))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
