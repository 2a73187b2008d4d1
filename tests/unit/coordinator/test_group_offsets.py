"""Committed offsets on the sans-IO coordinator: who may commit, what is refused, durability
before visibility, deletion, expiry, and the admin views (list, describe, delete)."""

from __future__ import annotations

from sparklog.coordinator.group.config import GroupConfig

from .harness import Harness
from .test_classic_groups import stable_group

NONE, UNKNOWN_PARTITION, METADATA_TOO_LARGE, NOT_AVAILABLE = 0, 3, 12, 15
ILLEGAL_GENERATION, UNKNOWN_MEMBER, REBALANCE_IN_PROGRESS = 22, 25, 27
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, SUBSCRIBED_TO_TOPIC = 68, 69, 86


def test_standalone_commits_need_no_membership_and_are_fetched_back():
    h = Harness()
    assert h.commit({("t", 0): 5, ("t", 1): 7}) == {("t", 0): NONE, ("t", 1): NONE}
    assert h.committed() == {("t", 0): 5, ("t", 1): 7}
    found = h.core.fetch_offsets("g", [("t", 0), ("t", 5)])
    assert found[("t", 0)].committed_offset == 5 and found[("t", 5)] is None
    assert h.state() == "Empty"


def test_member_commits_are_checked_against_generation_and_membership():
    h = Harness()
    a, _b = stable_group(h, 2)
    assert h.commit({("t", 0): 1}, member_id=a, generation=2) == {("t", 0): NONE}
    assert h.commit({("t", 0): 2}, member_id=a, generation=1) == {("t", 0): ILLEGAL_GENERATION}
    assert h.commit({("t", 0): 3}, member_id="x", generation=2) == {("t", 0): UNKNOWN_MEMBER}
    assert h.commit({("t", 0): 4}) == {("t", 0): UNKNOWN_MEMBER}  # not empty: no simple commits
    assert h.committed() == {("t", 0): 1}


def test_commits_during_completing_rebalance_answer_rebalance_in_progress():
    h = Harness()
    first = h.join_new()
    a = first.value["member_id"]
    assert h.state() == "CompletingRebalance"
    assert h.commit({("t", 0): 1}, member_id=a, generation=1) == {("t", 0): REBALANCE_IN_PROGRESS}


def test_unknown_partitions_and_big_metadata_are_refused_per_partition():
    h = Harness(offset_metadata_max_bytes=10)
    codes = h.commit({("t", 0): 1, ("t", 6): 1, ("nope", 0): 1}, metadata="")
    assert codes == {("t", 0): NONE, ("t", 6): UNKNOWN_PARTITION, ("nope", 0): UNKNOWN_PARTITION}
    assert h.commit({("t", 1): 1}, metadata="x" * 11) == {("t", 1): METADATA_TOO_LARGE}
    assert h.committed() == {("t", 0): 1}


def test_a_commit_is_visible_only_once_durable():
    h = Harness()
    answers = []
    from sparklog.coordinator.group.coordinator import OffsetCommitPartition

    h.core.commit_offsets(
        h.now_ms,
        group_id="g",
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        retention_time_ms=-1,
        partitions=[OffsetCommitPartition("t", 0, 9, -1, None)],
        respond=answers.append,
    )
    assert answers == [] and h.committed() == {}
    h.flush()
    assert answers == [{("t", 0): NONE}] and h.committed() == {("t", 0): 9}


def test_a_standalone_group_outlives_a_tick_that_fires_while_its_commit_is_written():
    """Issue 29 item 2: the tick once forgot a group created by a standalone commit whose
    offsets were not yet durable; the offsets then landed in a group that read as Dead and
    could not be deleted (GROUP_ID_NOT_FOUND)."""
    from sparklog.coordinator.group.coordinator import OffsetCommitPartition

    h = Harness()
    answers = []
    h.core.commit_offsets(
        h.now_ms,
        group_id="g",
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        retention_time_ms=-1,
        partitions=[OffsetCommitPartition("t", p, 5 + p, -1, None) for p in (0, 1)],
        respond=answers.append,
    )
    h.core.tick(h.now_ms + 50)  # the 50 ms tick, while the Delta write is in flight
    h.flush()
    assert answers == [{("t", 0): NONE, ("t", 1): NONE}]
    h.advance(50)
    assert h.state() == "Empty" and h.committed() == {("t", 0): 5, ("t", 1): 6}
    assert [g["group_id"] for g in h.core.list_groups()] == ["g"]
    codes = []
    h.core.delete_offsets("g", [("t", 0)], h.now_ms, lambda top, per: codes.append((top, per)))
    h.flush()
    assert codes == [(NONE, {("t", 0): NONE})]
    h.restart()  # a restart finds the group the live path had
    assert h.state() == "Empty" and h.committed() == {("t", 1): 6}
    deleted = []
    h.core.delete_groups(["g"], h.now_ms, deleted.append)
    h.flush()
    assert deleted == [{"g": NONE}] and h.state() == "Dead" and h.committed() == {}


def test_a_failed_write_answers_the_error_and_changes_nothing():
    h = Harness()
    h.commit({("t", 0): 1})
    h.fail_next_flush = NOT_AVAILABLE
    assert h.commit({("t", 0): 2}) == {("t", 0): NOT_AVAILABLE}
    assert h.committed() == {("t", 0): 1}
    h.restart()
    assert h.committed() == {("t", 0): 1}


def test_offsets_survive_a_restart_and_deletions_too():
    h = Harness()
    h.commit({("t", 0): 1, ("t", 1): 2, ("u", 0): 3})
    h.commit({("t", 0): 10})
    codes = []
    h.core.delete_offsets("g", [("u", 0)], h.now_ms, lambda top, per: codes.append((top, per)))
    h.flush()
    assert codes == [(NONE, {("u", 0): NONE})]
    h.restart()
    assert h.committed() == {("t", 0): 10, ("t", 1): 2}


def test_offset_delete_refuses_topics_the_group_subscribes_to():
    h = Harness()
    a, _b = stable_group(h, 2)
    h.commit({("t", 0): 1, ("u", 0): 1}, member_id=a, generation=2)
    codes = []
    h.core.delete_offsets(
        "g", [("t", 0), ("u", 0)], h.now_ms, lambda top, per: codes.append((top, per))
    )
    h.flush()
    assert codes == [(NONE, {("t", 0): SUBSCRIBED_TO_TOPIC, ("u", 0): NONE})]
    assert h.committed() == {("t", 0): 1}
    h.core.delete_offsets("nope", [("t", 0)], h.now_ms, lambda top, per: codes.append(top))
    assert codes[-1] == GROUP_ID_NOT_FOUND


def test_empty_group_offsets_expire_after_retention_and_the_group_goes():
    h = Harness(offsets_retention_minutes=1, offsets_retention_check_interval_ms=1000)
    (a,) = stable_group(h, 1)
    h.commit({("t", 0): 5}, member_id=a, generation=1)
    h.advance(120_000)
    assert h.committed() == {("t", 0): 5}  # a group with members keeps its offsets
    h.leave((a, None))
    h.advance(59_000)
    assert h.committed() == {("t", 0): 5}
    h.advance(2_000)
    assert h.committed() == {} and h.state() == "Dead"
    h.restart()
    assert h.committed() == {} and h.state() == "Dead"


def test_list_describe_and_delete_groups():
    h = Harness()
    stable_group(h, 2, group="busy")
    h.commit({("t", 0): 1}, group="idle")
    listed = {g["group_id"]: g["group_state"] for g in h.core.list_groups()}
    assert listed == {"busy": "Stable", "idle": "Empty"}
    assert [g["group_id"] for g in h.core.list_groups(states={"stable"})] == ["busy"]
    assert h.core.list_groups(types={"consumer"}) == []
    described = h.core.describe_group("busy")
    assert described["protocol_data"] == "range" and len(described["members"]) == 2
    assert described["members"][0]["client_host"] == "/127.0.0.1"
    answers = []
    h.core.delete_groups(["busy", "idle", "ghost"], h.now_ms, answers.append)
    h.flush()
    assert answers == [{"busy": NON_EMPTY_GROUP, "idle": NONE, "ghost": GROUP_ID_NOT_FOUND}]
    assert h.core.describe_group("idle") is None and h.committed("idle") == {}
    h.restart()
    assert h.committed("idle") == {} and h.state("busy") == "Stable"


def test_config_reads_kafka_names_and_names_a_bad_value():
    config = GroupConfig.from_properties(
        {"group.initial.rebalance.delay.ms": "0", "offsets.retention.minutes": "5", "x": "y"}
    )
    assert config.group_initial_rebalance_delay_ms == 0 and config.offsets_retention_ms == 300_000
    try:
        GroupConfig.from_properties({"group.max.size": "many"})
    except ValueError as e:
        assert "group.max.size" in str(e)
    else:
        raise AssertionError("a bad value must be refused")
