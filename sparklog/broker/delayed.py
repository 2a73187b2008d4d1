"""Requests that wait for a partition to change: long-polling fetches and acks=all produces
(Kafka's `DelayedOperationPurgatory`, reduced to what asyncio needs).

A waiting request registers one `Waiter` under every partition it watches, once, and sleeps
until one of them is notified (an append, a high-watermark move, a leadership change) or its
deadline passes; it then re-checks its own condition for the partitions notified since it last
looked, so a spurious wake-up is harmless and a wake costs what changed, not what is watched.
A follower's fetch watches every partition it replicates from this leader, so it registers
under one `FollowerFetches` key instead, which the leader notifies with the partition as the
item (registering under hundreds of partition keys per fetch cost a tenth of the leader's
time with 1,000 partitions).
Waiters are bounded by `max_waiters`: beyond it a request does not wait and is answered with
what it has, which keeps memory bounded under a flood of idle consumers.

Thread-safety: none; use from the broker's event loop only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable
from typing import NamedTuple

from sparklog.protocol.request_queue import release_request_slot

DEFAULT_MAX_WAITERS = 10_000


class FollowerFetches(NamedTuple):
    """The key under which fetches from follower `replica_id` wait (a 1-tuple: never equal to
    a (topic, partition) key)."""

    replica_id: int


class Waiter:
    """One waiting request: the items notified since it last looked (`take`)."""

    __slots__ = ("_future", "_woken")

    def __init__(self) -> None:
        self._future: asyncio.Future[None] | None = None
        self._woken: set[Hashable] = set()

    def wake(self, item: Hashable | None) -> bool:
        if item is not None:
            self._woken.add(item)
        if self._future is not None and not self._future.done():
            self._future.set_result(None)
            return True
        return False

    def take(self) -> set[Hashable]:
        """The items notified since the last call."""
        woken, self._woken = self._woken, set()
        return woken


class DelayedOperations:
    """Waiters keyed by partition, woken by `notify`."""

    def __init__(self, max_waiters: int = DEFAULT_MAX_WAITERS) -> None:
        self.max_waiters = max_waiters
        self._waiters: dict[Hashable, set[Waiter]] = {}
        self._count = 0
        self.closed = False

    @property
    def waiting_count(self) -> int:
        return self._count

    def statistics(self) -> dict[str, int]:
        return {"waiting": self._count, "keys": len(self._waiters), "max": self.max_waiters}

    def register(self, keys: list[Hashable]) -> Waiter | None:
        """Watch `keys` until `unregister`; None when nobody may wait (shut down, too many
        waiters, nothing to watch)."""
        if self.closed or not keys or self._count >= self.max_waiters:
            return None
        release_request_slot()  # a parked request leaves queued.max.requests, as in Kafka
        waiter = Waiter()
        waiters = self._waiters
        for key in keys:
            found = waiters.get(key)
            if found is None:
                waiters[key] = {waiter}
            else:
                found.add(waiter)
        self._count += 1
        return waiter

    def unregister(self, waiter: Waiter, keys: list[Hashable]) -> None:
        self._count -= 1
        waiters = self._waiters
        for key in keys:
            found = waiters.get(key)
            if found is not None:
                found.discard(waiter)
                if not found:
                    del waiters[key]

    async def wait(self, waiter: Waiter, timeout_s: float) -> bool:
        """Sleep until one of the waiter's keys is notified (True; at once if one was since its
        last `take`) or `timeout_s` passes or the operations shut down (False)."""
        if self.closed or timeout_s <= 0:
            return False
        if waiter._woken:
            return True
        waiter._future = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout_s):
                await waiter._future
            return not self.closed
        except TimeoutError:
            return False
        finally:
            waiter._future = None

    def notify(self, key: Hashable, item: Hashable | None = None) -> int:
        """Wake every waiter on `key`, telling it `item` changed (default: the key itself);
        returns how many were woken."""
        woken = 0
        if item is None:
            item = key
        for waiter in self._waiters.get(key, ()):
            woken += waiter.wake(item)
        return woken

    def close(self) -> None:
        """Shutdown: wake everyone, and let nobody wait from now on."""
        self.closed = True
        self.notify_all()

    def notify_all(self) -> None:
        """Wake everyone."""
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.wake(None)


async def wait_until(
    operations: DelayedOperations,
    keys: Iterable[Hashable],
    done: Callable[[set[Hashable] | None], bool],
    timeout_s: float,
    *,
    looked: bool = False,
) -> bool:
    """Re-check `done(woken)` after notifications on `keys` until it holds or time runs out.

    `woken` is the set of items notified since the last check, or None when everything must be
    looked at (the first check, skipped when the caller has just `looked`, and the last one at
    the deadline): a request watching many partitions re-checks only those that changed."""
    if not looked and done(None):
        return True
    keys = list(keys)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    waiter = operations.register(keys) if timeout_s > 0 else None
    if waiter is None:
        return False
    try:
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0 or not await operations.wait(waiter, remaining):
                return done(None)  # timed out or shutting down: a last full look
            if done(waiter.take()):
                return True
    finally:
        operations.unregister(waiter, keys)
