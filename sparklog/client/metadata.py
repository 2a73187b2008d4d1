"""The client's view of the cluster: brokers, topics, partition leaders (Kafka's `Metadata`).

`Cluster` is an immutable snapshot built from a Metadata response. `MetadataState` is the
sans-IO refresh policy: a refresh is due when someone asked for one (a NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE or connection error), when a topic of interest
is missing, or every `metadata.max.age.ms`; never sooner than `retry.backoff.ms` after the
last attempt. `Metadata` is the blocking edge that sends the requests.

Leader epochs (KIP-320): the state remembers the newest leader epoch seen per partition. A
response from a broker whose metadata lags (an older epoch) does not replace a newer leader:
the cached partition stays. A new topic id (the topic was recreated) starts the epochs over.
Brokers missing from a response are dropped with it. Leader hints in Produce responses
(KIP-951: `current_leader` + `node_endpoints`) move a partition to a newer leader without a
Metadata round trip, under the same newer-epoch-only rule.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sparklog.errors import (
    FencedLeaderEpochError,
    InconsistentTopicIdError,
    KafkaError,
    LeaderNotAvailableError,
    NetworkExceptionError,
    NotLeaderOrFollowerError,
    ReplicaNotAvailableError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from sparklog.protocol.api_versions import ApiKey
from sparklog.security.sasl.client import AUTHENTICATION_ERRORS
from sparklog.structs import TopicPartition

from .broker_connection import now_ms
from .config import parse_bootstrap_servers
from .network import NetworkClient

#: Errors after which the client's view of leaders is stale (Kafka's `InvalidMetadataException`).
REFRESH_ERROR_CODES = frozenset(
    {
        UnknownTopicOrPartitionError.code,
        LeaderNotAvailableError.code,
        NotLeaderOrFollowerError.code,
        ReplicaNotAvailableError.code,
        NetworkExceptionError.code,
        FencedLeaderEpochError.code,
        UnknownLeaderEpochError.code,
        UnknownTopicIdError.code,
        InconsistentTopicIdError.code,
    }
)


@dataclass(frozen=True, slots=True)
class BrokerNode:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition as the last Metadata response described it; leader -1 means none."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]
    topic_id: Any = None
    is_internal: bool = False
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class Cluster:
    """An immutable snapshot of the cluster: brokers by id and topics by name."""

    brokers: Mapping[int, BrokerNode] = field(default_factory=dict)
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)
    cluster_id: str | None = None
    controller_id: int = -1
    topic_errors: Mapping[str, int] = field(default_factory=dict)
    # available_partitions per topic, filled on first use (the snapshot never changes)
    _available: dict[str, list[int]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def from_response(cls, response: Any) -> Cluster:
        """Build a snapshot from a kio MetadataResponse of any version."""
        brokers = {
            int(b.node_id): BrokerNode(
                int(b.node_id), b.host, int(b.port), getattr(b, "rack", None)
            )
            for b in response.brokers
        }
        topics: dict[str, TopicInfo] = {}
        errors: dict[str, int] = {}
        for t in response.topics:
            code = int(t.error_code)
            if code != 0:
                errors[t.name] = code
                if code != LeaderNotAvailableError.code:  # such topics still list their partitions
                    continue
            partitions = tuple(
                sorted(
                    (
                        PartitionInfo(
                            t.name,
                            int(p.partition_index),
                            int(p.leader_id),
                            int(getattr(p, "leader_epoch", -1)),
                            tuple(int(r) for r in p.replica_nodes),
                            tuple(int(r) for r in p.isr_nodes),
                            tuple(int(r) for r in getattr(p, "offline_replicas", ())),
                            int(p.error_code),
                        )
                        for p in t.partitions
                    ),
                    key=lambda p: p.partition,
                )
            )
            topics[t.name] = TopicInfo(
                t.name, partitions, getattr(t, "topic_id", None), bool(t.is_internal), code
            )
        return cls(
            brokers,
            topics,
            getattr(response, "cluster_id", None),
            int(getattr(response, "controller_id", -1)),
            errors,
        )

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        topic = self.topics.get(tp.topic)
        if topic is None or not 0 <= tp.partition < len(topic.partitions):
            return None
        return topic.partitions[tp.partition]

    def leader_for(self, tp: TopicPartition) -> int | None:
        """The leader's node id when the leader is known and listed, else None."""
        info = self.partition(tp)
        if info is None or info.leader < 0 or info.leader not in self.brokers:
            return None
        return info.leader

    def leader_epoch_for(self, tp: TopicPartition) -> int:
        """The leader epoch this snapshot knows for `tp`; -1 when unknown."""
        info = self.partition(tp)
        return -1 if info is None else info.leader_epoch

    def partition_count(self, topic: str) -> int | None:
        info = self.topics.get(topic)
        return None if info is None else len(info.partitions)

    def available_partitions(self, topic: str) -> list[int]:
        """Partitions of `topic` with a live leader (what sticky and round-robin choose from);
        the list is shared: do not change it."""
        found = self._available.get(topic)
        if found is None:
            info = self.topics.get(topic)
            if info is None:
                return []
            found = [
                p.partition for p in info.partitions if p.leader >= 0 and p.leader in self.brokers
            ]
            self._available[topic] = found
        return found

    def with_topics(self, other: Cluster, replace: Iterable[str]) -> Cluster:
        """This snapshot with brokers from `other` and the topics in `replace` taken from it."""
        replace = set(replace)
        topics = {k: v for k, v in self.topics.items() if k not in replace}
        topics.update({k: v for k, v in other.topics.items() if k in replace})
        errors = {k: v for k, v in other.topic_errors.items() if k in replace}
        return Cluster(other.brokers, topics, other.cluster_id, other.controller_id, errors)


def group_by_leader(
    cluster: Cluster, partitions: Iterable[TopicPartition]
) -> tuple[dict[int, list[TopicPartition]], list[TopicPartition]]:
    """({leader node: its partitions}, partitions without a known leader)."""
    by_node: dict[int, list[TopicPartition]] = {}
    unknown: list[TopicPartition] = []
    for tp in partitions:
        leader = cluster.leader_for(tp)
        if leader is None:
            unknown.append(tp)
        else:
            by_node.setdefault(leader, []).append(tp)
    return by_node, unknown


class MetadataState:
    """When to refresh (sans-IO): asked for, a wanted topic missing, or older than max age."""

    def __init__(self, max_age_ms: int, retry_backoff_ms: int) -> None:
        self.max_age_ms = max_age_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.cluster = Cluster()
        self.topics: set[str] = set()
        self.last_refresh_ms: int | None = None
        self.last_attempt_ms: int | None = None
        self.update_requested = True
        self.version = 0  # bumps on every successful update
        #: The newest leader epoch seen per partition (KIP-320); never goes back.
        self.last_seen_epochs: dict[TopicPartition, int] = {}

    def add_topics(self, topics: Iterable[str]) -> bool:
        """Track `topics`; True when one was new (a refresh is then requested)."""
        new = set(topics) - self.topics
        if new:
            self.topics |= new
            self.update_requested = True
        return bool(new)

    def request_update(self) -> None:
        self.update_requested = True

    def time_to_next_update_ms(self, now_ms: int) -> int:
        """0 when a refresh is due now; otherwise how long until one is."""
        if (
            self.last_refresh_ms is None
            or self.update_requested
            or any(t not in self.cluster.topics for t in self.topics)
        ):
            due = 0
        else:
            due = max(0, self.last_refresh_ms + self.max_age_ms - now_ms)
        backoff = 0
        if self.last_attempt_ms is not None:
            backoff = max(0, self.last_attempt_ms + self.retry_backoff_ms - now_ms)
        return max(due, backoff)

    def on_attempt(self, now_ms: int) -> None:
        self.last_attempt_ms = now_ms

    def on_update(self, cluster: Cluster, now_ms: int) -> None:
        self.cluster = self._keep_newer_leaders(cluster)
        cluster = self.cluster
        self.last_refresh_ms = now_ms
        self.update_requested = any(
            code in REFRESH_ERROR_CODES for code in cluster.topic_errors.values()
        ) or any(
            p.leader < 0 or p.error_code in REFRESH_ERROR_CODES
            for t in cluster.topics.values()
            for p in t.partitions
        )
        self.version += 1

    def _keep_newer_leaders(self, fresh: Cluster) -> Cluster:
        """`fresh`, except partitions whose leader epoch is older than one already seen keep
        their cached entry (Kafka's `Metadata.updateLatestMetadata`)."""
        old = self.cluster
        seen = self.last_seen_epochs
        for tp in [tp for tp in seen if tp.topic not in fresh.topics]:
            del seen[tp]  # the topic is gone (or no longer tracked)
        topics = dict(fresh.topics)
        for name, info in fresh.topics.items():
            previous = old.topics.get(name)
            recreated = previous is not None and _ids_differ(previous.topic_id, info.topic_id)
            partitions = list(info.partitions)
            for i, p in enumerate(partitions):
                tp = TopicPartition(name, p.partition)
                last = seen.get(tp)
                if p.leader_epoch < 0:  # no epoch (old versions, errors): nothing to compare
                    seen.pop(tp, None)
                elif last is None or recreated or p.leader_epoch >= last:
                    seen[tp] = p.leader_epoch
                elif previous is not None and (cached := old.partition(tp)) is not None:
                    partitions[i] = cached  # this broker's metadata lags: keep the newer leader
            if partitions != list(info.partitions):
                topics[name] = replace(info, partitions=tuple(partitions))
        return replace(fresh, topics=topics) if topics != dict(fresh.topics) else fresh

    def on_leader_hints(
        self, hints: Mapping[TopicPartition, tuple[int, int]], nodes: Mapping[int, BrokerNode]
    ) -> set[TopicPartition]:
        """Apply `{partition: (leader id, leader epoch)}` hints from a Produce or Fetch response
        (KIP-951; Kafka's `Metadata.updatePartitionLeadership`): only a newer epoch, of a cached
        partition, led by a known node, moves a leader. Returns the partitions that moved."""
        brokers = {**self.cluster.brokers, **nodes}
        moved: dict[str, dict[int, PartitionInfo]] = {}
        for tp, (leader, epoch) in hints.items():
            info = self.cluster.partition(tp)
            if leader < 0 or epoch < 0 or info is None or leader not in brokers:
                continue
            if info.leader_epoch >= 0 and epoch <= info.leader_epoch:
                continue
            moved.setdefault(tp.topic, {})[tp.partition] = replace(
                info, leader=leader, leader_epoch=epoch
            )
            self.last_seen_epochs[tp] = epoch
        if not moved:
            return set()
        topics = dict(self.cluster.topics)
        for name, changes in moved.items():
            topic = topics[name]
            partitions = tuple(changes.get(p.partition, p) for p in topic.partitions)
            topics[name] = replace(topic, partitions=partitions)
        self.cluster = replace(self.cluster, brokers=brokers, topics=topics)
        self.version += 1
        return {TopicPartition(t, p) for t, changes in moved.items() for p in changes}


def _ids_differ(old: Any, new: Any) -> bool:
    """Whether two topic ids are both known and different (None or all-zero is unknown)."""
    known = [i for i in (old, new) if i is not None and getattr(i, "int", 1) != 0]
    return len(known) == 2 and old != new


class Metadata:
    """The blocking edge: bootstraps, refreshes, waits for topics. Thread-safe."""

    def __init__(
        self, network: NetworkClient, config: Mapping[str, Any], *, allow_auto_create: bool = True
    ) -> None:
        self.network = network
        self.config = config
        self.allow_auto_create = allow_auto_create
        self.state = MetadataState(config["metadata.max.age.ms"], config["retry.backoff.ms"])
        self._lock = threading.RLock()
        self._bootstrap_ids: list[int] = []
        for i, (host, port) in enumerate(parse_bootstrap_servers(config["bootstrap.servers"])):
            node_id = -(i + 1)
            network.set_address(node_id, host, port)
            self._bootstrap_ids.append(node_id)

    @property
    def cluster(self) -> Cluster:
        return self.state.cluster

    def add_topics(self, topics: Iterable[str]) -> None:
        with self._lock:
            self.state.add_topics(topics)

    def request_update(self) -> None:
        with self._lock:
            self.state.request_update()

    def maybe_refresh(self) -> None:
        """Refresh when due; errors are logged by the caller's next attempt, not raised."""
        with self._lock:
            if self.state.time_to_next_update_ms(now_ms()) > 0:
                return
            with contextlib.suppress(KafkaError):
                self.refresh()

    def refresh(self, timeout_ms: int | None = None) -> Cluster:
        """Fetch metadata for the tracked topics now; raises when no broker answers."""
        with self._lock:
            self.state.on_attempt(now_ms())
            topics = sorted(self.state.topics)
            response = self.request_metadata(topics, timeout_ms=timeout_ms)
            fresh = Cluster.from_response(response)
            self.state.on_update(self.state.cluster.with_topics(fresh, topics), now_ms())
            return self.state.cluster

    def request_metadata(self, topics: list[str] | None, *, timeout_ms: int | None = None) -> Any:
        """One Metadata request (None = all topics) to a broker that answers; updates addresses."""
        fields = {
            "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": self.allow_auto_create,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        errors: list[str] = []
        tried: set[int] = set()
        while True:
            candidates = [n for n in self.candidates() if n not in tried]
            node = self.network.least_loaded_node(candidates) if candidates else None
            if node is None:
                raise NetworkExceptionError(
                    "no broker answered a Metadata request (bootstrap.servers="
                    f"{','.join(self.config['bootstrap.servers'])}): " + "; ".join(errors)
                )
            tried.add(node)
            try:
                response = self.network.send(
                    node, ApiKey.METADATA, fields, timeout_ms=timeout_ms
                ).result()
            except (NetworkExceptionError, RequestTimedOutError) as e:
                errors.append(str(e))
                continue
            for b in response.brokers:
                self.network.set_address(int(b.node_id), b.host, int(b.port))
            return response

    def candidates(self) -> list[int]:
        """Nodes to ask for metadata: known brokers, then the bootstrap servers."""
        brokers = list(self.state.cluster.brokers)
        return brokers + self._bootstrap_ids if brokers else list(self._bootstrap_ids)

    def wait_for_topic(self, topic: str, deadline_ms: int) -> TopicInfo:
        """The topic's metadata, refreshing until it is known or `deadline_ms` passes
        (Kafka's `waitOnMetadata` bounded by `max.block.ms`)."""
        info = self.state.cluster.topics.get(topic)
        if info is not None and info.partitions and topic in self.state.topics:
            return info  # the common case, without the lock
        with self._lock:
            first_ask = topic not in self.state.topics
            self.state.add_topics([topic])
        last_error: str | None = None
        while True:
            cluster = self.state.cluster
            info = cluster.topics.get(topic)
            if info is not None and info.partitions:
                return info
            code = cluster.topic_errors.get(topic)
            if code is not None and code not in REFRESH_ERROR_CODES:
                raise error_for_code(code)(f"metadata for topic {topic!r} failed with error {code}")
            now = now_ms()
            if now >= deadline_ms:
                detail = f" (last error: {last_error})" if last_error else ""
                raise RequestTimedOutError(
                    f"topic {topic!r} not present in metadata after waiting; "
                    f"it may not exist (auto.create.topics.enable off?){detail}"
                )
            with self._lock:
                last = self.state.last_attempt_ms
                wait = 0 if last is None else max(0, last + self.state.retry_backoff_ms - now)
                if first_ask:  # a topic never asked for: no backoff (Kafka asks at once)
                    wait, first_ask = 0, False
                if wait == 0:
                    try:
                        self.refresh(timeout_ms=max(1, deadline_ms - now))
                    except AUTHENTICATION_ERRORS:
                        raise  # waiting cannot fix credentials (Kafka's waitOnMetadata)
                    except KafkaError as e:
                        last_error = str(e)
                    continue
            time.sleep(min(wait, deadline_ms - now) / 1000)

    def leader_for(self, topic: str, partition: int) -> int | None:
        return self.state.cluster.leader_for(TopicPartition(topic, partition))

    def update_leaders(
        self, hints: Mapping[TopicPartition, tuple[int, int]], nodes: Iterable[BrokerNode] = ()
    ) -> set[TopicPartition]:
        """Apply KIP-951 leader hints (see `MetadataState.on_leader_hints`); thread-safe."""
        if not hints:
            return set()
        by_id = {n.node_id: n for n in nodes}
        with self._lock:
            for n in by_id.values():
                self.network.set_address(n.node_id, n.host, n.port)
            return self.state.on_leader_hints(hints, by_id)


def raise_for_partition_error(code: int, tp: TopicPartition, message: str | None = None) -> None:
    """Raise the sparklog.errors exception for a partition-level error code (0 is fine)."""
    if code == 0:
        return
    cls = error_for_code(code)
    detail = f": {message}" if message else ""
    raise cls(f"{cls.__name__} on {tp.topic}-{tp.partition}{detail}")


__all__ = [
    "BrokerNode",
    "Cluster",
    "Metadata",
    "MetadataState",
    "PartitionInfo",
    "TopicInfo",
    "TopicPartition",
    "group_by_leader",
    "raise_for_partition_error",
]
