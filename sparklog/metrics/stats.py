"""Measurable statistics with Kafka's semantics (`org.apache.kafka.common.metrics.stats`).

A sampled stat keeps `MetricConfig.samples` windows of `time_window_ms` each; recording into
a window older than its length (or holding `event_window` events) starts the next one,
recycling the oldest; measuring first resets windows older than `samples × time_window_ms`.
`Rate` divides a windowed sum by the elapsed time Kafka's `Rate.windowSize` gives: from the
oldest live window's start to now, but never less than `samples − 1` full windows (so a rate
does not spike when the first window has barely started). Times are milliseconds on one
process's clock (`Metrics.now_ms`); nothing here reads a clock itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

#: Kafka's `metrics.num.samples` and `metrics.sample.window.ms` defaults.
DEFAULT_SAMPLES = 2
DEFAULT_TIME_WINDOW_MS = 30_000


@dataclass(frozen=True, slots=True)
class MetricConfig:
    """How a sampled stat windows its values, and the quota its value must stay within."""

    samples: int = DEFAULT_SAMPLES
    time_window_ms: int = DEFAULT_TIME_WINDOW_MS
    event_window: int = 2**63 - 1
    #: checked by `Sensor.record` (None: no quota)
    quota: Quota | None = None

    def with_quota(self, quota: Quota | None) -> MetricConfig:
        return replace(self, quota=quota)


@dataclass(frozen=True, slots=True)
class Quota:
    """An upper (or lower) bound a metric's value must respect (Kafka's `Quota`)."""

    bound: float
    upper: bool = True

    def acceptable(self, value: float) -> bool:
        return value <= self.bound if self.upper else value >= self.bound

    @classmethod
    def upper_bound(cls, bound: float) -> Quota:
        return cls(bound, True)

    @classmethod
    def lower_bound(cls, bound: float) -> Quota:
        return cls(bound, False)


class Stat(Protocol):
    def record(self, config: MetricConfig, value: float, now_ms: int) -> None: ...


class Measurable(Protocol):
    def measure(self, config: MetricConfig, now_ms: int) -> float: ...


class MeasurableStat(Stat, Measurable, Protocol):
    pass


class _Sample:
    __slots__ = ("initial", "value", "event_count", "last_window_ms")

    def __init__(self, initial: float, now_ms: int) -> None:
        self.initial = initial
        self.value = initial
        self.event_count = 0
        self.last_window_ms = now_ms

    def reset(self, now_ms: int) -> None:
        self.value = self.initial
        self.event_count = 0
        self.last_window_ms = now_ms

    def is_complete(self, now_ms: int, config: MetricConfig) -> bool:
        return (
            now_ms - self.last_window_ms >= config.time_window_ms
            or self.event_count >= config.event_window
        )


class SampledStat:
    """A stat over `config.samples` rolling windows (Kafka's `SampledStat`)."""

    __slots__ = ("_initial", "_samples", "_current")

    def __init__(self, initial: float = 0.0) -> None:
        self._initial = initial
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if sample.is_complete(now_ms, config):
            sample = self._advance(config, now_ms)
        self._update(sample, value)
        sample.event_count += 1

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        self._purge_obsolete(config, now_ms)
        return self._combine(self._samples, config, now_ms)

    def current_window_value(self, config: MetricConfig, now_ms: int) -> float:
        """The value of the window `now_ms` falls in (the initial value when that window
        has not started: nothing was recorded in it yet)."""
        if not self._samples:
            return self._initial
        sample = self._samples[self._current]
        if sample.is_complete(now_ms, config):
            return self._initial
        return sample.value

    def oldest_window_ms(self, now_ms: int) -> int:
        """Start of the oldest live window (now when there is none)."""
        if not self._samples:
            return now_ms
        return min(s.last_window_ms for s in self._samples)

    # -- for subclasses ----------------------------------------------------------------------

    def _new_sample(self, now_ms: int) -> _Sample:
        return _Sample(self._initial, now_ms)

    def _update(self, sample: _Sample, value: float) -> None:
        raise NotImplementedError

    def _combine(self, samples: Sequence[_Sample], config: MetricConfig, now_ms: int) -> float:
        raise NotImplementedError

    # -- windows -----------------------------------------------------------------------------

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(self._new_sample(now_ms))
        return self._samples[self._current]

    def _advance(self, config: MetricConfig, now_ms: int) -> _Sample:
        self._current = (self._current + 1) % max(1, config.samples)
        if self._current >= len(self._samples):
            sample = self._new_sample(now_ms)
            self._samples.append(sample)
        else:
            sample = self._samples[self._current]
            sample.reset(now_ms)
        return sample

    def _purge_obsolete(self, config: MetricConfig, now_ms: int) -> None:
        expire_age = config.samples * config.time_window_ms
        for sample in self._samples:
            if now_ms - sample.last_window_ms >= expire_age:
                sample.reset(now_ms)


class WindowedSum(SampledStat):
    """The sum of the values in the live windows."""

    __slots__ = ()

    def _update(self, sample: _Sample, value: float) -> None:
        sample.value += value

    def _combine(self, samples: Sequence[_Sample], config: MetricConfig, now_ms: int) -> float:
        return float(sum(s.value for s in samples))


class WindowedCount(WindowedSum):
    """How many values were recorded in the live windows."""

    __slots__ = ()

    def _update(self, sample: _Sample, value: float) -> None:
        sample.value += 1


class Avg(SampledStat):
    """The mean of the values in the live windows (NaN without any)."""

    __slots__ = ()

    def _update(self, sample: _Sample, value: float) -> None:
        sample.value += value

    def _combine(self, samples: Sequence[_Sample], config: MetricConfig, now_ms: int) -> float:
        total = sum(s.value for s in samples)
        count = sum(s.event_count for s in samples)
        return total / count if count else math.nan


class Max(SampledStat):
    """The largest value in the live windows (NaN without any)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(-math.inf)

    def _update(self, sample: _Sample, value: float) -> None:
        sample.value = max(sample.value, value)

    def _combine(self, samples: Sequence[_Sample], config: MetricConfig, now_ms: int) -> float:
        seen = [s.value for s in samples if s.event_count]
        return max(seen) if seen else math.nan


class Min(SampledStat):
    """The smallest value in the live windows (NaN without any)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(math.inf)

    def _update(self, sample: _Sample, value: float) -> None:
        sample.value = min(sample.value, value)

    def _combine(self, samples: Sequence[_Sample], config: MetricConfig, now_ms: int) -> float:
        seen = [s.value for s in samples if s.event_count]
        return min(seen) if seen else math.nan


class Rate:
    """A windowed sum (or count) per second (Kafka's `Rate`, unit seconds)."""

    __slots__ = ("stat",)

    def __init__(self, stat: SampledStat | None = None) -> None:
        self.stat = stat if stat is not None else WindowedSum()

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        self.stat.record(config, value, now_ms)

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        total = self.stat.measure(config, now_ms)
        return total / (self.window_size_ms(config, now_ms) / 1000.0)

    def window_size_ms(self, config: MetricConfig, now_ms: int) -> float:
        """The elapsed time the rate divides by (Kafka's `Rate.windowSize`)."""
        self.stat._purge_obsolete(config, now_ms)
        elapsed = now_ms - self.stat.oldest_window_ms(now_ms)
        full_windows = elapsed // config.time_window_ms
        min_full_windows = config.samples - 1
        if full_windows < min_full_windows:
            elapsed += (min_full_windows - full_windows) * config.time_window_ms
        return float(max(elapsed, 1))


class CumulativeSum:
    """The sum of every value ever recorded (Kafka's `CumulativeSum`; a Prometheus counter)."""

    __slots__ = ("total",)

    def __init__(self, initial: float = 0.0) -> None:
        self.total = initial

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        self.total += value

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self.total


class CumulativeCount(CumulativeSum):
    """How many values were ever recorded (Kafka's `CumulativeCount`)."""

    __slots__ = ()

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        self.total += 1


class Value:
    """The last value recorded (Kafka's `Value`)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = math.nan

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        self.value = value

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self.value


#: Histogram bins grow by this factor: a percentile is exact to within 5 %, from 0.001 up.
_BIN_GROWTH = 1.05
_LOG_GROWTH = math.log(_BIN_GROWTH)
_SMALLEST = 0.001


def _bin(value: float) -> int:
    if value <= _SMALLEST:
        return 0
    return 1 + int(math.log(value / _SMALLEST) / _LOG_GROWTH)


def _bin_value(index: int) -> float:
    """A bin's representative value (its upper edge)."""
    return 0.0 if index == 0 else _SMALLEST * _BIN_GROWTH**index


class _HistogramSample(_Sample):
    __slots__ = ("bins", "total")

    def __init__(self, now_ms: int) -> None:
        super().__init__(0.0, now_ms)
        self.bins: dict[int, int] = {}
        self.total = 0.0

    def reset(self, now_ms: int) -> None:
        super().reset(now_ms)
        self.bins.clear()
        self.total = 0.0


class Percentiles(SampledStat):
    """Percentiles of the values in the live windows, from exponential bins (a bin per 5 %:
    Kafka's `Percentiles` with a fixed bucket scheme, sized for latencies in ms and bytes).
    `measure` answers the median; `percentile(q)` any other; `count`/`total` describe the
    live windows (a Prometheus summary's `_count` and `_sum` are kept cumulative by the
    exposition)."""

    __slots__ = ()

    def _new_sample(self, now_ms: int) -> _Sample:
        return _HistogramSample(now_ms)

    def _update(self, sample: _Sample, value: float) -> None:
        assert isinstance(sample, _HistogramSample)
        index = _bin(value)
        sample.bins[index] = sample.bins.get(index, 0) + 1
        sample.total += value

    def _combine(self, samples: Sequence[_Sample], config: MetricConfig, now_ms: int) -> float:
        return self._percentile(samples, 0.5)

    def percentile(self, config: MetricConfig, quantile: float, now_ms: int) -> float:
        """The value under which `quantile` (0..1) of the live windows' values fall (NaN
        when nothing was recorded)."""
        self._purge_obsolete(config, now_ms)
        return self._percentile(self._samples, quantile)

    def percentiles(
        self, config: MetricConfig, quantiles: Sequence[float], now_ms: int
    ) -> list[float]:
        """`percentile(q)` for each of `quantiles`, the windows merged once (a scrape asks
        for six of every histogram)."""
        self._purge_obsolete(config, now_ms)
        merged: dict[int, int] = {}
        count = 0
        for sample in self._samples:
            assert isinstance(sample, _HistogramSample)
            for index, n in sample.bins.items():
                merged[index] = merged.get(index, 0) + n
            count += sample.event_count
        if not count:
            return [math.nan] * len(quantiles)
        out = [_bin_value(max(merged))] * len(quantiles)
        pending = sorted(range(len(quantiles)), key=lambda i: quantiles[i])
        at = 0
        seen = 0
        for index in sorted(merged):
            seen += merged[index]
            while at < len(pending) and seen >= quantiles[pending[at]] * count:
                out[pending[at]] = _bin_value(index)
                at += 1
            if at == len(pending):
                break
        return out

    @staticmethod
    def _percentile(samples: Sequence[_Sample], quantile: float) -> float:
        merged: dict[int, int] = {}
        count = 0
        for sample in samples:
            assert isinstance(sample, _HistogramSample)
            for index, n in sample.bins.items():
                merged[index] = merged.get(index, 0) + n
            count += sample.event_count
        if not count:
            return math.nan
        rank = quantile * count
        seen = 0
        for index in sorted(merged):
            seen += merged[index]
            if seen >= rank:
                return _bin_value(index)
        return _bin_value(max(merged))
