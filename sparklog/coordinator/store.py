"""Where the coordinators' rows live: the `CoordinatorStore` protocol, satisfied by the Delta
table (`offsets_store.OffsetsStore`) and by `InMemoryStore` (tests, simulations, the
benchmarks' no-durability baseline).

An append comes in two steps so the runtime can pipeline them (Kafka's `CoordinatorRuntime`
builds its next write batch while the previous one is being written): `prepare(rows)` does
everything that does not touch the table's log (numbering the rows, writing their data file)
and `commit(prepared)` makes one prepared append durable. Prepared appends are committed in
the order they were prepared; a prepared append that is never committed (the coordinator was
fenced, or crashed) leaves at most an unreferenced file, never a row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from sparklog.coordinator.shard import Row


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedAppend:
    """Rows numbered `first_sequence`..`last_sequence`, ready to commit (`payload` is the
    store's own: the Delta store's data file and add action, the rows in memory)."""

    first_sequence: int
    last_sequence: int
    payload: Any

    @property
    def rows(self) -> int:
        return self.last_sequence - self.first_sequence + 1


class CoordinatorStore(Protocol):
    """An append-only table of rows. `append` and `commit` are atomic (all rows or none) and
    raise `OffsetsStoreFencedError` when another coordinator took the table over."""

    def read_rows(self) -> Iterable[Row]:
        """Every row, in the order it was appended."""
        ...

    def append(self, rows: list[Row]) -> None:
        """Persist `rows` in one durable commit (`sync(commit([prepare(rows)]))`)."""
        ...

    def prepare(self, rows: list[Row]) -> PreparedAppend:
        """Number `rows` after every row prepared before and stage them (not yet visible).
        May run while the previous prepared append is being committed, never beside another
        `prepare`."""
        ...

    def commit(self, prepared: Sequence[PreparedAppend]) -> int:
        """Add prepared appends to the table in one commit, in preparation order; the
        version to `sync` before anyone is told."""
        ...

    def sync(self, version: int) -> None:
        """Make every commit up to `version` durable (raises when the disk fails)."""
        ...

    def discard(self, prepared: PreparedAppend) -> None:
        """Forget a prepared append that will never be committed (best effort)."""
        ...

    def version(self) -> int:
        """The table's version (the coordinator epoch derives from it)."""
        ...

    def wait_for_maintenance(self, timeout_s: float = 60.0) -> None:
        """Wait for background upkeep (compaction, checkpoints, vacuum) to end: a stopped
        coordinator leaves nothing writing to its table."""
        ...


class InMemoryStore:
    """A `CoordinatorStore` in memory: rows survive a coordinator restart within the process."""

    def __init__(self, path: str = "memory", maintenance_commits: int = 0) -> None:
        self.path = path
        self.rows: list[Row] = []
        self.commits = 0
        self._prepared_sequence = 0

    def read_rows(self) -> list[Row]:
        return [dict(r) for r in self.rows]

    def append(self, rows: list[Row]) -> None:
        self.sync(self.commit([self.prepare(rows)]))

    def prepare(self, rows: list[Row]) -> PreparedAppend:
        first = self._prepared_sequence
        self._prepared_sequence += len(rows)
        return PreparedAppend(first, first + len(rows) - 1, [dict(r) for r in rows])

    def commit(self, prepared: Sequence[PreparedAppend]) -> int:
        for p in prepared:
            self.rows.extend(p.payload)
        self.commits += 1
        return self.commits

    def sync(self, version: int) -> None:
        """Memory is as durable as it gets."""

    def discard(self, prepared: PreparedAppend) -> None:
        """Nothing was staged outside memory."""

    def version(self) -> int:
        return self.commits

    def wait_for_maintenance(self, timeout_s: float = 60.0) -> None:
        """Nothing runs in the background here."""
