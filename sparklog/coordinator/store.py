"""Where the coordinators' rows live: the `CoordinatorStore` protocol, satisfied by the Delta
table (`offsets_store.OffsetsStore`) and by `InMemoryStore` (tests, simulations, the
benchmarks' no-durability baseline)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from sparklog.coordinator.shard import Row


class CoordinatorStore(Protocol):
    """An append-only table of rows. `append` is atomic (all rows or none) and raises
    `OffsetsStoreFencedError` when another coordinator took the table over."""

    def read_rows(self) -> Iterable[Row]:
        """Every row, in the order it was appended."""
        ...

    def append(self, rows: list[Row]) -> None:
        """Persist `rows` in one commit."""
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

    def read_rows(self) -> list[Row]:
        return [dict(r) for r in self.rows]

    def append(self, rows: list[Row]) -> None:
        self.rows.extend(dict(r) for r in rows)
        self.commits += 1

    def version(self) -> int:
        return self.commits

    def wait_for_maintenance(self, timeout_s: float = 60.0) -> None:
        """Nothing runs in the background here."""
