"""ACL checks of the admin APIs (Kafka's `KafkaApis` / `ControllerApis` checks,
docs/security.html's table), shared by brokers and the controller.

A broker forwards admin requests under its own principal, so it checks the client's here
before forwarding (the controller checks the same for clients asking it directly): the refused resources are answered by the broker with Kafka's error
(TOPIC_AUTHORIZATION_FAILED for topics, CLUSTER_AUTHORIZATION_FAILED for the broker
resource and cluster-wide APIs, GROUP_AUTHORIZATION_FAILED for group configs), the rest is
forwarded and the two answers merged, as Kafka answers each resource of one request on its
own.

| API | needs |
|---|---|
| CreateTopics | CREATE on the cluster or on the topic |
| DeleteTopics | DELETE on the topic |
| CreatePartitions | ALTER on the topic |
| AlterConfigs, IncrementalAlterConfigs | ALTER_CONFIGS on the topic / cluster / group |
| DescribeConfigs | DESCRIBE_CONFIGS on the topic / cluster / group (brokers check it per resource as they answer; the controller here) |
| ElectLeaders, AlterPartitionReassignments | ALTER on the cluster |
| ListPartitionReassignments | DESCRIBE on the cluster |
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from sparklog.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
)
from sparklog.metadata import quota_wire, security_wire
from sparklog.metadata.configs import ConfigResourceType
from sparklog.protocol import kio_build
from sparklog.protocol.api_versions import SECURITY_METADATA_APIS, ApiKey
from sparklog.protocol.authorization import cluster_allowed
from sparklog.protocol.connection import Request
from sparklog.protocol.pipeline import authorize
from sparklog.security.acl import CLUSTER_NAME, AclOperation, ResourceType

_Op = AclOperation
#: BROKER_LOGGER config resources (Kafka's `ConfigResource.Type.BROKER_LOGGER`)
_BROKER_LOGGER = 8

#: cluster-wide APIs: the operation on the cluster they need
_CLUSTER_APIS = {
    ApiKey.ELECT_LEADERS: _Op.ALTER,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _Op.ALTER,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _Op.DESCRIBE,
    ApiKey.DESCRIBE_QUORUM: _Op.DESCRIBE,
    ApiKey.UPDATE_FEATURES: _Op.ALTER,
}
#: per-resource APIs: (the request's list field, the response's list field)
_FIELDS = {
    ApiKey.CREATE_TOPICS: ("topics", "topics"),
    ApiKey.DELETE_TOPICS: ("topics", "responses"),
    ApiKey.CREATE_PARTITIONS: ("topics", "results"),
    ApiKey.ALTER_CONFIGS: ("resources", "responses"),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: ("resources", "responses"),
    ApiKey.DESCRIBE_CONFIGS: ("resources", "results"),
}


def config_resource_check(request: Request, kind: int, name: str, operation: AclOperation) -> int:
    """0 when `operation` (ALTER_CONFIGS / DESCRIBE_CONFIGS) is allowed on a config resource,
    else its error code (Kafka's `ConfigAdminManager` / `AuthHelper` checks)."""
    if request.context.authorizer is None:
        return 0
    if kind == ConfigResourceType.TOPIC:
        allowed = authorize(request, operation, ResourceType.TOPIC, name)
        return 0 if allowed else TopicAuthorizationFailedError.code
    if kind == ConfigResourceType.GROUP:
        allowed = authorize(request, operation, ResourceType.GROUP, name)
        return 0 if allowed else GroupAuthorizationFailedError.code
    if kind in (ConfigResourceType.BROKER, _BROKER_LOGGER):
        allowed = authorize(request, operation, ResourceType.CLUSTER, CLUSTER_NAME)
        return 0 if allowed else ClusterAuthorizationFailedError.code
    return 0  # unknown types: the handler answers INVALID_REQUEST


def split(
    request: Request,
    topic_of_id: Callable[[Any], str | None],
    answer: Callable[[Request, int, str], Any] | None = None,
) -> tuple[Any, Any]:
    """(the body to forward or None, the broker's own answer for refused resources or None)
    of an admin request. `topic_of_id` names a topic by id (DeleteTopics v6+);
    `answer(request, code, message)` answers every resource of `request` with `code`
    (default: `error_response`)."""
    respond = answer or error_response
    if request.context.authorizer is None:
        return request.body, None
    key = ApiKey(request.api_key)
    operation = _CLUSTER_APIS.get(key)
    if operation is not None:
        if cluster_allowed(request, operation):
            return request.body, None
        code = ClusterAuthorizationFailedError.code
        return None, respond(request, code, _message(code))
    fields = _FIELDS.get(key)
    if fields is None:
        return request.body, None
    field, _ = fields
    body = request.body
    if key == ApiKey.DELETE_TOPICS and not getattr(body, "topics", None):
        field = "topic_names"  # v0-v5
    items = list(getattr(body, field) or ())
    codes = [_item_code(request, key, item, topic_of_id) for item in items]
    if not any(codes):
        return body, None
    refused = None
    for code in sorted({c for c in codes if c}):
        part = [i for i, c in zip(items, codes, strict=True) if c == code]
        sub = dataclasses.replace(request, body=dataclasses.replace(body, **{field: tuple(part)}))
        refused = merge(refused, respond(sub, code, _message(code)), key)
    kept = tuple(i for i, c in zip(items, codes, strict=True) if not c)
    return (dataclasses.replace(body, **{field: kept}) if kept else None), refused


def merge(response: Any, other: Any, key: ApiKey) -> Any:
    """`response` with `other`'s resources appended (either may be None)."""
    if response is None or other is None:
        return other if response is None else response
    _, field = _FIELDS[key]
    return dataclasses.replace(
        response, **{field: tuple(getattr(response, field)) + tuple(getattr(other, field))}
    )


def _item_code(
    request: Request, key: ApiKey, item: Any, topic_of_id: Callable[[Any], str | None]
) -> int:
    if key in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
        kind = int(item.resource_type)
        return config_resource_check(request, kind, str(item.resource_name), _Op.ALTER_CONFIGS)
    if key == ApiKey.DESCRIBE_CONFIGS:
        kind = int(item.resource_type)
        return config_resource_check(request, kind, str(item.resource_name), _Op.DESCRIBE_CONFIGS)
    if isinstance(item, str):  # DeleteTopics v0-v5: names
        name: str | None = item
    else:
        name = item.name
        if name is None:
            name = topic_of_id(getattr(item, "topic_id", None))
    if name is None:  # an unknown topic id: the controller answers UNKNOWN_TOPIC_ID
        return 0
    if key == ApiKey.CREATE_TOPICS:
        if cluster_allowed(request, _Op.CREATE, audit=False):
            return 0
        operation = _Op.CREATE
    elif key == ApiKey.DELETE_TOPICS:
        operation = _Op.DELETE
    else:
        operation = _Op.ALTER
    if authorize(request, operation, ResourceType.TOPIC, name):
        return 0
    return TopicAuthorizationFailedError.code


def _message(code: int) -> str:
    return {
        TopicAuthorizationFailedError.code: "Authorization failed.",
        ClusterAuthorizationFailedError.code: "Cluster authorization failed.",
        GroupAuthorizationFailedError.code: "Group authorization failed.",
    }[code]


def error_response(request: Request, code: int, message: str) -> Any:
    """An admin request's response answering every resource with `code` (a forwarded
    request that never reached the controller; resources refused by the authorizer)."""
    body = request.body
    key = ApiKey(request.api_key)
    data: dict[str, Any]
    if key in SECURITY_METADATA_APIS:
        return security_wire.refused(request, code, message)
    if key == ApiKey.ALTER_CLIENT_QUOTAS:
        return quota_wire.alter_refused(request, code, message)
    if key == ApiKey.CREATE_TOPICS:
        data = {
            "topics": [
                {
                    "name": t.name,
                    "topic_id": None,
                    "error_code": code,
                    "error_message": message,
                    "configs": None,
                }
                for t in body.topics
            ]
        }
    elif key == ApiKey.DELETE_TOPICS:
        names = getattr(body, "topic_names", ()) or [t.name for t in getattr(body, "topics", ())]
        data = {
            "responses": [{"name": n, "error_code": code, "error_message": message} for n in names]
        }
    elif key == ApiKey.CREATE_PARTITIONS:
        data = {
            "results": [
                {"name": t.name, "error_code": code, "error_message": message} for t in body.topics
            ]
        }
    elif key == ApiKey.ALTER_PARTITION_REASSIGNMENTS:
        data = {"error_code": code, "error_message": message, "responses": []}
    elif key == ApiKey.ELECT_LEADERS:
        data = {"error_code": code, "replica_election_results": []}
    elif key == ApiKey.UPDATE_FEATURES:
        data = {"error_code": code, "error_message": message, "results": []}
    elif key in (ApiKey.LIST_PARTITION_REASSIGNMENTS, ApiKey.DESCRIBE_QUORUM):
        data = {"error_code": code, "error_message": message, "topics": [], "nodes": []}
    elif key == ApiKey.DESCRIBE_CONFIGS:
        data = {
            "results": [
                {
                    "error_code": code,
                    "error_message": message,
                    "resource_type": r.resource_type,
                    "resource_name": r.resource_name,
                    "configs": [],
                }
                for r in body.resources
            ]
        }
    else:  # AlterConfigs, IncrementalAlterConfigs
        data = {
            "responses": [
                {
                    "error_code": code,
                    "error_message": message,
                    "resource_type": r.resource_type,
                    "resource_name": r.resource_name,
                }
                for r in body.resources
            ]
        }
    return kio_build.response(request, data)
