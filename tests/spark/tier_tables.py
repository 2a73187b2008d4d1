"""Topic tables for the Spark tests, built from what the brokers serve.

Until the brokers copy segments themselves, a test writes a topic's table the way the
remote log manager does: rows in `TABLE_SCHEMA` (control records included, aborted flagged),
partitioned by `partition` and `date`, several commits each carrying its app transaction and
ranges. Records come from the brokers with sparklog's consumer: read_uncommitted gives every
data record, read_committed the committed ones (the rest below the LSO are aborted), and the
offsets neither returns are control records.
"""

from __future__ import annotations

import datetime as dt
import uuid

import numpy as np
import pyarrow as pa

from sparklog.client import KafkaConsumer
from sparklog.storage.remote.schema import TABLE_SCHEMA, app_id, commit_metadata, table_location


def fetch(bootstrap: str, topic: str, partition: int, end: int, isolation: str) -> pa.Table:
    """Records [0, end) of a partition at an isolation level, as `poll_arrow` returns them."""
    config = {
        "bootstrap.servers": bootstrap,
        "isolation.level": isolation,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    batches = []
    with KafkaConsumer(config) as consumer:
        consumer.assign([(topic, partition)])
        consumer.seek((topic, partition), 0)
        for _ in range(10_000):
            if consumer.position((topic, partition)) >= end:
                break
            batch = consumer.poll_arrow(500, include_headers=True)
            if batch.num_rows:
                batches.append(batch)
    table = pa.Table.from_batches(batches) if batches else None
    if table is None:
        return pa.table({"offset": pa.array([], pa.int64())})
    return table.filter(pa.compute.less(table.column("offset"), end))


def table_rows(bootstrap: str, topic: str, partition: int, end: int) -> pa.Table:
    """Rows of offsets [0, end) of a partition in the table's layout."""
    data = fetch(bootstrap, topic, partition, end, "read_uncommitted")
    committed = set(fetch(bootstrap, topic, partition, end, "read_committed")["offset"].to_pylist())
    offsets = data["offset"].to_numpy()
    control = np.setdiff1d(np.arange(end, dtype=np.int64), offsets)
    n, c = len(offsets), len(control)
    ts_ms = np.concatenate([data["timestamp"].cast(pa.int64()).to_numpy(), np.zeros(c, np.int64)])
    # a control record's timestamp: its neighbour's (the marker is written right after)
    if c:
        ts_ms[n:] = ts_ms[:n].max() if n else 0
    all_offsets = np.concatenate([offsets, control])
    order = np.argsort(all_offsets, kind="stable")
    aborted = np.array([o not in committed for o in offsets.tolist()] + [False] * c)
    headers = data["headers"].to_pylist() + [None] * c
    columns = {
        "partition": pa.array(np.full(n + c, partition, np.int32)),
        "date": pa.array(
            [dt.datetime.fromtimestamp(t / 1000, dt.UTC).date() for t in ts_ms], pa.date32()
        ),
        "offset": pa.array(all_offsets),
        "timestamp": pa.array(ts_ms * 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "timestamp_type": pa.array(
            np.concatenate([data["timestampType"].to_numpy(), np.zeros(c, np.int32)]), pa.int32()
        ),
        "key": pa.array(data["key"].to_pylist() + [b"\x00\x00\x00\x00"] * c, pa.binary()),
        "value": pa.array(data["value"].to_pylist() + [b"\x00\x00\x00\x00\x00\x00"] * c),
        "headers": pa.array(headers, TABLE_SCHEMA.field("headers").type),
        "batch_base_offset": pa.array(all_offsets),
        "batch_last_offset_delta": pa.array(np.zeros(n + c, np.int32)),
        "batch_max_timestamp": pa.array(ts_ms),
        "leader_epoch": pa.array(np.zeros(n + c, np.int32)),
        "producer_id": pa.array(np.full(n + c, -1, np.int64)),
        "producer_epoch": pa.array(np.full(n + c, -1, np.int32)),
        "base_sequence": pa.array(np.full(n + c, -1, np.int32)),
        "compression": pa.array(np.zeros(n + c, np.int32)),
        "is_transactional": pa.array(np.zeros(n + c, bool)),
        "is_control": pa.array(np.concatenate([np.zeros(n, bool), np.ones(c, bool)])),
        "aborted": pa.array(aborted),
    }
    # columns the contract added since (batch_base_timestamp, create_timestamp, ...)
    for f in TABLE_SCHEMA:
        if f.name not in columns:
            fill = pa.array(ts_ms) if f.type == pa.int64() and not f.nullable else None
            columns[f.name] = fill if fill is not None else pa.nulls(n + c, f.type)
    return pa.table(columns, schema=TABLE_SCHEMA).take(pa.array(order))


def write_topic_table(
    root: str,
    topic: str,
    bootstrap: str,
    ends: dict[int, int],
    *,
    commits: int = 3,
    topic_id: uuid.UUID | None = None,
) -> str:
    """The table of `topic` under `root` holding [0, ends[p]) of each partition, written in
    `commits` commits (each a slice of every partition); returns its location."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    location = table_location(root, topic)
    topic_id = topic_id or uuid.uuid4()
    rows = {p: table_rows(bootstrap, topic, p, end) for p, end in ends.items()}
    for i in range(commits):
        ranges, parts, txns = {}, [], []
        for p, end in ends.items():
            lo, hi = end * i // commits, end * (i + 1) // commits
            if hi <= lo:
                continue
            parts.append(rows[p].slice(lo, hi - lo))
            ranges[p] = (lo, hi)
            txns.append(Transaction(app_id(topic_id, p), hi))
        if not parts:
            continue
        write_deltalake(
            location,
            pa.concat_tables(parts),
            mode="append",
            partition_by=["partition", "date"],
            commit_properties=CommitProperties(
                app_transactions=txns, custom_metadata={"userMetadata": commit_metadata(ranges)}
            ),
        )
    return location
