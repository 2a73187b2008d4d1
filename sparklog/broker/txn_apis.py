"""A broker's part in transactions (Kafka's `KafkaApis.handleWriteTxnMarkersRequest` and
`handleDescribeProducersRequest`): it appends the COMMIT/ABORT markers the driver's transaction
coordinator sends, and describes the producers its partitions know."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from sparklog.broker.replica_base import error_code_of
from sparklog.broker.replica_manager import ReplicaManager
from sparklog.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError
from sparklog.protocol import kio_build
from sparklog.protocol.authorization import cluster_allowed, denied_topics
from sparklog.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from sparklog.security.acl import AclOperation
from sparklog.storage.producer_append_info import AppendOrigin
from sparklog.structs import TopicPartition

#: How long a marker append waits for the in-sync replicas (Kafka: request.timeout.ms).
MARKER_APPEND_TIMEOUT_MS = 30_000
CLUSTER_DENIED = ClusterAuthorizationFailedError.code


async def handle_write_txn_markers(
    request: Any, replica_manager: ReplicaManager, clock_ms: Callable[[], int]
) -> Any:
    """Append each marker to each of its partitions (acks=all, as Kafka writes markers) and
    answer every partition's error code."""

    async def write(marker: Any) -> dict[str, Any]:
        kind = ControlRecordType.COMMIT if marker.transaction_result else ControlRecordType.ABORT
        batch = build_end_txn_marker_batch(
            EndTransactionMarker(kind, int(marker.coordinator_epoch)),
            producer_id=int(marker.producer_id),
            producer_epoch=int(marker.producer_epoch),
            timestamp_ms=clock_ms(),
        )
        entries: dict[TopicPartition, bytes | None] = {
            TopicPartition(t.name, int(p)): batch
            for t in marker.topics
            for p in t.partition_indexes
        }
        results = await replica_manager.append_records(
            -1,
            MARKER_APPEND_TIMEOUT_MS,
            entries,
            origin=AppendOrigin.COORDINATOR,
            # WriteTxnMarkers v2 (KIP-890 part 2): a TV2 marker's epoch must be above the data's
            transaction_version=int(getattr(marker, "transaction_version", 0)),
        )
        topics: dict[str, list[dict[str, int]]] = {}
        for (topic, partition), result in results.items():
            topics.setdefault(topic, []).append(
                {"partition_index": partition, "error_code": result.error_code}
            )
        return {
            "producer_id": int(marker.producer_id),
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }

    if not cluster_allowed(request, AclOperation.CLUSTER_ACTION):
        # only the transaction coordinator writes markers (Kafka's handleWriteTxnMarkersRequest)
        refused = [
            {
                "producer_id": int(m.producer_id),
                "topics": [
                    {
                        "name": t.name,
                        "partitions": [
                            {"partition_index": int(p), "error_code": CLUSTER_DENIED}
                            for p in t.partition_indexes
                        ],
                    }
                    for t in m.topics
                ],
            }
            for m in request.body.markers
        ]
        return kio_build.response(request, {"markers": refused})
    answers = await asyncio.gather(*(write(m) for m in request.body.markers))
    return kio_build.response(request, {"markers": answers})


def handle_describe_producers(request: Any, replica_manager: ReplicaManager) -> Any:
    """The active producers of each partition this broker leads (READ on the topic, else
    TOPIC_AUTHORIZATION_FAILED, as Kafka's handleDescribeProducersRequest)."""
    topics = []
    denied = denied_topics(request, AclOperation.READ, (t.name for t in request.body.topics))
    for t in request.body.topics:
        partitions = []
        for p in t.partition_indexes:
            answer: dict[str, Any] = {
                "partition_index": int(p),
                "error_code": 0,
                "error_message": None,
                "active_producers": [],
            }
            if t.name in denied:
                answer["error_code"] = TopicAuthorizationFailedError.code
                partitions.append(answer)
                continue
            try:
                hosted = replica_manager.hosted(t.name, int(p))
                hosted.partition.check_leader()
                producers = hosted.log.producer_state.active_producers
                answer["active_producers"] = [
                    {
                        "producer_id": pid,
                        "producer_epoch": entry.producer_epoch,
                        "last_sequence": entry.last_seq,
                        "last_timestamp": entry.last_timestamp,
                        "coordinator_epoch": entry.coordinator_epoch,
                        "current_txn_start_offset": -1
                        if entry.current_txn_first_offset is None
                        else entry.current_txn_first_offset,
                    }
                    for pid, entry in sorted(producers.items())
                ]
            except Exception as e:  # noqa: BLE001 - becomes the partition's error
                answer["error_code"], answer["error_message"] = error_code_of(
                    e, f"describe producers of {t.name}-{p}"
                )
            partitions.append(answer)
        topics.append({"name": t.name, "partitions": partitions})
    return kio_build.response(request, {"topics": topics})
