"""A broker's channel to the driver's group and transaction coordinator (Kafka's
`ForwardingManager` over a `NodeToControllerChannelManager`, aimed at the coordinator).

Clients reach the coordinator through brokers: FindCoordinator names a live broker, which sends
each group or transaction request on to the coordinator in an Envelope (KIP-590,
`protocol.envelope`) and hands back the answer. The coordinator's listener answers the requests
of one connection one at a time, in order (as Kafka mutes a channel while a request is in
flight), and a JoinGroup may wait there for a whole rebalance while the heartbeats of the other
members must go on. So the channel never puts two requests on one connection at once: it keeps
a pool, takes an idle connection for each request (opening one when none is idle) and returns
it afterwards. At most `max_in_flight` requests are forwarded at once; more wait for a
connection (a bounded queue, STYLE 8).

When the coordinator cannot be reached, `forward` raises `CoordinatorUnreachableError` at once
(after a failed connect, new attempts wait `reconnect.backoff.ms`, doubling up to
`reconnect.backoff.max.ms`, Kafka's client defaults), and the broker answers NOT_COORDINATOR so
clients find the coordinator again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sparklog.protocol import envelope, kio_build
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.async_client import AsyncKafkaConnection, connect
from sparklog.protocol.connection import Request
from sparklog.protocol.outbound import PLAINTEXT, ClientSecurity, Endpoint

logger = logging.getLogger(__name__)

#: Forwarded requests in flight at once per broker (each holds one pooled connection).
DEFAULT_MAX_IN_FLIGHT = 1024
#: Kafka's `reconnect.backoff.ms` and `reconnect.backoff.max.ms` client defaults.
RECONNECT_BACKOFF_MS = 50
RECONNECT_BACKOFF_MAX_MS = 1000
_CONNECT_TIMEOUT_S = 10.0

Connect = Callable[[str, int], Awaitable[AsyncKafkaConnection]]


class CoordinatorUnreachableError(ConnectionError):
    """The coordinator could not be asked (connect refused, connection broken, timed out)."""


async def _connect(
    host: str, port: int, security: ClientSecurity = PLAINTEXT
) -> AsyncKafkaConnection:
    return await connect(
        Endpoint(host, port),
        security,
        client_id="sparklog-broker-forwarder",
        timeout_s=_CONNECT_TIMEOUT_S,
    )


class CoordinatorChannel:
    """Forwards requests to the coordinator at `endpoint` ("host:port"); asyncio, one loop."""

    def __init__(
        self,
        endpoint: str,
        *,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        connect: Connect = _connect,
        clock_s: Callable[[], float] = time.monotonic,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        host, _sep, port = endpoint.rpartition(":")
        self.host, self.port = host, int(port)
        self.max_in_flight = max_in_flight
        #: the inter-broker listener's protocol and login: the coordinator serves that listener
        if connect is _connect and security is not PLAINTEXT:
            connect = functools.partial(_connect, security=security)
        self._connect = connect
        self._clock_s = clock_s
        self._idle: list[AsyncKafkaConnection] = []
        self._busy: set[AsyncKafkaConnection] = set()
        self._slots: asyncio.Semaphore | None = None  # made on the loop that uses it
        self._backoff_ms = 0
        self._retry_at_s = 0.0
        self._closed = False
        self._closing: set[asyncio.Task] = set()
        #: statistics (trio's `statistics()`): requests forwarded, connections opened
        self.forwarded = 0
        self.connections_opened = 0

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def statistics(self) -> dict[str, int]:
        in_flight = 0 if self._slots is None else self.max_in_flight - self._slots._value
        return {
            "forwarded": self.forwarded,
            "connections_opened": self.connections_opened,
            "idle_connections": len(self._idle),
            "in_flight": in_flight,
        }

    async def forward(
        self, request: Request, client_host: str, *, timeout_s: float | None = None
    ) -> bytes:
        """The coordinator's serialized response to `request`, forwarded for a client at
        `client_host`. Raises `CoordinatorUnreachableError` when it cannot be asked, and
        `envelope.EnvelopeError` when it refuses the Envelope itself."""
        wrapped = envelope.wrap(request, client_host, envelope.principal_bytes(request.session))
        what = f"forwarding {type(request.body).__name__}"
        answer = await self.send(wrapped, timeout_s=timeout_s, what=what)
        self.forwarded += 1
        if int(answer.error_code):
            raise envelope.EnvelopeError(int(answer.error_code), "the coordinator refused it")
        return bytes(answer.response_data or b"")

    async def send(
        self, body: Any, *, timeout_s: float | None = None, what: str | None = None
    ) -> Any:
        """The coordinator's response to a request of the broker's own (an Envelope, or
        sparklog's AuditEvents), on a pooled connection. Raises `CoordinatorUnreachableError`
        when the coordinator cannot be asked."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_in_flight)
        async with self._slots:
            conn = await self._take()
            self._busy.add(conn)
            try:
                answer = await conn.request(body, timeout_s=timeout_s)
            except (ConnectionError, OSError, TimeoutError) as e:
                await conn.close()  # a timed-out request still holds it: never reuse it
                raise CoordinatorUnreachableError(
                    f"{what or 'sending ' + type(body).__name__} to the coordinator at "
                    f"{self.endpoint} failed: {e}"
                ) from e
            finally:
                self._busy.discard(conn)
            self._give_back(conn)
        return answer

    async def _take(self) -> AsyncKafkaConnection:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        if self._closed:
            raise CoordinatorUnreachableError("the broker is shutting down")
        now_s = self._clock_s()
        if now_s < self._retry_at_s:
            raise CoordinatorUnreachableError(
                f"the coordinator at {self.endpoint} was unreachable moments ago; retrying in "
                f"{(self._retry_at_s - now_s) * 1000:.0f} ms"
            )
        try:
            conn = await self._connect(self.host, self.port)
        except (ConnectionError, OSError, TimeoutError) as e:
            self._backoff_ms = min(
                RECONNECT_BACKOFF_MAX_MS, max(RECONNECT_BACKOFF_MS, 2 * self._backoff_ms)
            )
            self._retry_at_s = self._clock_s() + self._backoff_ms / 1000
            if self._backoff_ms == RECONNECT_BACKOFF_MS:
                logger.warning("cannot reach the coordinator at %s: %s", self.endpoint, e)
            raise CoordinatorUnreachableError(
                f"cannot connect to the coordinator at {self.endpoint}: {e}"
            ) from e
        if self._backoff_ms:
            logger.info("the coordinator at %s is reachable again", self.endpoint)
        self._backoff_ms = 0
        self.connections_opened += 1
        return conn

    def _give_back(self, conn: AsyncKafkaConnection) -> None:
        if self._closed or conn.closed:
            task = asyncio.get_running_loop().create_task(conn.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        else:
            self._idle.append(conn)

    async def close(self) -> None:
        """Close every connection: requests in flight fail (their clients get NOT_COORDINATOR)
        instead of holding the broker's shutdown."""
        self._closed = True
        conns, self._idle = [*self._idle, *self._busy], []
        for conn in conns:
            with contextlib.suppress(Exception):
                await conn.close()


def forward_timeout_s(request: Request) -> float:
    """How long a forwarded request may wait for the coordinator: a JoinGroup waits up to its
    rebalance timeout for the group; others are answered within Kafka's request timeout."""
    body: Any = request.body
    if request.api_key == ApiKey.JOIN_GROUP:  # v0 has no rebalance timeout: the session's
        rebalance_ms = kio_build.millis(getattr(body, "rebalance_timeout", body.session_timeout))
        return rebalance_ms / 1000 + 30.0
    return 300.0
