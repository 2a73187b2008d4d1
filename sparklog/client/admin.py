"""The admin client: topics, partitions, configs, offsets, records, cluster (Kafka's `Admin`).

Blocking calls; each retries retriable errors (a lost connection, NOT_CONTROLLER, a moving
leader) with `retry.backoff.ms` until `default.api.timeout.ms` (or the call's `timeout_ms`),
then raises. Broker errors are raised as `sparklog.errors` exceptions carrying the broker's
message and naming the topic or partition. `list_offsets` is shared with the consumer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sparklog.errors import (
    KafkaError,
    LeaderNotAvailableError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from sparklog.protocol.api_versions import ApiKey
from sparklog.structs import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    IsolationLevel,
    TopicPartition,
)

from . import admin_groups, admin_reassignments
from .admin_channel import AdminChannel, admin_error, raise_first, retry_until
from .admin_groups import GroupDescription, GroupListing
from .admin_quotas import AdminQuotaCalls
from .admin_reassignments import PartitionReassignment
from .admin_security import AdminSecurityCalls
from .broker_connection import now_ms
from .config import admin_config
from .metadata import (
    REFRESH_ERROR_CODES,
    BrokerNode,
    Cluster,
    Metadata,
    PartitionInfo,
    group_by_leader,
)
from .network import NetworkClient

_RESOURCE_TYPES = {"topic": 2, "broker": 4, "broker_logger": 8, "group": 32}
_RESOURCE_NAMES = {v: k for k, v in _RESOURCE_TYPES.items()}
_OPS = {"set": 0, "delete": 1, "append": 2, "subtract": 3}
_CONFIG_SOURCES = {
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create; -1 partitions/replication factor take the broker defaults."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)
    replica_assignment: Mapping[int, list[int]] | None = None


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: Any
    is_internal: bool
    partitions: tuple[PartitionInfo, ...]


class ConfigResource(NamedTuple):
    """A config resource: type "topic", "broker" or "group" and its name (a broker's is its
    id)."""

    type: str
    name: str


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: str
    read_only: bool
    is_sensitive: bool


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    """An incremental config change: op "set", "delete", "append" or "subtract"."""

    name: str
    value: str | None
    op: str = "set"


@dataclass(frozen=True, slots=True)
class OffsetAndTimestamp:
    """An offset lookup's answer; offset -1 when no record matches (e.g. a later timestamp)."""

    offset: int
    timestamp: int
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerNode, ...]


def list_offsets(
    network: NetworkClient,
    metadata: Metadata,
    specs: Mapping[TopicPartition, int] | Mapping[TopicPartition | tuple[str, int], int],
    *,
    isolation_level: int,
    deadline_ms: int,
) -> dict[TopicPartition, OffsetAndTimestamp]:
    """ListOffsets at each partition's leader: a timestamp, or EARLIEST/LATEST/MAX_TIMESTAMP."""
    remaining = {TopicPartition(*tp): ts for tp, ts in specs.items()}
    results: dict[TopicPartition, OffsetAndTimestamp] = {}
    metadata.add_topics(tp.topic for tp in remaining)

    def attempt() -> None:
        by_node, unknown = group_by_leader(_cluster_for(metadata, remaining), remaining)
        futures = []
        for node, tps in by_node.items():
            topics: dict[str, list[dict]] = {}
            for tp in tps:
                topics.setdefault(tp.topic, []).append(
                    {
                        "partition_index": tp.partition,
                        "current_leader_epoch": -1,
                        "timestamp": remaining[tp],
                    }
                )
            fields = {
                "replica_id": -1,
                "isolation_level": isolation_level,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            }
            futures.append(network.send(node, ApiKey.LIST_OFFSETS, fields))
        retry: KafkaError | None = None
        for future in futures:
            try:
                response = future.result()
            except KafkaError as e:
                retry = e
                continue
            for topic in response.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, int(p.partition_index))
                    code = int(p.error_code)
                    if code == 0:
                        results[tp] = OffsetAndTimestamp(
                            int(p.offset), int(p.timestamp), int(getattr(p, "leader_epoch", -1))
                        )
                        remaining.pop(tp, None)
                    elif code in REFRESH_ERROR_CODES or error_for_code(code).retriable:
                        retry = admin_error(code, f"{tp.topic}-{tp.partition}")
                    else:
                        raise admin_error(code, f"{tp.topic}-{tp.partition}")
        if unknown or retry is not None:
            metadata.request_update()
            raise retry or admin_error(5, ", ".join(f"{tp.topic}-{tp.partition}" for tp in unknown))

    retry_until(deadline_ms, metadata.state.retry_backoff_ms, attempt)
    return results


def _cluster_for(metadata: Metadata, partitions: Iterable[TopicPartition]) -> Cluster:
    """Fresh-enough metadata for `partitions`; raises when a topic or partition does not exist."""
    if metadata.state.time_to_next_update_ms(now_ms()) == 0:
        metadata.refresh()
    cluster = metadata.cluster
    for tp in partitions:
        code = cluster.topic_errors.get(tp.topic)
        if code is not None and code != LeaderNotAvailableError.code:
            raise admin_error(code, f"topic {tp.topic!r}", final=True)
        count = cluster.partition_count(tp.topic)
        if count is not None and tp.partition >= count:
            error = UnknownTopicOrPartitionError(
                f"partition {tp.partition} of topic {tp.topic!r} does not exist ({count} partitions)"
            )
            error.retriable = False
            raise error
    return cluster


class AdminClient(AdminSecurityCalls, AdminQuotaCalls):
    """Blocking cluster administration over the Kafka protocol. Thread-safe."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = admin_config(config)
        self._channel = AdminChannel(self.config)
        self._network = self._channel.network
        self._metadata = self._channel.metadata

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    # ------------------------------------------------------------------ topics

    def create_topics(
        self,
        topics: Iterable[NewTopic | str],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        """Create topics; raises the first topic's error (e.g. TopicAlreadyExistsError)."""
        new = [NewTopic(t) if isinstance(t, str) else t for t in topics]
        fields = {
            "topics": [
                {
                    "name": t.name,
                    "num_partitions": t.num_partitions,
                    "replication_factor": t.replication_factor,
                    "assignments": [
                        {"partition_index": p, "broker_ids": list(ids)}
                        for p, ids in (t.replica_assignment or {}).items()
                    ],
                    "configs": [{"name": k, "value": v} for k, v in t.configs.items()],
                }
                for t in new
            ],
            "timeout": self._channel.timeout_field(timeout_ms),
            "validate_only": validate_only,
        }

        self._channel.controller_call(
            ApiKey.CREATE_TOPICS,
            fields,
            timeout_ms,
            lambda r: ((t.name, t.error_code, t.error_message) for t in r.topics),
            "topic",
            lambda f, names: {**f, "topics": [t for t in f["topics"] if t["name"] in names]},
        )
        self._metadata.request_update()

    def delete_topics(self, names: Iterable[str], *, timeout_ms: int | None = None) -> None:
        """Delete topics; raises the first error (UnknownTopicOrPartitionError when missing)."""
        fields = {"topic_names": list(names), "timeout": self._channel.timeout_field(timeout_ms)}

        self._channel.controller_call(
            ApiKey.DELETE_TOPICS,
            fields,
            timeout_ms,
            lambda r: (
                (x.name, x.error_code, getattr(x, "error_message", None)) for x in r.responses
            ),
            "topic",
            lambda f, names: {**f, "topic_names": [t for t in f["topic_names"] if t in names]},
        )
        self._metadata.request_update()

    def list_topics(
        self, *, include_internal: bool = False, timeout_ms: int | None = None
    ) -> list[str]:
        """Names of all topics, sorted."""
        response = self._channel.retry(
            self._channel.deadline(timeout_ms), lambda: self._metadata.request_metadata(None)
        )
        return sorted(t.name for t in response.topics if include_internal or not t.is_internal)

    def describe_topics(
        self, names: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, TopicDescription]:
        """Partitions, leaders, replicas and ISRs of `names`; a missing topic raises."""
        names = list(names)
        response = self._channel.retry(
            self._channel.deadline(timeout_ms), lambda: self._metadata.request_metadata(names)
        )
        cluster = Cluster.from_response(response)
        out = {}
        for name in names:
            code = cluster.topic_errors.get(name)
            if code is not None and name not in cluster.topics:
                raise admin_error(code, f"topic {name!r}")
            info = cluster.topics[name]
            out[name] = TopicDescription(name, info.topic_id, info.is_internal, info.partitions)
        return out

    def create_partitions(
        self,
        new_totals: Mapping[str, int],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        """Grow each topic to the given total partition count."""
        fields = {
            "topics": [{"name": t, "count": n, "assignments": None} for t, n in new_totals.items()],
            "timeout": self._channel.timeout_field(timeout_ms),
            "validate_only": validate_only,
        }

        self._channel.controller_call(
            ApiKey.CREATE_PARTITIONS,
            fields,
            timeout_ms,
            lambda r: ((x.name, x.error_code, x.error_message) for x in r.results),
            "topic",
            lambda f, names: {**f, "topics": [t for t in f["topics"] if t["name"] in names]},
        )
        self._metadata.request_update()

    # ----------------------------------------------------------------- configs

    def describe_configs(
        self,
        resources: Iterable[ConfigResource | tuple[str, str]],
        *,
        timeout_ms: int | None = None,
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Current config values of topics, brokers or groups (broker resources ask that
        broker)."""
        wanted = [ConfigResource(*r) for r in resources]
        out: dict[ConfigResource, dict[str, ConfigEntry]] = {}
        for resource in wanted:
            fields = {
                "resources": [
                    {
                        "resource_type": _resource_type(resource),
                        "resource_name": resource.name,
                        "configuration_keys": None,
                    }
                ],
                "include_synonyms": False,
                "include_documentation": False,
            }

            def attempt(resource: ConfigResource = resource, fields: dict = fields) -> Any:
                # a broker by id asks that broker; "" (the cluster-wide default) any node
                by_id = resource.type == "broker" and resource.name != ""
                node = int(resource.name) if by_id else self._channel.any_node()
                if by_id:
                    self._channel.ensure_broker_address(node)
                return self._channel.request(node, ApiKey.DESCRIBE_CONFIGS, fields, timeout_ms)

            response = self._channel.retry(self._channel.deadline(timeout_ms), attempt)
            for r in response.results:
                raise_first([(r.resource_name, r.error_code, r.error_message)], resource.type)
                out[resource] = {
                    c.name: ConfigEntry(
                        c.name,
                        c.value,
                        _CONFIG_SOURCES.get(int(getattr(c, "config_source", -1)), "UNKNOWN"),
                        bool(c.read_only),
                        bool(c.is_sensitive),
                    )
                    for c in r.configs
                }
        return out

    def incremental_alter_configs(
        self,
        changes: Mapping[
            ConfigResource | tuple[str, str], Mapping[str, str | None] | Iterable[AlterConfigOp]
        ],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        """Change configs: {resource: {name: value or None to delete}} or AlterConfigOp lists."""
        resources = []
        for resource, ops in changes.items():
            resource = ConfigResource(*resource)
            if isinstance(ops, Mapping):
                ops = [
                    AlterConfigOp(k, v, "delete" if v is None else "set") for k, v in ops.items()
                ]
            resources.append(
                {
                    "resource_type": _resource_type(resource),
                    "resource_name": resource.name,
                    "configs": [
                        {"name": o.name, "config_operation": _op(o.op), "value": o.value}
                        for o in ops
                    ],
                }
            )
        fields = {"resources": resources, "validate_only": validate_only}

        self._channel.controller_call(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            fields,
            timeout_ms,
            lambda r: ((x.resource_name, x.error_code, x.error_message) for x in r.responses),
            "resource",
        )

    # ----------------------------------------------------------------- offsets

    def list_offsets(
        self,
        specs: Mapping[TopicPartition | tuple[str, int], int],
        *,
        isolation_level: str = "read_uncommitted",
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, OffsetAndTimestamp]:
        """Offsets by spec: EARLIEST_TIMESTAMP (-2), LATEST_TIMESTAMP (-1), MAX_TIMESTAMP (-3),
        or a timestamp in ms (the first offset whose timestamp is >= it; -1 when none)."""
        level = (
            IsolationLevel.READ_COMMITTED
            if isolation_level == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        return list_offsets(
            self._network,
            self._metadata,
            specs,
            isolation_level=level,
            deadline_ms=self._channel.deadline(timeout_ms),
        )

    def delete_records(
        self,
        before: Mapping[TopicPartition | tuple[str, int], int],
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, int]:
        """Delete records below the given offsets (-1 = the high watermark); returns each
        partition's new low watermark (log start offset)."""
        remaining = {TopicPartition(*tp): o for tp, o in before.items()}
        self._metadata.add_topics(tp.topic for tp in remaining)
        results: dict[TopicPartition, int] = {}

        def attempt() -> None:
            by_node, unknown = group_by_leader(_cluster_for(self._metadata, remaining), remaining)
            retry: KafkaError | None = None
            for node, tps in by_node.items():
                topics: dict[str, list[dict]] = {}
                for tp in tps:
                    topics.setdefault(tp.topic, []).append(
                        {"partition_index": tp.partition, "offset": remaining[tp]}
                    )
                fields = {
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                    "timeout": self._channel.timeout_field(timeout_ms),
                }
                try:
                    response = self._channel.request(
                        node, ApiKey.DELETE_RECORDS, fields, timeout_ms
                    )
                except KafkaError as e:
                    retry = e
                    continue
                for topic in response.topics:
                    for p in topic.partitions:
                        tp = TopicPartition(topic.name, int(p.partition_index))
                        code = int(p.error_code)
                        if code == 0:
                            results[tp] = int(p.low_watermark)
                            remaining.pop(tp, None)
                        elif error_for_code(code).retriable:
                            retry = admin_error(code, f"{tp.topic}-{tp.partition}")
                        else:
                            raise admin_error(code, f"{tp.topic}-{tp.partition}")
            if unknown or retry is not None:
                self._metadata.request_update()
                raise retry or admin_error(
                    5, ", ".join(f"{tp.topic}-{tp.partition}" for tp in unknown)
                )

        self._channel.retry(self._channel.deadline(timeout_ms), attempt)
        return results

    # ----------------------------------------------------------------- cluster

    def describe_cluster(self, *, timeout_ms: int | None = None) -> ClusterDescription:
        """Cluster id, controller and brokers (DescribeCluster)."""
        fields = {"include_cluster_authorized_operations": False, "endpoint_type": 1}

        def attempt() -> Any:
            return self._channel.request(
                self._channel.any_node(), ApiKey.DESCRIBE_CLUSTER, fields, timeout_ms
            )

        response = self._channel.retry(self._channel.deadline(timeout_ms), attempt)
        if int(response.error_code) != 0:
            raise admin_error(int(response.error_code), "DescribeCluster", response.error_message)
        brokers = tuple(
            sorted(
                (
                    BrokerNode(int(b.broker_id), b.host, int(b.port), b.rack)
                    for b in response.brokers
                ),
                key=lambda b: b.node_id,
            )
        )
        return ClusterDescription(response.cluster_id, int(response.controller_id), brokers)

    # ------------------------------------------------------------------ groups

    def list_groups(self, states: Iterable[str] = ()) -> list[GroupListing]:
        """Every consumer group (optionally only those in `states`, e.g. "Stable")."""
        return admin_groups.list_groups(self._channel, states)

    def describe_group(self, group_id: str) -> GroupDescription:
        return admin_groups.describe_group(self._channel, group_id)

    def find_group_coordinator(self, group_id: str) -> BrokerNode:
        """The node coordinating `group_id` (FindCoordinator), with its address."""
        return admin_groups.group_coordinator(self._channel, group_id)

    def list_group_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        return admin_groups.list_group_offsets(self._channel, group_id)

    def alter_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, int] | Mapping[tuple[str, int], int],
    ) -> None:
        admin_groups.alter_group_offsets(self._channel, group_id, offsets)

    def delete_groups(self, group_ids: Iterable[str]) -> None:
        admin_groups.delete_groups(self._channel, group_ids)

    def delete_group_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        admin_groups.delete_group_offsets(self._channel, group_id, partitions)

    # --------------------------------------------------------- reassignments

    def alter_partition_reassignments(
        self,
        reassignments: Mapping[tuple[str, int], Sequence[int] | None],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Move partitions to new replica lists (KIP-455); None cancels a reassignment in
        progress. Raises the first partition's error."""
        admin_reassignments.alter_partition_reassignments(self._channel, reassignments, timeout_ms)

    def list_partition_reassignments(
        self, partitions: Iterable[tuple[str, int]] | None = None, *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The reassignments in progress (of `partitions`, or all): replicas, adding, removing."""
        return admin_reassignments.list_partition_reassignments(
            self._channel, partitions, timeout_ms
        )


def _resource_type(resource: ConfigResource) -> int:
    try:
        return _RESOURCE_TYPES[resource.type]
    except KeyError:
        raise ValueError(
            f"config resource type must be one of {sorted(_RESOURCE_TYPES)}, got {resource.type!r}"
        ) from None


def _op(name: str) -> int:
    try:
        return _OPS[name]
    except KeyError:
        raise ValueError(f"config op must be one of {sorted(_OPS)}, got {name!r}") from None


__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AdminClient",
    "AlterConfigOp",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "NewTopic",
    "OffsetAndTimestamp",
    "PartitionReassignment",
    "TopicDescription",
    "list_offsets",
]
