"""The sans-IO partition state: roles, epochs, high watermark, ISR proposals."""

from __future__ import annotations

import pytest

from sparklog.broker.partition import (
    BecameFollower,
    BecameLeader,
    HighWatermarkAdvanced,
    IllegalStateTransition,
    IsrChangeProposed,
    Partition,
    PartitionRegistration,
    Role,
)
from sparklog.errors import (
    FencedLeaderEpochError,
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
    assert p.on_follower_fetch(2, 2, 10, leader_log_end_offset=10) == [IsrChangeProposed((1, 2))]


def test_lagging_follower_is_proposed_out_of_isr():
    p = Partition("t", 0, 1)
    p.apply_registration(reg(isr=(1, 2, 3), replicas=(1, 2, 3)), now_ms=1000, log_end_offset=0)
    p.on_follower_fetch(20_000, 3, 0, leader_log_end_offset=0)  # 3 is caught up at 20 s
    assert p.maybe_shrink_isr(now_ms=25_000, replica_lag_time_max_ms=30_000) == []
    assert p.out_of_sync_replicas(40_000, 30_000) == (2,)
    assert p.maybe_shrink_isr(now_ms=40_000, replica_lag_time_max_ms=30_000) == [
        IsrChangeProposed((1, 3))
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
