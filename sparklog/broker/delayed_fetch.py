"""Kafka's `DelayedFetch`: a fetch that waits in the purgatory (`delayed.DelayedOperations`)
until `min_bytes` are there or `max_wait_ms` passed.

A wake re-reads only the partitions notified since the last look: a large session mostly waits
with nothing to read, and re-reading all of it on every append cost more than the appends. Once
something was read (a partial read) or at the deadline, every partition is read again, so the
answer is one consistent read. Thread-safety: none; use from the broker's event loop only.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

from sparklog.broker.delayed import DelayedOperations, wait_until
from sparklog.broker.fetch_params import FetchParams, FetchPartition, FetchResult, Unchanged
from sparklog.records.file_records import FileRecords

#: `read_all(params, partitions, unchanged)`: a fresh read of every partition
ReadAll = Callable[[FetchParams, list[FetchPartition], Unchanged | None], list[FetchResult | None]]
#: `read_into(results, params, partitions, indices, unchanged)`: re-read `partitions[i]` in place
ReadInto = Callable[
    [list[FetchResult | None], FetchParams, list[FetchPartition], Iterable[int], Unchanged | None],
    None,
]


class DelayedFetch:
    """One waiting fetch: its partitions, its latest results and how to read them again."""

    def __init__(
        self,
        params: FetchParams,
        partitions: list[FetchPartition],
        unchanged: Unchanged | None,
        results: list[FetchResult | None],
        *,
        read_all: ReadAll,
        read_into: ReadInto,
    ) -> None:
        self.params = params
        self.partitions = partitions
        self.unchanged = unchanged
        self.results = results
        self._read_all = read_all
        self._read_into = read_into
        self.index = {(p.topic, p.partition): i for i, p in enumerate(partitions)}

    def try_complete(self, woken: set | None) -> bool:
        """Kafka's `tryComplete` (and, with `woken` None, the last look at expiration)."""
        results = self.results
        if woken is None or read_bytes(results):  # the deadline, or a partial read
            close_all(results)
            self.results = self._read_all(self.params, self.partitions, self.unchanged)
        else:  # nothing read yet: only the notified partitions can have news
            index = self.index
            changed = sorted(index[k] for k in woken if k in index)
            if not changed:
                return False
            self._read_into(results, self.params, self.partitions, changed, self.unchanged)
        return fetch_satisfied(self.params, self.results)

    async def wait(
        self, operations: DelayedOperations, keys: Iterable[Hashable]
    ) -> list[FetchResult | None]:
        """Wait under `keys` until satisfied or `max_wait_ms` passed; the results then."""
        await wait_until(
            operations, keys, self.try_complete, self.params.max_wait_ms / 1000, looked=True
        )
        return self.results


def fetch_satisfied(params: FetchParams, results: list[FetchResult | None]) -> bool:
    """Whether a fetch may be answered now: no wait asked, an error, or `min_bytes` read."""
    if params.max_wait_ms <= 0 or not results:
        return True
    if any(r is not None and r.error_code for r in results):
        return True
    return read_bytes(results) >= params.min_bytes


def read_bytes(results: list[FetchResult | None]) -> int:
    return sum(len(r.records) for r in results if r is not None and r.records)


def close_all(results: list[FetchResult | None]) -> None:
    for r in results:
        if r is not None and isinstance(r.records, FileRecords):
            r.records.close()
