"""The clients' connections to a cluster: `NetworkClient` holds one `BrokerConnection`
(`client.broker_connection`) per node id, made on demand, and avoids a node whose connect
failed for `reconnect.backoff.ms` (doubling up to `reconnect.backoff.max.ms`, `ReconnectBackoff`):
a request to it fails at once with NetworkExceptionError, so a dead leader never blocks the
caller's thread. A node whose authentication failed raises that failure again while it backs
off, and a connection whose SASL session is due for renewal (KIP-368) is replaced by a new one.
A broker that answered with a throttle time (KIP-219, `client.throttle`) is not `ready` until
that time has passed: the producer and consumer send it nothing meanwhile, as Kafka's do.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from sparklog.client.broker_connection import BrokerConnection, now_ms
from sparklog.client.security import client_security
from sparklog.client.throttle import ThrottleRecorder
from sparklog.errors import KafkaError, NetworkExceptionError
from sparklog.security.sasl.client import AUTHENTICATION_ERRORS

# ------------------------------------------------------------------------------ backoff


class ReconnectBackoff:
    """Exponential reconnect backoff for one node (Kafka's `ClusterConnectionStates`).

    Sans-IO: time is passed in. After n consecutive failures the next attempt waits
    `base_ms * 2**(n-1)`, capped at `max_ms`; a success resets it.
    """

    __slots__ = ("base_ms", "max_ms", "failures", "next_attempt_ms")

    def __init__(self, base_ms: int, max_ms: int) -> None:
        self.base_ms = base_ms
        self.max_ms = max(max_ms, base_ms)
        self.failures = 0
        self.next_attempt_ms = 0

    def on_failure(self, now_ms: int) -> None:
        self.failures += 1
        delay = min(self.max_ms, self.base_ms * (1 << min(self.failures - 1, 30)))
        self.next_attempt_ms = now_ms + delay

    def on_success(self) -> None:
        self.failures = 0
        self.next_attempt_ms = 0

    def delay_ms(self, now_ms: int) -> int:
        """How long to wait before the next attempt may start."""
        return max(0, self.next_attempt_ms - now_ms)


# ----------------------------------------------------------------------------- client


class NetworkClient:
    """Connections to brokers by node id, made on demand; thread-safe.

    Bootstrap servers get node ids -1, -2, ... until metadata names the real brokers.
    """

    def __init__(
        self, config: Mapping[str, Any], *, on_throttle_time: ThrottleRecorder | None = None
    ) -> None:
        self._config = config
        #: records every response's throttle time (the producer's or consumer's sensor)
        self._on_throttle_time = on_throttle_time
        self._client_id = config["client.id"] or "sparklog"
        self._security = client_security(config)
        self._lock = threading.RLock()
        self._addresses: dict[int, tuple[str, int]] = {}
        self._connections: dict[int, BrokerConnection] = {}
        self._backoff: dict[int, ReconnectBackoff] = {}
        self._node_locks: dict[int, threading.Lock] = {}
        #: a node's last authentication failure, raised again while it backs off (Kafka's
        #: `ClusterConnectionStates.authenticationException`)
        self._auth_errors: dict[int, Exception] = {}
        self._closed = False

    def set_address(self, node_id: int, host: str, port: int) -> None:
        """Record where `node_id` listens; a moved node's old connection is closed."""
        with self._lock:
            old = self._addresses.get(node_id)
            self._addresses[node_id] = (host, port)
            conn = self._connections.get(node_id)
            moved = old is not None and old != (host, port)
            if moved:  # a restarted broker on a new port: the old address's failures don't count
                self._backoff.pop(node_id, None)
        if moved and conn is not None:
            conn.close()

    def nodes(self) -> list[int]:
        with self._lock:
            return list(self._addresses)

    def least_loaded_node(self, candidates: list[int] | None = None) -> int | None:
        """A connected node with the fewest requests in flight, else any node not backing off
        (Kafka's `leastLoadedNode`)."""
        now = now_ms()
        with self._lock:
            ids = candidates if candidates is not None else list(self._addresses)
            ids = [i for i in ids if i in self._addresses]
            if not ids:
                return None
            live = [
                (c.in_flight_count, i)
                for i in ids
                if (c := self._connections.get(i)) and not c.closed
            ]
            if live:
                return min(live)[1]
            ready = [
                i for i in ids if i not in self._backoff or self._backoff[i].delay_ms(now) == 0
            ]
            return ready[0] if ready else min(ids, key=lambda i: self._backoff[i].next_attempt_ms)

    def speaks(self, node_id: int, api_key: int, version: int, feature: str, level: int) -> bool:
        """Whether `node_id` (connected now if needed) negotiated `api_key` at `version` or
        above and finalized `feature` at `level` or above (what decides transactions v2)."""
        try:
            conn = self.connection(node_id)
        except NetworkExceptionError:
            return False
        return (
            conn.versions.get(api_key, -1) >= version
            and conn.finalized_features.get(feature, 0) >= level
        )

    def connection(self, node_id: int) -> BrokerConnection:
        """The open connection to `node_id`, connecting (after any backoff) when needed."""
        with self._lock:
            if self._closed:
                raise NetworkExceptionError("the client is closed")
            conn = self._connections.get(node_id)
            if conn is not None and not conn.closed and not conn.session_expiring(now_ms()):
                return conn
            if node_id not in self._addresses:
                raise NetworkExceptionError(f"node {node_id} is not known (no metadata names it)")
            node_lock = self._node_locks.setdefault(node_id, threading.Lock())
        with node_lock:  # one thread connects; the others wait for its connection
            with self._lock:
                conn = self._connections.get(node_id)
                if conn is not None and not conn.closed:
                    if not conn.session_expiring(now_ms()):
                        return conn
                    conn.retire()  # KIP-368: a new connection, a new session
                host, port = self._addresses[node_id]
                backoff = self._backoff.setdefault(
                    node_id,
                    ReconnectBackoff(
                        self._config["reconnect.backoff.ms"],
                        self._config["reconnect.backoff.max.ms"],
                    ),
                )
            delay = backoff.delay_ms(now_ms())
            auth_error = self._auth_errors.get(node_id)
            if delay and auth_error is not None:
                raise type(auth_error)(str(auth_error))
            if delay:  # fail fast: callers try another node or retry after their own backoff
                raise NetworkExceptionError(
                    f"node {node_id} at {host}:{port} is unreachable (the last connect failed; "
                    f"next attempt in {delay} ms, reconnect.backoff.ms)"
                )
            conn = BrokerConnection(
                node_id,
                host,
                port,
                client_id=self._client_id,
                request_timeout_ms=self._config["request.timeout.ms"],
                send_buffer_bytes=self._config["send.buffer.bytes"],
                receive_buffer_bytes=self._config["receive.buffer.bytes"],
                security=self._security,
                on_throttle_time=self._on_throttle_time,
            )
            try:
                conn.connect(self._config["socket.connection.setup.timeout.ms"])
            except Exception as e:
                backoff.on_failure(now_ms())
                if isinstance(e, AUTHENTICATION_ERRORS):
                    self._auth_errors[node_id] = e
                raise
            backoff.on_success()
            self._auth_errors.pop(node_id, None)
            with self._lock:
                if self._closed:
                    conn.close()
                    raise NetworkExceptionError("the client is closed")
                self._connections[node_id] = conn
            return conn

    def send(
        self,
        node_id: int,
        api_key: int,
        fields: Mapping[str, Any],
        *,
        expects_response: bool = True,
        timeout_ms: int | None = None,
    ) -> Future:
        """Send to `node_id`; connection failures and a missing common version come back as a
        failed future."""
        try:
            conn = self.connection(node_id)
            return conn.send(
                api_key, fields, expects_response=expects_response, timeout_ms=timeout_ms
            )
        except KafkaError as e:
            future: Future = Future()
            future.set_exception(e)
            return future

    def connection_delay_ms(self, node_id: int) -> int:
        """0 when `node_id` is connected or may be connected to now; else how long its
        reconnect backoff still lasts (Kafka's `NetworkClient.connectionDelay`)."""
        with self._lock:
            conn = self._connections.get(node_id)
            if conn is not None and not conn.closed:
                return 0
            backoff = self._backoff.get(node_id)
        return 0 if backoff is None else backoff.delay_ms(now_ms())

    def throttle_delay_ms(self, node_id: int) -> int:
        """How long `node_id` still throttles us (KIP-219; 0: not throttled), Kafka's
        `ClusterConnectionStates.throttleDelayMs`."""
        with self._lock:
            conn = self._connections.get(node_id)
        return 0 if conn is None or conn.closed else conn.throttle.delay_ms(now_ms())

    def is_unavailable(self, node_id: int) -> bool:
        """Whether `node_id` failed to connect and is still in its reconnect backoff."""
        return self.connection_delay_ms(node_id) > 0

    def ready(self, node_id: int) -> bool:
        """Connected to `node_id`, connecting now if allowed, and not throttled; False (and no
        exception) when the node is backing off, refuses, or throttles us (Kafka's
        `NetworkClient.ready`: `canSendRequest` is false while `isThrottled`)."""
        if self.throttle_delay_ms(node_id):
            return False
        try:
            self.connection(node_id)
        except KafkaError:
            return False
        return True

    def in_flight_count(self, node_id: int) -> int:
        with self._lock:
            conn = self._connections.get(node_id)
        return 0 if conn is None or conn.closed else conn.in_flight_count

    def is_connected(self, node_id: int) -> bool:
        with self._lock:
            conn = self._connections.get(node_id)
        return conn is not None and not conn.closed

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            conn.close(NetworkExceptionError("the client is closing"))
