"""The topic table's layout: one row per record (control records included), partitioned by
`partition` and a UTC `date` of the record's timestamp (DESIGN D17; issue 32 §2).

A row carries the record (`offset`, `timestamp`, `timestamp_type`, `key`, `value`,
`headers`) and the columns of its batch that rebuild a record-identical v2 batch
(`batch_*`, `leader_epoch`, `producer_*`, `base_sequence`, flags, `compression`). `aborted` is
set from the transaction index at upload time: only offsets below the last stable offset are
copied, so every transactional record's outcome is known. Analysts want committed data
records: `committed_records_filter` is the predicate (`is_control = false and aborted =
false`).

Exactly once: a commit carries one Delta app transaction per partition it adds rows to,
`txnAppId = app_id(topic_id, partition)`, `txnVersion` = the copied end offset (exclusive), and
the ranges in the commit's `userMetadata` (`commit_metadata`). A retried or duplicated upload
finds the version already at its end offset and is a no-op.

The table stays at Delta protocol (1, 2): no deletion vectors, timestamp-ntz or column mapping
(DESIGN D8), so any Delta reader can open it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping

import pyarrow as pa

#: Delta table configuration keys naming the topic the table belongs to.
TOPIC_ID_KEY = "sparklog.topic.id"
TOPIC_NAME_KEY = "sparklog.topic"
#: The userMetadata key of a commit: {"<partition>": [start_offset, end_offset], ...}.
RANGES_KEY = "sparklog.ranges"

PARTITION_COLUMNS = ("partition", "date")

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

#: Column order of the table (the Spark reader and the broker's rebuild rely on the names).
TABLE_SCHEMA = pa.schema(
    [
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("date", pa.date32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("timestamp_type", pa.int32(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADER_TYPE),
        # the batch the record came in: enough to rebuild it record-identical
        pa.field("batch_base_offset", pa.int64(), nullable=False),
        pa.field("batch_last_offset_delta", pa.int32(), nullable=False),
        pa.field("batch_max_timestamp", pa.int64(), nullable=False),
        pa.field("leader_epoch", pa.int32(), nullable=False),
        pa.field("producer_id", pa.int64(), nullable=False),
        pa.field("producer_epoch", pa.int32(), nullable=False),
        pa.field("base_sequence", pa.int32(), nullable=False),
        pa.field("compression", pa.int32(), nullable=False),
        pa.field("is_transactional", pa.bool_(), nullable=False),
        pa.field("is_control", pa.bool_(), nullable=False),
        pa.field("aborted", pa.bool_(), nullable=False),
        # the batch's own base timestamp, and in a LogAppendTime batch each record's own
        # timestamp (`timestamp` there is the append time): the batch's CRC covers both
        pa.field("batch_base_timestamp", pa.int64(), nullable=False),
        pa.field("create_timestamp", pa.int64()),
    ]
)

#: What analysts read: committed data records only.
COMMITTED_RECORDS_FILTER = "is_control = false AND aborted = false"


def app_id(topic_id: uuid.UUID, partition: int) -> str:
    """The Delta app-transaction id of one partition's uploads: `<topic id>-<partition>`."""
    return f"{topic_id}-{partition}"


def commit_metadata(ranges: Mapping[int, tuple[int, int]], **extra: object) -> str:
    """A commit's `userMetadata`: the offset ranges it adds per partition, plus `extra`."""
    body: dict[str, object] = {RANGES_KEY: {str(p): list(r) for p, r in sorted(ranges.items())}}
    body.update({f"sparklog.{k}": v for k, v in extra.items()})
    return json.dumps(body, separators=(",", ":"))


def table_location(root: str, topic: str) -> str:
    """Where a topic's table lives under `remote.table.root`."""
    return root.rstrip("/") + "/" + topic


# -- the data files' layout ------------------------------------------------------------------

#: Columns with file statistics (Delta's `dataSkippingStatsColumns`): what reads prune by.
STATS_COLUMNS = (
    "offset",
    "timestamp",
    "batch_base_offset",
    "batch_last_offset_delta",
    "batch_max_timestamp",
    "leader_epoch",
    "producer_id",
)
#: Parquet row groups of about this many bytes (about a fetch's max.partition.fetch.bytes).
ROW_GROUP_BYTES = 1 << 20
#: Columns delta-encoded in the data files (they grow by small steps).
DELTA_ENCODED = (
    "offset",
    "timestamp",
    "batch_base_offset",
    "batch_max_timestamp",
    "batch_base_timestamp",
)


def row_group_rows(row_bytes: int, rows: int) -> int:
    """Rows per Parquet row group for rows of this average size: about `ROW_GROUP_BYTES` (a
    read of `max_bytes` decodes about that much more, by row-group statistics)."""
    per_row = max(1, row_bytes // max(1, rows))
    return min(max(ROW_GROUP_BYTES // per_row, 1024), 1 << 20)
