"""AlterPartition on the sans-IO controller: every refusal, accepted shrinks and expansions."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from sparklog.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidRequestError,
    InvalidUpdateVersionError,
    NotLeaderOrFollowerError,
    StaleBrokerEpochError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from sparklog.metadata.alter_partition import IsrChange, IsrChangeOutcome

from .harness import SESSION_TIMEOUT_MS, Harness


def setup(brokers: int = 3, rf: int = 3, partitions: int = 1) -> Harness:
    h = Harness()
    h.start_brokers(brokers)
    h.create("t", partitions, rf)
    return h


def alter(h: Harness, broker_id: int, *changes: IsrChange) -> list[IsrChangeOutcome]:
    broker = h.image.broker(broker_id)
    assert broker is not None
    return h.commit(h.controller.alter_partition(h.now_ms, broker_id, broker.broker_epoch, changes))


def change(h: Harness, isr: tuple[int, ...], partition: int = 0, **epochs: int) -> IsrChange:
    p = h.partitions("t")[partition]
    return IsrChange(
        p.topic_id,
        partition,
        epochs.get("leader_epoch", p.leader_epoch),
        epochs.get("partition_epoch", p.partition_epoch),
        isr,
    )


def test_shrink_then_expand_bumps_only_the_partition_epoch():
    h = setup()
    (out,) = alter(h, 0, change(h, (0, 1)))
    (p,) = h.partitions("t")
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (0, (0, 1), 0, 1)
    assert out == IsrChangeOutcome(p.topic_id, 0, 0, None, 0, 0, (0, 1), 1)
    (out,) = alter(h, 0, change(h, (0, 1, 2)))
    assert (out.error_code, out.isr, out.partition_epoch) == (0, (0, 1, 2), 2)
    assert h.partitions("t")[0].isr == (0, 1, 2)
    assert h.replayed() == h.image


def test_unchanged_isr_answers_the_current_state_without_a_record():
    h = setup()
    log_length = len(h.log)
    (out,) = alter(h, 0, change(h, (0, 1, 2)))
    assert (out.error_code, out.isr, out.partition_epoch, out.leader_id) == (0, (0, 1, 2), 0, 0)
    assert len(h.log) == log_length


def test_stale_broker_epoch_is_a_top_level_error():
    h = setup()
    with pytest.raises(StaleBrokerEpochError):
        h.controller.alter_partition(h.now_ms, 0, 12345, [change(h, (0, 1))])
    with pytest.raises(StaleBrokerEpochError):
        h.controller.alter_partition(h.now_ms, 7, 0, [change(h, (0, 1))])


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda h: IsrChange(uuid.UUID(int=999), 0, 0, 0, (0,)), UnknownTopicIdError),
        (lambda h: dataclasses.replace(change(h, (0,)), partition=5), UnknownTopicOrPartitionError),
        (lambda h: change(h, (0, 1), leader_epoch=1), FencedLeaderEpochError),
        (lambda h: change(h, (0, 1), leader_epoch=-1), FencedLeaderEpochError),
        (lambda h: change(h, (0, 1), partition_epoch=3), InvalidUpdateVersionError),
        (lambda h: change(h, (1, 2)), InvalidRequestError),
        (lambda h: change(h, (0, 0, 1)), InvalidRequestError),
        (lambda h: change(h, ()), InvalidRequestError),
        (lambda h: change(h, (0, 3)), IneligibleReplicaError),
    ],
    ids=[
        "unknown-topic-id",
        "unknown-partition",
        "newer-leader-epoch",
        "older-leader-epoch",
        "partition-epoch",
        "leader-missing",
        "duplicates",
        "empty",
        "not-a-replica",
    ],
)
def test_refusals_carry_kafka_codes_and_change_nothing(make, error):
    h = setup(brokers=4)
    before = h.image.to_dict()
    (out,) = alter(h, 0, make(h))
    assert out.error_code == error.code, out.error_message
    assert out.error_message
    assert h.image.to_dict() == before


def test_requester_not_leader_gets_not_leader_or_follower():
    h = setup()
    (out,) = alter(h, 1, change(h, (0, 1)))
    assert out.error_code == NotLeaderOrFollowerError.code


def test_fenced_or_unregistered_or_shutting_down_members_are_ineligible():
    h = setup(brokers=3)
    h.advance(SESSION_TIMEOUT_MS + 1)
    h.heartbeat_all(0, 1)
    assert h.tick() == [2]  # isr (0, 1) now
    (out,) = alter(h, 0, change(h, (0, 1, 2)))
    assert out.error_code == IneligibleReplicaError.code
    assert h.heartbeat(1, want_shut_down=True).should_shut_down
    h.heartbeat(2)  # unfenced again, so only broker 1 (shutting down) is ineligible now
    assert not h.image.broker(2).fenced
    (out,) = alter(h, 0, change(h, (0, 2)))
    assert out.error_code == 0
    (out,) = alter(h, 0, change(h, (0, 1, 2)))
    assert out.error_code == IneligibleReplicaError.code


def test_a_partition_named_twice_is_refused_and_others_proceed():
    h = setup(partitions=2)
    p0 = h.partitions("t")[0]
    twice = change(h, (0, 1))
    other = change(h, (1,), partition=1)  # partition 1 is led by broker 1
    outs = alter(h, 0, twice, twice)
    assert [o.error_code for o in outs] == [InvalidRequestError.code] * 2
    (out,) = alter(h, 1, other)
    assert out.error_code == 0 and out.isr == (1,)
    assert h.partitions("t")[0] == p0


def test_several_partitions_in_one_request_each_get_their_outcome():
    h = setup(brokers=2, rf=2, partitions=2)
    p0, p1 = h.partitions("t")
    assert (p0.leader, p1.leader) == (0, 1)
    outs = alter(h, 0, change(h, (0,), 0), change(h, (1,), 1))
    assert [o.error_code for o in outs] == [0, NotLeaderOrFollowerError.code]
    assert [p.isr for p in h.partitions("t")] == [(0,), (1, 0)]


def test_stale_partition_epoch_after_a_change_is_refused():
    h = setup()
    stale = change(h, (0, 1))
    alter(h, 0, change(h, (0, 2)))
    (out,) = alter(h, 0, stale)
    assert out.error_code == InvalidUpdateVersionError.code
    assert h.partitions("t")[0].isr == (0, 2)


def test_v3_member_broker_epochs_must_match_the_registration():
    h = setup()
    p = h.partitions("t")[0]
    epochs = {b: h.image.broker(b).broker_epoch for b in (0, 1, 2)}
    request = [change(h, (0, 1))]

    def alter_with(member_epochs: tuple[int, ...]) -> IsrChangeOutcome:
        result = h.controller.alter_partition(
            h.now_ms, 0, epochs[0], request, member_epochs={(p.topic_id, 0): member_epochs}
        )
        (out,) = h.commit(result)
        return out

    # Broker 1 restarted (a new registration) since the leader saw it catch up: refused.
    assert alter_with((epochs[0], epochs[1] + 1)).error_code == IneligibleReplicaError.code
    assert alter_with((epochs[0], -1)).error_code == 0  # -1: not checked
    request = [change(h, (0, 1, 2))]
    assert alter_with((epochs[0], epochs[1], epochs[2])).error_code == 0
