"""Partition reassignment for the admin client (KIP-455; Kafka's
`Admin.alterPartitionReassignments` / `listPartitionReassignments`).

The requests go to the controller through any broker (brokers forward them), over the admin
client's `AdminChannel`; `AdminClient` keeps thin methods that call these functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparklog.protocol.api_versions import ApiKey
from sparklog.structs import TopicPartition

from .admin_channel import AdminChannel


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """A reassignment in progress: the widened replica list and what is added / removed."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


def alter_partition_reassignments(
    channel: AdminChannel,
    reassignments: Mapping[tuple[str, int], Sequence[int] | None],
    timeout_ms: int | None,
) -> None:
    """Start (a broker list) or cancel (None) reassignments; raises the first partition's
    error (e.g. InvalidReplicaAssignmentError, NoReassignmentInProgressError)."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), replicas in reassignments.items():
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": int(partition),
                "replicas": None if replicas is None else [int(b) for b in replicas],
            }
        )
    fields = {
        "timeout": channel.timeout_field(timeout_ms),
        "allow_replication_factor_change": True,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    }

    def results(response: Any) -> Iterable[tuple[str, Any, str | None]]:
        if int(response.error_code) != 0:
            yield "request", response.error_code, response.error_message
        for topic in response.responses:
            for p in topic.partitions:
                yield f"{topic.name}-{p.partition_index}", p.error_code, p.error_message

    channel.controller_call(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS, fields, timeout_ms, results, "partition"
    )
    channel.metadata.request_update()


def list_partition_reassignments(
    channel: AdminChannel,
    partitions: Iterable[tuple[str, int]] | None,
    timeout_ms: int | None,
) -> dict[TopicPartition, PartitionReassignment]:
    """The reassignments in progress (of `partitions`, or all)."""
    topics = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(int(partition))
        topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
    fields = {"timeout": channel.timeout_field(timeout_ms), "topics": topics}
    found: dict[TopicPartition, PartitionReassignment] = {}

    def results(response: Any) -> Iterable[tuple[str, Any, str | None]]:
        found.clear()
        yield "request", response.error_code, response.error_message
        for topic in response.topics:
            for p in topic.partitions:
                found[TopicPartition(topic.name, int(p.partition_index))] = PartitionReassignment(
                    tuple(int(b) for b in p.replicas),
                    tuple(int(b) for b in p.adding_replicas),
                    tuple(int(b) for b in p.removing_replicas),
                )

    channel.controller_call(
        ApiKey.LIST_PARTITION_REASSIGNMENTS, fields, timeout_ms, results, "partition"
    )
    return dict(sorted(found.items()))


__all__ = [
    "PartitionReassignment",
    "alter_partition_reassignments",
    "list_partition_reassignments",
]
