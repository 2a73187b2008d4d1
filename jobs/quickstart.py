"""Quickstart: a sparklog cluster inside Spark, written and read with DataFrames.

What `make demo` runs (through spark-submit from the venv). It starts a cluster in this Spark
application (controller in the driver, brokers as Spark tasks), creates a 6-partition topic,
writes 1,000,000 rows with `df.write.format("sparklog")`, reads them back in batch and checks
counts and per-partition offsets, aggregates the topic with a streaming query under
`Trigger.AvailableNow` into a table, prints a short summary and stops the cluster.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

import sparklog  # noqa: E402
from sparklog.client import AdminClient  # noqa: E402
from sparklog.client.admin import NewTopic  # noqa: E402
from sparklog.spark.session import with_reference_jars  # noqa: E402

TOPIC = "quickstart-events"
PARTITIONS = 6


def session(master: str | None) -> SparkSession:
    """The session spark-submit configured, else a local one (`python jobs/quickstart.py`)."""
    from pyspark import SparkConf

    builder = SparkSession.builder
    if master or not SparkConf().contains("spark.master"):
        builder = builder.master(master or "local[4]")
    return (
        with_reference_jars(builder)
        .appName("sparklog-quickstart")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.showConsoleProgress", "true")
        .config("spark.speculation", "false")
        .config("spark.sql.shuffle.partitions", "6")
        .getOrCreate()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--master", default=None, help="default: spark-submit's, else local[4]")
    parser.add_argument("--brokers", type=int, default=1)
    args = parser.parse_args()
    started = time.perf_counter()
    spark = session(args.master)
    spark.sparkContext.setLogLevel("WARN")
    work = tempfile.mkdtemp(prefix="sparklog-quickstart-")
    cluster = sparklog.start(spark, brokers=args.brokers, data_dir=os.path.join(work, "cluster"))
    try:
        print(
            f"sparklog cluster up: {cluster.bootstrap_servers} ({args.brokers} broker(s) as Spark tasks)"
        )
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
        admin.close()

        events = spark.range(args.rows).select(
            F.format_string("user-%05d", F.col("id") % 10_000).cast("binary").alias("key"),
            F.format_string('{"event": %d, "amount": %d}', F.col("id"), F.col("id") % 100)
            .cast("binary")
            .alias("value"),
        )
        t = time.perf_counter()
        events.write.format("sparklog").option("topic", TOPIC).option(
            "kafka.compression.type", "lz4"
        ).save()
        write_s = time.perf_counter() - t
        print(
            f"wrote {args.rows:,} rows to {TOPIC} in {write_s:.1f}s ({args.rows / write_s:,.0f} rows/s)"
        )

        t = time.perf_counter()
        back = spark.read.format("sparklog").option("subscribe", TOPIC).load()
        per_partition = (
            back.groupBy("partition")
            .agg(
                F.count("*").alias("rows"),
                F.min("offset").alias("first"),
                F.max("offset").alias("last"),
            )
            .orderBy("partition")
            .collect()
        )
        read_s = time.perf_counter() - t
        total = sum(r["rows"] for r in per_partition)
        assert total == args.rows, f"read {total} rows, wrote {args.rows}"
        for r in per_partition:
            assert r["first"] == 0 and r["last"] == r["rows"] - 1, (
                f"gap in partition {r['partition']}"
            )
        print(f"read them back in {read_s:.1f}s: {total:,} rows, offsets contiguous per partition:")
        for r in per_partition:
            print(f"  partition {r['partition']}: offsets 0..{r['last']} ({r['rows']:,} rows)")

        t = time.perf_counter()
        stream = (
            spark.readStream.format("sparklog")
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", args.rows // 4)
            .option("kafka.group.id", "quickstart-totals")  # lag visible while it runs
            .load()
            .select(
                F.get_json_object(F.col("value").cast("string"), "$.amount")
                .cast("int")
                .alias("amount")
            )
            .groupBy((F.col("amount") % 10).alias("bucket"))
            .agg(F.count("*").alias("events"), F.sum("amount").alias("amount"))
        )
        query = (
            stream.writeStream.outputMode("complete")
            .format("memory")
            .queryName("quickstart_totals")
            .option("checkpointLocation", os.path.join(work, "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        batches = len([p for p in query.recentProgress if p["numInputRows"] > 0])
        totals = spark.sql("SELECT * FROM quickstart_totals ORDER BY bucket").collect()
        stream_s = time.perf_counter() - t
        counted = sum(r["events"] for r in totals)
        assert counted == args.rows, f"streaming counted {counted}, expected {args.rows}"
        print(
            f"streamed the topic with Trigger.AvailableNow in {batches} bounded batches ({stream_s:.1f}s): {counted:,} events in {len(totals)} buckets"
        )
        lag = sparklog.consumer_lag_df(spark, group="quickstart-totals").collect()
        behind = sum(r["lag"] for r in lag)
        assert behind == 0, f"the query's group still lags by {behind} records"
        print(
            f"consumer group quickstart-totals: {len(lag)} partitions committed in Delta, "
            f"lag {behind} (sparklog.consumer_lag_df)"
        )
    finally:
        cluster.stop()
    print(f"cluster stopped cleanly; quickstart finished in {time.perf_counter() - started:.0f}s")
    spark.stop()


if __name__ == "__main__":
    main()
