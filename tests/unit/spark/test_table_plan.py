"""The planner's cut of a read between a topic's table and its brokers (no Spark, no Delta)."""

from __future__ import annotations

import pytest

from sparklog.spark.offsets import OffsetRange
from sparklog.spark.table_plan import (
    PartitionTier,
    TableFile,
    TierSnapshot,
    cut_table_range,
    partition_tiers,
    plan_tiers,
    split_at_tier,
)


def files(partition, *bounds, size=100):
    return tuple(
        TableFile(f"/t/p{partition}-{lo}.parquet", partition, lo, hi, size, hi - lo + 1)
        for lo, hi in bounds
    )


def covered(pieces):
    """Every offset of the pieces, in order, with repeats kept."""
    return [o for p in pieces for o in range(p.from_offset, p.until_offset)]


TIER = PartitionTier(100, 400, files(0, (100, 199), (200, 299), (300, 399)))


@pytest.mark.parametrize(
    ("start", "until", "table", "brokers"),
    [
        (0, 50, [], [(0, 50)]),  # wholly below the table: brokers (which report a loss)
        (500, 600, [], [(500, 600)]),  # wholly above: the tail, brokers
        (150, 350, [(150, 350)], []),  # inside: the table only
        (0, 600, [(100, 400)], [(0, 100), (400, 600)]),  # around: three pieces
        (100, 400, [(100, 400)], []),  # exactly the table
        (399, 401, [(399, 400)], [(400, 401)]),  # one offset each side of the end
        (250, 250, [], []),  # empty
    ],
)
def test_split_at_tier_covers_the_range_once(start, until, table, brokers):
    r = OffsetRange("t", 0, start, until)
    in_table, in_brokers = split_at_tier(r, TIER)
    assert [(p.from_offset, p.until_offset) for p in in_table] == table
    assert [(p.from_offset, p.until_offset) for p in in_brokers] == brokers
    assert sorted(covered(in_table) + covered(in_brokers)) == list(range(start, until))


def test_no_tier_means_brokers():
    r = OffsetRange("t", 0, 0, 10)
    assert split_at_tier(r, None) == ([], [r])


def test_cut_by_bytes_at_file_starts_and_by_records():
    r = OffsetRange("t", 0, 150, 400)
    by_bytes = cut_table_range(r, TIER.files, task_bytes=150)
    assert [(p.from_offset, p.until_offset) for p in by_bytes] == [(150, 300), (300, 400)]
    by_records = cut_table_range(r, TIER.files, max_records_per_partition=100)
    assert [(p.from_offset, p.until_offset) for p in by_records] == [
        (150, 250),
        (250, 350),
        (350, 400),
    ]
    assert covered(by_bytes) == covered(by_records) == list(range(150, 400))


def test_plan_ships_only_the_overlapping_files():
    snap = TierSnapshot("t", "/t", 7, {0: TIER})
    ranges = [OffsetRange("t", 0, 50, 450), OffsetRange("t", 1, 0, 10), OffsetRange("u", 0, 0, 5)]
    table, brokers = plan_tiers(ranges, {"t": snap}, task_bytes=100)
    assert [(tr.range.from_offset, tr.range.until_offset) for tr in table] == [
        (100, 200),
        (200, 300),
        (300, 400),
    ]
    assert [[f.min_offset for f in tr.files] for tr in table] == [[100], [200], [300]]
    assert {tr.version for tr in table} == {7}
    # partition 1 has no rows in the table, topic u no table: brokers
    assert [(b.topic, b.partition, b.from_offset, b.until_offset) for b in brokers] == [
        ("t", 0, 50, 100),
        ("t", 0, 400, 450),
        ("t", 1, 0, 10),
        ("u", 0, 0, 5),
    ]


def test_overlapping_files_of_two_dates():
    """A segment whose records straddle midnight is two files with interleaved offsets: a
    task's range takes both."""
    both = files(0, (0, 99)) + (TableFile("/t/d2.parquet", 0, 50, 120, 100, 40),)
    tier = partition_tiers(both)[0]
    assert (tier.start_offset, tier.end_offset) == (0, 121)
    table, _ = plan_tiers(
        [OffsetRange("t", 0, 60, 70)], {"t": TierSnapshot("t", "/t", 0, {0: tier})}
    )
    assert len(table) == 1 and len(table[0].files) == 2


def test_partition_tiers_from_file_stats():
    tiers = partition_tiers(files(0, (10, 19), (0, 9)) + files(2, (5, 5)))
    assert sorted(tiers) == [0, 2]
    assert (tiers[0].start_offset, tiers[0].end_offset) == (0, 20)
    assert [f.min_offset for f in tiers[0].files] == [0, 10]
    assert (tiers[2].start_offset, tiers[2].end_offset) == (5, 6)
