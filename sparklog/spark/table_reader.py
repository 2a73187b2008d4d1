"""Reading tiered offsets in a Spark task: a topic table's Parquet files, read with pyarrow.

A `TableRange` names the files (listed on the driver from one Delta snapshot) whose offset
statistics meet the task's range. The task reads only the columns the connector returns,
with the offset range pushed down as a filter (row groups outside it are skipped by their
statistics), sorts by offset (a segment's rows may sit in several files, one per `date`),
checks that every offset of the range is there, then drops control records (consumers never
see them) and, with `isolation.level=read_committed`, aborted records: exactly the records a
consumer at that isolation level gets from the brokers, in the connector's schema.

When the files no longer hold the whole range (vacuumed after a compaction or retention, a
table rewritten under the query), the task reads the range through the brokers instead
(`partition_reader.read_range`), which serve it from their logs or from the table's current
snapshot, and report data loss under `failOnDataLoss` as any broker read does. No row is read
twice, none is skipped.

Object stores: `s3://` files are opened with pyarrow's S3 filesystem configured from the
delta-rs storage options the read was given (`storage.options.AWS_ENDPOINT_URL`, ...).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from sparklog.spark.options import SourceOptions
from sparklog.spark.partition_reader import (
    HEADERS_ARROW_TYPE,
    SPARK_ARROW_SCHEMA,
    SPARK_ARROW_SCHEMA_WITH_HEADERS,
    read_range,
)
from sparklog.spark.table_plan import TableRange

logger = logging.getLogger(__name__)

#: Rows per Arrow batch handed to Spark (the brokers' path uses max.poll.records = 10000 too).
BATCH_ROWS = 10_000
_COLUMNS = (
    "offset",
    "timestamp",
    "timestamp_type",
    "key",
    "value",
    "is_control",
    "aborted",
    "batch_base_offset",
    "batch_last_offset_delta",
)


class IncompleteTableRange(Exception):
    """The listed files do not hold every offset of the range any more."""


def read_table_range(tr: TableRange, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    """The records of `tr` as Arrow batches in Spark's Kafka schema, in offset order."""
    r = tr.range
    if r.size == 0:
        return
    try:
        table = load_rows(tr, options.include_headers)
    except (FileNotFoundError, IncompleteTableRange) as e:
        logger.warning(
            "table %s (version %d) no longer holds %s-%d [%d, %d) (%s); reading it through "
            "the brokers",
            tr.location,
            tr.version,
            r.topic,
            r.partition,
            r.from_offset,
            r.until_offset,
            e,
        )
        yield from read_range(r, options)
        return
    yield from to_connector_batches(
        table, r.topic, r.partition, options.include_headers, options.isolation_level
    )


def load_rows(tr: TableRange, include_headers: bool) -> pa.Table:
    """Every row of [from, until) from the files (control and aborted rows included), sorted
    by offset; IncompleteTableRange when the rows' batches do not cover the range end to end
    or an offset repeats."""
    import pyarrow.dataset as ds

    r = tr.range
    columns = [*_COLUMNS, "headers"] if include_headers else list(_COLUMNS)
    filesystem, paths = filesystem_for([f.uri for f in tr.files], tr.storage_options)
    if not paths:
        raise IncompleteTableRange("no file holds the range")
    dataset = ds.dataset(paths, format="parquet", filesystem=filesystem)
    offset = ds.field("offset")
    table = dataset.to_table(
        columns=columns, filter=(offset >= r.from_offset) & (offset < r.until_offset)
    )
    offsets = table.column("offset").to_numpy()
    if len(offsets) > 1 and not bool(np.all(offsets[1:] > offsets[:-1])):
        table = table.sort_by("offset")
        offsets = table.column("offset").to_numpy()
        if not bool(np.all(offsets[1:] > offsets[:-1])):
            raise IncompleteTableRange("an offset repeats")
    check_coverage(
        table.column("batch_base_offset").to_numpy(),
        table.column("batch_last_offset_delta").to_numpy(),
        r.from_offset,
        r.until_offset,
    )
    return table


def check_coverage(bases: Any, deltas: Any, from_offset: int, until_offset: int) -> None:
    """The batches of the rows (in offset order) must cover [from_offset, until_offset) with
    no hole: offsets inside a batch that have no row (a compacted batch's gaps) are fine,
    a missing batch is not."""
    if until_offset <= from_offset:
        return
    if len(bases) == 0:
        raise IncompleteTableRange("no row of the range")
    starts, first = np.unique(bases, return_index=True)
    ends = starts + deltas[first].astype(np.int64)  # last offset of each batch
    if starts[0] > from_offset:
        raise IncompleteTableRange(f"the first batch starts at {int(starts[0])}")
    if ends[-1] < until_offset - 1:
        raise IncompleteTableRange(f"the last batch ends at {int(ends[-1])}")
    holes = np.flatnonzero(starts[1:] != ends[:-1] + 1)
    if len(holes):
        raise IncompleteTableRange(f"no batch holds offset {int(ends[holes[0]]) + 1}")


def to_connector_batches(
    table: pa.Table, topic: str, partition: int, include_headers: bool, isolation_level: str
) -> Iterator[pa.RecordBatch]:
    """Rows of the table's layout -> the connector's columns, control (and, read_committed,
    aborted) rows left out."""
    import pyarrow.compute as pc

    drop = table.column("is_control")
    if isolation_level == "read_committed":
        drop = pc.or_(drop, table.column("aborted"))
    if pc.any(drop).as_py():
        table = table.filter(pc.invert(drop))
    schema = SPARK_ARROW_SCHEMA_WITH_HEADERS if include_headers else SPARK_ARROW_SCHEMA
    for batch in table.to_batches(max_chunksize=BATCH_ROWS):
        n = batch.num_rows
        if n == 0:
            continue
        arrays = [
            batch.column("key").cast(pa.binary()),
            batch.column("value").cast(pa.binary()),
            pa.repeat(pa.scalar(topic, pa.string()), n) if n else pa.array([], pa.string()),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            batch.column("offset"),
            batch.column("timestamp").cast(pa.timestamp("us", tz="UTC")),
            batch.column("timestamp_type").cast(pa.int32()),
        ]
        if include_headers:
            arrays.append(_headers(batch.column("headers")))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def _headers(column: Any) -> pa.Array:
    """The table's headers as the connector's type; a record without headers is null there
    (as the brokers' reader returns it), whether the table stored null or an empty list."""
    import pyarrow.compute as pc

    headers = column.cast(HEADERS_ARROW_TYPE)
    empty = pc.equal(pc.list_value_length(headers), 0)
    if pc.any(empty).as_py():
        headers = pc.if_else(empty, pa.scalar(None, HEADERS_ARROW_TYPE), headers)
    return headers


def filesystem_for(uris: list[str], storage_options: Mapping[str, str]) -> tuple[Any, list[str]]:
    """(pyarrow filesystem, paths within it) of the files: local paths as they are, `s3://`
    through pyarrow's S3 filesystem from the delta-rs storage options."""
    if not uris:
        return None, []
    scheme = uris[0].partition("://")[0].lower() if "://" in uris[0] else ""
    if scheme in ("", "file"):
        return None, [u.partition("://")[2] if "://" in u else u for u in uris]
    if scheme in ("s3", "s3a"):
        return s3_filesystem(storage_options), [u.partition("://")[2] for u in uris]
    from pyarrow import fs

    filesystem, _ = fs.FileSystem.from_uri(uris[0])
    return filesystem, [fs.FileSystem.from_uri(u)[1] for u in uris]


def s3_filesystem(storage_options: Mapping[str, str]) -> Any:
    """pyarrow's S3 filesystem from delta-rs / object_store option names."""
    from pyarrow import fs

    opts = {k.lower(): v for k, v in storage_options.items()}
    endpoint = opts.get("aws_endpoint_url") or opts.get("aws_endpoint") or opts.get("endpoint")
    kwargs: dict[str, Any] = {}
    if endpoint:
        scheme, _, rest = endpoint.partition("://")
        kwargs["endpoint_override"] = rest or scheme
        kwargs["scheme"] = scheme if rest else "https"
    if opts.get("aws_allow_http", "").lower() == "true" and "scheme" not in kwargs:
        kwargs["scheme"] = "http"
    for ours, theirs in (
        ("aws_access_key_id", "access_key"),
        ("aws_secret_access_key", "secret_key"),
        ("aws_session_token", "session_token"),
        ("aws_region", "region"),
    ):
        if opts.get(ours):
            kwargs[theirs] = opts[ours]
    if opts.get("aws_virtual_hosted_style_request", "").lower() != "true" and endpoint:
        kwargs["force_virtual_addressing"] = False
    return fs.S3FileSystem(**kwargs)
