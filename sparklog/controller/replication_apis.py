"""The controller's replication handlers (Kafka's `ControllerApis`): AlterPartition from
partition leaders, ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments
from admin clients (forwarded by brokers). Same shape as `apis.py`: kio request in, core call,
records committed, kio response out.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sparklog.controller.api_responses import alter_partition_topics
from sparklog.controller.controller_context import ControllerContext
from sparklog.controller.results import ApiError
from sparklog.errors import KafkaError
from sparklog.metadata.alter_partition import IsrChange
from sparklog.protocol.responses import Response
from sparklog.structs import TopicPartition

if TYPE_CHECKING:
    from sparklog.protocol.connection import Request

logger = logging.getLogger(__name__)


async def handle_alter_partition(server: ControllerContext, request: Request) -> Any:
    """AlterPartition v2 (`new_isr`) and v3 (`new_isr_with_epochs`, KIP-903)."""
    body, respond = request.body, Response(request)
    changes: list[IsrChange] = []
    member_epochs: dict[tuple[uuid.UUID, int], tuple[int, ...]] = {}
    for topic in body.topics:
        # A null topic id names no topic: the core answers UNKNOWN_TOPIC_ID.
        topic_id = topic.topic_id or uuid.UUID(int=0)
        for p in topic.partitions:
            with_epochs = getattr(p, "new_isr_with_epochs", None)
            if with_epochs is not None:
                isr = tuple(int(b.broker_id) for b in with_epochs)
                member_epochs[(topic_id, p.partition_index)] = tuple(
                    int(b.broker_epoch) for b in with_epochs
                )
            else:
                isr = tuple(int(b) for b in p.new_isr)
            changes.append(
                IsrChange(topic_id, p.partition_index, p.leader_epoch, p.partition_epoch, isr)
            )
    controller = server.controller
    assert controller is not None  # handlers run once the server started
    try:
        outcomes = await server.commit(
            lambda: controller.alter_partition(
                server.now_ms(),
                body.broker_id,
                body.broker_epoch,
                changes,
                member_epochs=member_epochs or None,
            )
        )
    except KafkaError as e:
        logger.info("AlterPartition from broker %d refused: %s", body.broker_id, e)
        return respond(error_code=e.code, topics=())
    return respond(error_code=0, topics=alter_partition_topics(respond, outcomes))


async def handle_elect_leaders(server: ControllerContext, request: Request) -> Any:
    """ElectLeaders v0-v2 (v0 has no election type: preferred)."""
    body, respond = request.body, Response(request)
    election_type = int(getattr(body, "election_type", 0))
    wanted = None
    if body.topic_partitions is not None:
        wanted = [
            TopicPartition(t.topic, int(p)) for t in body.topic_partitions for p in t.partitions
        ]
    controller = server.controller
    assert controller is not None  # handlers run once the server started
    try:
        results = await server.commit(lambda: controller.elect_leaders(election_type, wanted))
    except KafkaError as e:
        return respond(error_code=e.code, replica_election_results=())
    return respond(
        error_code=0,
        replica_election_results=tuple(
            respond.nested(
                "ReplicaElectionResult",
                topic=topic,
                partition_result=tuple(
                    respond.nested(
                        "PartitionResult",
                        partition_id=index,
                        error_code=error.code,
                        error_message=error.message,
                    )
                    for index, error in entries
                ),
            )
            for topic, entries in _by_topic(results)
        ),
    )


async def handle_alter_partition_reassignments(server: ControllerContext, request: Request) -> Any:
    """AlterPartitionReassignments v0-v1 (v1: allow_replication_factor_change, KIP-860)."""
    body, respond = request.body, Response(request)
    reassignments = [
        (
            TopicPartition(t.name, int(p.partition_index)),
            None if p.replicas is None else list(p.replicas),
        )
        for t in body.topics
        for p in t.partitions
    ]
    allow = bool(getattr(body, "allow_replication_factor_change", True))
    controller = server.controller
    assert controller is not None  # handlers run once the server started
    results = await server.commit(
        lambda: controller.alter_partition_reassignments(
            reassignments, allow_replication_factor_change=allow
        )
    )
    return respond(
        error_code=0,
        error_message=None,
        allow_replication_factor_change=allow,
        responses=tuple(
            respond.nested(
                "ReassignableTopicResponse",
                name=topic,
                partitions=tuple(
                    respond.nested(
                        "ReassignablePartitionResponse",
                        partition_index=index,
                        error_code=error.code,
                        error_message=error.message,
                    )
                    for index, error in entries
                ),
            )
            for topic, entries in _by_topic(results)
        ),
    )


def handle_list_partition_reassignments(server: ControllerContext, request: Request) -> Any:
    """ListPartitionReassignments v0: the reassignments in progress (of the named partitions)."""
    body, respond = request.body, Response(request)
    wanted = None
    if body.topics is not None:
        wanted = [TopicPartition(t.name, int(p)) for t in body.topics for p in t.partition_indexes]
    controller = server.controller
    assert controller is not None  # handlers run once the server started
    ongoing = controller.list_partition_reassignments(wanted)
    by_topic: dict[str, list[Any]] = {}
    for r in ongoing:
        by_topic.setdefault(r.topic, []).append(
            respond.nested(
                "OngoingPartitionReassignment",
                partition_index=r.partition,
                replicas=r.replicas,
                adding_replicas=r.adding_replicas,
                removing_replicas=r.removing_replicas,
            )
        )
    return respond(
        error_code=0,
        error_message=None,
        topics=tuple(
            respond.nested("OngoingTopicReassignment", name=name, partitions=tuple(partitions))
            for name, partitions in by_topic.items()
        ),
    )


def _by_topic(
    results: Sequence[tuple[TopicPartition, ApiError]],
) -> list[tuple[str, list[tuple[int, ApiError]]]]:
    """Per-partition results grouped by topic, topics in first-seen order."""
    grouped: dict[str, list[tuple[int, ApiError]]] = {}
    for (topic, index), error in results:
        grouped.setdefault(topic, []).append((index, error))
    return list(grouped.items())


__all__ = [
    "handle_alter_partition",
    "handle_alter_partition_reassignments",
    "handle_elect_leaders",
    "handle_list_partition_reassignments",
]
