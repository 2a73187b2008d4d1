"""Clients that outlive a Spark task, for the next task in the same Python worker.

Spark reuses Python workers across tasks (`spark.python.worker.reuse`, on by default), and its
Kafka connector caches consumers and producers per executor the same way
(`spark.kafka.consumer.cache.*`, `CachedKafkaProducer`): a task then skips connecting,
ApiVersions and Metadata, and the close. A client goes back only after its task's work ended
normally; on an error, or a read Spark abandoned, it is closed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

POOL_IDLE_MAX = 4  # idle clients kept per distinct config
POOL_IDLE_TIMEOUT_S = 300.0  # Spark's spark.kafka.consumer.cache.timeout default (5m)


class ClientPool:
    """Idle clients by config. Thread-safe; a client is used by one lease at a time."""

    def __init__(
        self,
        factory: Callable[[dict[str, Any]], Any],
        *,
        before_reuse: Callable[[Any], None] | None = None,
        discard: Callable[[Any], None] = lambda client: client.close(),
        idle_max: int = POOL_IDLE_MAX,
        idle_timeout_s: float = POOL_IDLE_TIMEOUT_S,
    ) -> None:
        self._factory = factory
        self._before_reuse = before_reuse
        self._discard = discard
        self._idle_max = idle_max
        self._idle_timeout_s = idle_timeout_s
        self._idle: dict[tuple[tuple[str, str], ...], list[tuple[float, Any]]] = {}
        self._lock = threading.Lock()

    def _take(self, key: tuple[tuple[str, str], ...]) -> Any | None:
        now = time.monotonic()
        with self._lock:
            idle = self._idle.get(key, [])
            stale = [c for t, c in idle if now - t > self._idle_timeout_s]
            idle[:] = [(t, c) for t, c in idle if now - t <= self._idle_timeout_s]
            client = idle.pop()[1] if idle else None
        for c in stale:
            self._discard(c)
        return client

    def _give_back(self, key: tuple[tuple[str, str], ...], client: Any) -> bool:
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) >= self._idle_max:
                return False
            idle.append((time.monotonic(), client))
            return True

    @contextmanager
    def lease(self, config: Mapping[str, Any]) -> Iterator[Any]:
        """A client for `config`: an idle one or a new one."""
        key = tuple(sorted((k, str(v)) for k, v in config.items()))
        client = self._take(key)
        if client is None:
            client = self._factory(dict(config))
        finished = False
        try:
            yield client
            finished = True
        finally:
            if finished and self._before_reuse is not None:
                self._before_reuse(client)
            if not (finished and self._give_back(key, client)):
                self._discard(client)

    def close_all(self) -> None:
        with self._lock:
            clients = [c for idle in self._idle.values() for _, c in idle]
            self._idle.clear()
        for c in clients:
            self._discard(c)

    def idle_count(self) -> int:
        with self._lock:
            return sum(len(idle) for idle in self._idle.values())


def _new_consumer(config: dict[str, Any]) -> Any:
    from sparklog.client.consumer import KafkaConsumer

    return KafkaConsumer(config)


def _new_producer(config: dict[str, Any]) -> Any:
    from sparklog.client.producer import KafkaProducer

    return KafkaProducer(config)


#: Consumers of range reads; unassigned before reuse so no buffered data leaks across tasks.
CONSUMERS = ClientPool(_new_consumer, before_reuse=lambda c: c.assign([]))
#: Producers of write tasks; returned only after everything they sent was acknowledged. One
#: that failed is closed at once, dropping what it still queued: Spark retries the task.
PRODUCERS = ClientPool(_new_producer, discard=lambda producer: producer.close(0))
