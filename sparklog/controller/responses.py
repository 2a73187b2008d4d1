"""Version-aware kio response building for the controller's handlers.

`Response(request)` builds the response entities of the request's version and keeps only the
fields that version has, so one handler serves every version a server announces (e.g.
CreateTopics v2 has no per-topic configs, Metadata v1 no throttle time).
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Callable
from dataclasses import fields
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from sparklog.controller.replication_control import validate_topic_name
from sparklog.controller.results import ApiError
from sparklog.errors import InvalidTopicError, UnknownTopicIdError, UnknownTopicOrPartitionError
from sparklog.metadata.alter_partition import IsrChangeOutcome
from sparklog.metadata.configs import ConfigEntry, ConfigResource
from sparklog.protocol import codec
from sparklog.protocol.connection import Request
from sparklog.protocol.pipeline import authorized_operations, throttle_time_ms
from sparklog.security.acl import AUTHORIZED_OPERATIONS_OMITTED, ResourceType


class Response:
    """Builds kio entities of one response version, keeping only the fields it has; the
    response's `throttle_time_ms` and `authorized_operations` come from the request pipeline
    (`sparklog.protocol.pipeline`)."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.schema = codec.response_schema(request.api_key, request.api_version)
        self.module = sys.modules[self.schema.__module__]

    def __call__(self, **values: Any) -> Any:
        throttle = i32Timedelta.parse(
            datetime.timedelta(milliseconds=throttle_time_ms(self.request))
        )
        return _make(self.schema, {**values, "throttle_time": throttle})

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """A resource's `authorized_operations` field (omitted unless the request asked)."""
        return authorized_operations(self.request, resource_type, name)

    def has(self, entity: str) -> bool:
        """Whether this version has the nested entity (e.g. CreateTopics configs from v5)."""
        return hasattr(self.module, entity)

    def nested(self, entity: str, /, **values: Any) -> Any:
        return _make(getattr(self.module, entity), values)


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def _make(cls: type, values: dict[str, Any]) -> Any:
    names = _field_names(cls)
    kept = {k: v for k, v in values.items() if k in names}
    if "error_code" in kept:
        kept["error_code"] = ErrorCode(kept["error_code"])
    return cls(**kept)


def to_ms(value: Any) -> int:
    """Milliseconds of a kio timedelta field (or a plain int)."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


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
