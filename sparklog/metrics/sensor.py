"""Sensors (Kafka's `org.apache.kafka.common.metrics.Sensor`).

A sensor is the thing code records into: `sensor.record(value)` updates every stat added to
it (and its parents'), then checks the quota of each of its metrics that has one, raising
`QuotaViolation` with the measured value and the bound (the quota managers turn that into a
throttle time). A sensor remembers when it last recorded, so `Metrics` can expire sensors
nobody used for a while (Kafka drops a quota sensor of an idle client after an hour).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sparklog.metrics.metric import KafkaMetric, MetricName
from sparklog.metrics.stats import MeasurableStat, MetricConfig, Stat


class SensorRegistry(Protocol):
    """What a sensor needs of its registry (`registry.Metrics`)."""

    def now_ms(self) -> int: ...

    def metric(self, name: MetricName) -> KafkaMetric | None: ...

    def _register(
        self, name: MetricName, measurable: MeasurableStat, config: MetricConfig
    ) -> KafkaMetric: ...


class QuotaViolation(Exception):
    """A recorded value took a metric over its quota (Kafka's `QuotaViolationException`)."""

    def __init__(self, metric: MetricName, value: float, bound: float) -> None:
        super().__init__(f"{metric.jmx} is {value:.3f}, over its quota of {bound:.3f}")
        self.metric = metric
        self.value = value
        self.bound = bound


class Sensor:
    """Records values into its stats; made and looked up by `Metrics.sensor`."""

    __slots__ = (
        "name",
        "_registry",
        "config",
        "parents",
        "inactive_expiration_ms",
        "last_record_ms",
        "_stats",
        "_metrics",
        "_quota_metrics",
    )

    def __init__(
        self,
        registry: SensorRegistry,
        name: str,
        config: MetricConfig,
        parents: Sequence[Sensor] = (),
        inactive_expiration_ms: int | None = None,
    ) -> None:
        self.name = name
        self._registry = registry
        self.config = config
        self.parents = tuple(parents)
        self.inactive_expiration_ms = inactive_expiration_ms
        self.last_record_ms = registry.now_ms()
        self._stats: list[tuple[Stat, MetricConfig]] = []
        self._metrics: list[KafkaMetric] = []
        self._quota_metrics: list[KafkaMetric] = []

    def add(
        self, metric_name: MetricName, stat: MeasurableStat, config: MetricConfig | None = None
    ) -> KafkaMetric:
        """Add a stat measured as the metric `metric_name` (registered with the registry;
        a metric of that name already there is returned as is, as Kafka does)."""
        existing = self._registry.metric(metric_name)
        if existing is not None:
            return existing
        config = config or self.config
        metric = self._registry._register(metric_name, stat, config)
        self._stats.append((stat, config))
        self._metrics.append(metric)
        if config.quota is not None:
            self._quota_metrics.append(metric)
        return metric

    def add_stat(self, stat: Stat, config: MetricConfig | None = None) -> None:
        """Add a stat that is recorded into but not itself a metric (a `Percentiles` whose
        percentiles are registered separately, say)."""
        self._stats.append((stat, config or self.config))

    @property
    def metrics(self) -> list[KafkaMetric]:
        return list(self._metrics)

    def record(
        self, value: float = 1.0, now_ms: int | None = None, *, check_quotas: bool = True
    ) -> None:
        """Record `value` into every stat (then the parents'); with `check_quotas`, raise
        `QuotaViolation` for the first of this sensor's metrics now over its quota (the
        value stays recorded, as Kafka's does)."""
        if now_ms is None:
            now_ms = self._registry.now_ms()
        self.last_record_ms = now_ms
        for stat, config in self._stats:
            stat.record(config, value, now_ms)
        if check_quotas and self._quota_metrics:
            self.check_quotas(now_ms)
        for parent in self.parents:
            parent.record(value, now_ms, check_quotas=check_quotas)

    def check_quotas(self, now_ms: int | None = None) -> None:
        """Raise `QuotaViolation` when one of this sensor's metrics is over its quota."""
        if now_ms is None:
            now_ms = self._registry.now_ms()
        for metric in self._quota_metrics:
            quota = metric.config.quota
            assert quota is not None
            value = metric.value(now_ms)
            if not quota.acceptable(value):
                raise QuotaViolation(metric.name, value, quota.bound)

    def set_quota(self, metric_name: MetricName, config: MetricConfig) -> None:
        """Change one metric's config (its quota: a quota altered at runtime)."""
        for metric in self._metrics:
            if metric.name == metric_name:
                metric.config = config
        self._quota_metrics = [m for m in self._metrics if m.config.quota is not None]

    def has_expired(self, now_ms: int) -> bool:
        return (
            self.inactive_expiration_ms is not None
            and now_ms - self.last_record_ms > self.inactive_expiration_ms
        )
