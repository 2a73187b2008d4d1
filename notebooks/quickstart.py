# Databricks notebook source
# MAGIC %md
# MAGIC # sparklog quickstart
# MAGIC
# MAGIC sparklog is Apache Kafka's log running inside this Spark application: the controller runs
# MAGIC in the driver, each broker is a long-running Spark task, and producers and consumers are
# MAGIC DataFrame writers and readers. This notebook walks through the whole story in under a minute:
# MAGIC
# MAGIC 1. start a one-broker cluster,
# MAGIC 2. create a topic with 6 partitions,
# MAGIC 3. write 100,000 rows with `df.write.format("sparklog")`,
# MAGIC 4. look at topics and offsets,
# MAGIC 5. read the topic back in batch,
# MAGIC 6. aggregate it with a streaming query (`Trigger.AvailableNow`) into a table, committing
# MAGIC    its progress to a consumer group (`kafka.group.id`),
# MAGIC 7. watch the query's lag and the group's lag (`consumer_lag_df`) grow and drain,
# MAGIC 8. query the group's offsets table (Delta) with Spark SQL,
# MAGIC 9. clean up: delete the group and the topic, stop the cluster and remove its files.
# MAGIC
# MAGIC Everything uses Spark's Kafka connector API: switching `format("kafka")` to
# MAGIC `format("sparklog")` is the only change. On Databricks, install the `sparklog` wheel on the
# MAGIC cluster (or `%pip install` it) first; the cluster needs `spark.speculation=false` (the default).

# COMMAND ----------

import json
import shutil
import tempfile

from pyspark.sql import functions as F

import sparklog
from sparklog.client import AdminClient, NewTopic
from sparklog.spark.delta_read import native_delta_reads, read_delta
from sparklog.spark.notebook import brokers_df, offsets_df, query_lag_df, topics_df

try:
    spark  # noqa: B018 - Databricks and the pyspark shell define it
except NameError:
    from pyspark.sql import SparkSession

    from sparklog.spark.session import with_delta

    # the pinned JARs, with Delta's SQL extension and catalog (as Databricks has them)
    spark = with_delta(SparkSession.builder.master("local[4]")).getOrCreate()

try:
    display  # noqa: B018 - Databricks and Jupyter define it
except NameError:

    def display(df):
        df.show(truncate=False)


# A small data set: a few shuffle partitions keep the streaming aggregation's state small.
spark.conf.set("spark.sql.shuffle.partitions", "4")

TOPIC = "quickstart-events"
GROUP = "quickstart-totals"
PARTITIONS = 6
ROWS = 100_000
KINDS = ["view", "click", "purchase"]

# COMMAND ----------

# MAGIC %md
# MAGIC ## 1. Start a cluster
# MAGIC
# MAGIC `sparklog.start` runs the controller in this driver and one broker as a Spark task, waits
# MAGIC until the broker registered, and makes `format("sparklog")` default to this cluster (no
# MAGIC `kafka.bootstrap.servers` option needed). `brokers_df` shows where each broker runs. The
# MAGIC cluster keeps its data in `data_dir` (the controller's state and the broker's partitions),
# MAGIC which the last cell removes.

# COMMAND ----------

data_dir = tempfile.mkdtemp(prefix="sparklog-quickstart-")
cluster = sparklog.start(spark, brokers=1, data_dir=data_dir)
bootstrap_servers = cluster.bootstrap_servers
display(brokers_df(spark))

# COMMAND ----------

# MAGIC %md
# MAGIC ## 2. Create a topic
# MAGIC
# MAGIC Any Kafka admin client works (confluent-kafka, kafka-python, `kcat`); here sparklog's own.
# MAGIC Six partitions, one replica (there is one broker), seven days of retention.

# COMMAND ----------

with AdminClient({"bootstrap.servers": bootstrap_servers}) as admin:
    admin.create_topics(
        [NewTopic(TOPIC, PARTITIONS, 1, configs={"retention.ms": str(7 * 24 * 3600 * 1000)})]
    )
display(topics_df(spark))

# COMMAND ----------

# MAGIC %md
# MAGIC ## 3. Write rows from a DataFrame
# MAGIC
# MAGIC The sink takes Spark's Kafka sink columns: `key` and `value` (string or binary), optional
# MAGIC `headers`, `timestamp`, `partition`, `topic`. Records with the same key go to the same
# MAGIC partition (Kafka's murmur2 partitioner), in order.

# COMMAND ----------

kind = (
    F.when(F.col("id") % 3 == 0, KINDS[0]).when(F.col("id") % 3 == 1, KINDS[1]).otherwise(KINDS[2])
)
events = spark.range(ROWS).select(
    F.format_string("user-%04d", F.col("id") % 1000).alias("key"),
    F.to_json(
        F.struct(
            F.col("id").alias("event"), kind.alias("kind"), (F.col("id") % 100).alias("amount")
        )
    ).alias("value"),
    F.array(
        F.struct(F.lit("source").alias("key"), F.lit("quickstart").cast("binary").alias("value"))
    ).alias("headers"),
)
events.write.format("sparklog").option("topic", TOPIC).option(
    "kafka.compression.type", "lz4"
).save()

# COMMAND ----------

# MAGIC %md
# MAGIC ## 4. Topics and offsets
# MAGIC
# MAGIC `offsets_df` lists each partition's leader, earliest offset (log start), latest offset (high
# MAGIC watermark) and the records between them: the 100,000 rows spread over the 6 partitions.

# COMMAND ----------

offsets = offsets_df(spark, TOPIC)
display(offsets)
written = offsets.agg(F.sum("records")).first()[0]
print(f"{written:,} records in {TOPIC}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## 5. Read back in batch
# MAGIC
# MAGIC `spark.read.format("sparklog")` returns Spark's Kafka source schema: `key, value, topic,
# MAGIC partition, offset, timestamp, timestampType` (plus `headers` with `includeHeaders`).
# MAGIC Offsets are dense per partition: 0, 1, 2, ...

# COMMAND ----------

back = (
    spark.read.format("sparklog")
    .option("subscribe", TOPIC)
    .option("startingOffsets", "earliest")
    .option("includeHeaders", "true")
    .load()
)
display(
    back.select(
        F.col("key").cast("string"),
        F.col("value").cast("string"),
        "partition",
        "offset",
        "timestamp",
        "headers",
    ).limit(5)
)
per_partition = (
    back.groupBy("partition")
    .agg(
        F.count("*").alias("rows"),
        F.min("offset").alias("first_offset"),
        F.max("offset").alias("last_offset"),
        F.countDistinct("key").alias("users"),
    )
    .orderBy("partition")
)
display(per_partition)

# COMMAND ----------

# MAGIC %md
# MAGIC ## 6. Stream the topic into a table
# MAGIC
# MAGIC A streaming query reads the topic from the earliest offset and keeps running totals per
# MAGIC event kind in the table `quickstart_totals`. `Trigger.AvailableNow` processes what is in
# MAGIC the topic now, in bounded batches of at most `maxOffsetsPerTrigger` records, then stops: the
# MAGIC usual way to run a streaming job on a schedule. Its checkpoint remembers the offsets read.
# MAGIC
# MAGIC With `kafka.group.id`, each finished batch also commits its end offsets to that consumer
# MAGIC group, so the query's progress shows wherever Kafka's group offsets show
# MAGIC (`kafka-consumer-groups --describe`, `sparklog.consumer_lag_df`); the checkpoint stays
# MAGIC the query's position. Spark's own Kafka connector never commits.

# COMMAND ----------

checkpoint = tempfile.mkdtemp(prefix="sparklog-quickstart-checkpoint-")


def run_totals_query():
    """Run the aggregation until it has caught up with the topic, then return the query."""
    totals = (
        spark.readStream.format("sparklog")
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", ROWS // 2)
        .option("kafka.group.id", GROUP)
        .load()
        .select(F.from_json(F.col("value").cast("string"), "kind string, amount int").alias("e"))
        .groupBy("e.kind")
        .agg(F.count("*").alias("events"), F.sum("e.amount").alias("amount"))
    )
    query = (
        totals.writeStream.outputMode("complete")
        .format("memory")
        .queryName("quickstart_totals")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return query


query = run_totals_query()
batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
print(f"{sum(batches):,} records in {len(batches)} batches: {batches}")
totals = spark.table("quickstart_totals").orderBy("kind")
display(totals)

# COMMAND ----------

# MAGIC %md
# MAGIC ## 7. Lag and offsets
# MAGIC
# MAGIC `query_lag_df` compares the offsets the query has read (its last batch's end offsets) with
# MAGIC each partition's latest offset; `sparklog.consumer_lag_df` does the same for the offsets
# MAGIC the group committed, read from the coordinator's Delta table (as
# MAGIC `kafka-consumer-groups --describe` shows them). Right after the run both lags are 0. Write
# MAGIC 3,000 more events and both show them; run the query again from its checkpoint and it reads
# MAGIC only those.

# COMMAND ----------

display(query_lag_df(spark, query))
lag_after_first_run = query_lag_df(spark, query).agg(F.sum("lag")).first()[0]
group_lag = sparklog.consumer_lag_df(spark, group=GROUP)
display(group_lag)
group_lag_after_first_run = group_lag.agg(F.sum("lag")).first()[0]

more = events.limit(3_000).withColumn("key", F.concat(F.lit("late-"), "key"))
more.write.format("sparklog").option("topic", TOPIC).save()
lag = query_lag_df(spark, query)
display(lag)
lag_before_catch_up = lag.agg(F.sum("lag")).first()[0]
group_lag = sparklog.consumer_lag_df(spark, group=GROUP)
display(group_lag)
group_lag_before_catch_up = group_lag.agg(F.sum("lag")).first()[0]
print(
    f"the query is {lag_before_catch_up:,} records behind, its group {group_lag_before_catch_up:,}"
)

# COMMAND ----------

query = run_totals_query()
caught_up = sum(p["numInputRows"] for p in query.recentProgress)
lag_after_catch_up = query_lag_df(spark, query).agg(F.sum("lag")).first()[0]
group_lag_after_catch_up = sparklog.consumer_lag_df(spark, group=GROUP).agg(F.sum("lag")).first()[0]
print(f"caught up: read {caught_up:,} new records, lag now {lag_after_catch_up}")
totals = spark.table("quickstart_totals").orderBy("kind")
display(totals)
print(json.dumps({r["kind"]: r["events"] for r in totals.collect()}))

# COMMAND ----------

# MAGIC %md
# MAGIC ## 8. The offsets table in Spark SQL
# MAGIC
# MAGIC The group coordinator keeps every offset commit as a row of a Delta table
# MAGIC (`cluster.coordinator.table_path`, docs/groups.md lists its columns), so Spark SQL on
# MAGIC ``delta.`path` `` answers what `kafka-consumer-groups --describe` shows: the latest
# MAGIC committed offset per partition. A session without Delta's extension reads the same rows
# MAGIC through `sparklog.spark.delta_read.read_delta` as a temporary view.

# COMMAND ----------

offsets_table_path = cluster.coordinator.table_path
offsets_table = f"delta.`{offsets_table_path}`"
if not native_delta_reads(spark):
    read_delta(spark, offsets_table_path).createOrReplaceTempView("quickstart_offsets_table")
    offsets_table = "quickstart_offsets_table"
committed_sql = spark.sql(
    f"""
    SELECT group_id, topic, partition, committed_offset, commit_timestamp
    FROM (SELECT *, row_number() OVER (PARTITION BY group_id, topic, partition
                                       ORDER BY sequence DESC) AS rn
          FROM {offsets_table} WHERE record_type = 'offset' AND group_id = '{GROUP}')
    WHERE rn = 1 AND committed_offset IS NOT NULL
    ORDER BY topic, partition
    """
)
display(committed_sql)
committed_by_sql = {(r.topic, r.partition): r.committed_offset for r in committed_sql.collect()}

# COMMAND ----------

# MAGIC %md
# MAGIC ## 9. Clean up
# MAGIC
# MAGIC Everything the notebook wrote goes: the consumer group's committed offsets, the topic, the
# MAGIC in-memory table and the query's checkpoint. `cluster.stop()` asks the broker to shut down
# MAGIC cleanly through its heartbeat, waits for its Spark job to finish, and stops the controller:
# MAGIC no Spark job is left running. `stop()` keeps the cluster's files for a later start on the
# MAGIC same `data_dir`, so the notebook removes that directory itself (on a multi-host cluster,
# MAGIC each executor also holds `<data_dir>/brokers` on its own disk).

# COMMAND ----------

with AdminClient({"bootstrap.servers": bootstrap_servers}) as admin:
    admin.delete_groups([GROUP])
    admin.delete_topics([TOPIC])
    groups_left = [g.group_id for g in admin.list_groups()]
    topics_left = admin.list_topics()
spark.catalog.dropTempView("quickstart_totals")
spark.catalog.dropTempView("quickstart_offsets_table")  # when the cell above made one
cluster.stop()
shutil.rmtree(checkpoint)
shutil.rmtree(data_dir)
print(f"sparklog cluster stopped; left behind: groups {groups_left}, topics {topics_left}")
