"""The coordinators' clock: wall-clock milliseconds that never jump inside one process.

What the group and transaction coordinators compare with `now_ms` is persisted: an offset's
commit time, the time a group became Empty, a transaction's start (Kafka's
`OffsetAndMetadata.commitTimestampMs`, `ClassicGroup.currentStateTimestamp`,
`TransactionMetadata.txnStartTimestamp`). A coordinator started later, maybe on another host,
compares them with its own `now_ms`, so that clock must be the wall clock (STYLE 18): machine
uptime once made a driver restarted on a host with more uptime expire an Empty group's offsets
at its first check, and one with less uptime hold an abandoned transaction open for days.

The same `now_ms` also drives in-process deadlines (sessions, rebalance and transaction
timeouts). Kafka reads `Time.milliseconds()` for those and lives with a wall clock that steps;
here a step must not expire every session at once, nor keep one alive for days. So the clock
reads the wall clock once, at start, and advances with the monotonic clock from there: across
processes it is the wall clock, inside one it never jumps. `not_before(ms)` moves it forward
to the newest time the table already holds, so a wall clock set back since the last write
cannot make persisted times lie in the future (an abandoned transaction is then aborted one
timeout after the restart, not when the wall clock catches up).

What this cannot tell apart: a wall clock moved forward while the coordinator was down looks
like time that passed; offsets of an Empty group older than `offsets.retention.minutes` by that
clock expire, as they would in Kafka.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

#: Persisted times below this (2001-09-09) were never wall-clock readings: coordinators before
#: issue 27 wrote machine uptime. Such a time counts from when it is loaded.
WALL_CLOCK_FLOOR_MS = 1_000_000_000_000


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def loaded_ms(value: int, now_ms: int) -> int:
    """A persisted time as the coordinator uses it: `now_ms` for one written as uptime by an
    old coordinator (its age is unknown, so it starts now), else the value itself. Negative
    values are sentinels (no transaction open) and stay."""
    return now_ms if 0 <= value < WALL_CLOCK_FLOOR_MS else value


def describe_ms(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).isoformat(timespec="seconds")


class CoordinatorClock:
    """Wall-clock milliseconds read once, advanced by the monotonic clock; callable.

    Invariant: successive calls never decrease. Thread-safe (reads only, after `not_before`,
    which the owner calls before serving).
    """

    def __init__(
        self,
        wall_ms: Callable[[], int] = wall_clock_ms,
        mono_ms: Callable[[], int] = monotonic_ms,
    ) -> None:
        self._mono_ms = mono_ms
        self._offset_ms = wall_ms() - mono_ms()

    def __call__(self) -> int:
        return self._mono_ms() + self._offset_ms

    def not_before(self, ms: int | None) -> None:
        """Move the clock forward to `ms` if it is behind (never back)."""
        now = self()
        if ms is None or ms <= now:
            return
        logger.warning(
            "the wall clock (%s) is %.1f s behind the newest time in the coordinator's table "
            "(%s): it was set back since then; the coordinator counts from %s so that no "
            "persisted time lies in its future",
            describe_ms(now),
            (ms - now) / 1000,
            describe_ms(ms),
            describe_ms(ms),
        )
        self._offset_ms += ms - now
