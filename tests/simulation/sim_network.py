"""Simulated time, event queue, network and processes (FoundationDB / TigerBeetle VOPR style).

Theory of operation. One `Scheduler` owns the clock (integer milliseconds) and a heap of
callbacks ordered by (time, sequence); the sequence breaks ties in scheduling order, so a run
is a pure function of the seed. `Network` carries envelopes between nodes with a random delay,
first-in-first-out per directed link (like one TCP connection), drops them with a loss
probability and while a link is cut. A `Node` is a process: it can be stopped (killed: its
timers, buffered messages and pending calls die with it), started again (a new incarnation),
or paused (a GC-like stall: everything addressed to it waits until the pause ends and then
runs against its stale state). `call` is request/response with a timeout; a lost request or
response is indistinguishable from a slow one, so callers only ever see the timeout.

The trace keeps the last events as (time, format, args) and formats them only on failure.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Node ids on the simulated network: brokers are 0..n-1, clients from CLIENT_BASE_ID.
CONTROLLER_ID = 100
CLIENT_BASE_ID = 200
#: Bound on the events of one run (TigerBeetle: bound every loop); a run needs ~10^4-10^5.
MAX_EVENTS = 2_000_000


class Scheduler:
    """The simulated clock and its event queue."""

    def __init__(self, rng: random.Random, trace_length: int = 120) -> None:
        self.rng = rng
        self.now_ms = 0
        self.events_run = 0
        self._queue: list[tuple[int, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._sequence = itertools.count()
        self.trace: deque[tuple[int, str, tuple[Any, ...]]] = deque(maxlen=trace_length)

    def at(self, time_ms: int, fn: Callable[..., Any], *args: Any) -> None:
        assert time_ms >= self.now_ms, (time_ms, self.now_ms)
        heapq.heappush(self._queue, (time_ms, next(self._sequence), fn, args))

    def after(self, delay_ms: int, fn: Callable[..., Any], *args: Any) -> None:
        self.at(self.now_ms + max(0, delay_ms), fn, *args)

    def run_until(self, end_ms: int) -> None:
        """Run every event due at or before `end_ms`; the clock ends at `end_ms`."""
        queue = self._queue
        while queue and queue[0][0] <= end_ms:
            time_ms, _, fn, args = heapq.heappop(queue)
            self.now_ms = time_ms
            fn(*args)
            self.events_run += 1
            assert self.events_run < MAX_EVENTS, "runaway simulation: event bound reached"
        self.now_ms = max(self.now_ms, end_ms)

    def note(self, fmt: str, *args: Any) -> None:
        """Add a line to the trace (formatted lazily: most runs never print it)."""
        self.trace.append((self.now_ms, fmt, args))

    def format_trace(self, last: int = 60) -> str:
        lines = list(self.trace)[-last:]
        return "\n".join(f"  {t:>7} ms  {fmt % args}" for t, fmt, args in lines)


@dataclass(frozen=True, slots=True)
class Envelope:
    src: int
    correlation_id: int
    body: Any
    is_reply: bool


class Network:
    """Delivers envelopes between nodes: delay, FIFO per link, loss, cuts."""

    def __init__(
        self, scheduler: Scheduler, *, delay_min_ms: int = 1, delay_max_ms: int = 8
    ) -> None:
        self.scheduler = scheduler
        self.nodes: dict[int, Node] = {}
        self.base_delay = (delay_min_ms, delay_max_ms)
        self.delay_min_ms = delay_min_ms
        self.delay_max_ms = delay_max_ms
        self.loss_probability = 0.0
        self._cut: set[tuple[int, int]] = set()  # membership tests only, never iterated
        self._link_free_ms: dict[tuple[int, int], int] = {}
        self.link_delay_ms: dict[tuple[int, int], int] = {}  # extra delay of slow links
        self.sent = 0
        self.dropped = 0

    def cut(self, a: int, b: int) -> None:
        self._cut.add((a, b))
        self._cut.add((b, a))

    def heal(self, a: int, b: int) -> None:
        self._cut.discard((a, b))
        self._cut.discard((b, a))

    def heal_all(self) -> None:
        self._cut.clear()
        self.link_delay_ms.clear()
        self.delay_min_ms, self.delay_max_ms = self.base_delay
        self.loss_probability = 0.0

    def is_cut(self, a: int, b: int) -> bool:
        return (a, b) in self._cut

    def send(self, src: int, dst: int, envelope: Envelope) -> None:
        self.sent += 1
        rng = self.scheduler.rng
        if (src, dst) in self._cut or (
            self.loss_probability and rng.random() < self.loss_probability
        ):
            self.dropped += 1
            return
        now = self.scheduler.now_ms
        link = (src, dst)
        deliver_ms = now + rng.randint(self.delay_min_ms, self.delay_max_ms)
        if self.link_delay_ms:
            deliver_ms += rng.randint(0, self.link_delay_ms.get(link, 0))
        deliver_ms = max(deliver_ms, self._link_free_ms.get(link, 0))
        self._link_free_ms[link] = deliver_ms
        self.scheduler.at(deliver_ms, self._deliver, src, dst, envelope)

    def _deliver(self, src: int, dst: int, envelope: Envelope) -> None:
        if (src, dst) in self._cut:
            self.dropped += 1
            return
        node = self.nodes.get(dst)
        if node is not None:
            node.on_envelope(envelope)


class Node:
    """A simulated process with timers, RPCs and a kill/restart/pause life cycle."""

    def __init__(self, node_id: int, scheduler: Scheduler, network: Network) -> None:
        self.node_id = node_id
        self.scheduler = scheduler
        self.network = network
        self.up = False
        self.incarnation = 0
        self.paused_until_ms = 0
        # a wall-clock step (NTP): what the node reads as the time, not when its timers fire
        self.clock_offset_ms = 0
        self._pending: dict[int, Callable[[Any], None]] = {}
        self._correlation = itertools.count()
        network.nodes[node_id] = self

    @property
    def now_ms(self) -> int:
        return self.scheduler.now_ms

    @property
    def wall_ms(self) -> int:
        """The node's wall clock (Kafka's `time.milliseconds()`), which a clock jump moves."""
        return self.scheduler.now_ms + self.clock_offset_ms

    # -- life cycle -------------------------------------------------------------------------

    def start(self) -> None:
        assert not self.up
        self.incarnation += 1
        self.up = True
        self.paused_until_ms = 0
        self._pending = {}
        self.on_start()

    def stop(self) -> None:
        """Kill the process: volatile state, timers and pending calls are gone."""
        if not self.up:
            return
        self.up = False
        self._pending = {}
        self.on_stop()

    def pause(self, duration_ms: int) -> None:
        self.paused_until_ms = max(self.paused_until_ms, self.now_ms + duration_ms)

    def on_start(self) -> None:  # subclasses: (re)build volatile state, start loops
        pass

    def on_stop(self) -> None:
        pass

    # -- timers -----------------------------------------------------------------------------

    def set_timer(self, delay_ms: int, fn: Callable[..., Any], *args: Any) -> None:
        self.scheduler.after(delay_ms, self._fire, self.incarnation, fn, args)

    def _fire(self, incarnation: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        if not self.up or incarnation != self.incarnation:
            return
        if self.now_ms < self.paused_until_ms:
            self.scheduler.at(self.paused_until_ms, self._fire, incarnation, fn, args)
            return
        fn(*args)

    # -- messages ---------------------------------------------------------------------------

    def call(self, dst: int, body: Any, timeout_ms: int, on_reply: Callable[[Any], None]) -> None:
        """Send `body`; `on_reply(reply)` runs once: with the reply, or None on timeout."""
        correlation_id = next(self._correlation)
        self._pending[correlation_id] = on_reply
        self.network.send(self.node_id, dst, Envelope(self.node_id, correlation_id, body, False))
        self.set_timer(timeout_ms, self._expire, correlation_id)

    def _expire(self, correlation_id: int) -> None:
        callback = self._pending.pop(correlation_id, None)
        if callback is not None:
            callback(None)

    def reply(self, dst: int, correlation_id: int, body: Any) -> None:
        self.network.send(self.node_id, dst, Envelope(self.node_id, correlation_id, body, True))

    def on_envelope(self, envelope: Envelope) -> None:
        if not self.up:
            return
        # Buffered in the process's socket: runs when it does, dies with it.
        self._fire(self.incarnation, self._receive, (envelope,))

    def _receive(self, envelope: Envelope) -> None:
        if envelope.is_reply:
            callback = self._pending.pop(envelope.correlation_id, None)
            if callback is not None:
                callback(envelope.body)
        else:
            self.handle(envelope.src, envelope.correlation_id, envelope.body)

    def handle(self, src: int, correlation_id: int, body: Any) -> None:
        raise NotImplementedError
