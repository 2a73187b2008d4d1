"""The table task's checks and conversion, on Arrow tables in memory (no Spark, no files)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sparklog.spark.partition_reader import SPARK_ARROW_SCHEMA_WITH_HEADERS
from sparklog.spark.table_reader import IncompleteTableRange, check_coverage, to_connector_batches
from sparklog.storage.remote.schema import HEADER_TYPE


def spans(*batches):
    """Rows' (batch_base_offset, batch_last_offset_delta) for batches given as (base, delta,
    offsets that have rows)."""
    bases, deltas = [], []
    for base, delta, rows in batches:
        bases += [base] * rows
        deltas += [delta] * rows
    return np.array(bases, np.int64), np.array(deltas, np.int32)


def test_batches_must_cover_the_range():
    check_coverage(*spans((0, 9, 10), (10, 4, 5)), 3, 15)
    check_coverage(*spans((0, 9, 2), (10, 4, 1)), 0, 15)  # compacted batches: gaps inside
    with pytest.raises(IncompleteTableRange, match="offset 10"):
        check_coverage(*spans((0, 9, 10), (15, 4, 5)), 0, 20)  # a batch is missing
    with pytest.raises(IncompleteTableRange, match="starts at 10"):
        check_coverage(*spans((10, 4, 5)), 5, 15)
    with pytest.raises(IncompleteTableRange, match="ends at 14"):
        check_coverage(*spans((10, 4, 5)), 10, 16)
    with pytest.raises(IncompleteTableRange):
        check_coverage(*spans(), 0, 1)


def rows():
    return pa.table(
        {
            "offset": pa.array([0, 1, 2, 3], pa.int64()),
            "timestamp": pa.array([1000, 2000, 3000, 4000], pa.int64()).cast(
                pa.timestamp("us", tz="UTC")
            ),
            "timestamp_type": pa.array([0, 0, 0, 1], pa.int32()),
            "key": pa.array([b"a", None, b"c", b"d"]),
            "value": pa.array([b"1", b"2", b"\x00\x00\x00\x00", b"4"]),
            "is_control": pa.array([False, False, True, False]),
            "aborted": pa.array([False, True, False, False]),
            "headers": pa.array([[{"key": "h", "value": b"v"}], [], None, []], HEADER_TYPE),
        }
    )


@pytest.mark.parametrize(
    ("isolation", "offsets"), [("read_uncommitted", [0, 1, 3]), ("read_committed", [0, 3])]
)
def test_control_rows_always_dropped_aborted_when_read_committed(isolation, offsets):
    (batch,) = to_connector_batches(rows(), "t", 4, True, isolation)
    assert batch.schema == SPARK_ARROW_SCHEMA_WITH_HEADERS
    got = batch.to_pydict()
    assert got["offset"] == offsets
    assert set(got["topic"]) == {"t"} and set(got["partition"]) == {4}
    # a record without headers is null, as the brokers' reader returns it
    assert got["headers"][0] == [{"key": "h", "value": b"v"}]
    assert all(h is None for h in got["headers"][1:])
