"""A fair share of the event loop for every connection: work that grows with a request's
contents lets other connections run at least every `SLICE_S`.

Kafka gives each request an I/O thread of its own (`KafkaRequestHandlerPool`), so one huge
request costs its own thread and nobody else's. A server here is one asyncio loop: a Metadata
request naming 100,000 topics held it for a second (checking, decoding, answering, building
and encoding 100,000 entries), and every other client of the broker waited that long, again
for each such request a hostile client sent back to back. So every loop whose length a peer
chooses calls `checkpoint()` (or iterates with `each()`), which yields to the loop once the
code has held it for `SLICE_S`; the clock is read only every `CHECK_EVERY` calls, so a
checkpoint costs a counter increment. The whole request costs as much CPU as before; what
changes is that other connections are answered between its slices.

The deadline is per thread (one loop per thread), restarted by `restart()` when a connection
starts a request and whenever a checkpoint yields. Another task's restart while a request was
suspended can only make that request yield earlier, never later than one slice after it last
got the loop back. Tests set `SLICE_S = 0`: every `CHECK_EVERY`-th checkpoint then yields, so
the interleaving is deterministic.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Generator, Iterable
from typing import TypeVar

#: The longest a request's code holds the loop before letting other connections run.
SLICE_S = 0.002
#: Checkpoints between clock reads: one read per this many entries (a few microseconds each).
CHECK_EVERY = 64

T = TypeVar("T")


class _Turn(threading.local):
    def __init__(self) -> None:
        self.deadline = 0.0
        self.count = 0


_turn = _Turn()


def restart() -> None:
    """The current code just got the loop: a new slice starts now."""
    _turn.deadline = time.perf_counter() + SLICE_S
    _turn.count = 0


def due(weight: int = 1) -> bool:
    """Whether the current slice is used up; reads the clock once `CHECK_EVERY` units of
    work (`weight` each call: 1 for an entry of a request) were done since the last read."""
    turn = _turn
    turn.count += weight
    if turn.count < CHECK_EVERY:
        return False
    turn.count = 0
    return time.perf_counter() >= turn.deadline


async def pause() -> None:
    """Let every other ready task run once, then start a new slice."""
    await asyncio.sleep(0)
    restart()


async def checkpoint() -> None:
    """Yield to the loop if the current slice is used up; call once per entry of a loop."""
    if due():
        await pause()


async def each(items: Iterable[T], weight: int = 1) -> AsyncIterator[T]:
    """`items`, with a checkpoint before each one (`weight`: see `due`)."""
    for item in items:
        if due(weight):
            await pause()
        yield item


async def complete(steps: Generator[object, None, T]) -> T:
    """Run a generator that yields once per unit of work (a frame walk, an encode) to its
    end, pausing between steps whenever the slice is used up; its return value."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value
        if due():
            await pause()


def finish(steps: Generator[object, None, T]) -> T:
    """Run such a generator to its end without pausing (for synchronous callers)."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value
