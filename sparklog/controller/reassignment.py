"""Partition reassignment (KIP-455; Kafka's `PartitionReassignmentReplicas`,
`PartitionReassignmentRevert` and `ReplicationControlManager.alterPartitionReassignments`).

Theory of operation: a reassignment of a partition to `target` first widens its replicas to
target + the current replicas not in it (target order first), with adding = target - current
and removing = current - target; the new replicas start fetching from the leader and are
added to the ISR by the leader's AlterPartition once caught up. When the ISR holds every
target replica (checked on each AlterPartition and each controller tick), the reassignment
completes in one PartitionChange: replicas = target, ISR = ISR minus the removed ones, a new
leader from the target when the current one is removed (leader epoch bump), adding/removing
cleared. A cancel reverts to the original replicas (current - adding).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sparklog.controller.partition_change import MinIsrOf, change_record, elect_leader, elr_off
from sparklog.controller.results import NONE, ApiError
from sparklog.errors import (
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    KafkaError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)
from sparklog.metadata.image import MetadataImage
from sparklog.metadata.log_records import PartitionRegistration
from sparklog.structs import NO_LEADER, TopicPartition

logger = logging.getLogger(__name__)

Record = dict[str, Any]


def completed_reassignment(
    partition: PartitionRegistration, isr: Sequence[int], is_active: Callable[[int], bool]
) -> tuple[tuple[int, ...], tuple[int, ...], int] | None:
    """(replicas, ISR, leader) once `partition`'s reassignment completes with ISR `isr`, or
    None when none is in progress or a target replica is not in the ISR yet."""
    if not partition.is_reassigning:
        return None
    target = partition.target_replicas
    new_isr = tuple(r for r in isr if r not in partition.removing_replicas)
    if not new_isr or not set(target) <= set(new_isr):
        return None
    leader = partition.leader
    if leader not in new_isr or not is_active(leader):
        leader = elect_leader(target, new_isr, is_active)
    return target, new_isr, leader


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """A ListPartitionReassignments entry."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


def alter_partition_reassignments(
    image: MetadataImage,
    reassignments: Sequence[tuple[TopicPartition, Sequence[int] | None]],
    is_active: Callable[[int], bool],
    unclean_enabled: Callable[[str], bool],
    *,
    allow_replication_factor_change: bool = True,
    min_isr_of: MinIsrOf = elr_off,
) -> tuple[list[tuple[TopicPartition, ApiError]], list[Record]]:
    """Start (a replica list) or cancel (None) reassignments: per-partition results in request
    order and the PartitionChange records (`min_isr_of`: KIP-966's settings)."""
    counts = Counter(tp for tp, _ in reassignments)
    results: list[tuple[TopicPartition, ApiError]] = []
    records: list[Record] = []
    for tp, target in reassignments:
        try:
            if counts[tp] > 1:
                raise InvalidRequestError(f"Partition {tp[0]}-{tp[1]} appears more than once.")
            partition = _partition(image, tp)
            record: Record | None
            if target is None:
                record = _cancel(
                    partition, tp, is_active, unclean_enabled(tp[0]), min_isr_of(partition)
                )
            else:
                _validate_target(image, tp, partition, target, allow_replication_factor_change)
                record = _start(partition, tuple(target), is_active, min_isr_of(partition))
        except KafkaError as e:
            results.append((tp, ApiError.of(e)))
            continue
        results.append((tp, NONE))
        if record is not None:
            records.append(record)
            logger.info(
                "reassignment of %s-%d: replicas %s -> %s (adding %s, removing %s)",
                tp[0],
                tp[1],
                list(partition.replicas),
                record.get("replicas", list(partition.replicas)),
                record.get("adding_replicas", []),
                record.get("removing_replicas", []),
            )
    return results, records


def list_partition_reassignments(
    image: MetadataImage, partitions: Sequence[TopicPartition] | None = None
) -> list[OngoingReassignment]:
    """Reassignments in progress (of `partitions`, or all), topics by name, partitions by index.
    Partitions that do not exist or are not being reassigned are left out (Kafka's answer)."""
    wanted = None if partitions is None else set(partitions)
    out = []
    for name in image.topic_names():
        topic = image.topic(name)
        assert topic is not None
        for index in sorted(topic.partitions):
            p = topic.partitions[index]
            if p.is_reassigning and (wanted is None or (name, index) in wanted):
                out.append(
                    OngoingReassignment(
                        name, index, p.replicas, p.adding_replicas, p.removing_replicas
                    )
                )
    return out


def complete_reassignments(
    image: MetadataImage, is_active: Callable[[int], bool], min_isr_of: MinIsrOf = elr_off
) -> list[Record]:
    """PartitionChanges completing every reassignment whose ISR already holds its target."""
    records = []
    for partition in image.partitions():
        completed = completed_reassignment(partition, partition.isr, is_active)
        if completed is not None:
            records.append(_completion_record(partition, completed, min_isr_of(partition)))
    return records


def _partition(image: MetadataImage, tp: TopicPartition) -> PartitionRegistration:
    topic = image.topic(tp[0])
    partition = None if topic is None else topic.partitions.get(tp[1])
    if partition is None:
        raise UnknownTopicOrPartitionError(f"Unable to find partition {tp[0]}-{tp[1]}.")
    return partition


def _validate_target(
    image: MetadataImage,
    tp: TopicPartition,
    partition: PartitionRegistration,
    target: Sequence[int],
    allow_replication_factor_change: bool,
) -> None:
    if not target:
        raise InvalidReplicaAssignmentError(
            f"The target replica list of {tp[0]}-{tp[1]} is empty; give at least one broker."
        )
    if len(set(target)) != len(target):
        raise InvalidReplicaAssignmentError(
            f"The target replica list {list(target)} of {tp[0]}-{tp[1]} names a broker twice."
        )
    unknown = sorted(b for b in target if image.broker(b) is None)
    if unknown:
        raise InvalidReplicaAssignmentError(
            f"The target replica list {list(target)} of {tp[0]}-{tp[1]} includes broker(s) "
            f"{unknown}, but no such broker is registered."
        )
    current_rf = len(partition.original_replicas)
    if not allow_replication_factor_change and len(target) != current_rf:
        raise InvalidReplicationFactorError(
            f"The replication factor of {tp[0]}-{tp[1]} is {current_rf}; the target "
            f"{list(target)} would change it, which the request does not allow (KIP-860)."
        )


def _start(
    partition: PartitionRegistration,
    target: tuple[int, ...],
    is_active: Callable[[int], bool],
    min_isr: int | None,
) -> Record | None:
    """KIP-455: widen the replicas to target + current; complete at once when possible."""
    current = partition.replicas
    replicas = target + tuple(r for r in current if r not in target)
    adding = tuple(r for r in target if r not in current)
    removing = tuple(r for r in current if r not in target)
    if (replicas, adding, removing) == (
        current,
        partition.adding_replicas,
        partition.removing_replicas,
    ):
        return None
    widened = replace(
        partition, replicas=replicas, adding_replicas=adding, removing_replicas=removing
    )
    completed = completed_reassignment(widened, partition.isr, is_active)
    if completed is not None:
        return _completion_record(partition, completed, min_isr)
    if not adding and not removing:  # a reordering only: nothing to wait for
        return change_record(
            partition,
            isr=partition.isr,
            leader=partition.leader,
            replicas=target,
            adding_replicas=(),
            removing_replicas=(),
            min_isr=min_isr,
        )
    return change_record(
        partition,
        isr=partition.isr,
        leader=partition.leader,
        replicas=replicas,
        adding_replicas=adding,
        removing_replicas=removing,
        min_isr=min_isr,
    )


def _cancel(
    partition: PartitionRegistration,
    tp: TopicPartition,
    is_active: Callable[[int], bool],
    unclean: bool,
    min_isr: int | None,
) -> Record:
    """Revert to the original replicas (Kafka's `PartitionReassignmentRevert`): the widened
    list minus the adding ones, so in the widened order (the preferred leader may differ)."""
    if not partition.is_reassigning:
        raise NoReassignmentInProgressError(
            f"No reassignment of {tp[0]}-{tp[1]} is in progress to cancel."
        )
    original = partition.original_replicas
    isr = tuple(r for r in partition.isr if r not in partition.adding_replicas)
    leader = partition.leader if partition.leader in isr else NO_LEADER
    if leader == NO_LEADER or not is_active(leader):
        leader = elect_leader(original, isr, is_active)
    unclean_election = not isr
    if not isr:
        if not unclean:
            raise InvalidReplicaAssignmentError(
                f"Unable to revert the reassignment of {tp[0]}-{tp[1]}: no original replica "
                "is in the ISR, so it would need an unclean leader election "
                "(unclean.leader.election.enable is false)."
            )
        leader = elect_leader(original, (), is_active, unclean=True)
        isr = (leader,) if leader != NO_LEADER else (original[0],)
        logger.warning(
            "cancelling the reassignment of %s-%d with an unclean election: leader %d, "
            "records the ISR %s had may be lost",
            tp[0],
            tp[1],
            leader,
            list(partition.isr),
        )
    return change_record(
        partition,
        isr=isr,
        leader=leader,
        replicas=original,
        adding_replicas=(),
        removing_replicas=(),
        min_isr=min_isr,
        unclean_election=unclean_election,
    )


def _completion_record(
    partition: PartitionRegistration,
    completed: tuple[tuple[int, ...], tuple[int, ...], int],
    min_isr: int | None,
) -> Record:
    replicas, isr, leader = completed
    return change_record(
        partition,
        isr=isr,
        leader=leader,
        replicas=replicas,
        adding_replicas=(),
        removing_replicas=(),
        min_isr=min_isr,
    )


__all__ = [
    "OngoingReassignment",
    "alter_partition_reassignments",
    "complete_reassignments",
    "completed_reassignment",
    "list_partition_reassignments",
]
