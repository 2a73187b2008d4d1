"""Offset bookkeeping of the source: JSON form, range splitting, rate limits."""

from __future__ import annotations

import json
import random

import pytest

from sparklog.spark.offsets import (
    OffsetRange,
    backlog,
    from_json_dict,
    rate_limit,
    split_ranges,
    to_json_dict,
)


def test_json_offsets_have_a_stable_order():
    offsets = {("b", 10): 5, ("a", 2): 1, ("b", 2): 7, ("a", 10): 3}
    data = to_json_dict(offsets)
    assert json.dumps(data) == '{"a": {"2": 1, "10": 3}, "b": {"2": 7, "10": 5}}'
    assert from_json_dict(json.loads(json.dumps(data))) == offsets
    assert json.dumps(to_json_dict(dict(reversed(list(offsets.items()))))) == json.dumps(data)


def _covers(pieces, ranges):
    """Pieces tile each non-empty range exactly, in order."""
    for r in ranges:
        mine = [p for p in pieces if (p.topic, p.partition) == (r.topic, r.partition)]
        if r.size == 0:
            assert mine == []
            continue
        assert mine[0].from_offset == r.from_offset and mine[-1].until_offset == r.until_offset
        assert all(a.until_offset == b.from_offset for a, b in zip(mine, mine[1:], strict=False))
        assert all(p.size > 0 for p in mine)


def test_split_drops_empty_ranges_and_keeps_small_ones():
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 5)]
    assert split_ranges(ranges) == [OffsetRange("t", 0, 0, 10)]


def test_max_records_per_partition_caps_every_piece():
    ranges = [OffsetRange("t", 0, 0, 1001), OffsetRange("t", 1, 100, 150)]
    pieces = split_ranges(ranges, max_records_per_partition=250)
    assert max(p.size for p in pieces) <= 250
    assert len(pieces) == 5 + 1
    _covers(pieces, ranges)


def test_min_partitions_splits_large_ranges_proportionally():
    ranges = [OffsetRange("t", 0, 0, 900), OffsetRange("t", 1, 0, 100)]
    pieces = split_ranges(ranges, min_partitions=10)
    assert len(pieces) == 10
    assert sum(1 for p in pieces if p.partition == 0) == 9
    _covers(pieces, ranges)


def test_min_partitions_already_met_changes_nothing():
    ranges = [OffsetRange("t", p, 0, 10) for p in range(4)]
    assert split_ranges(ranges, min_partitions=3) == ranges


def test_a_range_is_never_cut_below_one_record():
    pieces = split_ranges([OffsetRange("t", 0, 7, 10)], min_partitions=50)
    assert [p.size for p in pieces] == [1, 1, 1]


def test_rate_limit_under_the_limit_takes_everything():
    start = {("t", 0): 0, ("t", 1): 5}
    latest = {("t", 0): 10, ("t", 1): 8}
    assert rate_limit(start, latest, 100) == latest


def test_rate_limit_is_proportional_to_backlog():
    start = {("t", 0): 0, ("t", 1): 0}
    latest = {("t", 0): 900, ("t", 1): 100}
    end = rate_limit(start, latest, 100)
    assert backlog(start, end) == 100
    assert end[("t", 0)] in (89, 90, 91) and end[("t", 1)] in (9, 10, 11)


def test_rate_limit_does_not_starve_small_partitions():
    start = {("t", 0): 0, ("t", 1): 0}
    latest = {("t", 0): 1_000_000, ("t", 1): 1}
    end = rate_limit(start, latest, 10)
    assert end == {("t", 0): 9, ("t", 1): 1}


def test_rate_limit_below_partition_count_takes_one_from_the_biggest():
    start = {("t", p): 0 for p in range(4)}
    latest = {("t", 0): 5, ("t", 1): 50, ("t", 2): 20, ("t", 3): 1}
    end = rate_limit(start, latest, 2)
    assert end == {("t", 0): 0, ("t", 1): 1, ("t", 2): 1, ("t", 3): 0}


@pytest.mark.parametrize("seed", range(30))
def test_rate_limit_never_exceeds_the_limit_or_the_end(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 12)
    start = {("t", p): rng.randint(0, 1000) for p in range(n)}
    latest = {tp: s + rng.choice([0, 1, 2, rng.randint(0, 10_000)]) for tp, s in start.items()}
    limit = rng.randint(1, 5000)
    end = rate_limit(start, latest, limit)
    assert backlog(start, end) == min(limit, backlog(start, latest)), f"seed={seed}"
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in start), f"seed={seed}"


@pytest.mark.parametrize("seed", range(30))
def test_min_partitions_gives_exactly_that_many_pieces_when_records_allow(seed):
    rng = random.Random(seed)
    ranges = [OffsetRange("t", p, 0, rng.randint(0, 300)) for p in range(rng.randint(1, 6))]
    wanted = rng.randint(1, 40)
    pieces = split_ranges(ranges, min_partitions=wanted)
    total = sum(r.size for r in ranges)
    nonempty = sum(1 for r in ranges if r.size)
    assert len(pieces) == max(nonempty, min(wanted, total)), f"seed={seed}"
    _covers(pieces, ranges)
