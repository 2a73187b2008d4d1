"""Requests waiting for their transactional id to settle (a small purgatory, in the spirit of
Kafka's `DelayedOperationPurgatory`): instead of answering CONCURRENT_TRANSACTIONS at once and
making the client back off, a request for an id with a write in flight or markers being
written waits — at most `PARK_MS`, at most `MAX_PARKED_PER_ID` per id — and runs again when
the id settles. No I/O, no clock: times are passed in."""

from __future__ import annotations

from collections.abc import Callable

#: How long a request may wait for its transactional id to settle before it is answered
#: CONCURRENT_TRANSACTIONS (the client then retries as it would have at once).
PARK_MS = 5_000
MAX_PARKED_PER_ID = 16


class ParkedRequests:
    """Per transactional id: (deadline, retry(now_ms), give_up()) of each waiting request."""

    def __init__(self) -> None:
        self._parked: dict[str, list[tuple[int, Callable[[int], None], Callable[[], None]]]] = {}

    def park(
        self, tid: str, now_ms: int, retry: Callable[[int], None], give_up: Callable[[], None]
    ) -> bool:
        """Hold a request for `tid` (the caller checked the id is settling). False: full."""
        parked = self._parked.setdefault(tid, [])
        if len(parked) >= MAX_PARKED_PER_ID:
            return False
        parked.append((now_ms + PARK_MS, retry, give_up))
        return True

    def release(self, tid: str, now_ms: int) -> None:
        """`tid` settled: run every request waiting for it again."""
        for _deadline, retry, _give_up in self._parked.pop(tid, []):
            retry(now_ms)

    def expire(self, now_ms: int) -> None:
        """Give up the requests that waited `PARK_MS`."""
        for tid, parked in list(self._parked.items()):
            keep = [p for p in parked if p[0] > now_ms]
            for deadline, _retry, give_up in parked:
                if deadline <= now_ms:
                    give_up()
            if keep:
                self._parked[tid] = keep
            else:
                del self._parked[tid]
