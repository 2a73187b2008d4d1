"""Leadership when brokers are fenced and unfenced; `elect_leader` and `partition_change`."""

from __future__ import annotations

import uuid

import pytest

from sparklog.controller.partition_change import elect_leader, partition_change
from sparklog.metadata.log_records import PartitionRegistration
from sparklog.structs import NO_LEADER

from .harness import SESSION_TIMEOUT_MS, Harness


def expire(h: Harness, *alive: int) -> list[int]:
    """Let every lease but those of `alive` expire; the fenced ids."""
    h.advance(SESSION_TIMEOUT_MS + 1)
    h.heartbeat_all(*alive)
    return h.tick()


def test_rf1_partition_goes_offline_and_returns_with_a_bumped_epoch():
    h = Harness()
    h.start_brokers(2)
    h.create("t", 2, 1)
    assert [p.leader for p in h.partitions("t")] == [0, 1]
    assert expire(h, 0) == [1]
    p0, p1 = h.partitions("t")
    assert (p0.leader, p0.leader_epoch) == (0, 0)
    assert (p1.leader, p1.isr, p1.leader_epoch, p1.partition_epoch) == (NO_LEADER, (1,), 1, 1)
    h.heartbeat(1)  # caught up again -> unfenced -> leader again
    p1 = h.partitions("t")[1]
    assert (p1.leader, p1.isr, p1.leader_epoch, p1.partition_epoch) == (1, (1,), 2, 2)


def test_fenced_leader_is_replaced_by_the_first_live_isr_member_in_assignment_order():
    h = Harness()
    h.start_brokers(3)
    h.create("t", 1, 3)
    (p,) = h.partitions("t")
    assert p.replicas == (0, 1, 2) and p.leader == 0
    expire(h, 1, 2)
    (p,) = h.partitions("t")
    assert (p.leader, p.isr, p.leader_epoch) == (1, (1, 2), 1)
    expire(h, 2)
    (p,) = h.partitions("t")
    assert (p.leader, p.isr, p.leader_epoch) == (2, (2,), 2)
    expire(h)
    (p,) = h.partitions("t")
    # The last ISR member stays recorded so that it is the one elected when it returns.
    assert (p.leader, p.isr, p.leader_epoch) == (NO_LEADER, (2,), 3)
    h.heartbeat(0)  # not in the ISR: may have missed records, so no clean election
    assert h.partitions("t")[0].leader == NO_LEADER
    h.heartbeat(2)
    (p,) = h.partitions("t")
    assert (p.leader, p.isr, p.leader_epoch) == (2, (2,), 4)


def test_fencing_a_follower_shrinks_the_isr_without_a_new_leader_epoch():
    h = Harness()
    h.start_brokers(2)
    h.create("t", 1, 2)
    expire(h, 0)
    (p,) = h.partitions("t")
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (0, (0,), 0, 1)


def test_unclean_election_picks_a_live_replica_outside_the_isr():
    h = Harness()
    h.start_brokers(2)
    h.create("t", 1, 2, configs={"unclean.leader.election.enable": "true"})
    expire(h, 0)  # isr [0]
    expire(h)  # everyone fenced: leader -1, isr [0]
    h.heartbeat(1)
    (p,) = h.partitions("t")
    assert (p.leader, p.isr) == (1, (1,))


def test_a_re_registering_live_broker_gives_up_its_leadership_first():
    h = Harness()
    h.start_brokers(1)
    h.create("t", 1, 1)
    epoch = h.register(0)
    (p,) = h.partitions("t")
    assert (p.leader, p.leader_epoch) == (NO_LEADER, 1)
    assert h.log[-1]["type"] == "RegisterBroker" and h.log[-1]["broker_epoch"] == epoch
    h.heartbeat(0)
    assert h.partitions("t")[0].leader_epoch == 2


def test_leader_epochs_never_go_backwards_over_many_fence_cycles():
    h = Harness()
    h.start_brokers(3)
    h.create("t", 3, 2)
    seen = {p.partition: p.leader_epoch for p in h.partitions("t")}
    for cycle in range(6):
        alive = [b for b in range(3) if b != cycle % 3]
        expire(h, *alive)
        for broker_id in range(3):
            h.heartbeat(broker_id)
        for p in h.partitions("t"):
            assert p.leader_epoch >= seen[p.partition]
            assert p.leader == NO_LEADER or (p.leader in p.isr and h.image.is_unfenced(p.leader))
            seen[p.partition] = p.leader_epoch
    assert h.replayed() == h.image


def partition(replicas, isr, leader, epoch=5):
    return PartitionRegistration(uuid.UUID(int=9), 0, tuple(replicas), tuple(isr), leader, epoch, 7)


@pytest.mark.parametrize(
    ("replicas", "isr", "live", "unclean", "expected"),
    [
        ((2, 0, 1), (0, 1, 2), {0, 1, 2}, False, 2),
        ((2, 0, 1), (0, 1), {0, 1, 2}, False, 0),
        ((2, 0, 1), (0, 1), {1}, False, 1),
        ((2, 0, 1), (0,), {1, 2}, False, NO_LEADER),
        ((2, 0, 1), (0,), {1, 2}, True, 2),
        ((2, 0, 1), (), set(), True, NO_LEADER),
    ],
)
def test_elect_leader(replicas, isr, live, unclean, expected):
    assert elect_leader(replicas, isr, live.__contains__, unclean=unclean) == expected


def test_partition_change_is_none_when_nothing_changes():
    p = partition((0, 1), (0, 1), 0)
    assert partition_change(p, {0, 1}.__contains__, broker_to_add=1) is None
    assert partition_change(p, {0, 1}.__contains__, broker_to_remove=3) is None


def test_partition_change_bumps_epochs_as_kafka_does():
    p = partition((0, 1), (0, 1), 0)
    change = partition_change(p, {0, 1}.__contains__, broker_to_remove=0)
    assert change == {
        "type": "PartitionChange",
        "topic_id": str(p.topic_id),
        "partition": 0,
        "leader": 1,
        "isr": [1],
        "leader_epoch": 6,
        "partition_epoch": 8,
    }
    follower_gone = partition_change(p, {0, 1}.__contains__, broker_to_remove=1)
    assert (follower_gone["leader"], follower_gone["leader_epoch"]) == (0, 5)
