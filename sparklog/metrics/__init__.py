"""Metrics and quotas (DESIGN D19): Kafka's metrics library (sensors over sampled windows),
the broker's standard metric names, client quotas built on the same sensors, and the
Prometheus text exposition.

- `stats`: the measurable statistics (`Rate`, `Avg`, `Max`, `Min`, `CumulativeSum`,
  `CumulativeCount`, `WindowedSum`, `WindowedCount`, `Percentiles`) over `MetricConfig`'s
  sampled windows (`metrics.num.samples`, `metrics.sample.window.ms`).
- `sensor`: `Sensor` (records a value into its stats, checks quotas) and `Quota`.
- `registry`: `MetricName` (Kafka's JMX name: domain, type, name, tags), `Metrics` (the
  per-process registry: sensors, meters, histograms, gauges).

The package sits on the floor beside `protocol` and `security` (sans-IO; asyncio only in the
exposition's HTTP edge), so brokers, the controller and the coordinators all use it.
"""
