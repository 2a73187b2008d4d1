"""Leader election and partition changes (Kafka's `PartitionChangeBuilder`), as pure functions.

When a broker is fenced (lease expired, controlled shutdown, unregistered, re-registered) it
leaves every ISR it is in and loses every leadership; when it is unfenced, partitions left
without a leader elect again. An election picks the first live ISR member in assignment order
(`elect_leader`); with `unclean.leader.election.enable` a live replica outside the ISR may win
and becomes the whole ISR.

The ISR never becomes empty: when the last member leaves, it stays recorded (KRaft without
ELR) so that it, holding every committed record, is the one elected when it returns. With one
replica that means: fenced -> leader -1 (offline), unfenced -> leader again.

Epochs: the leader epoch bumps whenever the leader changes (also to or from -1); the partition
epoch bumps on every change. Neither ever goes backwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sparklog.controller.image import NO_LEADER, PARTITION_CHANGE, PartitionRegistration


def elect_leader(
    replicas: Sequence[int],
    isr: Sequence[int],
    is_live: Callable[[int], bool],
    *,
    unclean: bool = False,
) -> int:
    """The first live ISR member in assignment order; with `unclean`, else the first live
    replica; NO_LEADER (-1) when there is none."""
    for replica in replicas:
        if replica in isr and is_live(replica):
            return replica
    if unclean:
        for replica in replicas:
            if is_live(replica):
                return replica
    return NO_LEADER


def partition_change(
    partition: PartitionRegistration,
    is_active: Callable[[int], bool],
    *,
    broker_to_remove: int = NO_LEADER,
    broker_to_add: int = NO_LEADER,
    unclean: bool = False,
) -> dict[str, Any] | None:
    """The PartitionChange record after `broker_to_remove` is fenced or `broker_to_add`
    unfenced, or None when nothing changes.

    `is_active` says which brokers are unfenced now; `broker_to_remove` never counts as
    active and `broker_to_add` always does (the image still shows its old state while the
    records that change it are built).
    """

    def acceptable(broker_id: int) -> bool:
        return broker_id != broker_to_remove and (
            broker_id == broker_to_add or is_active(broker_id)
        )

    isr = [r for r in partition.isr if r != broker_to_remove] or list(partition.isr)
    leader = partition.leader
    if leader == NO_LEADER or leader not in isr or not acceptable(leader):
        leader = elect_leader(partition.replicas, isr, acceptable)
        if leader == NO_LEADER and unclean:
            # A replica still being added by a reassignment never caught up: not a candidate.
            candidates = [r for r in partition.replicas if r not in partition.adding_replicas]
            leader = elect_leader(candidates, (), acceptable, unclean=True)
            if leader != NO_LEADER:
                isr = [leader]
    if leader == partition.leader and tuple(isr) == partition.isr:
        return None
    return change_record(partition, isr=isr, leader=leader)


def change_record(
    partition: PartitionRegistration,
    *,
    isr: Sequence[int],
    leader: int,
    replicas: Sequence[int] | None = None,
    adding_replicas: Sequence[int] | None = None,
    removing_replicas: Sequence[int] | None = None,
) -> dict[str, Any]:
    """A PartitionChange record: the leader epoch bumps when the leader changes, the
    partition epoch always. Replica fields are written only when given (absent = unchanged)."""
    record: dict[str, Any] = {
        "type": PARTITION_CHANGE,
        "topic_id": str(partition.topic_id),
        "partition": partition.partition,
        "leader": leader,
        "isr": list(isr),
        "leader_epoch": partition.leader_epoch + (1 if leader != partition.leader else 0),
        "partition_epoch": partition.partition_epoch + 1,
    }
    if replicas is not None:
        record["replicas"] = list(replicas)
    if adding_replicas is not None:
        record["adding_replicas"] = list(adding_replicas)
    if removing_replicas is not None:
        record["removing_replicas"] = list(removing_replicas)
    return record


def registration_after(
    partition: PartitionRegistration, record: dict[str, Any]
) -> PartitionRegistration:
    """What `partition` becomes once `record` (a PartitionChange for it) is applied."""
    return PartitionRegistration(
        partition.topic_id,
        partition.partition,
        tuple(record.get("replicas", partition.replicas)),
        tuple(record["isr"]),
        record["leader"],
        record["leader_epoch"],
        record["partition_epoch"],
        tuple(record.get("adding_replicas", partition.adding_replicas)),
        tuple(record.get("removing_replicas", partition.removing_replicas)),
    )
