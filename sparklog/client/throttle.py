"""The client side of broker quotas (KIP-219): a throttled response holds the connection.

A broker over a client's quota answers at once with `throttle_time_ms` and then mutes the
connection for that long (KIP-219). Kafka's clients do their part: after such a response they
send nothing more to that broker until the time has passed (`NetworkClient.maybeThrottle` →
`ClusterConnectionStates.throttle`, and `canSendRequest` is false while `isThrottled`), so
requests wait in the client rather than in the muted socket where their request timeout
would run. Responses of versions from before KIP-219 were delayed by the broker instead, so
the client does not wait again (`AbstractResponse.shouldClientThrottle(version)`).

Every response's throttle time, throttled or not, is recorded into the client's throttle
sensor, as Kafka's `NetworkClient` records into the `throttleTimeSensor` its producer
(`produce-throttle-time-avg|max`, `producer-metrics`) or consumer
(`fetch-throttle-time-avg|max`, `consumer-fetch-manager-metrics`) hands it.

Sans-IO: `ThrottleState` takes `now_ms`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from sparklog.client.request_builder import duration_ms
from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Metrics
from sparklog.metrics.stats import Avg, CumulativeSum, Max, MetricConfig
from sparklog.protocol.api_versions import client_throttles


def response_throttle_ms(body: Any) -> int:
    """A response's `throttle_time_ms` (0 for responses that have none)."""
    # kio names the duration field `throttle_time` (a timedelta); the schema's name has `_ms`
    value = getattr(body, "throttle_time", None)
    if value is None:
        value = getattr(body, "throttle_time_ms", None)
    return 0 if value is None else max(0, duration_ms(value))


class ThrottleState:
    """Until when one broker connection is throttled (Kafka's per-node `throttleUntilTimeMs`)."""

    __slots__ = ("until_ms",)

    def __init__(self) -> None:
        self.until_ms = 0

    def on_response(self, api_key: int, version: int, throttle_ms: int, now_ms: int) -> None:
        if throttle_ms > 0 and client_throttles(api_key, version):
            self.until_ms = max(self.until_ms, now_ms + throttle_ms)

    def delay_ms(self, now_ms: int) -> int:
        """How long requests to this broker must still wait (0: send now)."""
        return max(0, self.until_ms - now_ms)


#: Kafka's client metric groups for the throttle sensor, by client kind.
_THROTTLE_METRICS = {
    "producer": ("kafka.producer", "producer-metrics", "produce-throttle-time"),
    "consumer": ("kafka.consumer", "consumer-fetch-manager-metrics", "fetch-throttle-time"),
}

#: What a connection calls with each response's throttle time (in ms) and the time.
ThrottleRecorder = Callable[[int, int], None]


def client_metrics(config: Mapping[str, Any]) -> Metrics:
    """A client's metrics registry (`metrics.num.samples`, `metrics.sample.window.ms`, as
    Kafka's clients configure theirs)."""
    return Metrics(
        MetricConfig(
            samples=config["metrics.num.samples"],
            time_window_ms=config["metrics.sample.window.ms"],
        )
    )


def throttle_recorder(metrics: Metrics, kind: str, client_id: str) -> ThrottleRecorder:
    """The client's throttle-time sensor (`<prefix>-avg` and `<prefix>-max`, tagged by client
    id, as Kafka's `SenderMetrics` / `FetchMetricsManager` name them); returns its recorder."""
    domain, group, prefix = _THROTTLE_METRICS[kind]
    sensor = metrics.sensor(prefix)
    tags = {"client-id": client_id}
    sensor.add(
        MetricName.of(domain, group, f"{prefix}-avg", tags, "The average throttle time in ms"),
        Avg(),
    )
    sensor.add(
        MetricName.of(domain, group, f"{prefix}-max", tags, "The maximum throttle time in ms"),
        Max(),
    )

    # sparklog's own: the total, so a Spark task can tell how long brokers throttled it
    sensor.add(
        MetricName.of(
            domain, group, f"{prefix}-total", tags, "The total throttle time in ms (sparklog's)"
        ),
        CumulativeSum(),
    )
    lock = threading.Lock()  # every connection's reader thread records (Kafka's are synchronized)

    def record(throttle_ms: int, now_ms: int) -> None:
        with lock:
            sensor.record(throttle_ms, now_ms, check_quotas=False)

    return record


def metric_values(metrics: Metrics) -> dict[str, dict[str, float]]:
    """{group: {name: value}} of a client's metrics (what `KafkaProducer.metrics()` and
    `KafkaConsumer.metrics()` return, as kafka-python's do; the registry itself is the
    client's `client_metrics`)."""
    out: dict[str, dict[str, float]] = {}
    for metric in metrics:
        out.setdefault(metric.name.type, {})[metric.name.name] = metric.value()
    return out


def total_throttle_ms(metrics: Metrics | None) -> float:
    """The throttle time brokers answered a client in total (its `*-throttle-time-total`)."""
    if metrics is None:
        return 0.0
    return sum(m.value() for m in metrics if m.name.name.endswith("-throttle-time-total"))
