"""Small DataFrames to `display()` in a notebook: topics, partition offsets, brokers, query lag.

Each helper takes one snapshot from the driver (with sparklog's AdminClient, or the launcher's
view for brokers) and returns a Spark DataFrame of a few rows, sorted, so `display(...)`,
`.show()` and SQL over a temp view all work. Without `bootstrap_servers` they talk to the
cluster `sparklog.start(spark)` launched in this application. They are views of one moment:
call again to refresh.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from sparklog.client import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    AdminClient,
    ConfigResource,
    TopicPartition,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from sparklog.spark.cluster import SparkLogCluster

TOPICS_DDL = "topic string, partitions int, replication_factor int, configs map<string,string>"
OFFSETS_DDL = "topic string, partition int, leader int, earliest long, latest long, records long"
BROKERS_DDL = (
    "broker_id int, host string, port int, rack string, executor_id string, data_dir string, "
    "fenced boolean, leader_partitions int, task_attempt int, launches int, last_error string"
)
LAG_DDL = "topic string, partition int, query_offset long, latest long, lag long"

#: Config sources that are a topic's own settings (what `kafka-topics.sh --describe` lists
#: under "Configs:"); the rest are broker defaults.
_OVERRIDE_SOURCES = frozenset({"DYNAMIC_TOPIC_CONFIG"})


def resolve_bootstrap(bootstrap_servers: str | None = None) -> str:
    """The given servers, else the cluster `sparklog.start()` runs here; a clear error if neither."""
    if bootstrap_servers:
        return bootstrap_servers
    from sparklog.spark.cluster import active_cluster
    from sparklog.spark.source import cluster_bootstrap

    cluster = active_cluster()
    servers = cluster_bootstrap(cluster) if cluster is not None else None
    if not servers:
        raise ValueError(
            "no sparklog cluster to ask: start one with sparklog.start(spark), or pass "
            "bootstrap_servers='host:port'"
        )
    return servers


def _admin(bootstrap_servers: str | None) -> AdminClient:
    from sparklog.spark.source import running_cluster_client_settings

    # the running cluster's client settings (its security) unless another cluster is named
    settings = running_cluster_client_settings() if bootstrap_servers is None else {}
    return AdminClient(
        {
            **settings,
            "bootstrap.servers": resolve_bootstrap(bootstrap_servers),
            "client.id": "sparklog-notebook",
        }
    )


def _topic_names(admin: AdminClient, topic: str | Iterable[str] | None) -> list[str]:
    if topic is None:
        return admin.list_topics()
    return [topic] if isinstance(topic, str) else sorted(topic)


def topics_df(spark: SparkSession, bootstrap_servers: str | None = None) -> DataFrame:
    """One row per topic: partition count, replication factor and its own config overrides."""
    with _admin(bootstrap_servers) as admin:
        names = admin.list_topics()
        described = admin.describe_topics(names) if names else {}
        configs = admin.describe_configs([ConfigResource("topic", n) for n in names])
    rows = []
    for name in names:
        partitions = described[name].partitions
        entries = configs.get(ConfigResource("topic", name), {})
        rows.append(
            (
                name,
                len(partitions),
                max((len(p.replicas) for p in partitions), default=0),
                {e.name: e.value for e in entries.values() if e.source in _OVERRIDE_SOURCES},
            )
        )
    return spark.createDataFrame(rows, TOPICS_DDL)


def partition_offsets(
    topic: str | Iterable[str] | None = None, bootstrap_servers: str | None = None
) -> list[tuple[str, int, int, int, int, int]]:
    """(topic, partition, leader, earliest, latest, records) for every partition, sorted."""
    with _admin(bootstrap_servers) as admin:
        names = _topic_names(admin, topic)
        described = admin.describe_topics(names) if names else {}
        leaders = {
            TopicPartition(name, p.partition): p.leader
            for name in names
            for p in described[name].partitions
        }
        earliest = admin.list_offsets(dict.fromkeys(leaders, EARLIEST_TIMESTAMP))
        latest = admin.list_offsets(dict.fromkeys(leaders, LATEST_TIMESTAMP))
    rows = []
    for tp, leader in sorted(leaders.items()):
        name, partition = tp
        first, end = earliest[tp].offset, latest[tp].offset
        rows.append((name, partition, leader, first, end, end - first))
    return rows


def offsets_df(
    spark: SparkSession,
    topic: str | Iterable[str] | None = None,
    bootstrap_servers: str | None = None,
) -> DataFrame:
    """One row per partition (of `topic`, or of every topic): leader, earliest and latest
    offset (the log start offset and the high watermark), and the offsets in between as
    `records` (transaction markers, once there are any, take offsets too)."""
    return spark.createDataFrame(partition_offsets(topic, bootstrap_servers), OFFSETS_DDL)


def brokers_df(spark: SparkSession, cluster: SparkLogCluster | None = None) -> DataFrame:
    """One row per broker of `cluster` (default: the one `sparklog.start()` launched): where
    it runs (executor, data dir), whether it is fenced, what it leads, how often it launched."""
    from sparklog.spark.cluster import active_cluster

    cluster = cluster if cluster is not None else active_cluster()
    if cluster is None:
        raise ValueError(
            "no running sparklog cluster: start one with cluster = sparklog.start(spark), "
            "or pass it: brokers_df(spark, cluster)"
        )
    described = cluster.describe()
    led: dict[int, int] = {}
    for topic in described["topics"]:
        for p in topic["partitions"]:
            led[p["leader"]] = led.get(p["leader"], 0) + 1
    rows = [
        (
            b["broker_id"],
            b["host"],
            b["port"],
            b.get("rack"),
            b.get("executor_id"),
            b.get("data_dir"),
            bool(b.get("fenced")),
            led.get(b["broker_id"], 0),
            b.get("task_attempt"),
            b.get("launches"),
            b.get("last_error"),
        )
        for b in described["brokers"]
    ]
    return spark.createDataFrame(rows, BROKERS_DDL)


def query_offsets(query: StreamingQuery) -> dict[tuple[str, int], int]:
    """The next offset per (topic, partition) a streaming query reads, from its last progress
    (the end offset of its last batch, Spark's Kafka offset JSON); {} before any batch."""
    progress = query.lastProgress
    out: dict[tuple[str, int], int] = {}
    for source in progress.sources if progress is not None else ():
        try:
            end = json.loads(source.endOffset)
        except (TypeError, ValueError):
            continue
        if not isinstance(end, dict):
            continue
        for topic, partitions in end.items():
            if isinstance(partitions, dict):
                out.update({(topic, int(p)): int(o) for p, o in partitions.items()})
    return out


def query_lag_df(
    spark: SparkSession, query: StreamingQuery, bootstrap_servers: str | None = None
) -> DataFrame:
    """One row per partition a streaming query reads: its position, the partition's latest
    offset now, and the lag between them (Spark's Kafka source reports only the min/avg/max of
    these as `*OffsetsBehindLatest` metrics)."""
    position = query_offsets(query)
    topics = sorted({topic for topic, _ in position})
    latest = {(t, p): end for t, p, _, _, end, _ in partition_offsets(topics, bootstrap_servers)}
    rows = []
    for (topic, partition), offset in sorted(position.items()):
        end = latest.get((topic, partition))  # None: the partition is gone
        rows.append((topic, partition, offset, end, None if end is None else max(0, end - offset)))
    return spark.createDataFrame(rows, LAG_DDL)
