"""Server-wide admission bounds on requests, Kafka's `queued.max.requests` and
`queued.max.request.bytes` (its `RequestChannel` queue and `MemoryPool`).

`RequestSlots`: a request holds a slot from the moment it is decoded until its handler answers
it or parks it in purgatory (a long-polling Fetch, an acks=all Produce): as in Kafka, where a
request leaves the queue when an I/O thread takes it, parked requests do not count. When every
slot is taken, connections stop reading until one frees, so a flood of requests waits in the
kernel's socket buffers instead of broker memory.

`MemoryPool`: bytes of request frames being received. A connection reserves a frame's declared
size before reading its body; an exhausted pool mutes connections until a reservation is
released. Non-strict like Kafka's request pool: a reservation succeeds while anything is left,
so one large request is never refused outright. -1 (Kafka's default) means unbounded.
"""

from __future__ import annotations

import asyncio
import contextvars

DEFAULT_QUEUED_MAX_REQUESTS = 500
UNBOUNDED = -1


class _Slot:
    __slots__ = ("_slots", "held")

    def __init__(self, slots: RequestSlots) -> None:
        self._slots = slots
        self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self._slots._semaphore.release()


_CURRENT: contextvars.ContextVar[_Slot | None] = contextvars.ContextVar(
    "request_slot", default=None
)


class RequestSlots:
    """At most `queued_max_requests` requests decoded and not yet answered or parked."""

    def __init__(self, queued_max_requests: int = DEFAULT_QUEUED_MAX_REQUESTS) -> None:
        if queued_max_requests < 1:
            raise ValueError(f"queued.max.requests must be at least 1, got {queued_max_requests}")
        self.capacity = queued_max_requests
        self._semaphore = asyncio.Semaphore(queued_max_requests)

    @property
    def in_use(self) -> int:
        return self.capacity - self._semaphore._value

    def slot(self) -> _Holding:
        """`async with` it: hold a slot while the body runs (or until `release_request_slot`
        is called in it)."""
        return _Holding(self)


class _Holding:
    """The context `RequestSlots.slot` returns; a class rather than an `asynccontextmanager`,
    whose generator machinery cost more than the rest of a small request's bookkeeping."""

    __slots__ = ("_slots", "_slot", "_token")

    def __init__(self, slots: RequestSlots) -> None:
        self._slots = slots

    async def __aenter__(self) -> None:
        await self._slots._semaphore.acquire()
        self._slot = _Slot(self._slots)
        self._token = _CURRENT.set(self._slot)

    async def __aexit__(self, *_exc: object) -> None:
        _CURRENT.reset(self._token)
        self._slot.release()


def release_request_slot() -> None:
    """The running request leaves the queue (it is about to wait in purgatory)."""
    slot = _CURRENT.get()
    if slot is not None:
        slot.release()


class MemoryPool:
    """Bytes reserved by request frames being received, bounded by `queued.max.request.bytes`."""

    def __init__(self, max_bytes: int = UNBOUNDED) -> None:
        self.max_bytes = max_bytes
        self.reserved = 0
        self._freed = asyncio.Event()

    @property
    def bounded(self) -> bool:
        return self.max_bytes > 0

    async def reserve(self, size: int) -> int:
        """Wait until the pool has room (anything left, non-strict), then take `size` bytes."""
        if not self.bounded:
            return 0
        while self.reserved >= self.max_bytes:
            self._freed.clear()
            await self._freed.wait()
        self.reserved += size
        return size

    def release(self, size: int) -> None:
        if size:
            self.reserved -= size
            self._freed.set()
