"""The controller's ACL checks (Kafka's `ControllerApis`): broker-only RPCs need the
inter-broker principal's CLUSTER_ACTION on the cluster (UnregisterBroker, an operator's call,
ALTER), admin APIs asked of the controller directly need what they need on a broker
(`metadata.admin_authz`), and Metadata shows only topics the principal may DESCRIBE.

Without this an unauthenticated client could send UnregisterBroker or BrokerHeartbeat
(want_fence) and take brokers out of the cluster; with an authorizer it gets
CLUSTER_AUTHORIZATION_FAILED and nothing is written.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError
from sparklog.metadata import admin_authz
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.authorization import cluster_allowed
from sparklog.protocol.connection import Request
from sparklog.protocol.pipeline import authorize
from sparklog.protocol.responses import Response
from sparklog.security.acl import AclOperation, ResourceType

_Op = AclOperation
#: what each broker RPC needs on the cluster (the metadata log's Fetch and ListOffsets are
#: the brokers' metadata followers, as Kafka's raft Fetch)
BROKER_RPCS = {
    ApiKey.BROKER_REGISTRATION: _Op.CLUSTER_ACTION,
    ApiKey.BROKER_HEARTBEAT: _Op.CLUSTER_ACTION,
    ApiKey.ALTER_PARTITION: _Op.CLUSTER_ACTION,
    ApiKey.ALLOCATE_PRODUCER_IDS: _Op.CLUSTER_ACTION,
    ApiKey.FETCH: _Op.CLUSTER_ACTION,
    ApiKey.LIST_OFFSETS: _Op.CLUSTER_ACTION,
    ApiKey.UNREGISTER_BROKER: _Op.ALTER,
    ApiKey.SPARKLOG_QUOTA_USAGE: _Op.CLUSTER_ACTION,
    ApiKey.ENVELOPE: _Op.CLUSTER_ACTION,  # only brokers speak for clients (KIP-590)
}
_DENIED = ClusterAuthorizationFailedError.code
_MESSAGE = "Cluster authorization failed."


def check(request: Request) -> tuple[Request | None, Any]:
    """(the request to serve, possibly with refused resources removed, or None; the answer
    for what was refused, or None)."""
    if request.context.authorizer is None:
        return request, None
    key = ApiKey(request.api_key)
    operation = BROKER_RPCS.get(key)
    if operation is not None:
        if cluster_allowed(request, operation):
            return request, None
        return None, _broker_rpc_refusal(request, key)
    body, refused = admin_authz.split(request, lambda _topic_id: None)
    if body is None:
        return None, refused
    return (request if body is request.body else dataclasses.replace(request, body=body)), refused


def merge(request: Request, response: Any, refused: Any) -> Any:
    return admin_authz.merge(response, refused, ApiKey(request.api_key))


def _broker_rpc_refusal(request: Request, key: ApiKey) -> Any:
    respond = Response(request)
    if key == ApiKey.BROKER_REGISTRATION:
        return respond(error_code=_DENIED, broker_epoch=-1)
    if key == ApiKey.BROKER_HEARTBEAT:
        return respond(
            error_code=_DENIED, is_caught_up=False, is_fenced=True, should_shut_down=False
        )
    if key == ApiKey.UNREGISTER_BROKER:
        return respond(error_code=_DENIED, error_message=_MESSAGE)
    if key == ApiKey.ALLOCATE_PRODUCER_IDS:
        return respond(error_code=_DENIED, producer_id_start=-1, producer_id_len=0)
    if key == ApiKey.ALTER_PARTITION:
        return respond(error_code=_DENIED, topics=())
    if key == ApiKey.FETCH:
        return respond(error_code=_DENIED, session_id=0, responses=())
    if key == ApiKey.SPARKLOG_QUOTA_USAGE:
        return respond(error_code=_DENIED, default_share=1.0, shares=())
    if key == ApiKey.ENVELOPE:
        return respond(error_code=_DENIED, response_data=None)
    # ListOffsets: every partition refused
    return respond(
        topics=tuple(
            respond.nested(
                "ListOffsetsTopicResponse",
                name=t.name,
                partitions=tuple(
                    respond.nested(
                        "ListOffsetsPartitionResponse",
                        partition_index=p.partition_index,
                        error_code=_DENIED,
                        timestamp=-1,
                        offset=-1,
                        leader_epoch=-1,
                    )
                    for p in t.partitions
                ),
            )
            for t in request.body.topics
        )
    )


def filter_metadata(request: Request, response: Any) -> Any:
    """A Metadata answer as the principal may see it: all-topics requests list only topics
    it may DESCRIBE (quietly), named topics it may not are TOPIC_AUTHORIZATION_FAILED."""
    if request.context.authorizer is None:
        return response
    listed = request.body.topics is None
    topics = []
    for topic in response.topics:
        name = topic.name
        if name is None or authorize(
            request, _Op.DESCRIBE, ResourceType.TOPIC, name, audit_denied=not listed
        ):
            topics.append(topic)
        elif not listed:
            topics.append(
                dataclasses.replace(
                    topic,
                    error_code=ErrorCode(TopicAuthorizationFailedError.code),
                    topic_id=uuid.UUID(int=0),
                    partitions=(),
                    topic_authorized_operations=-(2**31),
                )
            )
    return dataclasses.replace(response, topics=tuple(topics))
