"""`table_scan`'s planning helpers: the table's task ranges merged per partition, the broker
ranges grouped so that each `format("sparklog")` read names a partition once."""

from __future__ import annotations

from sparklog.spark.offsets import OffsetRange
from sparklog.spark.table_plan import TableRange
from sparklog.spark.table_scan import _layers, _merged


def tr(partition, a, b):
    return TableRange(OffsetRange("t", partition, a, b), "/tables/t", 3, ())


def test_consecutive_task_ranges_of_a_partition_merge():
    got = _merged([tr(1, 100, 200), tr(0, 0, 50), tr(1, 0, 100), tr(0, 60, 70)])
    assert [(r.partition, r.from_offset, r.until_offset) for r in got] == [
        (0, 0, 50),
        (0, 60, 70),
        (1, 0, 200),
    ]


def test_broker_ranges_below_and_above_the_table_go_to_separate_reads():
    below, above = OffsetRange("t", 0, 0, 10), OffsetRange("t", 0, 90, 100)
    other = OffsetRange("t", 1, 50, 60)
    empty = OffsetRange("t", 2, 5, 5)
    layers = _layers([above, other, below, empty])
    assert layers == [[below, other, empty], [above]]
    assert _layers([empty]) == []
    assert _layers([]) == []
