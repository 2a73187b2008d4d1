"""The metrics registry of one server (Kafka's `Metrics` plus the Yammer registry its broker
uses for `kafka.server:type=BrokerTopicMetrics,...` and friends).

Every metric is named as Kafka's JMX name (`MetricName`: domain, type, name, tags), which the
Prometheus exposition turns into the JMX exporter's names (`kafka.server:type=
BrokerTopicMetrics,name=BytesInPerSec,topic=t` → `kafka_server_brokertopicmetrics_bytesin_
total{topic="t"}`), so Kafka's dashboards and alerts work unchanged. Three kinds:

- **counter** (`Metrics.meter`: a Yammer meter, `...PerSec`): `mark(n)` adds to a count; the
  cheapest thing to record on a hot path (one addition).
- **summary** (`Metrics.histogram`: a Yammer histogram, `TotalTimeMs`, ...): `update(value)`
  records into `Percentiles` over the sampled windows, plus a cumulative count and sum.
- **gauge** (`Metrics.gauge`: a callable read at scrape time; or a sensor's measurable stat,
  `Metrics.sensor(...).add(name, Rate())`).

Names a server records into on hot paths are looked up once (keep the `Meter`/`Sensor`), not
per call. Time is this process's monotonic clock in ms unless a test passes its own.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import cast

from sparklog.metrics.metric import SUMMARY_QUANTILES, KafkaMetric, MetricKind, MetricName
from sparklog.metrics.sensor import Sensor
from sparklog.metrics.stats import Measurable, MeasurableStat, MetricConfig, Percentiles


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class Meter:
    """A count of events or bytes (a Yammer meter; exposed as a Prometheus counter)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0.0

    def mark(self, n: float = 1) -> None:
        self.count += n

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self.count


class Histogram:
    """Values whose distribution matters (latencies, sizes): percentiles over the sampled
    windows, and a cumulative count and sum (a Yammer histogram; a Prometheus summary)."""

    __slots__ = ("config", "percentiles", "count", "sum", "_clock")

    def __init__(self, config: MetricConfig, clock: Callable[[], int]) -> None:
        self.config = config
        self.percentiles = Percentiles()
        self.count = 0
        self.sum = 0.0
        self._clock = clock

    def update(self, value: float, now_ms: int | None = None) -> None:
        self.percentiles.record(self.config, value, self._clock() if now_ms is None else now_ms)
        self.count += 1
        self.sum += value

    def quantiles(
        self, quantiles: Sequence[float] = SUMMARY_QUANTILES, now_ms: int | None = None
    ) -> list[float]:
        now_ms = self._clock() if now_ms is None else now_ms
        return self.percentiles.percentiles(self.config, quantiles, now_ms)

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self.sum / self.count if self.count else math.nan


class Metrics:
    """The registry: named metrics, and the sensors that record into them."""

    def __init__(
        self, config: MetricConfig | None = None, *, clock: Callable[[], int] = monotonic_ms
    ) -> None:
        self.config = config or MetricConfig()
        self._clock = clock
        self._metrics: dict[MetricName, KafkaMetric] = {}
        self._sensors: dict[str, Sensor] = {}

    def now_ms(self) -> int:
        return self._clock()

    # -- sensors -----------------------------------------------------------------------------

    def sensor(
        self,
        name: str,
        config: MetricConfig | None = None,
        parents: Sequence[Sensor] = (),
        inactive_expiration_ms: int | None = None,
    ) -> Sensor:
        """The sensor called `name`, made on first use."""
        sensor = self._sensors.get(name)
        if sensor is None:
            sensor = Sensor(self, name, config or self.config, parents, inactive_expiration_ms)
            self._sensors[name] = sensor
        return sensor

    def get_sensor(self, name: str) -> Sensor | None:
        return self._sensors.get(name)

    def remove_sensor(self, name: str) -> None:
        """Drop a sensor and the metrics it measures."""
        sensor = self._sensors.pop(name, None)
        if sensor is not None:
            for metric in sensor.metrics:
                self._metrics.pop(metric.name, None)

    def expire_inactive_sensors(self, now_ms: int | None = None) -> list[str]:
        """Remove the sensors idle longer than their `inactive_expiration_ms`; their names."""
        now_ms = self.now_ms() if now_ms is None else now_ms
        expired = [name for name, s in self._sensors.items() if s.has_expired(now_ms)]
        for name in expired:
            self.remove_sensor(name)
        return expired

    # -- metrics -----------------------------------------------------------------------------

    def meter(self, name: MetricName) -> Meter:
        """The counter called `name`, made on first use."""
        metric = self._metrics.get(name)
        if metric is None:
            metric = self._register(name, Meter(), self.config, MetricKind.COUNTER)
        return cast(Meter, metric.measurable)

    def histogram(self, name: MetricName) -> Histogram:
        """The histogram called `name`, made on first use."""
        metric = self._metrics.get(name)
        if metric is None:
            histogram = Histogram(self.config, self._clock)
            metric = self._register(name, histogram, self.config, MetricKind.SUMMARY)
        return cast(Histogram, metric.measurable)

    def gauge(self, name: MetricName, read: Callable[[], float]) -> KafkaMetric:
        """A metric read by calling `read` at scrape time (replaces one of the same name)."""
        self._metrics.pop(name, None)
        return self._register(name, read, self.config, MetricKind.GAUGE)

    def add_metric(
        self,
        name: MetricName,
        measurable: MeasurableStat | Measurable,
        config: MetricConfig | None = None,
    ) -> KafkaMetric:
        """A measurable (a stat nobody records into through a sensor, or a custom one) as a
        gauge."""
        self._metrics.pop(name, None)
        return self._register(name, measurable, config or self.config, MetricKind.GAUGE)

    def metric(self, name: MetricName) -> KafkaMetric | None:
        return self._metrics.get(name)

    def remove(self, name: MetricName) -> None:
        self._metrics.pop(name, None)

    def remove_matching(self, predicate: Callable[[MetricName], bool]) -> int:
        """Drop every metric whose name matches (a deleted topic's, a closed partition's)."""
        doomed = [name for name in self._metrics if predicate(name)]
        for name in doomed:
            del self._metrics[name]
        return len(doomed)

    def metrics(self) -> Mapping[MetricName, KafkaMetric]:
        return self._metrics

    def __iter__(self) -> Iterator[KafkaMetric]:
        return iter(list(self._metrics.values()))

    def __len__(self) -> int:
        return len(self._metrics)

    def _register(
        self,
        name: MetricName,
        measurable: Measurable | Callable[[], float],
        config: MetricConfig,
        kind: MetricKind = MetricKind.GAUGE,
    ) -> KafkaMetric:
        metric = KafkaMetric(self._clock, name, kind, measurable, config)
        self._metrics[name] = metric
        return metric
