"""Read batches carry exactly the Arrow schema Spark derives from the source schema."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from sparklog.client.arrow_batches import arrow_schema
from sparklog.spark.partition_reader import (
    SPARK_ARROW_SCHEMA,
    SPARK_ARROW_SCHEMA_WITH_HEADERS,
    to_spark_arrow,
)
from sparklog.spark.source import source_schema


@pytest.mark.parametrize("include_headers", [False, True])
def test_arrow_schema_is_what_spark_expects(include_headers):
    expected = to_arrow_schema(source_schema(include_headers), timezone="UTC")
    ours = SPARK_ARROW_SCHEMA_WITH_HEADERS if include_headers else SPARK_ARROW_SCHEMA
    assert ours.equals(expected)


def test_poll_batches_convert_without_changing_values():
    polled = pa.RecordBatch.from_pylist(
        [
            {
                "key": b"k",
                "value": None,
                "topic": "t",
                "partition": 2,
                "offset": 7,
                "timestamp": 1_700_000_000_123,
                "timestampType": 1,
                "headers": [{"key": "h", "value": b"x"}, {"key": "n", "value": None}],
            }
        ],
        schema=arrow_schema(True),
    )
    converted = to_spark_arrow(polled, include_headers=True)
    assert converted.schema.equals(SPARK_ARROW_SCHEMA_WITH_HEADERS)
    row = converted.to_pylist()[0]
    assert row["timestamp"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC)
    assert row["headers"] == [{"key": "h", "value": b"x"}, {"key": "n", "value": None}]
    assert (row["key"], row["value"], row["partition"], row["offset"]) == (b"k", None, 2, 7)
    assert to_spark_arrow(polled.drop_columns(["headers"]), False).schema.equals(SPARK_ARROW_SCHEMA)
