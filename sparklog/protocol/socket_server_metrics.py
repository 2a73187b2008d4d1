"""Socket-server metrics of a listener (Kafka's `Selector` metrics, group
`socket-server-metrics`, and `SocketServer`'s `NetworkProcessorAvgIdlePercent`).

Per listener (`kafka.server:type=socket-server-metrics,listener=<name>`, Kafka's metrics
library names): `connection-count`, `connection-creation-rate`/`-total`,
`connection-close-rate`/`-total`, `failed-authentication-total`,
`successful-authentication-total`, `failed-reauthentication-total` (expired sessions,
KIP-368), and sparklog's `connection-refused-total` (over `max.connections[.per.ip]`).
Kafka also tags them `networkProcessor=<n>`; a sparklog server has one event loop, so none.

**Idle ratio.** Kafka's `NetworkProcessorAvgIdlePercent` is the share of time its network
threads wait in `select()`, and `RequestHandlerAvgIdlePercent` the share its handler threads
wait for requests. One asyncio loop does both jobs here, so both are the loop's idle share:
time spent in the selector's `select()` over wall time, measured by wrapping the loop's
selector (two clock reads per loop iteration) over the last `_WINDOW_S` seconds (1 − this is
the event loop's busy ratio). A loop without a selector to wrap (uvloop) reports NaN.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
import weakref
from typing import Any, Protocol

from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Metrics
from sparklog.metrics.stats import CumulativeCount, Rate


class Listener(Protocol):
    """What the socket-server metrics read of a listener (`server.KafkaServer`)."""

    listener_name: str
    failed_authentications: int
    authentications: int
    expired_sessions: int
    refused_connections: int

    @property
    def connection_count(self) -> int: ...


_GROUP = "socket-server-metrics"
#: the idle ratio covers about this much recent time (checkpoints one second apart)
_WINDOW_S = 30
_CHECKPOINT_NS = 1_000_000_000


class LoopIdleMeter:
    """How much of a loop's time went to waiting in `select()` (module doc)."""

    def __init__(self) -> None:
        self.idle_ns = 0
        self.started_ns = time.monotonic_ns()
        self._next_checkpoint_ns = self.started_ns + _CHECKPOINT_NS
        #: (time, idle_ns so far), one a second: the window the ratio is over
        self._checkpoints: collections.deque[tuple[int, int]] = collections.deque(
            [(self.started_ns, 0)], maxlen=_WINDOW_S + 1
        )

    def on_select(self, began_ns: int, ended_ns: int) -> None:
        self.idle_ns += ended_ns - began_ns
        if ended_ns >= self._next_checkpoint_ns:
            self._checkpoints.append((ended_ns, self.idle_ns))
            self._next_checkpoint_ns = ended_ns + _CHECKPOINT_NS

    def idle_ratio(self, now_ns: int | None = None) -> float:
        """The idle share (0..1) since the oldest checkpoint of the window."""
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        since_ns, idle_then = self._checkpoints[0]
        elapsed = now_ns - since_ns
        if elapsed <= 0:
            return math.nan
        return min(1.0, max(0.0, (self.idle_ns - idle_then) / elapsed))


class _TimedSelector:
    """The loop's selector, with the time spent in `select()` counted."""

    def __init__(self, selector: Any, meter: LoopIdleMeter) -> None:
        self._selector = selector
        self._meter = meter
        # the calls asyncio makes per reader pause/resume go straight to the selector
        for name in ("register", "unregister", "modify", "get_key", "get_map", "close"):
            setattr(self, name, getattr(selector, name))

    def select(self, timeout: float | None = None) -> Any:
        began_ns = time.monotonic_ns()
        try:
            return self._selector.select(timeout)
        finally:
            self._meter.on_select(began_ns, time.monotonic_ns())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._selector, name)


_METERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopIdleMeter | None] = (
    weakref.WeakKeyDictionary()
)


def loop_idle_meter(loop: asyncio.AbstractEventLoop) -> LoopIdleMeter | None:
    """The idle meter of `loop`, installed on first use (None: the loop has no selector)."""
    if loop in _METERS:
        return _METERS[loop]
    selector = getattr(loop, "_selector", None)
    meter = None
    if selector is not None and hasattr(selector, "select"):
        meter = LoopIdleMeter()
        loop._selector = _TimedSelector(selector, meter)  # type: ignore[attr-defined]
    _METERS[loop] = meter
    return meter


def register_loop_metrics(metrics: Metrics, loop: asyncio.AbstractEventLoop) -> None:
    """`NetworkProcessorAvgIdlePercent` and `RequestHandlerAvgIdlePercent` of the server
    whose loop this is (module doc)."""
    meter = loop_idle_meter(loop)

    def idle() -> float:
        return meter.idle_ratio() if meter is not None else math.nan

    metrics.gauge(
        MetricName.of("kafka.network", "SocketServer", "NetworkProcessorAvgIdlePercent"), idle
    )
    metrics.gauge(
        MetricName.of("kafka.server", "KafkaRequestHandlerPool", "RequestHandlerAvgIdlePercent"),
        idle,
    )


class ConnectionSensors:
    """What a listener records per connection (creation, close)."""

    __slots__ = ("created", "closed")

    def __init__(self, metrics: Metrics, listener: str) -> None:
        tags = {"listener": listener}
        self.created = metrics.sensor(f"connections-created:{listener}")
        self.created.add(_name("connection-creation-rate", tags), Rate())
        self.created.add(_name("connection-creation-total", tags), CumulativeCount())
        self.closed = metrics.sensor(f"connections-closed:{listener}")
        self.closed.add(_name("connection-close-rate", tags), Rate())
        self.closed.add(_name("connection-close-total", tags), CumulativeCount())


def _name(name: str, tags: dict[str, str]) -> MetricName:
    return MetricName.of("kafka.server", _GROUP, name, tags)


def register_socket_server_metrics(metrics: Metrics, server: Listener) -> ConnectionSensors:
    """The listener's socket-server metrics (module doc), read from `server` at scrape time
    on its loop; the sensors it records connections into are returned (and kept by it)."""
    tags = {"listener": server.listener_name}
    gauges = {
        "connection-count": lambda: server.connection_count,
        "failed-authentication-total": lambda: server.failed_authentications,
        "successful-authentication-total": lambda: server.authentications,
        "failed-reauthentication-total": lambda: server.expired_sessions,
        "connection-refused-total": lambda: server.refused_connections,
    }
    for name, read in gauges.items():
        metrics.gauge(_name(name, tags), read)
    return ConnectionSensors(metrics, server.listener_name)
