"""What the unit tests of quota enforcement share: Kafka's default quota windows, a clock the
test moves, and a resolved quota as a `QuotaSource` answers one (limit + metric tags)."""

from __future__ import annotations

from dataclasses import dataclass

from sparklog.metrics.stats import MetricConfig

#: `quota.window.num` (11) × `quota.window.size.seconds` (1)
QUOTA_WINDOWS = MetricConfig(samples=11, time_window_ms=1000)


class Clock:
    """Milliseconds the test sets (`clock.ms += 1000`)."""

    def __init__(self, start_ms: int = 1_000_000) -> None:
        self.ms = start_ms

    def __call__(self) -> int:
        return self.ms


@dataclass(frozen=True)
class Resolved:
    limit: float
    tags: tuple[tuple[str, str], ...]
