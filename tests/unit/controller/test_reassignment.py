"""Partition reassignment (KIP-455) on the sans-IO controller: start, completion through
AlterPartition and tick, cancel, errors, and the image/snapshot round trip of the new fields."""

from __future__ import annotations

import pytest

from sparklog.controller.results import ApiError, ControllerResult
from sparklog.errors import (
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    NewLeaderElectedError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)
from sparklog.metadata.alter_partition import IsrChange
from sparklog.metadata.image import MetadataImage
from sparklog.metadata.log_records import PartitionRegistration

from .harness import SESSION_TIMEOUT_MS, Harness


def setup(brokers: int = 3) -> Harness:
    h = Harness()
    h.start_brokers(brokers)
    assert h.create("t", assignments=((0, (0, 1)),)).error.is_success
    return h


def reassign(h: Harness, *entries, **kwargs) -> list[ApiError]:
    results = h.commit(h.controller.alter_partition_reassignments(list(entries), **kwargs))
    return [error for _tp, error in results]


def grow_isr(h: Harness, isr: tuple[int, ...]) -> int:
    p = h.partitions("t")[0]
    leader = h.image.broker(p.leader)
    change = IsrChange(p.topic_id, 0, p.leader_epoch, p.partition_epoch, isr)
    (out,) = h.commit(
        h.controller.alter_partition(h.now_ms, p.leader, leader.broker_epoch, [change])
    )
    return out.error_code


def test_move_from_0_1_to_1_2_widens_then_completes_when_2_joins_the_isr():
    h = setup()
    assert reassign(h, (("t", 0), [1, 2])) == [ApiError()]
    (p,) = h.partitions("t")
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ((1, 2, 0), (2,), (0,))
    assert (p.isr, p.leader, p.leader_epoch) == ((0, 1), 0, 0)
    (ongoing,) = h.controller.list_partition_reassignments()
    assert (ongoing.topic, ongoing.partition, ongoing.replicas) == ("t", 0, (1, 2, 0))
    assert h.commit(h.controller.tick(h.now_ms)) is None
    assert h.partitions("t")[0].is_reassigning  # 2 not in the ISR yet
    # The leader (0, being removed) adds 2: the reassignment completes, 1 leads now.
    assert grow_isr(h, (0, 1, 2)) == NewLeaderElectedError.code
    (p,) = h.partitions("t")
    assert (p.replicas, p.isr, p.leader, p.leader_epoch) == ((1, 2), (1, 2), 1, 1)
    assert (p.adding_replicas, p.removing_replicas) == ((), ())
    assert h.controller.list_partition_reassignments() == []
    assert h.replayed() == h.image


def test_completion_keeping_the_leader_answers_the_new_state():
    h = setup()
    reassign(h, (("t", 0), [0, 2]))
    assert grow_isr(h, (0, 1, 2)) == 0
    (p,) = h.partitions("t")
    assert (p.replicas, p.isr, p.leader, p.leader_epoch) == ((0, 2), (0, 2), 0, 0)


def test_shrinking_the_replica_set_completes_at_once():
    h = Harness()
    h.start_brokers(3)
    h.create("t", 1, 3)
    assert reassign(h, (("t", 0), [1, 2])) == [ApiError()]
    (p,) = h.partitions("t")
    assert (p.replicas, p.isr, p.leader, p.is_reassigning) == ((1, 2), (1, 2), 1, False)


def test_tick_completes_a_reassignment_whose_isr_already_holds_the_target():
    h = setup()
    reassign(h, (("t", 0), [1, 2]))
    p = h.partitions("t")[0]
    # An ISR holding the target without the completion (as a log written before it would
    # leave it): the next tick completes the reassignment.
    h.commit(
        ControllerResult(
            None,
            (
                {
                    "type": "PartitionChange",
                    "topic_id": str(p.topic_id),
                    "partition": 0,
                    "leader": 0,
                    "isr": [0, 1, 2],
                    "leader_epoch": 0,
                    "partition_epoch": p.partition_epoch + 1,
                },
            ),
        )
    )
    assert h.partitions("t")[0].is_reassigning
    h.commit(h.controller.tick(h.now_ms))
    (p,) = h.partitions("t")
    assert (p.replicas, p.isr, p.leader, p.is_reassigning) == ((1, 2), (1, 2), 1, False)


def test_cancel_reverts_to_the_original_replicas():
    h = setup()
    reassign(h, (("t", 0), [1, 2]))
    assert reassign(h, (("t", 0), None)) == [ApiError()]
    (p,) = h.partitions("t")
    # The original brokers, in the widened order (Kafka's PartitionReassignmentRevert too).
    assert (p.replicas, p.isr, p.leader, p.is_reassigning) == ((1, 0), (0, 1), 0, False)
    (error,) = reassign(h, (("t", 0), None))
    assert error.code == NoReassignmentInProgressError.code


def test_cancel_after_the_new_replica_joined_drops_it_from_the_isr():
    h = setup()
    reassign(h, (("t", 0), [2, 1, 0]))  # grow to three replicas (adding 2)
    assert h.partitions("t")[0].adding_replicas == (2,)
    reassign(h, (("t", 0), None))
    (p,) = h.partitions("t")
    assert (p.replicas, p.isr) == ((1, 0), (0, 1))


def test_a_reordering_changes_the_preferred_leader_without_a_reassignment():
    h = setup()
    assert reassign(h, (("t", 0), [1, 0])) == [ApiError()]
    (p,) = h.partitions("t")
    assert (p.replicas, p.leader, p.is_reassigning) == ((1, 0), 0, False)
    log_length = len(h.log)
    assert reassign(h, (("t", 0), [1, 0])) == [ApiError()]
    assert len(h.log) == log_length  # nothing to change


@pytest.mark.parametrize(
    ("target", "error"),
    [
        ([], InvalidReplicaAssignmentError),
        ([1, 1], InvalidReplicaAssignmentError),
        ([1, 9], InvalidReplicaAssignmentError),
    ],
)
def test_bad_targets_are_refused(target, error):
    h = setup()
    before = h.image.to_dict()
    (got,) = reassign(h, (("t", 0), target))
    assert got.code == error.code and got.message
    assert h.image.to_dict() == before


def test_unknown_partitions_duplicates_and_rf_changes():
    h = setup()
    errors = reassign(h, (("t", 5), [1]), (("nope", 0), [1]))
    assert [e.code for e in errors] == [UnknownTopicOrPartitionError.code] * 2
    errors = reassign(h, (("t", 0), [1, 2]), (("t", 0), [2, 1]))
    assert [e.code for e in errors] == [InvalidRequestError.code] * 2
    (error,) = reassign(h, (("t", 0), [2]), allow_replication_factor_change=False)
    assert error.code == InvalidReplicationFactorError.code
    assert not h.partitions("t")[0].is_reassigning


def test_fenced_targets_may_be_named_and_a_fenced_leader_moves_on_completion():
    h = setup()
    reassign(h, (("t", 0), [2, 1]))
    assert grow_isr(h, (0, 1)) == 0  # unchanged ISR: nothing completes
    h.advance(SESSION_TIMEOUT_MS + 1)
    h.heartbeat_all(0, 1)
    assert h.tick() == [2]
    assert grow_isr(h, (0, 1, 2)) != 0  # 2 is fenced: ineligible


def test_image_and_snapshot_keep_the_reassignment_fields_and_old_records_load():
    h = setup()
    reassign(h, (("t", 0), [1, 2]))
    copy = MetadataImage.from_dict(h.image.to_dict())
    assert copy == h.image
    assert copy.partition(h.partitions("t")[0].topic_id, 0).adding_replicas == (2,)
    old_style = h.partitions("t")[0]
    record = PartitionRegistration(
        old_style.topic_id, 1, (0,), (0,), 0, 0, 0
    ).to_record()  # no reassignment fields
    assert "adding_replicas" not in record
    image = h.replayed()
    image.apply(record)
    assert image.partition(old_style.topic_id, 1).adding_replicas == ()


def test_an_unclean_election_never_picks_a_replica_still_being_added():
    h = Harness()
    h.start_brokers(3)
    configs = {"unclean.leader.election.enable": "true"}
    assert h.create("t", assignments=((0, (0, 1)),), configs=configs).error.is_success
    reassign(h, (("t", 0), [0, 1, 2]))
    assert h.partitions("t")[0].adding_replicas == (2,)
    h.advance(SESSION_TIMEOUT_MS + 1)
    h.heartbeat_all(2)
    assert sorted(h.tick()) == [0, 1]  # the ISR is gone; only the new, empty replica lives
    assert h.partitions("t")[0].leader == -1
    h.heartbeat(1)  # an original replica returns: unclean election picks it
    (p,) = h.partitions("t")
    assert (p.leader, p.isr) == (1, (1,))
