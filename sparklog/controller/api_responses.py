"""Response entities of the controller's APIs that carry controller and metadata values (a
missing topic's Metadata entry, DescribeConfigs entries, AlterConfigs results, AlterPartition
topics), built with the shared version-aware `protocol.responses.Response`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparklog.controller.replication_control import validate_topic_name
from sparklog.controller.results import ApiError
from sparklog.errors import InvalidTopicError, UnknownTopicIdError, UnknownTopicOrPartitionError
from sparklog.metadata.alter_partition import IsrChangeOutcome
from sparklog.metadata.configs import ConfigEntry, ConfigResource
from sparklog.protocol.connection import Request
from sparklog.protocol.responses import Response
from sparklog.security.acl import AUTHORIZED_OPERATIONS_OMITTED, ResourceType


def missing_topic(name: str | None, topic_id: Any) -> Callable[[Response], Any]:
    """A builder of the Metadata entry for a topic that does not exist (or has a bad name)."""
    if name is None:
        code = UnknownTopicIdError.code
    else:
        try:
            validate_topic_name(name)
            code = UnknownTopicOrPartitionError.code
        except InvalidTopicError:
            code = InvalidTopicError.code

    def build(respond: Response) -> Any:
        return respond.nested(
            "MetadataResponseTopic",
            error_code=code,
            name=name,
            topic_id=topic_id,
            is_internal=False,
            partitions=(),
            topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED
            if name is None  # an unknown topic id: Kafka answers no operations for it
            else respond.authorized_operations(ResourceType.TOPIC, name),
        )

    return build


def described_config(respond: Response, entry: ConfigEntry) -> Any:
    """A DescribeConfigs result entry."""
    synonyms = tuple(
        respond.nested("DescribeConfigsSynonym", name=s.name, value=s.value, source=int(s.source))
        for s in entry.synonyms
    )
    return respond.nested(
        "DescribeConfigsResourceResult",
        name=entry.name,
        value=entry.value,
        read_only=entry.read_only,
        config_source=int(entry.source),
        is_sensitive=entry.is_sensitive,
        synonyms=synonyms,
        config_type=int(entry.config_type),
        documentation=None,
    )


def alter_configs_response(request: Request, results: list[tuple[ConfigResource, ApiError]]) -> Any:
    respond = Response(request)
    return respond(
        responses=tuple(
            respond.nested(
                "AlterConfigsResourceResponse",
                error_code=error.code,
                error_message=error.message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
            for resource, error in results
        )
    )


def alter_partition_topics(respond: Response, outcomes: list[IsrChangeOutcome]) -> tuple[Any, ...]:
    """AlterPartition response topics: outcomes grouped by topic id, in request order."""
    by_topic: dict[Any, list[IsrChangeOutcome]] = {}
    for outcome in outcomes:
        by_topic.setdefault(outcome.topic_id, []).append(outcome)
    return tuple(
        respond.nested(
            "TopicData",
            topic_id=topic_id,
            partitions=tuple(
                respond.nested(
                    "PartitionData",
                    partition_index=o.partition,
                    error_code=o.error_code,
                    leader_id=o.leader_id,
                    leader_epoch=o.leader_epoch,
                    isr=o.isr,
                    leader_recovery_state=0,
                    partition_epoch=o.partition_epoch,
                )
                for o in group
            ),
        )
        for topic_id, group in by_topic.items()
    )
