"""Consumer-group admin calls (Kafka's `listConsumerGroups`, `describeConsumerGroups`,
`listConsumerGroupOffsets`, `alterConsumerGroupOffsets`, `deleteConsumerGroups`,
`deleteConsumerGroupOffsets`) over an `AdminChannel`.

Requests that concern one group go to its coordinator, found with FindCoordinator (and found
again when the coordinator answers NOT_COORDINATOR or is loading); ListGroups goes to every node
and the answers are merged, as Kafka's admin does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from sparklog.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidRequestError,
    NotCoordinatorError,
    UnknownMemberIdError,
)
from sparklog.protocol.api_versions import ApiKey
from sparklog.structs import TopicPartition

from .admin_channel import AdminChannel, admin_error
from .metadata import BrokerNode

#: Errors that send a call back to FindCoordinator (Kafka's admin does the same).
_COORDINATOR_MOVED = frozenset(
    {
        CoordinatorLoadInProgressError.code,
        CoordinatorNotAvailableError.code,
        NotCoordinatorError.code,
    }
)


@dataclasses.dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    state: str
    protocol_type: str


@dataclasses.dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]


def find_coordinator(channel: AdminChannel, group_id: str) -> int:
    """The node id of `group_id`'s coordinator (its address known to the network)."""
    response = channel.request(
        channel.any_node(), ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": [group_id]}
    )
    (found,) = response.coordinators
    if int(found.error_code) != 0:
        raise admin_error(int(found.error_code), f"FindCoordinator for group {group_id!r}")
    channel.ensure_broker_address(int(found.node_id))
    return int(found.node_id)


def group_coordinator(channel: AdminChannel, group_id: str) -> BrokerNode:
    """The node coordinating `group_id`, with its address (kafka-consumer-groups --state)."""
    response = channel.request(
        channel.any_node(), ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": [group_id]}
    )
    (found,) = response.coordinators
    if int(found.error_code) != 0:
        raise admin_error(int(found.error_code), f"FindCoordinator for group {group_id!r}")
    return BrokerNode(int(found.node_id), found.host, int(found.port))


def group_call(
    channel: AdminChannel,
    group_id: str,
    api_key: ApiKey,
    fields: Mapping[str, Any],
    error_of: Any,
    timeout_ms: int | None = None,
) -> Any:
    """Send one request to the group's coordinator, retrying until the deadline while the
    coordinator moves or loads; `error_of(response)` picks the error code to check."""

    def attempt() -> Any:
        node = find_coordinator(channel, group_id)
        response = channel.request(node, api_key, fields, timeout_ms)
        code = int(error_of(response))
        if code in _COORDINATOR_MOVED:
            raise admin_error(code, f"{api_key.name} for group {group_id!r}")
        return response

    return channel.retry(channel.deadline(timeout_ms), attempt)


def list_groups(channel: AdminChannel, states: Iterable[str] = ()) -> list[GroupListing]:
    """Every group of the cluster (asking every node, as groups may live on any of them)."""
    response = channel.metadata.request_metadata([])
    fields = {"states_filter": list(states), "types_filter": []}
    found: dict[str, GroupListing] = {}
    for node in sorted(int(b.node_id) for b in response.brokers):
        response = channel.request(node, ApiKey.LIST_GROUPS, fields)
        if int(response.error_code) != 0:
            raise admin_error(int(response.error_code), f"ListGroups on node {node}")
        for g in response.groups:
            found[g.group_id] = GroupListing(g.group_id, g.group_state, g.protocol_type)
    return [found[g] for g in sorted(found)]


def describe_group(channel: AdminChannel, group_id: str) -> GroupDescription:
    """Members, state and each member's assignment (consumer groups' assignments decoded)."""
    from sparklog.protocol.consumer_protocol import assignment_partitions

    response = group_call(
        channel,
        group_id,
        ApiKey.DESCRIBE_GROUPS,
        {"groups": [group_id], "include_authorized_operations": False},
        lambda r: r.groups[0].error_code,
    )
    g = response.groups[0]
    members = []
    for m in g.members:
        try:
            assignment = tuple(
                TopicPartition(*tp) for tp in assignment_partitions(bytes(m.member_assignment))
            )
        except ValueError:
            assignment = ()
        members.append(
            MemberDescription(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, assignment
            )
        )
    return GroupDescription(
        g.group_id, g.group_state, g.protocol_type, g.protocol_data, tuple(members)
    )


def list_group_offsets(channel: AdminChannel, group_id: str) -> dict[TopicPartition, int]:
    """The group's committed offsets (partitions without one are left out)."""
    response = group_call(
        channel,
        group_id,
        ApiKey.OFFSET_FETCH,
        {"groups": [{"group_id": group_id, "topics": None}], "require_stable": False},
        lambda r: r.groups[0].error_code,
    )
    out = {}
    for t in response.groups[0].topics:
        for p in t.partitions:
            if int(p.error_code) != 0:
                raise admin_error(int(p.error_code), f"offset of {t.name}-{p.partition_index}")
            if int(p.committed_offset) >= 0:
                out[TopicPartition(t.name, int(p.partition_index))] = int(p.committed_offset)
    return out


def alter_group_offsets(
    channel: AdminChannel,
    group_id: str,
    offsets: Mapping[TopicPartition, int] | Mapping[tuple[str, int], int],
) -> None:
    """Commit `offsets` for a group with no active members (Kafka refuses otherwise:
    UNKNOWN_MEMBER_ID, i.e. stop the consumers first)."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "committed_offset": offset,
                "committed_leader_epoch": -1,
                "committed_metadata": "",
            }
        )
    fields = {
        "group_id": group_id,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    }

    def first_error(response: Any) -> int:
        codes = [int(p.error_code) for t in response.topics for p in t.partitions]
        return next((c for c in codes if c), 0)

    response = group_call(channel, group_id, ApiKey.OFFSET_COMMIT, fields, first_error)
    code = first_error(response)
    if code:
        hint = " (stop the group's consumers first)" if code == UnknownMemberIdError.code else ""
        raise admin_error(code, f"OffsetCommit for group {group_id!r}{hint}")


def delete_groups(channel: AdminChannel, group_ids: Iterable[str]) -> None:
    """Delete empty groups and their offsets; raises the first group's error."""
    for group_id in group_ids:
        response = group_call(
            channel,
            group_id,
            ApiKey.DELETE_GROUPS,
            {"groups_names": [group_id]},
            lambda r: r.results[0].error_code,
        )
        code = int(response.results[0].error_code)
        if code:
            raise admin_error(code, f"DeleteGroups {group_id!r}")


def delete_group_offsets(
    channel: AdminChannel, group_id: str, partitions: Iterable[tuple[str, int]]
) -> None:
    """Delete the group's committed offsets of `partitions` (not of subscribed topics)."""
    by_topic: dict[str, list[dict[str, int]]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append({"partition_index": partition})
    if not by_topic:
        raise InvalidRequestError("no partitions to delete offsets of")
    response = group_call(
        channel,
        group_id,
        ApiKey.OFFSET_DELETE,
        {
            "group_id": group_id,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        },
        lambda r: r.error_code,
    )
    if int(response.error_code):
        raise admin_error(int(response.error_code), f"OffsetDelete for group {group_id!r}")
    for t in response.topics:
        for p in t.partitions:
            if int(p.error_code):
                raise admin_error(int(p.error_code), f"OffsetDelete {t.name}-{p.partition_index}")
