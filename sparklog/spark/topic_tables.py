"""A topic's remote tier as a Spark DataFrame: `sparklog.topic_table(spark, topic)`.

The table of a topic with `remote.storage.enable=true` is a plain Delta table (DESIGN D17,
docs/tiered-storage.md): one row per record, control records included, partitioned by
`partition` and `date`. These helpers read it with `read_delta` (Delta's own reader when the
session has it, else D8's file-listing fallback), so any Spark SQL works on it:

- `topic_table(spark, topic)`: every row; `committed=True` keeps what analysts want, the
  committed data records (`COMMITTED_RECORDS_FILTER`: no control records, no aborted ones);
- `topic_table_as_of(spark, topic, offsets=... | version=...)`: time travel. Each Delta
  version is a consistent "as of these offsets" snapshot (a commit adds whole offset ranges,
  named in its `userMetadata`); given offsets, the first version whose copied ends reach them;
- `committed_records(spark, topic)`: `topic_table(..., committed=True)`, registered as a
  temporary view when `view` is given.

Where the table is: `root` (the cluster's `remote.table.root`), else the cluster
`sparklog.start(spark)` runs here (its `remote.table.root` and `storage.options.*`), else
the brokers at `bootstrap_servers` say (DescribeConfigs of a broker).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sparklog.spark.table_listing import REMOTE_TABLE_ROOT
from sparklog.storage.remote.schema import (
    COMMITTED_RECORDS_FILTER,
    RANGES_KEY,
    TABLE_SCHEMA,
    table_location,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class TopicTableError(ValueError):
    """No table for the topic, or no version matching what was asked; says what to do."""


def topic_table(
    spark: SparkSession,
    topic: str,
    *,
    root: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    bootstrap_servers: str | None = None,
    committed: bool = False,
    version: int | None = None,
) -> DataFrame:
    """The topic's table as a DataFrame (at `version`, else its latest snapshot)."""
    from sparklog.spark.delta_read import read_delta

    location, options = locate(topic, root, storage_options, bootstrap_servers)
    df = read_delta(spark, location, version, options)
    # the table's column order (the file-listing fallback puts partition columns last)
    ordered = [c for c in TABLE_SCHEMA.names if c in df.columns]
    df = df.select(*ordered, *[c for c in df.columns if c not in ordered])
    return df.where(COMMITTED_RECORDS_FILTER) if committed else df


def committed_records(
    spark: SparkSession, topic: str, *, view: str | None = None, **where: Any
) -> DataFrame:
    """The committed data records of the topic's table; also a temporary view `view`."""
    df = topic_table(spark, topic, committed=True, **where)
    if view:
        df.createOrReplaceTempView(view)
    return df


def topic_table_as_of(
    spark: SparkSession,
    topic: str,
    offsets: Mapping[Any, int] | str | None = None,
    *,
    version: int | None = None,
    committed: bool = False,
    **where: Any,
) -> DataFrame:
    """The table as it stood at a Delta `version`, or at the first version whose copied ends
    reach `offsets`: {partition: end offset} (exclusive, as a streaming query's offsets),
    {(topic, partition): offset} or Spark's JSON `{"topic": {"0": n}}`."""
    if (offsets is None) == (version is None):
        raise TopicTableError("give either offsets or version")
    if offsets is not None:
        from sparklog.spark.table_listing import open_table

        location, options = locate(
            topic,
            where.get("root"),
            where.get("storage_options"),
            where.get("bootstrap_servers"),
        )
        table = open_table(location, options)
        if table is None:
            raise TopicTableError(f"topic {topic} has no table at {location}")
        version = version_covering(table.history(), partition_offsets(topic, offsets))
    return topic_table(spark, topic, committed=committed, version=version, **where)


def partition_offsets(topic: str, offsets: Mapping[Any, int] | str) -> dict[int, int]:
    """{partition: offset} of the topic from any of the accepted shapes."""
    if isinstance(offsets, str):
        data = json.loads(offsets)
        if topic not in data:
            raise TopicTableError(f"offsets {offsets} name no partition of topic {topic}")
        return {int(p): int(o) for p, o in data[topic].items()}
    out = {}
    for key, offset in offsets.items():
        if isinstance(key, tuple):
            if key[0] != topic:
                continue
            key = key[1]
        out[int(key)] = int(offset)
    return out


def version_covering(history: list[dict[str, Any]], wanted: Mapping[int, int]) -> int:
    """The first version at which every partition's copied end is at least `wanted`'s, from
    the ranges each commit's `userMetadata` names."""
    ends: dict[int, int] = {}
    for commit in sorted(history, key=lambda c: int(c["version"])):
        meta = commit.get("userMetadata")
        if meta:
            try:
                ranges = json.loads(meta).get(RANGES_KEY, {})
            except (ValueError, AttributeError):
                ranges = {}
            for p, (_, end) in ranges.items():
                ends[int(p)] = max(ends.get(int(p), 0), int(end))
        if all(ends.get(p, 0) >= o for p, o in wanted.items()):
            return int(commit["version"])
    have = {p: ends.get(p, 0) for p in sorted(wanted)}
    raise TopicTableError(
        f"no version of the table reaches offsets {dict(sorted(wanted.items()))} yet (it "
        f"holds up to {have}); wait for the brokers to copy them, or ask for a smaller offset"
    )


def locate(
    topic: str,
    root: str | None,
    storage_options: Mapping[str, str] | None,
    bootstrap_servers: str | None,
) -> tuple[str, dict[str, str] | None]:
    """(location, storage options) of the topic's table."""
    options = dict(storage_options) if storage_options else None
    if root:
        return table_location(root, topic), options
    from sparklog.spark.cluster import active_cluster

    cluster = active_cluster()
    if cluster is not None and bootstrap_servers is None:
        from sparklog.storage.object_store import storage_options as options_of

        settings = dict(cluster.settings)
        if settings.get(REMOTE_TABLE_ROOT):
            return (
                table_location(settings[REMOTE_TABLE_ROOT], topic),
                options or options_of(settings) or None,
            )
        bootstrap_servers = cluster.bootstrap_servers
    if bootstrap_servers:
        from sparklog.client import AdminClient
        from sparklog.spark.table_listing import TierLocator

        with AdminClient({"bootstrap.servers": bootstrap_servers}) as admin:
            found = TierLocator(None, admin=admin).broker_root()
        if found:
            return table_location(found, topic), options
    raise TopicTableError(
        f"where is topic {topic}'s table? pass root='<remote.table.root>', or start the "
        "cluster with remote.table.root set (sparklog.start(spark, config={...})), or pass "
        "bootstrap_servers of brokers that have it"
    )
