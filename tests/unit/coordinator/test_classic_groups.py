"""The classic group protocol on the sans-IO coordinator: generations, rebalances, timers, static
membership, and the awkward interleavings (joins during CompletingRebalance, a leader leaving
mid-sync, a restart during a rebalance)."""

from __future__ import annotations

import pytest

from sparklog.coordinator.group.classic_group import (
    TRANSITIONS,
    ClassicGroup,
    GroupState,
)
from sparklog.errors import IllegalStateTransition

from .harness import REBALANCE_MS, SESSION_MS, Harness

NONE, ILLEGAL_GENERATION, INCONSISTENT_PROTOCOL, UNKNOWN_MEMBER = 0, 22, 23, 25
INVALID_SESSION_TIMEOUT, REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED = 26, 27, 79
GROUP_MAX_SIZE_REACHED, FENCED_INSTANCE_ID, INVALID_GROUP_ID = 81, 82, 24


def stable_group(h: Harness, n: int, group: str = "g", **kw) -> list[str]:
    """n members in a Stable group (member ids, the leader first); assignment = member id."""
    first = h.join_new(group, **kw)
    members = [first.value["member_id"]]
    generation = first.value["generation_id"]
    for _ in range(1, n):
        joining = h.join(group, **kw)
        if kw.get("instance_id") is None:
            joining = h.join(group, joining.value["member_id"], **kw)
        rejoins = [h.join(group, m, **kw) for m in members]
        assert joining.done and all(r.done for r in rejoins)
        members.append(joining.value["member_id"])
        generation = joining.value["generation_id"]
    leader = h.core.describe_group(group)["members"][0]["member_id"]
    state = h.core.groups[group]
    assert state.leader_id == leader
    syncs = [
        h.sync(m, generation, group, {x: x.encode() for x in members} if m == leader else None)
        for m in members
    ]
    assert [s.value["error_code"] for s in syncs] == [NONE] * n
    assert [s.value["assignment"] for s in syncs] == [m.encode() for m in members]
    assert h.state(group) == "Stable"
    return members


def test_transition_table_refuses_moves_it_does_not_list():
    group = ClassicGroup("g", 0)
    with pytest.raises(IllegalStateTransition):
        group.transition_to(GroupState.STABLE, 1)
    assert GroupState.STABLE not in TRANSITIONS[GroupState.EMPTY]


def test_first_join_needs_a_member_id_then_forms_generation_one():
    h = Harness()
    first = h.join()
    assert first.value["error_code"] == MEMBER_ID_REQUIRED
    assert first.value["member_id"].startswith("client-")
    joined = h.join(member_id=first.value["member_id"])
    v = joined.value
    assert (v["error_code"], v["generation_id"], v["protocol_name"]) == (NONE, 1, "range")
    assert v["leader"] == v["member_id"]
    assert [m["member_id"] for m in v["members"]] == [v["member_id"]]  # the leader sees members
    assert h.state() == "CompletingRebalance"


def test_old_clients_join_without_a_member_id_round_trip():
    h = Harness()
    joined = h.join(version=3)
    assert joined.value["error_code"] == NONE and joined.value["generation_id"] == 1


def test_second_member_triggers_a_rebalance_both_get_the_next_generation():
    h = Harness()
    a, b = stable_group(h, 2)
    assert h.core.groups["g"].generation_id == 2
    assert h.heartbeat(a, 2) == NONE and h.heartbeat(b, 2) == NONE


def test_join_during_completing_rebalance_answers_parked_syncs_with_rebalance_in_progress():
    h = Harness()
    a, b = stable_group(h, 2)
    c = h.join_new()  # parked: a and b must rejoin
    assert not c.done and h.state() == "PreparingRebalance"
    ra, rb = h.join(member_id=a), h.join(member_id=b)
    assert ra.done and rb.done and c.done
    generation = ra.value["generation_id"]
    assert generation == 3 and h.state() == "CompletingRebalance"
    parked = h.sync(b, generation)  # waits for the leader's assignment
    assert not parked.done
    d = h.join_new()  # a fourth member arrives before the leader syncs
    assert parked.value == {"error_code": REBALANCE_IN_PROGRESS}
    assert not d.done and h.state() == "PreparingRebalance"


def test_leader_leaving_mid_sync_moves_leadership_and_rebalances():
    h = Harness()
    a, b = stable_group(h, 2)
    h.join_new()  # third member: rebalance
    c_id = h.core.groups["g"].members.keys() - {a, b}
    ra, _rb = h.join(member_id=a), h.join(member_id=b)
    generation = ra.value["generation_id"]
    assert ra.value["leader"] == a
    parked = h.sync(b, generation)
    top, codes = h.leave((a, None))
    assert (top, codes) == (NONE, [NONE])
    assert parked.value["error_code"] == REBALANCE_IN_PROGRESS
    assert h.state() == "PreparingRebalance"
    rb2 = h.join(member_id=b)
    (c,) = c_id
    rc = h.join(member_id=c)
    assert rb2.done and rc.done
    assert rb2.value["leader"] in {b, c} and a not in h.core.groups["g"].members
    assert rb2.value["generation_id"] == generation + 1


def test_heartbeat_errors_follow_kafka():
    h = Harness()
    a, _b = stable_group(h, 2)
    assert h.heartbeat(a, 1) == ILLEGAL_GENERATION
    assert h.heartbeat("nobody", 2) == UNKNOWN_MEMBER
    assert h.heartbeat(a, 2, group="other") == UNKNOWN_MEMBER
    h.join_new()
    assert h.heartbeat(a, 2) == REBALANCE_IN_PROGRESS


def test_session_expiry_evicts_a_silent_member_and_rebalances():
    h = Harness()
    a, b = stable_group(h, 2)
    for _ in range(3):
        h.advance(SESSION_MS // 3)
        assert h.heartbeat(a, 2) == NONE
    h.advance(SESSION_MS // 3)
    assert b not in h.core.groups["g"].members
    assert h.heartbeat(a, 2) == REBALANCE_IN_PROGRESS
    rejoined = h.join(member_id=a)
    assert rejoined.value["generation_id"] == 3 and len(rejoined.value["members"]) == 1


def test_rebalance_timeout_drops_members_that_do_not_rejoin():
    h = Harness()
    a, b = stable_group(h, 2)
    ra = h.join(member_id=a, protocols=["range", "roundrobin"])  # changed protocols: rebalance
    assert not ra.done
    for _ in range(REBALANCE_MS // 1000):
        h.advance(1000)  # b keeps heartbeating but never rejoins
        if h.state() == "PreparingRebalance":
            assert h.heartbeat(b, 2) == REBALANCE_IN_PROGRESS
    assert ra.done and ra.value["generation_id"] == 3
    assert list(h.core.groups["g"].members) == [a]


def test_initial_rebalance_delay_collects_members_before_the_first_generation():
    h = Harness(group_initial_rebalance_delay_ms=3000)
    first = h.join_new()
    h.advance(2000)
    second = h.join_new()  # extends the delay by up to 3 s more
    h.advance(2000)
    assert not first.done and not second.done
    h.advance(1100)
    assert first.value["generation_id"] == second.value["generation_id"] == 1
    assert len(first.value["members"]) + len(second.value["members"]) == 2


def test_static_member_restart_gets_its_assignment_back_without_a_rebalance():
    h = Harness()
    a = stable_group(h, 1, instance_id="host-a")[0]
    b_join = h.join(instance_id="host-b")
    rejoin_a = h.join(member_id=a, instance_id="host-a")
    b = b_join.value["member_id"]
    assert rejoin_a.value["generation_id"] == b_join.value["generation_id"] == 2
    h.sync(a, 2, assignments={a: b"A", b: b"B"}, instance_id="host-a")
    assert h.sync(b, 2, instance_id="host-b").value["assignment"] == b"B"
    # host-b restarts: a new member id, same instance id, same subscription
    restarted = h.join(instance_id="host-b")
    new_b = restarted.value["member_id"]
    assert new_b != b and restarted.value["error_code"] == NONE
    assert restarted.value["generation_id"] == 2 and h.state() == "Stable"
    assert h.heartbeat(b, 2, instance_id="host-b") == FENCED_INSTANCE_ID
    assert h.sync(new_b, 2, instance_id="host-b").value["assignment"] == b"B"
    assert h.heartbeat(a, 2, instance_id="host-a") == NONE  # nobody else rebalanced


def test_static_leader_restart_skips_the_assignment_when_the_client_can():
    h = Harness()
    a = stable_group(h, 1, instance_id="host-a")[0]
    again = h.join(instance_id="host-a")
    v = again.value
    assert v["skip_assignment"] and v["leader"] == v["member_id"] != a
    assert v["generation_id"] == 1 and h.state() == "Stable"
    old_client = h.join(instance_id="host-a", version=8)  # cannot skip: a real rebalance
    assert old_client.value["generation_id"] == 2 and not old_client.value["skip_assignment"]
    assert h.state() == "CompletingRebalance"


def test_join_refusals():
    h = Harness()
    assert h.join(group="").value["error_code"] == INVALID_GROUP_ID
    assert h.join(session_ms=10).value["error_code"] == INVALID_SESSION_TIMEOUT
    assert h.join(session_ms=10**9).value["error_code"] == INVALID_SESSION_TIMEOUT
    assert h.join(member_id="made-up").value["error_code"] == UNKNOWN_MEMBER
    stable_group(h, 1)
    assert h.join(protocol_type="connect").value["error_code"] == INCONSISTENT_PROTOCOL
    assert h.join(protocols=["sticky"]).value["error_code"] == INCONSISTENT_PROTOCOL


def test_group_max_size():
    h = Harness(group_max_size=2)
    stable_group(h, 2)
    assert h.join().value["error_code"] == GROUP_MAX_SIZE_REACHED


def test_leave_group_batch_reports_each_member():
    h = Harness()
    a, b = stable_group(h, 2, instance_id=None)
    top, codes = h.leave((a, None), ("ghost", None), (b, None))
    assert (top, codes) == (NONE, [NONE, UNKNOWN_MEMBER, NONE])
    assert h.state() == "Empty"
    assert h.leave((a, None), group="nope")[0] == UNKNOWN_MEMBER


def test_static_leave_with_the_wrong_member_id_is_fenced():
    h = Harness()
    a = stable_group(h, 1, instance_id="host-a")[0]
    assert h.leave(("other", "host-a"))[1] == [FENCED_INSTANCE_ID]
    assert h.leave(("", "host-a"))[1] == [NONE]
    assert a not in h.core.groups["g"].members


def test_a_member_that_never_syncs_is_removed_after_the_rebalance_timeout():
    h = Harness()
    a, b = stable_group(h, 2)
    h.join(member_id=a, protocols=["range", "roundrobin"])
    h.join(member_id=b, protocols=["range", "roundrobin"])
    assert h.state() == "CompletingRebalance"
    h.sync(a, 3, assignments={a: b"x", b: b"y"})  # b never syncs
    assert h.state() == "Stable"
    for _ in range(REBALANCE_MS // 1000 + 1):
        h.advance(1000)
        h.heartbeat(a, h.core.groups["g"].generation_id)
    assert list(h.core.groups["g"].members) == [a]


def test_coordinator_restart_restores_members_generation_and_assignment():
    h = Harness()
    a, b = stable_group(h, 2)
    h.restart()
    assert h.state() == "Stable"
    assert h.heartbeat(a, 2) == NONE and h.heartbeat(b, 2) == NONE
    assert h.sync(b, 2).value["assignment"] == b.encode()


def test_coordinator_restart_during_a_rebalance_resumes_from_the_last_stable_generation():
    h = Harness()
    a, b = stable_group(h, 2)
    h.join_new()  # rebalance in progress, nothing new persisted yet
    h.restart()
    assert h.state() == "Stable" and h.core.groups["g"].generation_id == 2
    assert h.heartbeat(a, 2) == NONE
    rejoin = h.join(member_id=a, protocols=["range", "sticky"])
    h.join(member_id=b, protocols=["range", "sticky"])
    assert rejoin.value["generation_id"] == 3


def test_a_failed_assignment_write_sends_the_group_back_to_rebalance():
    h = Harness()
    first = h.join_new()
    a = first.value["member_id"]
    h.fail_next_flush = 15  # COORDINATOR_NOT_AVAILABLE
    assert h.sync(a, 1, assignments={a: b"x"}).value == {"error_code": 15}
    assert h.state() == "PreparingRebalance"
