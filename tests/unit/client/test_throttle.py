"""The client side of KIP-219 (`client.throttle`), sans-IO."""

from __future__ import annotations

import datetime
import types

from sparklog.client.config import producer_config
from sparklog.client.throttle import (
    ThrottleState,
    client_metrics,
    metric_values,
    response_throttle_ms,
    throttle_recorder,
)
from sparklog.metrics.metric import MetricName
from sparklog.protocol.api_versions import ApiKey, client_throttles


def test_only_responses_sent_before_the_throttle_hold_the_client():
    # before KIP-219 the broker delayed the response itself: waiting again would double it
    assert not client_throttles(ApiKey.PRODUCE, 5)
    assert client_throttles(ApiKey.PRODUCE, 6)
    assert not client_throttles(ApiKey.FETCH, 7)
    assert client_throttles(ApiKey.FETCH, 8)
    assert client_throttles(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0)  # newer than KIP-219


def test_a_throttled_response_holds_the_connection_until_its_time_passed():
    state = ThrottleState()
    state.on_response(ApiKey.PRODUCE, 9, 250, now_ms=1_000)
    assert state.delay_ms(1_000) == 250
    assert state.delay_ms(1_200) == 50
    assert state.delay_ms(1_250) == 0
    state.on_response(ApiKey.PRODUCE, 9, 0, now_ms=1_300)  # an unthrottled answer: no wait
    assert state.delay_ms(1_300) == 0
    state.on_response(ApiKey.PRODUCE, 5, 400, now_ms=1_300)  # already delayed by the broker
    assert state.delay_ms(1_300) == 0
    state.on_response(ApiKey.FETCH, 12, 500, now_ms=2_000)
    state.on_response(ApiKey.METADATA, 12, 100, now_ms=2_010)  # a shorter one does not cut it
    assert state.delay_ms(2_010) == 490


def test_the_throttle_time_is_read_as_kio_decodes_it():
    kio_body = types.SimpleNamespace(throttle_time=datetime.timedelta(milliseconds=300))
    assert response_throttle_ms(kio_body) == 300
    assert response_throttle_ms(types.SimpleNamespace(throttle_time_ms=40)) == 40
    assert response_throttle_ms(types.SimpleNamespace()) == 0


def test_throttle_times_are_kafkas_client_metrics():
    metrics = client_metrics(producer_config({"bootstrap.servers": "h:1"}))
    record = throttle_recorder(metrics, "producer", "me")
    now = metrics.now_ms()
    for ms in (0, 100, 200):
        record(ms, now)
    tags = {"client-id": "me"}
    avg = metrics.metric(
        MetricName.of("kafka.producer", "producer-metrics", "produce-throttle-time-avg", tags)
    )
    assert avg is not None and avg.value(now) == 100
    assert metric_values(metrics)["producer-metrics"]["produce-throttle-time-max"] == 200
    consumer = client_metrics(producer_config({"bootstrap.servers": "h:1"}))
    throttle_recorder(consumer, "consumer", "c")(7, consumer.now_ms())
    assert metric_values(consumer) == {
        "consumer-fetch-manager-metrics": {
            "fetch-throttle-time-avg": 7,
            "fetch-throttle-time-max": 7,
            "fetch-throttle-time-total": 7,  # sparklog's: what a Spark task reports
        }
    }
