"""What a coordinator core hands its runtime (Kafka's `CoordinatorShard` and
`CoordinatorResult`), without I/O.

A core answers a request with records to persist and what to do once they are durable: a
`Write`. The runtime (`runtime.py`) persists many writes in one store commit, then, for each
write in order, replays its rows into every core (`replay(row, now_ms)`, the ONE way a
persisted row changes state, used live and when loading the table at start alike) and calls
`done(now_ms, error_code)`, which answers the client. A failed write replays nothing.

`Write.replay` is False for a classic or KIP-848 group's membership record: the handlers
change the in-memory group as they decide (a rebalance cannot wait for the table), so the
record describes a state already applied — Kafka's classic group handlers return their
records with `replayRecords = false` for the same reason. At start those records are replayed
like every other row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

#: One persisted row of the coordinator table (`offsets_store.SCHEMA`'s columns).
Row = dict[str, Any]


@dataclasses.dataclass(slots=True)
class Write:
    """Rows to persist, and what to do once they are durable (`done(now_ms, error_code)`)."""

    rows: list[Row]
    done: Callable[[int, int], None]
    #: replay the rows into the cores once durable (False: the state is already in memory)
    replay: bool = True


def no_answer(_now_ms: int, _error_code: int) -> None:
    """The `done` of a write nobody waits for."""


class CoordinatorShard(Protocol):
    """A sans-IO core the runtime drives: the group or the transaction coordinator."""

    def take_writes(self) -> list[Write]:
        """Writes produced since the last call, in order."""
        ...

    def replay(self, row: Row, now_ms: int) -> None:
        """Apply one durable row (a row of another core's kind is ignored)."""
        ...

    def replay_rows(self, rows: Iterable[Row], now_ms: int) -> None:
        """`replay` each row, in order (a core may apply a run of rows at once, to the same
        effect: one flush carries ~20k offset rows a second)."""
        ...

    def tick(self, now_ms: int) -> None:
        """Fire the core's timers."""
        ...


def replay_rows(shards: Iterable[CoordinatorShard], rows: Sequence[Row], now_ms: int) -> None:
    """Replay persisted rows, in their persisted order, into every core. Core by core: a
    core's replay reads and changes only its own state, so this is the row-by-row order's
    outcome."""
    for shard in shards:
        shard.replay_rows(rows, now_ms)


def complete_write(
    write: Write, shards: Iterable[CoordinatorShard], now_ms: int, error_code: int
) -> None:
    """A write's outcome is known: replay its rows if they are durable, then answer."""
    if not error_code and write.replay:
        replay_rows(shards, write.rows, now_ms)
    write.done(now_ms, error_code)
