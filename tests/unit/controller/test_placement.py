"""Replica placement: striping over brokers sorted by id, rack-aware interleaving."""

from __future__ import annotations

from collections import Counter

import pytest

from sparklog.controller.placement import UsableBroker, place_replicas, rack_alternated
from sparklog.errors import InvalidReplicationFactorError

from .harness import Harness


def brokers(*ids: int, racks: str | None = None) -> list[UsableBroker]:
    return [UsableBroker(b, racks[i] if racks else None) for i, b in enumerate(ids)]


def test_partition_i_leads_on_broker_i_mod_n_and_replica_j_on_i_plus_j():
    placed = place_replicas(0, 5, 3, brokers(7, 3, 5))  # sorted by id: 3, 5, 7
    assert placed == [[3, 5, 7], [5, 7, 3], [7, 3, 5], [3, 5, 7], [5, 7, 3]]


def test_a_later_start_partition_continues_the_stripe():
    assert (
        place_replicas(3, 2, 2, brokers(0, 1, 2)) == place_replicas(0, 5, 2, brokers(0, 1, 2))[3:]
    )


def test_leaders_are_spread_evenly():
    placed = place_replicas(0, 40, 2, brokers(*range(4)))
    assert Counter(r[0] for r in placed) == {0: 10, 1: 10, 2: 10, 3: 10}


def test_too_few_brokers():
    with pytest.raises(
        InvalidReplicationFactorError,
        match=r"The target replication factor of 3 cannot be reached because only 2 broker",
    ):
        place_replicas(0, 1, 3, brokers(0, 1))
    with pytest.raises(InvalidReplicationFactorError, match="because only 0 broker"):
        place_replicas(0, 1, 1, [])


def test_rack_alternated_order_takes_one_broker_of_each_rack_in_turn():
    order = rack_alternated(brokers(0, 1, 2, 3, 4, 5, racks="aaabbc"))
    assert [b.broker_id for b in order] == [0, 3, 5, 1, 4, 2]


def test_replicas_land_in_distinct_racks_when_racks_allow():
    placed = place_replicas(0, 12, 3, brokers(0, 1, 2, 3, 4, 5, racks="aaabbc"))
    rack_of = dict(zip(range(6), "aaabbc", strict=True))
    for replicas in placed:
        assert len(set(replicas)) == 3
        assert len({rack_of[b] for b in replicas}) == 3, replicas


def test_even_racks_give_the_plain_stripe_over_the_interleaved_list():
    placed = place_replicas(0, 4, 2, brokers(0, 1, 2, 3, racks="aabb"))
    assert placed == [[0, 2], [2, 1], [1, 3], [3, 0]]


def test_more_replicas_than_racks_fill_up_with_unused_brokers():
    placed = place_replicas(0, 4, 3, brokers(0, 1, 2, 3, racks="aabb"))
    rack_of = dict(zip(range(4), "aabb", strict=True))
    for replicas in placed:
        assert len(set(replicas)) == 3 and {rack_of[b] for b in replicas} == {"a", "b"}


def test_controller_places_by_rack_when_brokers_have_racks():
    h = Harness()
    h.start_brokers(4, racks=["r1", "r1", "r2", "r2"])
    h.create("t", 4, 2)
    rack = {b: h.image.broker(b).rack for b in range(4)}
    for p in h.partitions("t"):
        assert rack[p.replicas[0]] != rack[p.replicas[1]]
