"""Leader election and partition changes (Kafka's `PartitionChangeBuilder`), as pure functions.

When a broker is fenced (lease expired, controlled shutdown, unregistered, re-registered) it
leaves every ISR it is in and loses every leadership; when it is unfenced, partitions left
without a leader elect again. An election picks the first live ISR member in assignment order
(`elect_leader`); with `unclean.leader.election.enable` a live replica outside the ISR may win
and becomes the whole ISR.

Without Eligible Leader Replicas (the `eligible.leader.replicas.version` feature at 0, clusters
created before it) the ISR never becomes empty: when the last member leaves, it stays recorded
so that it is the one elected when it returns. That trusts its log: if it lost its unflushed
tail to a power loss while it was the last member, acknowledged records go with it.

With ELR (KIP-966, as Kafka 4.1+ runs new clusters) a change is given the topic's effective
min.insync.replicas (`min_isr`, at most the replication factor). Whenever the new ISR is below
it, the members of the old ISR and ELR that leave the ISR join the ELR: the leader does not
advance the high watermark while its ISR is below min ISR, so each of them holds every committed
record. A broker that restarted without a clean shutdown (`unclean_shutdown`) may have lost its
tail, so it leaves ISR and ELR alike and is not elected. The ISR may become empty; then an ELR
member is elected (cleanly: it becomes the ISR). Once ISR and ELR are both empty, the last leader
(kept in `last_known_elr` when the partition lost its leader) is elected if it is back, an unclean
election Kafka makes even with unclean election off, so a cluster that lost power everywhere
comes back; only after that does `unclean.leader.election.enable` pick any live replica. An ISR
at or above min ISR clears ELR and last known ELR; an unclean election clears them too.

Epochs: the leader epoch bumps whenever the leader changes (also to or from -1); the partition
epoch bumps on every change. Neither ever goes backwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from sparklog.metadata.log_records import PARTITION_CHANGE, PartitionRegistration
from sparklog.structs import NO_LEADER


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


#: The effective min.insync.replicas of a partition's topic when ELR is on, else None (ELR off);
#: how the callers that build PartitionChange records learn KIP-966's settings.
MinIsrOf = Callable[[PartitionRegistration], "int | None"]


def elr_off(_partition: PartitionRegistration) -> int | None:
    """The `MinIsrOf` of a cluster without Eligible Leader Replicas."""
    return None


def partition_change(
    partition: PartitionRegistration,
    is_active: Callable[[int], bool],
    *,
    broker_to_remove: int = NO_LEADER,
    broker_to_add: int = NO_LEADER,
    unclean_shutdown: int = NO_LEADER,
    unclean: bool = False,
    min_isr: int | None = None,
) -> dict[str, Any] | None:
    """The PartitionChange record after `broker_to_remove` is fenced, `broker_to_add`
    unfenced or `unclean_shutdown` re-registered after an unclean shutdown, or None when
    nothing changes (Kafka's `generateLeaderAndIsrUpdates` + `PartitionChangeBuilder.build`).

    `is_active` says which brokers are unfenced now; `broker_to_remove` and `unclean_shutdown`
    never count as active and `broker_to_add` always does (the image still shows its old state
    while the records that change it are built). `min_isr`: None without ELR.
    """

    def acceptable(broker_id: int) -> bool:
        return (
            broker_id != broker_to_remove
            and broker_id != unclean_shutdown
            and (broker_id == broker_to_add or is_active(broker_id))
        )

    gone = (broker_to_remove, unclean_shutdown)
    isr = [r for r in partition.isr if r not in gone]
    if not isr and min_isr is None:
        isr = list(partition.isr)  # without ELR the last member stays (see module doc)
    unclean_shutdowns = () if unclean_shutdown == NO_LEADER else (unclean_shutdown,)
    elr = target_elr(partition, isr, min_isr, unclean_shutdowns)
    leader, unclean_election = partition.leader, False
    if leader == NO_LEADER or leader not in isr or not acceptable(leader):
        leader = elect_leader(partition.replicas, isr, acceptable)
        if leader == NO_LEADER and not isr and elr:
            leader = elect_leader(partition.replicas, elr, acceptable)
            if leader != NO_LEADER:  # Kafka: "using ELR", a clean election
                isr = [leader]
        if leader == NO_LEADER and not isr and not elr:
            leader = last_known_leader(partition, min_isr, acceptable)
            unclean_election = leader != NO_LEADER
        if leader == NO_LEADER and unclean:
            # A replica still being added by a reassignment never caught up: not a candidate.
            candidates = [r for r in partition.replicas if r not in partition.adding_replicas]
            leader = elect_leader(candidates, (), acceptable, unclean=True)
            unclean_election = leader != NO_LEADER
        if unclean_election:
            isr = [leader]
    record = change_record(
        partition,
        isr=isr,
        leader=leader,
        min_isr=min_isr,
        unclean_shutdowns=unclean_shutdowns,
        unclean_election=unclean_election,
    )
    return None if is_no_op(partition, record) else record


def target_elr(
    partition: PartitionRegistration,
    isr: Sequence[int],
    min_isr: int | None,
    unclean_shutdowns: Sequence[int] = (),
) -> tuple[int, ...]:
    """The ELR once the ISR becomes `isr` (Kafka's `maybePopulateTargetElr`): empty without
    ELR or with an ISR at min ISR; else the old ELR and ISR members outside `isr`, less those
    that shut down uncleanly or are no longer replicas, in assignment order."""
    if min_isr is None or len(isr) >= min_isr:
        return ()
    candidates = {*partition.elr, *partition.isr}
    return tuple(
        r
        for r in partition.replicas
        if r in candidates and r not in isr and r not in unclean_shutdowns
    )


def last_known_leader(
    partition: PartitionRegistration, min_isr: int | None, acceptable: Callable[[int], bool]
) -> int:
    """Kafka's `canElectLastKnownLeader`: with ELR on, the last leader recorded when the
    partition lost its leader, if it may lead now; else NO_LEADER."""
    if min_isr is None or len(partition.last_known_elr) != 1:
        return NO_LEADER
    last = partition.last_known_elr[0]
    return last if acceptable(last) else NO_LEADER


def is_no_op(partition: PartitionRegistration, record: dict[str, Any]) -> bool:
    """Whether `record` (from `change_record`) would leave `partition` as it is."""
    return (
        registration_after(partition, record)
        == replace(partition, partition_epoch=record["partition_epoch"])
        and record["leader"] == partition.leader
    )


def change_record(
    partition: PartitionRegistration,
    *,
    isr: Sequence[int],
    leader: int,
    replicas: Sequence[int] | None = None,
    adding_replicas: Sequence[int] | None = None,
    removing_replicas: Sequence[int] | None = None,
    min_isr: int | None = None,
    unclean_shutdowns: Sequence[int] = (),
    unclean_election: bool = False,
) -> dict[str, Any]:
    """A PartitionChange record: the leader epoch bumps when the leader changes, the
    partition epoch always. Replica fields are written only when given (absent = unchanged).

    KIP-966 fields (`min_isr` given: ELR on) follow Kafka's `PartitionChangeBuilder`: the ELR
    from `target_elr` less a member elected from it (`isr` is then that member alone), cleared
    by an unclean election; `last_known_elr` records the old leader when the partition loses
    its leader, and is cleared when one is elected. Both are written only when they change,
    and cleared when ELR is off.
    """
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
    elr, last_known = _elr_fields(
        partition, isr, leader, replicas, min_isr, unclean_shutdowns, unclean_election
    )
    if elr != partition.elr:
        record["eligible_leader_replicas"] = list(elr)
    if last_known != partition.last_known_elr:
        record["last_known_elr"] = list(last_known)
    return record


def _elr_fields(
    partition: PartitionRegistration,
    isr: Sequence[int],
    leader: int,
    replicas: Sequence[int] | None,
    min_isr: int | None,
    unclean_shutdowns: Sequence[int],
    unclean_election: bool,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if min_isr is None or unclean_election:
        elr: tuple[int, ...] = ()
    else:
        # An ELR member elected with an empty ISR left the ELR for the ISR ([leader]).
        elr = tuple(r for r in target_elr(partition, isr, min_isr, unclean_shutdowns))
        if replicas is not None:
            elr = tuple(r for r in elr if r in replicas)
    if min_isr is None:
        return elr, ()
    last_known = partition.last_known_elr
    if leader == NO_LEADER and partition.leader != NO_LEADER and not last_known:
        last_known = (partition.leader,)  # the first time the partition became leaderless
    elif leader != NO_LEADER and last_known:
        last_known = ()
    return elr, last_known


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
        tuple(record.get("eligible_leader_replicas", partition.elr)),
        tuple(record.get("last_known_elr", partition.last_known_elr)),
    )
