"""The controller's topic and config admin handlers (Kafka's `ControllerApis.handleCreateTopics`,
`handleDeleteTopics`, `handleCreatePartitions`, `handleDescribeConfigs`, `handleAlterConfigs`,
`handleIncrementalAlterConfigs`): kio request in, core call, records committed, kio response
out. The controller mutation quota (KIP-599) and ACLs are applied before these run
(`ControllerApis.handle`); per-resource errors carry Kafka's codes and messages.
"""

from __future__ import annotations

from typing import Any

from sparklog.controller.api_responses import alter_configs_response, described_config
from sparklog.controller.controller_context import ControllerContext
from sparklog.controller.quorum_controller import QuorumController
from sparklog.controller.replication_control import CreateTopicResult, NewPartitions, NewTopic
from sparklog.metadata.configs import AlterConfigOp, ConfigResource, describe_topic_configs
from sparklog.protocol.connection import Request
from sparklog.protocol.responses import Response


def _controller(server: ControllerContext) -> QuorumController:
    controller = server.controller
    assert controller is not None  # requests are served once the server started
    return controller


# -- topic admin ------------------------------------------------------------------------


async def handle_create_topics(server: ControllerContext, request: Request) -> Any:
    body, respond = request.body, Response(request)
    topics = [
        NewTopic(
            name=t.name,
            num_partitions=t.num_partitions,
            replication_factor=t.replication_factor,
            assignments=tuple((a.partition_index, tuple(a.broker_ids)) for a in t.assignments),
            configs={c.name: c.value for c in t.configs},
        )
        for t in body.topics
    ]
    results = await server.commit(
        lambda: _controller(server).create_topics(topics, validate_only=body.validate_only)
    )
    requested = {t.name: t for t in topics}
    return respond(topics=tuple(_created(server, respond, r, requested[r.name]) for r in results))


def _created(
    server: ControllerContext, respond: Response, result: CreateTopicResult, topic: NewTopic
) -> Any:
    configs = None
    if result.error.is_success and respond.has("CreatableTopicConfigs"):
        entries = describe_topic_configs(
            {k: v for k, v in topic.configs.items() if v is not None}, server.config
        )
        configs = tuple(
            respond.nested(
                "CreatableTopicConfigs",
                name=e.name,
                value=e.value,
                read_only=e.read_only,
                config_source=int(e.source),
                is_sensitive=e.is_sensitive,
            )
            for e in entries
        )
    return respond.nested(
        "CreatableTopicResult",
        name=result.name,
        topic_id=result.topic_id,
        error_code=result.error.code,
        error_message=result.error.message,
        num_partitions=result.num_partitions,
        replication_factor=result.replication_factor,
        configs=configs,
    )


async def handle_delete_topics(server: ControllerContext, request: Request) -> Any:
    respond = Response(request)
    names = list(request.body.topic_names)
    results = await server.commit(lambda: _controller(server).delete_topics(names))
    return respond(
        responses=tuple(
            respond.nested(
                "DeletableTopicResult",
                name=name,
                error_code=error.code,
                error_message=error.message,
            )
            for name, error in results
        )
    )


async def handle_create_partitions(server: ControllerContext, request: Request) -> Any:
    body, respond = request.body, Response(request)
    topics = [
        NewPartitions(
            name=t.name,
            count=t.count,
            assignments=None
            if t.assignments is None
            else tuple(tuple(a.broker_ids) for a in t.assignments),
        )
        for t in body.topics
    ]
    results = await server.commit(
        lambda: _controller(server).create_partitions(topics, validate_only=body.validate_only)
    )
    return respond(
        results=tuple(
            respond.nested(
                "CreatePartitionsTopicResult",
                name=name,
                error_code=error.code,
                error_message=error.message,
            )
            for name, error in results
        )
    )


# -- configs ----------------------------------------------------------------------------


def handle_describe_configs(server: ControllerContext, request: Request) -> Any:
    body, respond = request.body, Response(request)
    include_synonyms = getattr(body, "include_synonyms", False)
    results = []
    for resource in body.resources:
        keys = resource.configuration_keys
        error, entries = _controller(server).describe_configs(
            ConfigResource(resource.resource_type, resource.resource_name),
            None if keys is None else list(keys),
            include_synonyms=include_synonyms,
        )
        results.append(
            respond.nested(
                "DescribeConfigsResult",
                error_code=error.code,
                error_message=error.message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=tuple(described_config(respond, e) for e in entries),
            )
        )
    return respond(results=tuple(results))


async def handle_alter_configs(server: ControllerContext, request: Request) -> Any:
    body = request.body
    resources = [
        (ConfigResource(r.resource_type, r.resource_name), {c.name: c.value for c in r.configs})
        for r in body.resources
    ]
    results = await server.commit(
        lambda: _controller(server).alter_configs(resources, validate_only=body.validate_only)
    )
    return alter_configs_response(request, results)


async def handle_incremental_alter_configs(server: ControllerContext, request: Request) -> Any:
    body = request.body
    resources = [
        (
            ConfigResource(r.resource_type, r.resource_name),
            [AlterConfigOp(c.name, c.config_operation, c.value) for c in r.configs],
        )
        for r in body.resources
    ]
    results = await server.commit(
        lambda: _controller(server).incremental_alter_configs(
            resources, validate_only=body.validate_only
        )
    )
    return alter_configs_response(request, results)
