"""Replica placement: which brokers host each new partition (Kafka's `ReplicaPlacer`).

Deterministic striping over the usable (unfenced) brokers sorted by id: partition `i`'s leader
is broker `i mod n` and replica `j` is broker `(i + j) mod n`, so leaders spread evenly and a
topic grown with CreatePartitions continues the same stripe.

Rack awareness (when any broker has a rack): brokers are first interleaved across racks
(racks sorted, then one broker of each rack in turn, like Kafka's
`AdminUtils.getRackAlternatedBrokerList`), and each follower is the next broker in that order
whose rack the partition does not use yet; once every rack holds a replica, any unused broker
may follow. With evenly sized racks this is exactly the `(i + j) mod n` stripe over the
interleaved list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sparklog.errors import InvalidReplicationFactorError


@dataclass(frozen=True, slots=True)
class UsableBroker:
    """A broker that can take new replicas (Kafka's `UsableBroker`)."""

    broker_id: int
    rack: str | None = None


def place_replicas(
    start_partition: int,
    num_partitions: int,
    replication_factor: int,
    brokers: Sequence[UsableBroker],
) -> list[list[int]]:
    """Replica lists (leader first) for partitions start_partition .. start+num-1.

    Raises InvalidReplicationFactorError when there are fewer usable brokers than replicas.
    """
    assert num_partitions >= 0 and start_partition >= 0
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        # Kafka's `StripedReplicaPlacer` wording; the brokers counted are the unfenced ones.
        raise InvalidReplicationFactorError(
            f"Unable to replicate the partition {replication_factor} time(s): The target "
            f"replication factor of {replication_factor} cannot be reached because only "
            f"{len(brokers)} broker(s) are registered."
        )
    ordered = sorted(brokers, key=lambda b: b.broker_id)
    if any(b.rack is not None for b in ordered):
        ordered = rack_alternated(ordered)
        racks = {b.rack for b in ordered}
        return [
            _place_rack_aware(p, replication_factor, ordered, len(racks))
            for p in range(start_partition, start_partition + num_partitions)
        ]
    n = len(ordered)
    return [
        [ordered[(p + j) % n].broker_id for j in range(replication_factor)]
        for p in range(start_partition, start_partition + num_partitions)
    ]


def rack_alternated(brokers: Sequence[UsableBroker]) -> list[UsableBroker]:
    """Brokers interleaved by rack: first of each rack (racks sorted), then second of each, ..."""
    by_rack: dict[str, list[UsableBroker]] = {}
    for broker in sorted(brokers, key=lambda b: b.broker_id):
        by_rack.setdefault(broker.rack or "", []).append(broker)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    out: list[UsableBroker] = []
    for i in range(max(len(c) for c in columns)):
        out.extend(column[i] for column in columns if i < len(column))
    return out


def _place_rack_aware(
    partition: int, replication_factor: int, ordered: Sequence[UsableBroker], rack_count: int
) -> list[int]:
    n = len(ordered)
    leader = ordered[partition % n]
    replicas = [leader.broker_id]
    racks_used = {leader.rack}
    for k in range(1, n):
        if len(replicas) == replication_factor:
            break
        candidate = ordered[(partition + k) % n]
        if candidate.rack in racks_used and len(racks_used) < rack_count:
            continue
        replicas.append(candidate.broker_id)
        racks_used.add(candidate.rack)
    # Skipped brokers fill the remaining slots once every rack is used.
    for k in range(1, n):
        if len(replicas) == replication_factor:
            break
        broker_id = ordered[(partition + k) % n].broker_id
        if broker_id not in replicas:
            replicas.append(broker_id)
    assert len(replicas) == replication_factor and len(set(replicas)) == replication_factor
    return replicas
