"""Preferred-leader balancing and ElectLeaders (KIP-460; Kafka's `maybeBalancePartitionLeaders`,
the ZooKeeper controller's `checkAndTriggerAutoLeaderRebalance`, and `electLeaders`).

Theory of operation: a partition's preferred leader is the first replica in its assignment;
placement spreads those evenly, failover moves leaders off them. With
`auto.leader.rebalance.enable`, every `leader.imbalance.check.interval.seconds` the controller
looks at each broker: of the partitions it is preferred leader of, the share it does not lead is
its imbalance; above `leader.imbalance.per.broker.percentage` percent, leadership moves back to
it wherever it is active and in the ISR (a clean election: the ISR holds every committed record).
ElectLeaders does the same on request (PREFERRED), or elects a leader for leaderless partitions
(UNCLEAN: the first active ISR member, else the first active replica).

Pure functions over a `MetadataImage`: records only, nothing applied here.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sparklog.controller.partition_change import (
    MinIsrOf,
    change_record,
    elect_leader,
    elr_off,
    last_known_leader,
)
from sparklog.controller.results import NONE, ApiError
from sparklog.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    InvalidRequestError,
    KafkaError,
    PreferredLeaderNotAvailableError,
    UnknownTopicOrPartitionError,
)
from sparklog.metadata.image import MetadataImage
from sparklog.metadata.log_records import PartitionRegistration
from sparklog.structs import NO_LEADER, TopicPartition

logger = logging.getLogger(__name__)

Record = dict[str, Any]


class ElectionType(enum.IntEnum):
    """Kafka's `ElectionType`."""

    PREFERRED = 0
    UNCLEAN = 1


def imbalanced_brokers(image: MetadataImage, percentage: int) -> set[int]:
    """Brokers that do not lead more than `percentage` % of the partitions they prefer."""
    preferred: dict[int, int] = {}
    not_leading: dict[int, int] = {}
    for p in image.partitions():
        first = p.replicas[0]
        preferred[first] = preferred.get(first, 0) + 1
        if p.leader != first:
            not_leading[first] = not_leading.get(first, 0) + 1
    return {
        broker
        for broker, total in preferred.items()
        if not_leading.get(broker, 0) * 100 > percentage * total
    }


def rebalance_leaders(
    image: MetadataImage,
    is_active: Callable[[int], bool],
    percentage: int,
    min_isr_of: MinIsrOf = elr_off,
) -> list[Record]:
    """Preferred elections for the partitions of imbalanced brokers (skipping reassignments,
    which move leaders themselves when they complete)."""
    brokers = imbalanced_brokers(image, percentage)
    records = []
    for p in image.partitions():
        if p.replicas[0] in brokers and not p.is_reassigning and _can_prefer(p, is_active):
            records.append(change_record(p, isr=p.isr, leader=p.replicas[0], min_isr=min_isr_of(p)))
            logger.info(
                "auto leader rebalance: %s-%d leader %d -> preferred %d",
                p.topic_id,
                p.partition,
                p.leader,
                p.replicas[0],
            )
    return records


def elect_leaders(
    image: MetadataImage,
    election_type: int,
    partitions: Sequence[TopicPartition] | None,
    is_active: Callable[[int], bool],
    min_isr_of: MinIsrOf = elr_off,
) -> tuple[list[tuple[TopicPartition, ApiError]], list[Record]]:
    """ElectLeaders: per-partition results and records. With `partitions` None every partition
    is tried and only those elected or failing for another reason than ELECTION_NOT_NEEDED are
    reported (Kafka's answer to "all partitions")."""
    if election_type not in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        raise InvalidRequestError(f"Unknown election type {election_type}")
    everything = partitions is None
    wanted = list(_all_partitions(image)) if partitions is None else list(dict.fromkeys(partitions))
    results: list[tuple[TopicPartition, ApiError]] = []
    records: list[Record] = []
    for tp in wanted:
        try:
            record = _elect(image, tp, ElectionType(election_type), is_active, min_isr_of)
        except ElectionNotNeededError as e:
            if not everything:
                results.append((tp, ApiError.of(e)))
            continue
        except KafkaError as e:
            results.append((tp, ApiError.of(e)))
            continue
        records.append(record)
        results.append((tp, NONE))
    return results, records


def _elect(
    image: MetadataImage,
    tp: TopicPartition,
    kind: ElectionType,
    is_active: Callable[[int], bool],
    min_isr_of: MinIsrOf,
) -> Record:
    topic = image.topic(tp[0])
    p = None if topic is None else topic.partitions.get(tp[1])
    if p is None:
        raise UnknownTopicOrPartitionError(f"The partition {tp[0]}-{tp[1]} does not exist.")
    if kind == ElectionType.PREFERRED:
        if p.leader == p.replicas[0]:
            raise ElectionNotNeededError("Leader election not needed for topic partition.")
        if not _can_prefer(p, is_active):
            raise PreferredLeaderNotAvailableError(
                f"Failed to elect leader for partition {tp[0]}-{tp[1]} under strategy "
                f"PreferredReplicaPartitionLeaderElectionStrategy: broker {p.replicas[0]} is "
                "not active or not in the ISR."
            )
        return change_record(p, isr=p.isr, leader=p.replicas[0], min_isr=min_isr_of(p))
    if p.leader != NO_LEADER:
        raise ElectionNotNeededError("Leader election not needed for topic partition.")
    leader = elect_leader(p.replicas, p.isr, is_active)
    isr = p.isr
    if leader == NO_LEADER and not p.isr and p.elr:
        leader = elect_leader(p.replicas, p.elr, is_active)  # KIP-966: clean, from the ELR
        isr = (leader,)
    unclean_election = leader == NO_LEADER
    if leader == NO_LEADER and not p.isr and not p.elr:
        leader = last_known_leader(p, min_isr_of(p), is_active)
        isr = (leader,)
    if leader == NO_LEADER:
        leader = elect_leader(p.replicas, (), is_active, unclean=True)
        isr = (leader,)
        if leader != NO_LEADER:
            logger.warning(
                "unclean leader election (ElectLeaders) for %s-%d: leader %d was not in the "
                "ISR %s; records above the old high watermark may be lost",
                tp[0],
                tp[1],
                leader,
                list(p.isr),
            )
    if leader == NO_LEADER:
        raise EligibleLeadersNotAvailableError(
            f"No replica of {tp[0]}-{tp[1]} ({list(p.replicas)}) is active."
        )
    return change_record(
        p, isr=isr, leader=leader, min_isr=min_isr_of(p), unclean_election=unclean_election
    )


def _can_prefer(p: PartitionRegistration, is_active: Callable[[int], bool]) -> bool:
    first = p.replicas[0]
    return p.leader != first and first in p.isr and is_active(first)


def _all_partitions(image: MetadataImage) -> Iterable[TopicPartition]:
    for name in image.topic_names():
        topic = image.topic(name)
        assert topic is not None
        for index in sorted(topic.partitions):
            yield TopicPartition(name, index)


__all__ = ["ElectionType", "elect_leaders", "imbalanced_brokers", "rebalance_leaders"]
