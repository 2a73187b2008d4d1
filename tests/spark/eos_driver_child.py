"""A Spark driver for tests/spark/test_sink_driver_kill.py: copies one topic into another with
the exactly-once sink, one small micro-batch at a time, until the input is drained. The test
kills this process (and its JVM) with SIGKILL mid-run and starts it again on the same
checkpoint."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def main() -> None:
    bootstrap, source, sink, checkpoint = sys.argv[1:5]
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("eos-driver-child")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    import sparklog

    sparklog.register(spark)
    query = (
        spark.readStream.format("sparklog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "150")
        .load()
        .select("key", "value")
        .writeStream.format("sparklog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("exactlyOnce", os.environ.get("EOS_CHILD_EXACTLY_ONCE", "true"))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print("DRAINED", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
