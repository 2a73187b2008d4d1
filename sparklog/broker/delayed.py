"""Requests that wait for a partition to change: long-polling fetches and acks=all produces
(Kafka's `DelayedOperationPurgatory`, reduced to what asyncio needs).

A waiting request registers one future under every partition it watches and sleeps until one of
them is notified (an append, a high-watermark move, a leadership change) or its deadline passes;
it then re-checks its own condition, so a spurious wake-up is harmless. Waiters are bounded by
`max_waiters`: beyond it a request does not wait and is answered with what it has, which keeps
memory bounded under a flood of idle consumers.

Thread-safety: none; use from the broker's event loop only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable

from sparklog.protocol.request_queue import release_request_slot

DEFAULT_MAX_WAITERS = 10_000


class DelayedOperations:
    """Futures keyed by partition, woken by `notify`."""

    def __init__(self, max_waiters: int = DEFAULT_MAX_WAITERS) -> None:
        self.max_waiters = max_waiters
        self._waiters: dict[Hashable, set[asyncio.Future[None]]] = {}
        self._count = 0
        self.closed = False

    @property
    def waiting_count(self) -> int:
        return self._count

    def statistics(self) -> dict[str, int]:
        return {"waiting": self._count, "keys": len(self._waiters), "max": self.max_waiters}

    async def wait_any(self, keys: Iterable[Hashable], timeout_s: float) -> bool:
        """Sleep until one of `keys` is notified (True) or `timeout_s` passes (False)."""
        keys = list(keys)
        if self.closed or timeout_s <= 0 or not keys or self._count >= self.max_waiters:
            return False
        release_request_slot()  # a parked request leaves queued.max.requests, as in Kafka
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._waiters.setdefault(key, set()).add(future)
        self._count += 1
        try:
            async with asyncio.timeout(timeout_s):
                await future
            return True
        except TimeoutError:
            return False
        finally:
            self._count -= 1
            for key in keys:
                futures = self._waiters.get(key)
                if futures is not None:
                    futures.discard(future)
                    if not futures:
                        del self._waiters[key]

    def notify(self, key: Hashable) -> int:
        """Wake every waiter on `key`; returns how many were woken."""
        woken = 0
        for future in self._waiters.get(key, ()):
            if not future.done():
                future.set_result(None)
                woken += 1
        return woken

    def close(self) -> None:
        """Shutdown: wake everyone, and let nobody wait from now on."""
        self.closed = True
        self.notify_all()

    def notify_all(self) -> None:
        """Wake everyone."""
        for futures in self._waiters.values():
            for future in futures:
                if not future.done():
                    future.set_result(None)


async def wait_until(
    operations: DelayedOperations,
    keys: Iterable[Hashable],
    done: Callable[[], bool],
    timeout_s: float,
) -> bool:
    """Re-check `done()` after every notification on `keys` until it holds or time runs out."""
    keys = list(keys)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not done():
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        if not await operations.wait_any(keys, remaining):
            return done()  # timed out, or too many waiters to wait at all
    return True
