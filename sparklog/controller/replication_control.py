"""Topics and partitions: create, delete, add partitions, and partition changes when brokers
are fenced or unfenced (Kafka's `ReplicationControlManager`).

Every operation validates against the current image and returns records; nothing here
mutates the image (the controller applies the records after persisting them). Validation
order and messages follow Kafka's controller: name, existence, configs, then partition counts,
replication factor and manual assignments. Errors are per topic (`ApiError`).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparklog.controller.partition_change import elect_leader, partition_change
from sparklog.controller.placement import UsableBroker, place_replicas
from sparklog.controller.results import NONE, ApiError
from sparklog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaError,
    PolicyViolationError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from sparklog.metadata.configs import (
    ControllerConfig,
    effective_topic_config,
    validate_remote_storage,
    validate_topic_configs,
)
from sparklog.metadata.image import TOPIC_RESOURCE, MetadataImage
from sparklog.metadata.log_records import CONFIG, REMOVE_TOPIC, TOPIC, PartitionRegistration
from sparklog.structs import METADATA_TOPIC, NO_LEADER

logger = logging.getLogger(__name__)

MAX_TOPIC_NAME_LENGTH = 249
#: Partitions one request may create in one topic (bounds the records of one write).
MAX_PARTITIONS_PER_REQUEST = 10_000
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A CreateTopics entry; -1 means the cluster default (or a manual assignment)."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: tuple[tuple[int, tuple[int, ...]], ...] = ()  # (partition, broker ids)
    configs: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    name: str
    error: ApiError = NONE
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """A CreatePartitions entry: grow `name` to `count` partitions."""

    name: str
    count: int
    assignments: tuple[tuple[int, ...], ...] | None = None  # one broker list per new partition


def validate_topic_name(name: str) -> None:
    """Raise InvalidTopicError naming what is wrong (Kafka's `Topic.validate`)."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError('Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} "
            f"characters, topic name: {name}"
        )
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise InvalidTopicError(
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )


class ReplicationControl:
    """Topic admin over a shared `MetadataImage` (read-only here)."""

    def __init__(
        self,
        image: MetadataImage,
        config: ControllerConfig,
        topic_id_factory: Callable[[], uuid.UUID] = uuid.uuid4,
    ) -> None:
        self.image = image
        self.config = config
        self._topic_id_factory = topic_id_factory

    # -- CreateTopics -----------------------------------------------------------------------

    def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False
    ) -> tuple[list[CreateTopicResult], list[dict[str, Any]]]:
        """Per-topic results (in request order) and the records creating the good ones."""
        counts: dict[str, int] = {}
        for topic in topics:
            counts[topic.name] = counts.get(topic.name, 0) + 1
        too_big = self._over_budget(
            sum(self._partitions_asked(t) for t in topics), len(topics), "topics"
        )
        if too_big is not None:
            return [CreateTopicResult(t.name, too_big) for t in topics], []
        results: list[CreateTopicResult] = []
        records: list[dict[str, Any]] = []
        created: dict[str, str] = {}  # normalized name -> name, for collisions in this request
        for topic in topics:
            if counts[topic.name] > 1:
                error = ApiError(InvalidRequestError.code, "Duplicate topic name.")
                results.append(CreateTopicResult(topic.name, error))
                continue
            try:
                result, topic_records = self._create_topic(topic, created, validate_only)
            except KafkaError as e:
                results.append(CreateTopicResult(topic.name, ApiError.of(e)))
                continue
            created[_normalized(topic.name)] = topic.name
            results.append(result)
            records.extend(topic_records)
        return results, records

    def _partitions_asked(self, topic: NewTopic) -> int:
        if topic.assignments:
            return len(topic.assignments)
        return topic.num_partitions if topic.num_partitions > 0 else self.config.num_partitions

    def _over_budget(self, partitions: int, topics: int, what: str) -> ApiError | None:
        """POLICY_VIOLATION when one request would write more records than one controller
        write may hold (Kafka refuses it the same way rather than failing the write)."""
        budget = self.config.controller_max_records_per_batch
        if partitions + topics <= budget:
            return None
        logger.warning(
            "refused a request creating %d partitions in %d %s: over "
            "controller.max.records.per.batch=%d",
            partitions,
            topics,
            what,
            budget,
        )
        return ApiError(
            PolicyViolationError.code,
            f"Excessively large number of partitions per request: {partitions} partitions in "
            f"{topics} {what} would need more than controller.max.records.per.batch={budget} "
            "metadata records; split the request",
        )

    def _create_topic(
        self, topic: NewTopic, created: Mapping[str, str], validate_only: bool
    ) -> tuple[CreateTopicResult, list[dict[str, Any]]]:
        if topic.name == METADATA_TOPIC:
            raise InvalidRequestError(f"Creation of internal topic {METADATA_TOPIC} is prohibited.")
        validate_topic_name(topic.name)
        if self.image.topic(topic.name) is not None:
            raise TopicAlreadyExistsError(f"Topic '{topic.name}' already exists.")
        self._check_collision(topic.name, created)
        validate_topic_configs(topic.configs, self.config.topic_defaults)
        validate_remote_storage(
            effective_topic_config(
                {k: v for k, v in topic.configs.items() if v is not None},
                self.config.topic_defaults,
            ),
            system_enabled=self.config.remote_log_storage_system_enable,
        )
        if topic.assignments:
            assignments = self._manual_assignments(topic)
        else:
            assignments = self._placed_assignments(topic)
        check_min_insync_replicas(
            topic.name,
            effective_topic_config(
                {k: v for k, v in topic.configs.items() if v is not None},
                self.config.topic_defaults,
            ).min_insync_replicas,
            len(assignments[0][0]),
        )
        topic_id = None if validate_only else self._topic_id_factory()
        result = CreateTopicResult(
            topic.name, NONE, topic_id, len(assignments), len(assignments[0][0])
        )
        if validate_only:
            return result, []
        assert topic_id is not None
        records: list[dict[str, Any]] = [
            _config_record(topic.name, name, value) for name, value in sorted(topic.configs.items())
        ]
        records.append({"type": TOPIC, "name": topic.name, "topic_id": str(topic_id)})
        for index, (replicas, isr) in enumerate(assignments):
            records.append(_new_partition(topic_id, index, replicas, isr).to_record())
        return result, records

    def _check_collision(self, name: str, created: Mapping[str, str]) -> None:
        normalized = _normalized(name)
        existing = created.get(normalized) or next(
            (t for t in self.image.topic_names() if _normalized(t) == normalized), None
        )
        if existing is not None:
            raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {existing}")

    def _placed_assignments(self, topic: NewTopic) -> list[tuple[list[int], list[int]]]:
        if topic.replication_factor < -1 or topic.replication_factor == 0:
            raise InvalidReplicationFactorError(
                "Replication factor was set to an invalid non-positive value."
            )
        if topic.num_partitions < -1 or topic.num_partitions == 0:
            raise InvalidPartitionsError(
                "Number of partitions was set to an invalid non-positive value."
            )
        num_partitions = (
            self.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
        )
        _check_partition_limit(num_partitions)
        replication_factor = (
            self.config.default_replication_factor
            if topic.replication_factor == -1
            else topic.replication_factor
        )
        placed = place_replicas(0, num_partitions, replication_factor, self._usable_brokers())
        return [(replicas, list(replicas)) for replicas in placed]

    def _manual_assignments(self, topic: NewTopic) -> list[tuple[list[int], list[int]]]:
        if topic.replication_factor != -1:
            raise InvalidRequestError(
                "A manual partition assignment was specified, but replication factor was "
                "not set to -1."
            )
        if topic.num_partitions != -1:
            raise InvalidRequestError(
                "A manual partition assignment was specified, but numPartitions was not set to -1."
            )
        by_partition: dict[int, tuple[int, ...]] = {}
        for index, broker_ids in topic.assignments:
            if index in by_partition:
                raise InvalidReplicaAssignmentError(
                    f"Found multiple manual partition assignments for partition {index}"
                )
            by_partition[index] = broker_ids
        if sorted(by_partition) != list(range(len(by_partition))):
            raise InvalidReplicaAssignmentError(
                "partitions should be a consecutive 0-based integer sequence"
            )
        _check_partition_limit(len(by_partition))
        replication_factor = None
        out = []
        for index in range(len(by_partition)):
            replicas = list(by_partition[index])
            self._validate_manual_assignment(replicas, replication_factor)
            replication_factor = len(replicas)
            out.append((replicas, self._active_isr(replicas, index)))
        return out

    def _validate_manual_assignment(
        self, replicas: Sequence[int], replication_factor: int | None
    ) -> None:
        if not replicas:
            raise InvalidReplicaAssignmentError(
                "The manual partition assignment includes an empty replica list."
            )
        seen: set[int] = set()
        for broker_id in sorted(replicas):
            if self.image.broker(broker_id) is None:
                raise InvalidReplicaAssignmentError(
                    f"The manual partition assignment includes broker {broker_id}, but no such "
                    "broker is registered."
                )
            if broker_id in seen:
                raise InvalidReplicaAssignmentError(
                    f"The manual partition assignment includes the broker {broker_id} more than once."
                )
            seen.add(broker_id)
        if replication_factor is not None and len(replicas) != replication_factor:
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes a partition with {len(replicas)} "
                "replica(s), but this is not consistent with previous partitions, which have "
                f"{replication_factor} replica(s)."
            )

    def _active_isr(self, replicas: Sequence[int], partition: int) -> list[int]:
        isr = [b for b in replicas if self.image.is_unfenced(b)]
        if not isr:
            raise InvalidReplicaAssignmentError(
                "All brokers specified in the manual partition assignment for partition "
                f"{partition} are fenced or in controlled shutdown."
            )
        return isr

    def _usable_brokers(self) -> list[UsableBroker]:
        return [UsableBroker(b.broker_id, b.rack) for b in self.image.unfenced_brokers()]

    # -- DeleteTopics -----------------------------------------------------------------------

    def delete_topics(
        self, names: Sequence[str]
    ) -> tuple[list[tuple[str, ApiError]], list[dict[str, Any]]]:
        """Per-name results (in request order) and the RemoveTopic records."""
        results: list[tuple[str, ApiError]] = []
        records: list[dict[str, Any]] = []
        for name in names:
            topic = self.image.topic(name)
            if names.count(name) > 1:
                results.append((name, ApiError(InvalidRequestError.code, "Duplicate topic name.")))
            elif topic is None:
                error = UnknownTopicOrPartitionError(
                    "This server does not host this topic-partition."
                )
                results.append((name, ApiError.of(error)))
            else:
                results.append((name, NONE))
                records.append({"type": REMOVE_TOPIC, "topic_id": str(topic.topic_id)})
        return results, records

    # -- CreatePartitions -------------------------------------------------------------------

    def create_partitions(
        self, topics: Sequence[NewPartitions], *, validate_only: bool = False
    ) -> tuple[list[tuple[str, ApiError]], list[dict[str, Any]]]:
        """Per-topic results (in request order) and the new Partition records."""
        names = [t.name for t in topics]
        existing = {
            t.name: len(image.partitions) for t in topics if (image := self.image.topic(t.name))
        }
        new = sum(max(0, t.count - existing.get(t.name, t.count)) for t in topics)
        too_big = self._over_budget(new, len(topics), "topics")
        if too_big is not None:
            return [(t.name, too_big) for t in topics], []
        results: list[tuple[str, ApiError]] = []
        records: list[dict[str, Any]] = []
        for topic in topics:
            if names.count(topic.name) > 1:
                results.append(
                    (topic.name, ApiError(InvalidRequestError.code, "Duplicate topic name."))
                )
                continue
            try:
                new_records = self._create_partitions(topic)
            except KafkaError as e:
                results.append((topic.name, ApiError.of(e)))
                continue
            results.append((topic.name, NONE))
            if not validate_only:
                records.extend(new_records)
        return results, records

    def _create_partitions(self, request: NewPartitions) -> list[dict[str, Any]]:
        topic = self.image.topic(request.name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"Unable to find a topic named {request.name}.")
        existing = len(topic.partitions)
        if request.count == existing:
            raise InvalidPartitionsError(f"Topic already has {existing} partition(s).")
        if request.count < existing:
            raise InvalidPartitionsError(
                f"The topic {request.name} currently has {existing} partition(s); "
                f"{request.count} would not be an increase."
            )
        additional = request.count - existing
        _check_partition_limit(additional)
        replication_factor = topic.replication_factor
        if request.assignments is not None:
            if len(request.assignments) != additional:
                raise InvalidReplicaAssignmentError(
                    f"Attempted to add {additional} additional partition(s), but only "
                    f"{len(request.assignments)} assignment(s) were specified."
                )
            assignments = []
            for i, broker_ids in enumerate(request.assignments):
                replicas = list(broker_ids)
                self._validate_manual_assignment(replicas, replication_factor)
                assignments.append((replicas, self._active_isr(replicas, existing + i)))
        else:
            placed = place_replicas(
                existing, additional, replication_factor, self._usable_brokers()
            )
            assignments = [(replicas, list(replicas)) for replicas in placed]
        return [
            _new_partition(topic.topic_id, existing + i, replicas, isr).to_record()
            for i, (replicas, isr) in enumerate(assignments)
        ]

    # -- broker liveness --------------------------------------------------------------------

    def on_broker_fenced(self, broker_id: int) -> list[dict[str, Any]]:
        """PartitionChanges moving `broker_id` out of every ISR and leadership."""
        return self._changes(
            (p for p in self.image.partitions() if broker_id in p.isr),
            broker_to_remove=broker_id,
        )

    def on_broker_unfenced(self, broker_id: int) -> list[dict[str, Any]]:
        """PartitionChanges electing leaders for leaderless partitions `broker_id` can lead."""
        return self._changes(
            (p for p in self.image.partitions() if not p.is_online and broker_id in p.replicas),
            broker_to_add=broker_id,
        )

    def on_broker_shutdown(self, broker_id: int, *, clean: bool) -> list[dict[str, Any]]:
        """A new incarnation of `broker_id` registers (Kafka's `handleBrokerShutdown`). With ELR
        on and no proof of a clean shutdown its log may have lost an unflushed tail (KIP-966):
        it leaves every ISR and ELR and may not be elected; else it leaves the ISRs as fenced."""
        if clean or not self.image.elr_enabled:
            return self.on_broker_fenced(broker_id)
        return self._changes(
            (p for p in self.image.partitions() if broker_id in p.isr or broker_id in p.elr),
            unclean_shutdown=broker_id,
        )

    def _changes(self, partitions: Any, **brokers: int) -> list[dict[str, Any]]:
        records = []
        for partition in partitions:
            topic = self.image.topic_by_id(partition.topic_id)
            assert topic is not None
            unclean = self.unclean_leader_election_enabled(topic.name)
            record = partition_change(
                partition,
                self.image.is_unfenced,
                unclean=unclean,
                min_isr=self.elr_min_isr(partition),
                **brokers,
            )
            if record is None:
                continue
            leader = record["leader"]
            if leader != NO_LEADER and leader != partition.leader and leader not in partition.isr:
                _log_election(topic.name, partition, leader)
            records.append(record)
        return records

    def elr_min_isr(self, partition: PartitionRegistration) -> int | None:
        """KIP-966's `MinIsrOf`: the topic's min.insync.replicas capped at its replication
        factor (Kafka's `getTopicEffectiveMinIsr`) when ELR is on, else None."""
        if not self.image.elr_enabled:
            return None
        topic = self.image.topic_by_id(partition.topic_id)
        assert topic is not None
        overrides = self.image.topic_config(topic.name)
        min_isr = effective_topic_config(overrides, self.config.topic_defaults).min_insync_replicas
        return min(min_isr, topic.replication_factor)

    def unclean_leader_election_enabled(self, topic: str) -> bool:
        """The topic's `unclean.leader.election.enable` (its override, else the default)."""
        overrides = self.image.topic_config(topic)
        return effective_topic_config(
            overrides, self.config.topic_defaults
        ).unclean_leader_election_enable


def _log_election(topic: str, partition: PartitionRegistration, leader: int) -> None:
    """A leader from outside the ISR: from the ELR (clean: it holds every committed record),
    the last known leader (KIP-966's last resort) or an unclean election."""
    where = f"{topic}-{partition.partition}: broker {leader} leads"
    state = f"ISR {list(partition.isr)}, ELR {list(partition.elr)}"
    if leader in partition.elr:
        logger.info("%s, elected from the eligible leader replicas (%s)", where, state)
    elif partition.last_known_elr == (leader,):
        logger.warning(
            "%s, the last known leader, elected with no in-sync or eligible replica left (%s): "
            "records it lost in an unclean shutdown are gone",
            where,
            state,
        )
    else:
        logger.warning(
            "unclean leader election for %s (%s); records above the old high watermark may be lost",
            where,
            state,
        )


def check_min_insync_replicas(
    topic: str, min_insync_replicas: int, replication_factor: int
) -> None:
    """Raise InvalidConfigError when acks=all writes to `topic` could never succeed."""
    if min_insync_replicas > replication_factor:
        raise InvalidConfigError(
            f"min.insync.replicas={min_insync_replicas} is larger than the replication factor "
            f"{replication_factor} of topic '{topic}', so no acks=all write could ever succeed. "
            f"Use a replication factor of at least {min_insync_replicas}, or set "
            f"min.insync.replicas to at most {replication_factor}."
        )


def _new_partition(
    topic_id: uuid.UUID, index: int, replicas: Sequence[int], isr: Sequence[int]
) -> PartitionRegistration:
    leader = elect_leader(replicas, isr, lambda _broker: True)
    return PartitionRegistration(topic_id, index, tuple(replicas), tuple(isr), leader, 0, 0)


def _config_record(topic: str, name: str, value: str | None) -> dict[str, Any]:
    return {
        "type": CONFIG,
        "resource_type": TOPIC_RESOURCE,
        "resource_name": topic,
        "name": name,
        "value": value,
    }


def _normalized(name: str) -> str:
    """Kafka warns that '.' and '_' collide in metric names, so topics may not differ only so."""
    return name.replace(".", "_")


def _check_partition_limit(count: int) -> None:
    if count > MAX_PARTITIONS_PER_REQUEST:
        raise InvalidPartitionsError(
            f"Number of partitions {count} is more than the {MAX_PARTITIONS_PER_REQUEST} "
            "one request may create."
        )


__all__ = [
    "MAX_PARTITIONS_PER_REQUEST",
    "check_min_insync_replicas",
    "METADATA_TOPIC",
    "CreateTopicResult",
    "NewPartitions",
    "NewTopic",
    "ReplicationControl",
    "validate_topic_name",
]
