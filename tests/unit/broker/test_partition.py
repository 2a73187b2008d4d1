"""The sans-IO partition state: roles, epochs, high watermark, ISR proposals."""

from __future__ import annotations

import pytest

from sparklog.broker.partition import (
    BecameFollower,
    BecameLeader,
    HighWatermarkAdvanced,
    IsrChanged,
    IsrChangeProposed,
    Partition,
    PartitionRegistration,
    RemoteReplica,
    Role,
)
from sparklog.errors import (
    FencedLeaderEpochError,
    IllegalStateTransition,
    IneligibleReplicaError,
    InvalidUpdateVersionError,
    NetworkExceptionError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)


def reg(leader=1, isr=(1,), replicas=(1,), leader_epoch=0, partition_epoch=0):
    return PartitionRegistration(tuple(replicas), tuple(isr), leader, leader_epoch, partition_epoch)


def test_single_replica_leader_hw_follows_log_end():
    p = Partition("t", 0, 1)
    events = p.apply_registration(reg(), now_ms=0, log_end_offset=5)
    assert events == [BecameLeader(0), HighWatermarkAdvanced(5)]
    assert p.is_leader and p.high_watermark == 5
    assert p.on_leader_append(9) == [HighWatermarkAdvanced(9)]
    assert p.on_leader_append(9) == []


def test_hw_is_min_leo_over_isr_and_never_decreases():
    p = Partition("t", 0, 1)
    p.apply_registration(reg(isr=(1, 2), replicas=(1, 2)), now_ms=0, log_end_offset=10)
    assert p.high_watermark == 0  # follower 2 has not fetched yet
    assert p.on_follower_fetch(5, 2, 4, leader_log_end_offset=10) == [HighWatermarkAdvanced(4)]
    assert p.on_follower_fetch(6, 2, 3, leader_log_end_offset=10) == []  # a stale fetch
    assert p.high_watermark == 4
    assert p.on_follower_fetch(7, 2, 10, leader_log_end_offset=10) == [HighWatermarkAdvanced(10)]


def test_follower_outside_isr_is_proposed_back_when_caught_up():
    p = Partition("t", 0, 1)
    p.apply_registration(reg(isr=(1,), replicas=(1, 2)), now_ms=0, log_end_offset=10)
    assert p.high_watermark == 10
    assert p.on_follower_fetch(1, 2, 5, leader_log_end_offset=10) == []
    assert p.on_follower_fetch(2, 2, 10, leader_log_end_offset=10) == [
        IsrChangeProposed((1, 2), 0, 0)
    ]


def test_lagging_follower_is_proposed_out_of_isr():
    p = Partition("t", 0, 1)
    p.apply_registration(reg(isr=(1, 2, 3), replicas=(1, 2, 3)), now_ms=1000, log_end_offset=0)
    p.on_follower_fetch(20_000, 3, 0, leader_log_end_offset=0)  # 3 is caught up at 20 s
    assert p.maybe_shrink_isr(now_ms=25_000, replica_lag_time_max_ms=30_000) == []
    assert p.out_of_sync_replicas(40_000, 30_000) == (2,)
    assert p.maybe_shrink_isr(now_ms=40_000, replica_lag_time_max_ms=30_000) == [
        IsrChangeProposed((1, 3), 0, 0)
    ]


def test_follower_role_and_leader_change():
    p = Partition("t", 0, 2)
    events = p.apply_registration(reg(leader=1, isr=(1, 2), replicas=(1, 2)), 0, 0)
    assert events == [BecameFollower(1, 0)] and p.role is Role.FOLLOWER
    with pytest.raises(NotLeaderOrFollowerError):
        p.check_leader()
    events = p.apply_registration(
        reg(leader=2, isr=(2,), replicas=(1, 2), leader_epoch=1, partition_epoch=1), 0, 7
    )
    assert events == [BecameLeader(1), HighWatermarkAdvanced(7)]
    p.check_leader(1)


def test_stale_registration_is_ignored():
    p = Partition("t", 0, 1)
    p.apply_registration(reg(leader_epoch=3, partition_epoch=5), 0, 0)
    assert p.apply_registration(reg(leader_epoch=2, partition_epoch=4), 0, 0) == []
    assert p.leader_epoch == 3


def test_request_epoch_checks():
    p = Partition("t", 0, 1)
    p.apply_registration(reg(leader_epoch=4, partition_epoch=4), 0, 0)
    p.check_leader(-1)
    p.check_leader(4)
    with pytest.raises(FencedLeaderEpochError):
        p.check_leader(3)
    with pytest.raises(UnknownLeaderEpochError):
        p.check_leader(5)


def test_acks_all_checks():
    p = Partition("t", 0, 1)
    p.apply_registration(reg(isr=(1, 2), replicas=(1, 2)), 0, 0)
    p.check_enough_replicas(2)
    with pytest.raises(NotEnoughReplicasError):
        p.check_enough_replicas(3)
    p.on_leader_append(3)
    assert not p.acks_all_satisfied(3, 1)  # follower 2 has not fetched offset 3
    p.on_follower_fetch(0, 2, 3, leader_log_end_offset=3)
    assert p.acks_all_satisfied(3, 2)
    with pytest.raises(NotEnoughReplicasAfterAppendError):
        p.acks_all_satisfied(3, 3)


def test_deleted_partition_cannot_come_back():
    p = Partition("t", 0, 1)
    p.apply_registration(reg(), 0, 0)
    p.mark_deleted()
    with pytest.raises(IllegalStateTransition):
        p.apply_registration(reg(leader_epoch=1, partition_epoch=1), 0, 0)


def test_follower_fetch_from_a_non_replica_is_refused():
    p = Partition("t", 0, 1)
    p.apply_registration(reg(), 0, 0)
    with pytest.raises(NotLeaderOrFollowerError):
        p.on_follower_fetch(0, 9, 0, leader_log_end_offset=0)


# -- follower fetch state (Kafka's Replica.updateFetchState) ---------------------------------------


def test_a_follower_is_caught_up_as_of_its_previous_fetch_when_it_reaches_that_end():
    r = RemoteReplica(2)
    r.update_fetch_state(now_ms=100, fetch_offset=5, leader_log_end_offset=5)
    assert r.last_caught_up_time_ms == 100  # at the leader's end now
    r.update_fetch_state(now_ms=200, fetch_offset=5, leader_log_end_offset=9)
    assert r.last_caught_up_time_ms == 100  # behind: 9 arrived meanwhile
    r.update_fetch_state(now_ms=300, fetch_offset=9, leader_log_end_offset=12)
    assert r.last_caught_up_time_ms == 200  # it reached what the leader had at 200
    r.update_fetch_state(now_ms=400, fetch_offset=10, leader_log_end_offset=14)
    assert r.last_caught_up_time_ms == 200  # 12 at the previous fetch, not reached
    assert (r.log_end_offset, r.last_fetch_leader_log_end_offset) == (10, 14)


# -- ISR: maximal ISR, expansion, shrink, outcomes -------------------------------------------------


def leader_of_three(isr=(1, 2, 3), log_end_offset=10, now_ms=0, leader_epoch=0):
    p = Partition("t", 0, 1)
    p.apply_registration(
        reg(isr=isr, replicas=(1, 2, 3), leader_epoch=leader_epoch, partition_epoch=leader_epoch),
        now_ms,
        log_end_offset,
    )
    return p


def test_expansion_needs_the_epoch_start_and_the_high_watermark_and_an_eligible_broker():
    p = leader_of_three(isr=(1, 2), log_end_offset=10)
    assert p.leader_epoch_start_offset == 10
    p.on_follower_fetch(0, 2, 8, 12)
    assert p.high_watermark == 8
    # 3 reached the HW but not the start of this leader's epoch (10): it may still diverge
    assert p.on_follower_fetch(0, 3, 9, 12) == []
    assert p.on_follower_fetch(0, 3, 10, 12, replica_eligible=False) == []
    assert p.on_follower_fetch(0, 3, 10, 12) == [IsrChangeProposed((1, 2, 3), 0, 0)]
    assert p.pending_isr == IsrChangeProposed((1, 2, 3), 0, 0)
    assert p.on_follower_fetch(0, 3, 11, 12) == [], "one proposal in flight per partition"


def test_high_watermark_counts_the_maximal_isr_while_an_expansion_is_pending():
    p = leader_of_three(isr=(1, 2), log_end_offset=0)
    p.on_leader_append(10)
    p.on_follower_fetch(0, 2, 10, 10)
    assert p.high_watermark == 10
    p.on_leader_append(20)
    p.on_follower_fetch(0, 3, 10, 20)  # joins the maximal ISR at 10
    assert p.maximal_isr == (1, 2, 3) and p.isr == (1, 2)
    assert p.on_follower_fetch(0, 2, 20, 20) == [], "3 is counted although not committed"
    assert p.high_watermark == 10
    events = p.on_follower_fetch(0, 3, 15, 20)
    assert events == [HighWatermarkAdvanced(15)]


def test_a_pending_shrink_keeps_counting_the_members_it_removes():
    p = leader_of_three(log_end_offset=0, now_ms=0)
    p.on_leader_append(10)
    p.on_follower_fetch(100, 2, 10, 10)
    proposal = p.maybe_shrink_isr(2_000, 1_000, leader_log_end_offset=10)
    assert proposal == [IsrChangeProposed((1, 2), 0, 0)]
    assert p.maximal_isr == (1, 2, 3) and p.high_watermark == 0
    events, retry = p.apply_isr_outcome(
        proposal[0], 0, leader_epoch=0, isr=(1, 2), partition_epoch=1, leader_log_end_offset=10
    )
    assert (events, retry) == ([IsrChanged((1, 2), 1), HighWatermarkAdvanced(10)], False)
    assert (p.isr, p.partition_epoch, p.pending_isr) == ((1, 2), 1, None)


def test_a_follower_at_the_leader_end_is_never_out_of_sync():
    p = leader_of_three(log_end_offset=10, now_ms=0)
    p.on_follower_fetch(0, 2, 10, 10)
    p.on_follower_fetch(0, 3, 10, 10)
    assert p.out_of_sync_replicas(60_000, 1_000, leader_log_end_offset=10) == ()
    assert p.out_of_sync_replicas(60_000, 1_000, leader_log_end_offset=11) == (2, 3)
    assert p.maybe_shrink_isr(60_000, 1_000, leader_log_end_offset=10) == []


def test_no_shrink_while_a_proposal_is_in_flight_nor_on_a_follower():
    p = leader_of_three(isr=(1, 2), log_end_offset=10, now_ms=0)
    p.on_follower_fetch(0, 3, 10, 10)  # proposes (1, 2, 3)
    assert p.maybe_shrink_isr(60_000, 1_000, 11) == []
    follower = Partition("t", 0, 2)
    follower.apply_registration(reg(isr=(1, 2), replicas=(1, 2)), 0, 0)
    assert follower.maybe_shrink_isr(60_000, 1_000) == []


def test_ineligible_replica_reverts_and_a_new_proposal_may_follow():
    p = leader_of_three(isr=(1, 2), log_end_offset=10)
    (proposal,) = p.on_follower_fetch(0, 3, 10, 10)
    assert p.apply_isr_outcome(proposal, IneligibleReplicaError.code) == ([], False)
    assert p.pending_isr is None and p.isr == (1, 2)
    assert p.on_follower_fetch(1, 3, 10, 10) == [proposal]


def test_stale_epoch_errors_wait_for_metadata_and_other_errors_retry():
    p = leader_of_three(isr=(1, 2), log_end_offset=10)
    (proposal,) = p.on_follower_fetch(0, 3, 10, 10)
    assert p.apply_isr_outcome(proposal, InvalidUpdateVersionError.code) == ([], False)
    assert p.pending_isr == proposal, "stays pending until newer metadata"
    assert p.apply_isr_outcome(proposal, NetworkExceptionError.code) == ([], True)
    # the same registration again (any metadata publish) keeps it pending...
    p.apply_registration(reg(isr=(1, 2), replicas=(1, 2, 3)), 0, 10)
    assert p.pending_isr == proposal
    # ...a newer partition epoch replaces it, and a late answer to it is ignored
    p.apply_registration(reg(isr=(1, 2, 3), replicas=(1, 2, 3), partition_epoch=1), 0, 10)
    assert p.pending_isr is None and p.isr == (1, 2, 3)
    ok = p.apply_isr_outcome(proposal, 0, leader_epoch=0, isr=(1, 2, 3), partition_epoch=1)
    assert ok == ([], False)


def test_a_success_for_an_old_epoch_is_ignored():
    p = leader_of_three(isr=(1, 2), log_end_offset=10)
    (proposal,) = p.on_follower_fetch(0, 3, 10, 10)
    assert p.apply_isr_outcome(proposal, 0, leader_epoch=7, isr=(1, 2, 3), partition_epoch=9) == (
        [],
        False,
    )
    assert p.isr == (1, 2) and p.pending_isr == proposal


def test_a_new_leader_epoch_resets_follower_state_and_pending_proposals():
    p = leader_of_three(isr=(1, 2), log_end_offset=10, now_ms=5)
    p.on_follower_fetch(6, 2, 10, 10)
    p.on_follower_fetch(6, 3, 10, 10)
    assert p.pending_isr is not None and p.high_watermark == 10
    follower_events = p.apply_registration(
        reg(leader=2, isr=(1, 2), replicas=(1, 2, 3), leader_epoch=1, partition_epoch=1), 7, 10
    )
    assert follower_events == [BecameFollower(2, 1)] and p.pending_isr is None
    events = p.apply_registration(
        reg(leader=1, isr=(1, 2), replicas=(1, 2, 3), leader_epoch=2, partition_epoch=2), 50, 12
    )
    assert events == [BecameLeader(2)]
    assert p.remote_replicas[2] == RemoteReplica(2, -1, 50)  # ISR member: caught up as of now
    assert p.remote_replicas[3] == RemoteReplica(3, -1, 0)
    assert p.leader_epoch_start_offset == 12
    assert p.high_watermark == 10, "HW waits for 2 to fetch; it never goes back"
