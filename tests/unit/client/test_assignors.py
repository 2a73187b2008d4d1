"""Client-side assignors: Kafka's range and roundrobin layouts, sticky keeps owned partitions."""

from __future__ import annotations

from sparklog.client.assignors import range_assign, roundrobin_assign, sticky_assign

SUBS = {"c1": ["t0", "t1"], "c0": ["t0", "t1"]}
COUNTS = {"t0": 3, "t1": 3}


def test_range_gives_each_member_a_contiguous_range_per_topic():
    # Kafka's RangeAssignor javadoc example: C0 gets t0p0, t0p1, t1p0, t1p1
    assert range_assign(SUBS, COUNTS) == {
        "c0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)],
        "c1": [("t0", 2), ("t1", 2)],
    }


def test_roundrobin_deals_partitions_in_turn_to_subscribers():
    assert roundrobin_assign(SUBS, COUNTS) == {
        "c0": [("t0", 0), ("t0", 2), ("t1", 1)],
        "c1": [("t0", 1), ("t1", 0), ("t1", 2)],
    }
    only_t1 = roundrobin_assign({"a": ["t0"], "b": ["t0", "t1"]}, COUNTS)
    assert set(only_t1["a"]) <= {("t0", p) for p in range(3)} and ("t1", 0) in only_t1["b"]


def test_sticky_keeps_owned_partitions_and_balances():
    owned = {"c0": [("t0", 0), ("t0", 1), ("t0", 2), ("t1", 0), ("t1", 1), ("t1", 2)]}
    subs = {**SUBS, "c2": ["t0", "t1"]}
    plan = sticky_assign(subs, COUNTS, owned)
    assert sorted(len(v) for v in plan.values()) == [2, 2, 2]
    assert set(plan["c0"]) <= set(owned["c0"])  # c0 keeps two of its own, gives the rest away
    every = sorted(tp for v in plan.values() for tp in v)
    assert every == sorted(owned["c0"])


def test_cooperative_sticky_holds_back_partitions_that_change_owner():
    from sparklog.client.assignors import cooperative_sticky_assign
    from sparklog.protocol.consumer_protocol import (
        encode_subscription,
        subscription_owned,
        subscription_topics,
    )

    owned = {"c0": [("t0", p) for p in range(3)] + [("t1", p) for p in range(3)]}
    first_round = cooperative_sticky_assign({**SUBS}, COUNTS, owned)
    # c0 keeps three; the three it must give up go to nobody until it has revoked them
    assert len(first_round["c0"]) == 3 and first_round["c1"] == []
    second_round = cooperative_sticky_assign(SUBS, COUNTS, {"c0": first_round["c0"]})
    assert sorted(second_round["c0"] + second_round["c1"]) == sorted(owned["c0"])
    encoded = encode_subscription(["t0", "t1"], owned=owned["c0"])
    assert subscription_owned(encoded) == owned["c0"]
    assert subscription_topics(encoded) == {"t0", "t1"}
    assert subscription_owned(encode_subscription(["t0"])) == []  # v0 carries none
