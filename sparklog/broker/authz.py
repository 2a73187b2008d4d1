"""The broker's ACL checks for the APIs it serves itself (Kafka's `KafkaApis` with
`AuthHelper`), per docs/security.html "Operations and Resources on Protocols".

Each helper answers which resources of a request are refused and with what error code; the
handlers in `kafka_apis` answer those with the code and serve the rest, as Kafka does
(a partly refused Produce still writes its authorized partitions). Without an authorizer
(`RequestContext.authorizer` None) every helper returns nothing refused without looking.

Kafka's quirks kept here: an all-topics Metadata request lists only the topics the principal
may DESCRIBE, without auditing the others (`logIfDenied = false`); auto-creation needs CREATE
on the cluster or on the topic; a topic refused DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED
whether or not it exists (no existence leak); the cluster's authorized operations are 0 unless
DESCRIBE on the cluster is allowed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from sparklog.errors import (
    ClusterAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from sparklog.protocol.authorization import cluster_allowed, denied_topics
from sparklog.protocol.connection import Request
from sparklog.protocol.pipeline import authorize, authorized_operations

__all__ = ["cluster_allowed", "denied_topics"]
from sparklog.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from sparklog.structs import TopicPartition

_TOPIC = ResourceType.TOPIC
_CLUSTER = ResourceType.CLUSTER
TOPIC_DENIED = TopicAuthorizationFailedError.code
CLUSTER_DENIED = ClusterAuthorizationFailedError.code
TXN_ID_DENIED = TransactionalIdAuthorizationFailedError.code

#: v2 record batch: attributes (int16) at byte 21; bit 4 marks a transactional batch
_ATTRIBUTES = struct.Struct(">h")
_ATTRIBUTES_AT = 21
_TRANSACTIONAL = 0x10


def enabled(request: Request) -> bool:
    return request.context.authorizer is not None


def has_transactional_records(records: bytes | None) -> bool:
    """Whether a Produce partition's records are a transactional batch (Kafka's
    `RequestUtils.hasTransactionalRecords` looks at the first batch's attributes)."""
    if not records or len(records) < _ATTRIBUTES_AT + 2:
        return False
    (attributes,) = _ATTRIBUTES.unpack_from(records, _ATTRIBUTES_AT)
    return bool(attributes & _TRANSACTIONAL)


def produce_denials(
    request: Request, entries: dict[TopicPartition, bytes | None]
) -> dict[TopicPartition, int]:
    """Refused partitions of a Produce: transactional records need WRITE on the
    transactional id (else every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED), each topic
    WRITE (else TOPIC_AUTHORIZATION_FAILED) — `KafkaApis.handleProduceRequest`."""
    if request.context.authorizer is None:
        return {}
    if any(has_transactional_records(r) for r in entries.values()):
        txn_id = request.body.transactional_id
        if txn_id is None or not authorize(
            request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id
        ):
            return dict.fromkeys(entries, TXN_ID_DENIED)
    denied = denied_topics(request, AclOperation.WRITE, (tp[0] for tp in entries))
    return {tp: TOPIC_DENIED for tp in entries if tp[0] in denied}


def fetch_denials(
    request: Request, from_follower: bool, partitions: Iterable[Any]
) -> set[TopicPartition]:
    """Refused partitions of a Fetch (those of its session too): a follower needs
    CLUSTER_ACTION on the cluster, a consumer READ on each topic; both are answered
    TOPIC_AUTHORIZATION_FAILED (`KafkaApis.handleFetchRequest`)."""
    if request.context.authorizer is None:
        return set()
    parts = list(partitions)
    if from_follower:
        if cluster_allowed(request, AclOperation.CLUSTER_ACTION):
            return set()
        return {TopicPartition(p.topic, p.partition) for p in parts}
    denied = denied_topics(request, AclOperation.READ, (p.topic for p in parts))
    return {TopicPartition(p.topic, p.partition) for p in parts if p.topic in denied}


def offset_for_leader_epoch_denials(request: Request, topics: Iterable[str]) -> set[str]:
    """OffsetForLeaderEpoch: CLUSTER_ACTION on the cluster (followers) or DESCRIBE on each
    topic (`KafkaApis.handleOffsetForLeaderEpochRequest`)."""
    if request.context.authorizer is None:
        return set()
    if cluster_allowed(request, AclOperation.CLUSTER_ACTION, audit=False):
        return set()
    return denied_topics(request, AclOperation.DESCRIBE, topics)


def visible_topics(request: Request, names: list[str]) -> list[str]:
    """An all-topics Metadata answer lists only topics the principal may DESCRIBE; the others
    are left out quietly (Kafka does not audit them)."""
    if request.context.authorizer is None:
        return names
    return [
        n for n in names if authorize(request, AclOperation.DESCRIBE, _TOPIC, n, audit_denied=False)
    ]


def create_denied(request: Request, names: Iterable[str]) -> set[str]:
    """Topics a Metadata request may not auto-create: neither CREATE on the cluster (asked
    quietly) nor CREATE on the topic (Kafka's `handleTopicMetadataRequest`)."""
    names = list(names)
    if request.context.authorizer is None or not names:
        return set()
    if cluster_allowed(request, AclOperation.CREATE, audit=False):
        return set()
    return denied_topics(request, AclOperation.CREATE, names)


def denied_topic_metadata(name: str, asked_by_id: Any = None) -> dict[str, Any]:
    """A refused topic in a Metadata answer: no partitions, no authorized operations; no id
    when asked by name, and no name when asked by id (`asked_by_id`: its TopicImage), so
    neither leaks (Kafka's `handleTopicMetadataRequest`)."""
    if asked_by_id is not None:
        return {
            "error_code": TOPIC_DENIED,
            "name": None,
            "topic_id": asked_by_id.topic_id,
            "partitions": [],
        }
    return {"error_code": TOPIC_DENIED, "name": name, "topic_id": None, "partitions": []}


def cluster_operations(request: Request) -> int:
    """`cluster_authorized_operations`: omitted unless asked; 0 unless DESCRIBE on the cluster
    is allowed (Kafka's Metadata and DescribeCluster); else what the authorizer allows."""
    if (
        request.context.authorizer is not None
        and getattr(request.body, "include_cluster_authorized_operations", False)
        and not cluster_allowed(request, AclOperation.DESCRIBE, audit=False)
    ):
        return 0
    return authorized_operations(request, _CLUSTER, CLUSTER_NAME)


def idempotent_write_allowed(request: Request) -> bool:
    """InitProducerId without a transactional id: IDEMPOTENT_WRITE on the cluster or WRITE
    on some topic (KIP-679; `KafkaApis.handleInitProducerIdRequest`), else
    CLUSTER_AUTHORIZATION_FAILED."""
    authorizer = request.context.authorizer
    if authorizer is None or cluster_allowed(request, AclOperation.IDEMPOTENT_WRITE, audit=False):
        return True
    by_type = getattr(authorizer, "authorize_by_resource_type", None)
    if by_type is not None and by_type(request.context.session, AclOperation.WRITE, _TOPIC):
        return True
    return cluster_allowed(request, AclOperation.IDEMPOTENT_WRITE)  # audited this time
