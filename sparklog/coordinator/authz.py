"""The group and transaction coordinator's ACL checks (Kafka's `KafkaApis` group and
transaction handlers, docs/security.html's table), under the client's principal: brokers
forward these requests in Envelopes carrying it (the Envelope itself needs the broker's
CLUSTER_ACTION, checked in `server.py`).

`check(request)` runs before the handler: None to serve the request, or the refusal to
answer with (`protocol.responses.refusal`, every resource of the request answered the code),
or a narrowed request whose refused parts `merge` adds back. `filter_response` runs after
read-only handlers: resources the principal may not DESCRIBE are answered with the error or,
for listings, left out quietly (Kafka does not audit filtered listings).

| API | needs | refused with |
|---|---|---|
| JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ConsumerGroupHeartbeat | READ on the group | 30 |
| OffsetCommit | READ on the group; READ on each topic | 30; 29 per topic |
| TxnOffsetCommit | WRITE on the transactional id; READ on the group; READ per topic | 53; 30; 29 |
| OffsetFetch | DESCRIBE on the group; DESCRIBE per topic (all-topics: filtered) | 30; 29 |
| OffsetDelete | DELETE on the group; READ per topic | 30; 29 |
| DescribeGroups, ConsumerGroupDescribe | DESCRIBE per group | 30 |
| DeleteGroups | DELETE per group | 30 |
| ListGroups | DESCRIBE on the cluster, else only groups it may DESCRIBE | - |
| FindCoordinator | DESCRIBE on the group / transactional id | 30 / 53 |
| InitProducerId | WRITE on the transactional id (none: IDEMPOTENT_WRITE or WRITE on a topic) | 53 / 31 |
| AddPartitionsToTxn v0-3 | WRITE on the transactional id; WRITE per topic | 53; 29 (others 55) |
| AddPartitionsToTxn v4+ (brokers' verification) | CLUSTER_ACTION | 31 |
| AddOffsetsToTxn | WRITE on the transactional id; READ on the group | 53; 30 |
| EndTxn, EndTxnBatch (sparklog) | WRITE on the transactional id(s) | 53 |
| DescribeTransactions | DESCRIBE per transactional id | 53 |
| ListTransactions | only transactional ids it may DESCRIBE | - |
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    OperationNotAttemptedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from sparklog.protocol import kio_build
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.authorization import cluster_allowed, denied_topics
from sparklog.protocol.connection import Request
from sparklog.protocol.pipeline import authorize
from sparklog.protocol.responses import refusal
from sparklog.security.acl import AclOperation, ResourceType

_Op = AclOperation
_GROUP, _TXN = ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
GROUP_DENIED = GroupAuthorizationFailedError.code
TOPIC_DENIED = TopicAuthorizationFailedError.code
TXN_DENIED = TransactionalIdAuthorizationFailedError.code
CLUSTER_DENIED = ClusterAuthorizationFailedError.code

#: APIs refused whole unless READ on their group
_GROUP_READ = frozenset(
    {
        ApiKey.JOIN_GROUP,
        ApiKey.SYNC_GROUP,
        ApiKey.HEARTBEAT,
        ApiKey.LEAVE_GROUP,
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
    }
)


def _group(request: Request, operation: AclOperation, group_id: str) -> bool:
    return authorize(request, operation, _GROUP, group_id)


def _txn(request: Request, operation: AclOperation, txn_id: str) -> bool:
    return authorize(request, operation, _TXN, txn_id)


def check(request: Request) -> tuple[Request | None, Any]:
    """(the request to serve or None, the answer for what was refused or None)."""
    if request.context.authorizer is None:
        return request, None
    key = ApiKey(request.api_key)
    body = request.body
    if key in _GROUP_READ:
        if not _group(request, _Op.READ, body.group_id):
            return None, refusal(request, GROUP_DENIED)
        if key == ApiKey.CONSUMER_GROUP_HEARTBEAT:
            topics = body.subscribed_topic_names or ()
            if denied_topics(request, _Op.DESCRIBE, topics):
                return None, refusal(request, TOPIC_DENIED)
        return request, None
    if key == ApiKey.OFFSET_COMMIT:
        if not _group(request, _Op.READ, body.group_id):
            return None, refusal(request, GROUP_DENIED)
        return _without_topics(request, _Op.READ)
    if key == ApiKey.TXN_OFFSET_COMMIT:
        if not _txn(request, _Op.WRITE, body.transactional_id):
            return None, refusal(request, TXN_DENIED)
        if not _group(request, _Op.READ, body.group_id):
            return None, refusal(request, GROUP_DENIED)
        return _without_topics(request, _Op.READ)
    if key == ApiKey.OFFSET_DELETE:
        if not _group(request, _Op.DELETE, body.group_id):
            return None, refusal(request, GROUP_DENIED)
        return _without_topics(request, _Op.READ)
    if key == ApiKey.OFFSET_FETCH and request.api_version < 8:
        if not _group(request, _Op.DESCRIBE, body.group_id):
            return None, refusal(request, GROUP_DENIED)
        return request, None
    if key == ApiKey.DELETE_GROUPS:
        names = list(body.groups_names)
        denied = [g for g in names if not _group(request, _Op.DELETE, g)]
        if not denied:
            return request, None
        refused = refusal(_with(request, groups_names=tuple(denied)), GROUP_DENIED)
        kept = tuple(g for g in names if g not in denied)
        return (_with(request, groups_names=kept) if kept else None), refused
    if key == ApiKey.INIT_PRODUCER_ID:
        txn_id = body.transactional_id
        if txn_id is not None:
            allowed = _txn(request, _Op.WRITE, txn_id)
            return (request, None) if allowed else (None, refusal(request, TXN_DENIED))
        return _idempotent(request)
    if key == ApiKey.ADD_PARTITIONS_TO_TXN:
        return _add_partitions(request)
    if key == ApiKey.ADD_OFFSETS_TO_TXN:
        if not _txn(request, _Op.WRITE, body.transactional_id):
            return None, refusal(request, TXN_DENIED)
        if not _group(request, _Op.READ, body.group_id):
            return None, refusal(request, GROUP_DENIED)
        return request, None
    if key == ApiKey.END_TXN:
        allowed = _txn(request, _Op.WRITE, body.transactional_id)
        return (request, None) if allowed else (None, refusal(request, TXN_DENIED))
    if key == ApiKey.SPARKLOG_END_TXN_BATCH:
        ids = dict.fromkeys(t.transactional_id for t in body.transactions)
        if all(_txn(request, _Op.WRITE, t) for t in ids):
            return request, None
        return None, refusal(request, TXN_DENIED)
    return request, None


def merge(request: Request, response: Any, refused: Any) -> Any:
    """`response` with the refused resources' answers added."""
    if refused is None:
        return response
    if response is None:
        return refused
    key = ApiKey(request.api_key)
    if key == ApiKey.OFFSET_DELETE and int(response.error_code):
        return response  # a group-level error stands alone (Kafka's getErrorResponse)
    field = "results" if key == ApiKey.DELETE_GROUPS else "topics"
    return dataclasses.replace(
        response, **{field: tuple(getattr(response, field)) + tuple(getattr(refused, field))}
    )


def _with(request: Request, **fields: Any) -> Request:
    return dataclasses.replace(request, body=dataclasses.replace(request.body, **fields))


def _without_topics(request: Request, operation: AclOperation) -> tuple[Request | None, Any]:
    """OffsetCommit, TxnOffsetCommit, OffsetDelete: topics refused `operation` answer
    TOPIC_AUTHORIZATION_FAILED per partition, the others are served."""
    topics = list(request.body.topics)
    denied = denied_topics(request, operation, (t.name for t in topics))
    if not denied:
        return request, None
    refused_topics = tuple(t for t in topics if t.name in denied)
    refused = refusal(_with(request, topics=refused_topics), TOPIC_DENIED)
    kept = tuple(t for t in topics if t.name not in denied)
    if ApiKey(request.api_key) == ApiKey.OFFSET_DELETE:
        # Kafka asks the coordinator even with no topic left: a group error (unknown group,
        # not empty) answers the request alone, the refused topics dropped (`merge`)
        return _with(request, topics=kept), _offset_delete_refusal(request, refused_topics)
    return (_with(request, topics=kept) if kept else None), refused


def _offset_delete_refusal(request: Request, topics: tuple[Any, ...]) -> Any:
    # refusal() answers OffsetDelete with a group-level code; here it is per partition
    return kio_build.response(
        request,
        {
            "error_code": 0,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {"partition_index": p.partition_index, "error_code": TOPIC_DENIED}
                        for p in t.partitions
                    ],
                }
                for t in topics
            ],
        },
    )


def _idempotent(request: Request) -> tuple[Request | None, Any]:
    if cluster_allowed(request, _Op.IDEMPOTENT_WRITE, audit=False):
        return request, None
    authorizer = request.context.authorizer
    by_type = getattr(authorizer, "authorize_by_resource_type", None)
    if by_type is not None and by_type(request.context.session, _Op.WRITE, ResourceType.TOPIC):
        return request, None
    cluster_allowed(request, _Op.IDEMPOTENT_WRITE)  # audit the denial
    return None, refusal(request, CLUSTER_DENIED)


def _add_partitions(request: Request) -> tuple[Request | None, Any]:
    body = request.body
    if request.api_version >= 4:
        # v4+ is the brokers' produce-time verification (KIP-890): inter-broker only
        if cluster_allowed(request, _Op.CLUSTER_ACTION):
            return request, None
        return None, refusal(request, CLUSTER_DENIED)
    if not _txn(request, _Op.WRITE, body.v3_and_below_transactional_id):
        return None, refusal(request, TXN_DENIED)
    topics = list(body.v3_and_below_topics)
    denied = denied_topics(request, _Op.WRITE, (t.name for t in topics))
    if not denied:
        return request, None
    # Kafka: the refused topics answer 29, the others OPERATION_NOT_ATTEMPTED; nothing added
    return None, kio_build.response(
        request,
        {
            "results_by_topic_v3_and_below": [
                {
                    "name": t.name,
                    "results_by_partition": [
                        {
                            "partition_index": p,
                            "partition_error_code": TOPIC_DENIED
                            if t.name in denied
                            else OperationNotAttemptedError.code,
                        }
                        for p in t.partitions
                    ],
                }
                for t in topics
            ]
        },
    )


# -- after the handler: what the principal may see ------------------------------------------


def filter_response(request: Request, response: Any) -> Any:
    """Read-only answers narrowed to what the principal may DESCRIBE."""
    if request.context.authorizer is None or response is None:
        return response
    key = ApiKey(request.api_key)
    if key == ApiKey.LIST_GROUPS:
        if cluster_allowed(request, _Op.DESCRIBE, audit=False):
            return response
        groups = tuple(
            g
            for g in response.groups
            if authorize(request, _Op.DESCRIBE, _GROUP, g.group_id, audit_denied=False)
        )
        return dataclasses.replace(response, groups=groups)
    if key == ApiKey.LIST_TRANSACTIONS:
        states = tuple(
            t
            for t in response.transaction_states
            if authorize(request, _Op.DESCRIBE, _TXN, t.transactional_id, audit_denied=False)
        )
        return dataclasses.replace(response, transaction_states=states)
    if key in (ApiKey.DESCRIBE_GROUPS, ApiKey.CONSUMER_GROUP_DESCRIBE):
        return _replace_denied(request, response, "groups", "group_id", _GROUP, GROUP_DENIED)
    if key == ApiKey.DESCRIBE_TRANSACTIONS:
        return _replace_denied(
            request, response, "transaction_states", "transactional_id", _TXN, TXN_DENIED
        )
    if key == ApiKey.FIND_COORDINATOR:
        return _find_coordinator(request, response)
    if key == ApiKey.OFFSET_FETCH:
        return _offset_fetch(request, response)
    return response


def _replace_denied(
    request: Request, response: Any, field: str, id_field: str, kind: ResourceType, code: int
) -> Any:
    """Entries the principal may not DESCRIBE answered `code`, taken from `refusal`'s
    shape so no field of the real answer leaks."""
    entries = list(getattr(response, field))
    denied = {
        getattr(e, id_field)
        for e in entries
        if not authorize(request, _Op.DESCRIBE, kind, getattr(e, id_field))
    }
    if not denied:
        return response
    refused = {getattr(e, id_field): e for e in getattr(refusal(request, code), field)}
    return dataclasses.replace(
        response,
        **{
            field: tuple(
                refused[getattr(e, id_field)] if getattr(e, id_field) in denied else e
                for e in entries
            )
        },
    )


def _find_coordinator(request: Request, response: Any) -> Any:
    def denied_code(key_type: int, key: str) -> int:
        if key_type == 1:
            return 0 if _txn(request, _Op.DESCRIBE, key) else TXN_DENIED
        return 0 if _group(request, _Op.DESCRIBE, key) else GROUP_DENIED

    def refused(entry: Any, code: int) -> Any:
        fields: dict[str, Any] = {"error_code": ErrorCode(code), "host": "", "node_id": -1}
        fields["port"] = -1
        if hasattr(entry, "error_message"):
            fields["error_message"] = "Not authorized."
        return dataclasses.replace(entry, **fields)

    key_type = int(getattr(request.body, "key_type", 0))
    if request.api_version >= 4:
        coordinators = tuple(
            refused(c, code) if (code := denied_code(key_type, c.key)) else c
            for c in response.coordinators
        )
        return dataclasses.replace(response, coordinators=coordinators)
    code = denied_code(key_type, request.body.key)
    return refused(response, code) if code else response


def _offset_fetch(request: Request, response: Any) -> Any:
    """OffsetFetch: a group it may not DESCRIBE answers 30 (v8+: per group); topics it may
    not DESCRIBE answer 29 per partition when named, and are left out of all-topics
    fetches (Kafka's `handleOffsetFetchRequest`)."""
    if request.api_version < 8:
        named = request.body.topics is not None
        return dataclasses.replace(
            response, topics=_offset_fetch_topics(request, response.topics, named)
        )
    named_by_group = {g.group_id: g.topics is not None for g in request.body.groups}
    groups = []
    for group in response.groups:
        if not _group(request, _Op.DESCRIBE, group.group_id):
            group = dataclasses.replace(group, error_code=ErrorCode(GROUP_DENIED), topics=())
        else:
            named = named_by_group.get(group.group_id, True)
            group = dataclasses.replace(
                group, topics=_offset_fetch_topics(request, group.topics, named)
            )
        groups.append(group)
    return dataclasses.replace(response, groups=tuple(groups))


def _offset_fetch_topics(request: Request, topics: Any, named: bool) -> tuple[Any, ...]:
    topics = tuple(topics)
    denied = denied_topics(request, _Op.DESCRIBE, (t.name for t in topics), audit=named)
    if not denied:
        return topics
    if not named:
        return tuple(t for t in topics if t.name not in denied)
    return tuple(
        dataclasses.replace(
            t,
            partitions=tuple(
                dataclasses.replace(
                    p, committed_offset=-1, metadata=None, error_code=ErrorCode(TOPIC_DENIED)
                )
                for p in t.partitions
            ),
        )
        if t.name in denied
        else t
        for t in topics
    )
