"""`poll_arrow()`'s batches: their schema (Spark's Kafka source columns, timestamps as epoch
ms) and how one partition's decoded rows get their topic and partition columns."""

from __future__ import annotations

from functools import cache, lru_cache
from typing import Any

import pyarrow as pa

from sparklog.records.arrow_codec import HEADERS_TYPE
from sparklog.structs import TopicPartition


@cache  # called for every poll_arrow batch; schemas are immutable
def arrow_schema(include_headers: bool) -> pa.Schema:
    """The schema of `poll_arrow()` batches (Spark's Kafka source columns)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("timestampType", pa.int32(), nullable=False),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


@cache  # a poll that finds nothing returns this immutable batch
def empty_batch(include_headers: bool) -> pa.RecordBatch:
    schema = arrow_schema(include_headers)
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


def with_topic_partition(
    rows: pa.RecordBatch, tp: TopicPartition, include_headers: bool
) -> pa.RecordBatch:
    """A partition's decoded rows with its topic and partition as columns."""
    n = len(rows)
    schema = arrow_schema(include_headers)
    arrays = [
        rows.column("key"),
        rows.column("value"),
        _repeated(tp.topic, pa.string(), n),
        _repeated(tp.partition, pa.int32(), n),
        rows.column("offset"),
        rows.column("timestamp"),
        rows.column("timestampType"),
    ]
    if include_headers:
        arrays.append(rows.column("headers"))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _repeated(value: Any, type_: pa.DataType, n: int) -> pa.Array:
    """`value` n times: a zero-copy slice of a cached array (building the topic column of
    every polled batch afresh cost 0.2 ms per batch)."""
    return _repeated_block(value, type_, max(1024, 1 << (n - 1).bit_length())).slice(0, n)


@lru_cache(maxsize=256)
def _repeated_block(value: Any, type_: pa.DataType, size: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, type_), size)
