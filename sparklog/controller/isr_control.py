"""AlterPartition on the controller: a partition leader's ISR proposals, validated and turned
into PartitionChange records (Kafka's `ReplicationControlManager.alterPartition`, KIP-497,
KIP-903).

Theory of operation: the leader sends the leader epoch and partition epoch it acts on plus the
ISR it wants; the controller accepts only a proposal made against the current state (so a
leader that missed a change is told to wait for metadata), from the current leader, naming an
ISR the controller agrees with (the leader in it, every member a replica that is registered,
unfenced and not shutting down). An accepted change bumps the partition epoch only: leader and
leader epoch stay. When the new ISR holds every target replica of a reassignment in progress,
the same record completes it (KIP-455) and may elect a new leader (NEW_LEADER_ELECTED).

Pure functions over a `MetadataImage` (read-only): records of one request are computed against
the image before any is applied, so a partition named twice in one request is refused.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sparklog.controller.partition_change import (
    MinIsrOf,
    change_record,
    elr_off,
    registration_after,
)
from sparklog.controller.reassignment import completed_reassignment
from sparklog.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidRequestError,
    InvalidUpdateVersionError,
    KafkaError,
    NewLeaderElectedError,
    NotLeaderOrFollowerError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from sparklog.metadata.alter_partition import IsrChange, IsrChangeOutcome
from sparklog.metadata.image import MetadataImage
from sparklog.metadata.log_records import PartitionRegistration

logger = logging.getLogger(__name__)

Record = dict[str, Any]


def alter_partition(
    image: MetadataImage,
    broker_id: int,
    changes: Sequence[IsrChange],
    is_active: Callable[[int], bool],
    member_epochs: Mapping[tuple[uuid.UUID, int], Sequence[int]] | None = None,
    min_isr_of: MinIsrOf = elr_off,
) -> tuple[list[IsrChangeOutcome], list[Record]]:
    """One outcome per change (request order) and the PartitionChange records to persist.

    `is_active(b)`: broker `b` is registered, unfenced and not in controlled shutdown.
    `member_epochs`: AlterPartition v3's broker epoch of each proposed ISR member, by
    (topic id, partition), in `new_isr` order; -1 = not checked (KIP-903).
    The caller has checked the requester's broker epoch (a top-level error).
    `min_isr_of`: KIP-966's settings (a shrink below min ISR moves the removed to the ELR).
    """
    counts = Counter((c.topic_id, c.partition) for c in changes)
    outcomes: list[IsrChangeOutcome] = []
    records: list[Record] = []
    for change in changes:
        try:
            if counts[(change.topic_id, change.partition)] > 1:
                raise InvalidRequestError(
                    f"Partition {change.topic_id}:{change.partition} appears more than once."
                )
            partition = _validate(image, broker_id, change, is_active)
            if member_epochs is not None:
                epochs = member_epochs.get((change.topic_id, change.partition), ())
                _check_member_epochs(image, change, epochs)
        except KafkaError as e:
            outcomes.append(IsrChangeOutcome(change.topic_id, change.partition, e.code, str(e)))
            continue
        new_isr = tuple(change.new_isr)
        if new_isr == partition.isr:
            outcomes.append(_outcome(partition))
            continue
        record = _isr_change(partition, new_isr, is_active, min_isr_of(partition))
        records.append(record)
        after = registration_after(partition, record)
        logger.info(
            "AlterPartition from broker %d for %s-%d: ISR %s -> %s (partition epoch %d)",
            broker_id,
            partition.topic_id,
            partition.partition,
            list(partition.isr),
            list(after.isr),
            after.partition_epoch,
        )
        if after.leader != partition.leader:
            # Kafka: the request completed a reassignment that moved the leadership away.
            error = NewLeaderElectedError(
                f"The reassignment of {partition.topic_id}:{partition.partition} completed and "
                f"elected leader {after.leader}."
            )
            outcomes.append(
                IsrChangeOutcome(partition.topic_id, partition.partition, error.code, str(error))
            )
        else:
            outcomes.append(_outcome(after))
    return outcomes, records


def _validate(
    image: MetadataImage, broker_id: int, change: IsrChange, is_active: Callable[[int], bool]
) -> PartitionRegistration:
    """The partition the change applies to; raises the Kafka error refusing it."""
    topic = image.topic_by_id(change.topic_id)
    if topic is None:
        raise UnknownTopicIdError(f"Unknown topic id {change.topic_id}.")
    partition = topic.partitions.get(change.partition)
    if partition is None:
        raise UnknownTopicOrPartitionError(
            f"Partition {topic.name}-{change.partition} does not exist."
        )
    name = f"{topic.name}-{change.partition}"
    if partition.leader != broker_id:
        # Kafka answers INVALID_REQUEST; NOT_LEADER_OR_FOLLOWER tells a deposed leader what
        # happened (retriable: it waits for the metadata naming the new leader) instead of
        # reporting a malformed request.
        raise NotLeaderOrFollowerError(
            f"Broker {broker_id} is not the leader of {name}; the leader is {partition.leader}."
        )
    if change.leader_epoch != partition.leader_epoch:
        raise FencedLeaderEpochError(
            f"The leader epoch of {name} is {partition.leader_epoch}, not {change.leader_epoch}."
        )
    if change.partition_epoch != partition.partition_epoch:
        raise InvalidUpdateVersionError(
            f"The partition epoch of {name} is {partition.partition_epoch}, not "
            f"{change.partition_epoch}."
        )
    new_isr = list(change.new_isr)
    if len(set(new_isr)) != len(new_isr):
        raise InvalidRequestError(f"The proposed ISR {new_isr} of {name} has duplicates.")
    if partition.leader not in new_isr:
        raise InvalidRequestError(
            f"The proposed ISR {new_isr} of {name} does not contain its leader {partition.leader}."
        )
    ineligible = [b for b in new_isr if b not in partition.replicas or not is_active(b)]
    if ineligible:
        raise IneligibleReplicaError(
            f"The proposed ISR {new_isr} of {name} names {ineligible}: not replicas, or not "
            "registered, fenced or shutting down."
        )
    return partition


def _check_member_epochs(image: MetadataImage, change: IsrChange, epochs: Sequence[int]) -> None:
    """KIP-903: a member whose broker epoch is not the registered one restarted (maybe
    without its data) since the leader saw it catch up, so it may not join the ISR."""
    for broker_id, epoch in zip(change.new_isr, epochs, strict=False):
        broker = image.broker(broker_id)
        if epoch != -1 and (broker is None or broker.broker_epoch != epoch):
            raise IneligibleReplicaError(
                f"Broker {broker_id} in the proposed ISR has broker epoch {epoch}, but the "
                f"registered one is {broker.broker_epoch if broker else 'none'}."
            )


def _isr_change(
    partition: PartitionRegistration,
    new_isr: Sequence[int],
    is_active: Callable[[int], bool],
    min_isr: int | None,
) -> Record:
    completed = completed_reassignment(partition, new_isr, is_active)
    if completed is None:
        return change_record(partition, isr=new_isr, leader=partition.leader, min_isr=min_isr)
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


def _outcome(p: PartitionRegistration) -> IsrChangeOutcome:
    return IsrChangeOutcome(
        p.topic_id,
        p.partition,
        leader_id=p.leader,
        leader_epoch=p.leader_epoch,
        isr=p.isr,
        partition_epoch=p.partition_epoch,
    )


__all__ = ["alter_partition"]
