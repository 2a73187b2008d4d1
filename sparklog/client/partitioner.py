"""Producer partitioners: Kafka's built-in (murmur2 for keys, uniform sticky for null keys),
round-robin, and user callables, each with a vectorized form for `send_arrow`.

Built-in (Kafka's `BuiltInPartitioner`, KIP-480 and KIP-794): a keyed record goes to
`toPositive(murmur2(key)) % numPartitions` over all partitions, so keys land where Java,
librdkafka and aiokafka put them. Records without a key stick to one partition with a leader
until `batch.size` bytes went there, then move on, so batches fill up instead of spreading
thin. Not thread-safe: the producer calls partitioners under its lock.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from sparklog.records.murmur2 import partition_for_key, partitions_for_keys

from .config import ConfigError
from .metadata import Cluster


class Partitioner(Protocol):
    """What the producer needs from a partitioner (Kafka's `Partitioner` interface)."""

    def partition(
        self, topic: str, key: bytes | None, value: bytes | None, cluster: Cluster
    ) -> int: ...


def _candidates(topic: str, cluster: Cluster) -> list[int]:
    """Partitions with a leader, or all when none has one (the sender waits for a leader)."""
    available = cluster.available_partitions(topic)
    if available:
        return available
    count = cluster.partition_count(topic) or 0
    if count == 0:
        raise ValueError(f"topic {topic!r} has no partitions in the metadata")
    return list(range(count))


class BuiltInPartitioner:
    """murmur2 for keys; sticky for null keys, switching after `batch_size` bytes (KIP-794)."""

    def __init__(
        self, batch_size: int, *, ignore_keys: bool = False, rng: random.Random | None = None
    ) -> None:
        self.batch_size = max(1, batch_size)
        self.ignore_keys = ignore_keys
        self._rng = rng or random.Random()
        # topic -> [partition, bytes produced to it, the metadata snapshot it was checked in]
        self._sticky: dict[str, list[Any]] = {}

    def partition(
        self, topic: str, key: bytes | None, value: bytes | None, cluster: Cluster
    ) -> int:
        if key is not None and not self.ignore_keys:
            count = cluster.partition_count(topic)
            assert count, "the producer waits for the topic's metadata first"
            return partition_for_key(key, count)
        return self._sticky_partition(topic, cluster)

    def on_append(self, topic: str, partition: int, size_bytes: int) -> None:
        """Count bytes produced to the sticky partition; switch once `batch.size` is reached."""
        state = self._sticky.get(topic)
        if state is None or state[0] != partition:
            return
        state[1] += size_bytes
        if state[1] >= self.batch_size:
            del self._sticky[topic]

    def _sticky_partition(self, topic: str, cluster: Cluster) -> int:
        state = self._sticky.get(topic)
        if state is not None and state[2] is cluster:
            return state[0]  # checked against this metadata snapshot already
        candidates = _candidates(topic, cluster)
        if state is not None and state[0] in candidates:
            state[2] = cluster
            return state[0]
        previous = None if state is None else state[0]
        choices = [p for p in candidates if p != previous] or candidates
        partition = self._rng.choice(choices)
        self._sticky[topic] = [partition, 0, cluster]
        return partition

    def partition_array(
        self, topic: str, keys: pa.Array | None, sizes: np.ndarray, cluster: Cluster
    ) -> np.ndarray:
        """Partitions for a whole Arrow batch: murmur2 for keys; null keys fill one partition
        with `batch.size` bytes, then the next available one, in turn."""
        count = cluster.partition_count(topic)
        assert count, "the producer waits for the topic's metadata first"
        n = len(sizes)
        if keys is None or self.ignore_keys:
            out = np.full(n, -1, dtype=np.int32)
        else:
            out = partitions_for_keys(keys, count)
        null_rows = np.flatnonzero(out < 0)
        if null_rows.size:
            candidates = np.asarray(_candidates(topic, cluster), dtype=np.int32)
            chunk = np.cumsum(sizes[null_rows]) // self.batch_size
            start = self._rng.randrange(len(candidates))
            out[null_rows] = candidates[(start + chunk) % len(candidates)]
        return out


class RoundRobinPartitioner:
    """Every record to the next partition with a leader, keys ignored (Kafka's
    `RoundRobinPartitioner`)."""

    def __init__(self) -> None:
        self._counters: dict[str, int] = {}

    def partition(
        self, topic: str, key: bytes | None, value: bytes | None, cluster: Cluster
    ) -> int:
        candidates = _candidates(topic, cluster)
        counter = self._counters.get(topic, 0)
        self._counters[topic] = counter + 1
        return candidates[counter % len(candidates)]

    def partition_array(
        self, topic: str, keys: pa.Array | None, sizes: np.ndarray, cluster: Cluster
    ) -> np.ndarray:
        candidates = np.asarray(_candidates(topic, cluster), dtype=np.int32)
        counter = self._counters.get(topic, 0)
        n = len(sizes)
        self._counters[topic] = counter + n
        return candidates[(counter + np.arange(n, dtype=np.int64)) % len(candidates)]


class CallablePartitioner:
    """A user function `fn(topic, key, value, num_partitions) -> partition`."""

    def __init__(self, fn: Callable[[str, bytes | None, bytes | None, int], int]) -> None:
        self.fn = fn

    def partition(
        self, topic: str, key: bytes | None, value: bytes | None, cluster: Cluster
    ) -> int:
        count = cluster.partition_count(topic) or 0
        return int(self.fn(topic, key, value, count))


_BUILT_IN = {
    "default",
    "murmur2",
    "org.apache.kafka.clients.producer.internals.DefaultPartitioner",
    "DefaultPartitioner",
}
_STICKY = {
    "sticky",
    "org.apache.kafka.clients.producer.UniformStickyPartitioner",
    "UniformStickyPartitioner",
}
_ROUND_ROBIN = {
    "round_robin",
    "roundrobin",
    "org.apache.kafka.clients.producer.RoundRobinPartitioner",
    "RoundRobinPartitioner",
}


def make_partitioner(setting: Any, *, batch_size: int, ignore_keys: bool = False) -> Any:
    """The partitioner named by `partitioner.class`: None (built-in), a name, an object with
    a `partition(topic, key, value, cluster)` method, a class of one, or a plain callable."""
    if setting is None or setting in _BUILT_IN:
        return BuiltInPartitioner(batch_size, ignore_keys=ignore_keys)
    if setting in _STICKY:
        return BuiltInPartitioner(batch_size, ignore_keys=True)
    if setting in _ROUND_ROBIN:
        return RoundRobinPartitioner()
    if isinstance(setting, type):
        setting = setting()
    if not isinstance(setting, str) and hasattr(setting, "partition"):
        return setting
    if callable(setting) and not isinstance(setting, str):
        return CallablePartitioner(setting)
    raise ConfigError(
        f"partitioner.class: unknown partitioner {setting!r}; use None (murmur2 + sticky), "
        "'org.apache.kafka.clients.producer.RoundRobinPartitioner', an object with "
        "partition(topic, key, value, cluster), or fn(topic, key, value, num_partitions)"
    )
