"""The metrics and quota settings every server reads (brokers, the controller, the
coordinators), with Kafka's names and defaults (`metrics.*`, `quota.window.*`) and sparklog's
own (`metrics.prometheus.*`, `sparklog.metrics.enabled`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sparklog.metrics.registry import Metrics
from sparklog.metrics.stats import MetricConfig
from sparklog.settings import ConfigType, Range, Setting, define

METRICS_SETTINGS = define(
    Setting(
        "metrics.num.samples",
        ConfigType.INT,
        2,
        Range(1),
        doc="The number of samples maintained to compute metrics (Kafka's)",
        group="metrics",
    ),
    Setting(
        "metrics.sample.window.ms",
        ConfigType.LONG,
        30_000,
        Range(1),
        doc="The window of time a metrics sample is computed over (Kafka's)",
        group="metrics",
    ),
    Setting(
        "quota.window.num",
        ConfigType.INT,
        11,
        Range(1),
        doc="The number of samples to retain in memory for client quotas (Kafka's)",
        group="metrics",
    ),
    Setting(
        "quota.window.size.seconds",
        ConfigType.INT,
        1,
        Range(1),
        doc="The time span of each sample for client quotas (Kafka's)",
        group="metrics",
    ),
    Setting(
        "controller.quota.window.num",
        ConfigType.INT,
        11,
        Range(1),
        doc="The number of samples to retain in memory for the controller mutation quota "
        "(Kafka's, KIP-599)",
        group="metrics",
    ),
    Setting(
        "controller.quota.window.size.seconds",
        ConfigType.INT,
        1,
        Range(1),
        doc="The time span of each sample for the controller mutation quota (Kafka's, KIP-599)",
        group="metrics",
    ),
    Setting(
        "metrics.prometheus.port",
        ConfigType.INT,
        0,
        Range(-1, 65535),
        doc="sparklog's own: the port this process serves its metrics on in the Prometheus "
        "text format (/metrics); 0 = off, -1 = any free port",
        group="metrics",
    ),
    Setting(
        "metrics.prometheus.host",
        ConfigType.STRING,
        "127.0.0.1",
        doc="sparklog's own: the address the Prometheus endpoint binds",
        group="metrics",
    ),
    Setting(
        "sparklog.metrics.enabled",
        ConfigType.BOOLEAN,
        True,
        doc="sparklog's own: record the request and data-path metrics (false only to measure "
        "what they cost; quotas record their own sensors either way)",
        group="metrics",
    ),
)


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    metrics_num_samples: int = METRICS_SETTINGS.default("metrics.num.samples")
    metrics_sample_window_ms: int = METRICS_SETTINGS.default("metrics.sample.window.ms")
    quota_window_num: int = METRICS_SETTINGS.default("quota.window.num")
    quota_window_size_seconds: int = METRICS_SETTINGS.default("quota.window.size.seconds")
    controller_quota_window_num: int = METRICS_SETTINGS.default("controller.quota.window.num")
    controller_quota_window_size_seconds: int = METRICS_SETTINGS.default(
        "controller.quota.window.size.seconds"
    )
    metrics_prometheus_port: int = METRICS_SETTINGS.default("metrics.prometheus.port")
    metrics_prometheus_host: str = METRICS_SETTINGS.default("metrics.prometheus.host")
    sparklog_metrics_enabled: bool = METRICS_SETTINGS.default("sparklog.metrics.enabled")

    @classmethod
    def from_properties(cls, props: Mapping[str, object] | None) -> MetricsConfig:
        return cls(**METRICS_SETTINGS.parse(props or {}, unknown="ignore"))

    @property
    def metric_config(self) -> MetricConfig:
        """The windows of the server's metrics (`metrics.num.samples` × `.sample.window.ms`)."""
        return MetricConfig(self.metrics_num_samples, self.metrics_sample_window_ms)

    @property
    def quota_config(self) -> MetricConfig:
        """The windows of quota sensors (`quota.window.num` × `quota.window.size.seconds`)."""
        return MetricConfig(self.quota_window_num, self.quota_window_size_seconds * 1000)

    @property
    def controller_quota_config(self) -> MetricConfig:
        """The windows of the controller mutation quota (`controller.quota.window.num` ×
        `controller.quota.window.size.seconds`, KIP-599)."""
        return MetricConfig(
            self.controller_quota_window_num, self.controller_quota_window_size_seconds * 1000
        )

    def registry(self) -> Metrics:
        """A new server registry with these windows."""
        return Metrics(self.metric_config)
