"""The metrics core's semantics against Kafka's (`SampledStat`, `Rate.windowSize`, quotas)."""

from __future__ import annotations

import math

import pytest

from sparklog.metrics.metric import MetricKind, MetricName
from sparklog.metrics.registry import Metrics
from sparklog.metrics.sensor import QuotaViolation
from sparklog.metrics.stats import (
    Avg,
    CumulativeSum,
    Max,
    MetricConfig,
    Percentiles,
    Quota,
    Rate,
    WindowedCount,
)


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def name(n: str, **tags: str) -> MetricName:
    return MetricName.of("kafka.server", "Test", n, tags)


def test_rate_counts_at_least_samples_minus_one_windows() -> None:
    # 11 windows of 1 s (quota.window.num, quota.window.size.seconds): 1,000 bytes recorded
    # in the first instant is a rate over 10 s, not over 1 ms (Kafka's Rate.windowSize)
    clock = Clock()
    metrics = Metrics(MetricConfig(samples=11, time_window_ms=1000), clock=clock)
    sensor = metrics.sensor("bytes")
    rate = sensor.add(name("byte-rate"), Rate())
    sensor.record(1000)
    assert rate.value() == pytest.approx(100.0)
    clock.ms += 20_000  # 20 s later every window has expired
    sensor.record(500)
    assert rate.value() == pytest.approx(50.0)


def test_rate_over_a_full_run_is_bytes_over_elapsed_time() -> None:
    clock = Clock()
    config = MetricConfig(samples=11, time_window_ms=1000)
    metrics = Metrics(config, clock=clock)
    sensor = metrics.sensor("bytes")
    rate = sensor.add(name("byte-rate"), Rate())
    for _ in range(30):  # 100 bytes every 100 ms for 3 s: 1,000 B/s
        sensor.record(100)
        clock.ms += 100
    # 3 s of data: Kafka divides by at least samples - 1 = 10 windows, so 3,000 B / 10 s
    assert rate.value() == pytest.approx(300.0, rel=0.05)
    for _ in range(200):  # 20 s more: the windows hold only the last 11 s
        sensor.record(100)
        clock.ms += 100
    assert rate.value() == pytest.approx(1000.0, rel=0.1)


def test_windows_expire() -> None:
    clock = Clock()
    metrics = Metrics(MetricConfig(samples=2, time_window_ms=1000), clock=clock)
    sensor = metrics.sensor("s")
    count = sensor.add(name("count"), WindowedCount())
    biggest = sensor.add(name("max"), Max())
    mean = sensor.add(name("avg"), Avg())
    total = sensor.add(name("total"), CumulativeSum())
    for v in (1, 5, 3):
        sensor.record(v)
    assert (count.value(), biggest.value(), mean.value(), total.value()) == (3, 5, 3, 9)
    clock.ms += 2500
    assert count.value() == 0 and math.isnan(biggest.value()) and math.isnan(mean.value())
    assert total.value() == 9  # cumulative stats never expire


def test_quota_violation_carries_value_and_bound() -> None:
    clock = Clock()
    metrics = Metrics(MetricConfig(samples=11, time_window_ms=1000), clock=clock)
    sensor = metrics.sensor("produce-alice")
    config = metrics.config.with_quota(Quota.upper_bound(1000))
    sensor.add(name("byte-rate", user="alice"), Rate(), config)
    sensor.record(5000)  # 500 B/s over 10 s: fine
    with pytest.raises(QuotaViolation) as caught:
        sensor.record(10_000)  # 1,500 B/s
    assert caught.value.value == pytest.approx(1500)
    assert caught.value.bound == 1000
    assert "user=alice" in str(caught.value)


def test_parent_sensors_record_too() -> None:
    metrics = Metrics(clock=Clock())
    total = metrics.sensor("all")
    total_sum = total.add(name("total"), CumulativeSum())
    child = metrics.sensor("topic-a", parents=[total])
    child_sum = child.add(name("a"), CumulativeSum())
    child.record(3)
    assert (child_sum.value(), total_sum.value()) == (3, 3)


def test_percentiles_within_five_percent() -> None:
    clock = Clock()
    config = MetricConfig(samples=2, time_window_ms=30_000)
    stat = Percentiles()
    for v in range(1, 1001):
        stat.record(config, float(v), clock.ms)
    p50, p99 = stat.percentiles(config, [0.5, 0.99], clock.ms)
    assert p50 == pytest.approx(500, rel=0.05)
    assert p99 == pytest.approx(990, rel=0.05)


def test_registry_kinds_and_expiry() -> None:
    clock = Clock()
    metrics = Metrics(clock=clock)
    meter = metrics.meter(name("BytesInPerSec", topic="t"))
    meter.mark(10)
    assert metrics.meter(name("BytesInPerSec", topic="t")) is meter
    histogram = metrics.histogram(name("TotalTimeMs", request="Produce"))
    histogram.update(4.0)
    metrics.gauge(name("PartitionCount"), lambda: 7)
    kinds = {m.name.name: m.kind for m in metrics}
    assert kinds == {
        "BytesInPerSec": MetricKind.COUNTER,
        "TotalTimeMs": MetricKind.SUMMARY,
        "PartitionCount": MetricKind.GAUGE,
    }
    assert metrics.metric(name("PartitionCount")).value() == 7  # type: ignore[union-attr]
    assert name("BytesInPerSec", topic="t").jmx == (
        "kafka.server:type=Test,name=BytesInPerSec,topic=t"
    )
    sensor = metrics.sensor("idle", inactive_expiration_ms=1000)
    sensor.add(name("idle-rate"), Rate())
    clock.ms += 1001
    assert metrics.expire_inactive_sensors() == ["idle"]
    assert metrics.metric(name("idle-rate")) is None
    assert metrics.remove_matching(lambda n: n.tag("topic") == "t") == 1
