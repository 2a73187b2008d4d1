"""The broker's throttle stage in the pipeline (no sockets; time by argument): the request
quota counts event-loop time only, a throttled Fetch returns no data and un-records it, the
fetch cap, followers and inter-broker APIs exempt, the max of two throttles, KIP-219 versions."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from sparklog.broker.quotas import BrokerQuotas, ThrottleStage, fetch_record_bytes
from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Metrics
from sparklog.protocol import codec, kio_build
from sparklog.protocol.api_versions import ApiKey, client_throttles
from sparklog.protocol.authorization import stages_with
from sparklog.protocol.connection import Request, RequestContext
from sparklog.protocol.pipeline import RequestPipeline
from tests.support.quota_fakes import QUOTA_WINDOWS, Clock, Resolved


class ClientIdQuotas:
    def __init__(self, **limits: float) -> None:
        self.limits = limits
        self.version = 1

    def client_quota(self, key: str, user: str, client_id: str) -> Resolved | None:
        limit = self.limits.get(f"{client_id}.{key}")
        return None if limit is None else Resolved(limit, (("user", ""), ("client-id", client_id)))


def stage_for(**limits: float) -> tuple[ThrottleStage, Clock, Metrics]:
    clock = Clock()
    metrics = Metrics(clock=clock)
    source = ClientIdQuotas(**limits)
    return (
        ThrottleStage(BrokerQuotas(metrics, QUOTA_WINDOWS, lambda: source), metrics),
        clock,
        metrics,
    )


def request(api_key: ApiKey, version: int, data: dict[str, Any], size: int = 100) -> Request:
    body = kio_build.build(codec.request_schema(api_key, version), data)
    return Request(int(api_key), version, 1, "c", body, size, RequestContext())


def fetch_request(replica_id: int = -1, max_bytes: int = 50 * 2**20) -> Request:
    return request(
        ApiKey.FETCH,
        12,
        {
            "replica_id": replica_id,
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": max_bytes,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )


def fetch_response(req: Request, records: bytes) -> Any:
    return kio_build.response(
        req,
        {
            "error_code": 0,
            "session_id": 7,
            "responses": [
                {
                    "topic": "t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "error_code": 0,
                            "high_watermark": 1,
                            "last_stable_offset": 1,
                            "log_start_offset": 0,
                            "aborted_transactions": None,
                            "preferred_read_replica": -1,
                            "records": records,
                        }
                    ],
                }
            ],
        },
    )


def test_a_throttled_fetch_returns_no_data_and_is_unrecorded() -> None:
    stage, clock, metrics = stage_for(**{"c.consumer_byte_rate": 1000})
    first = fetch_request()
    stage.on_request(first)
    # capped to what fits in the quota window: 1,000 B/s × 10 windows of 1 s
    assert first.context.fetch_max_bytes_cap == 10_000
    response = stage.on_response(first, fetch_response(first, b"r" * 10_000))
    assert fetch_record_bytes(response) == 10_000 and first.context.throttle_time_ms == 0
    second = fetch_request()
    stage.on_request(second)
    throttled = stage.on_response(second, fetch_response(second, b"r" * 5_000))
    # 15,000 B over 10 s is 1,500 B/s: 5 s over; the answer is empty, the session kept
    assert second.context.throttle_time_ms == 5000
    assert fetch_record_bytes(throttled) == 0 and throttled.session_id == 7
    assert throttled.throttle_time.total_seconds() == 5
    rate = metrics.metric(
        MetricName.of("kafka.server", "Fetch", "byte-rate", {"user": "", "client-id": "c"})
    )
    assert rate is not None and rate.value() == pytest.approx(1000)  # the 5,000 B taken back


def test_follower_fetches_are_exempt() -> None:
    stage, _clock, metrics = stage_for(**{"c.consumer_byte_rate": 1})
    follower = fetch_request(replica_id=2)
    stage.on_request(follower)
    response = fetch_response(follower, b"r" * 10**6)
    assert stage.on_response(follower, response) is response
    assert follower.context.throttle_time_ms == 0 and follower.context.fetch_max_bytes_cap is None
    assert metrics.metric(MetricName.of("kafka.server", "Request", "exempt-request-time"))


def produce_request(acks: int, size: int) -> Request:
    return request(
        ApiKey.PRODUCE,
        9,
        {"transactional_id": None, "acks": acks, "timeout": 1000, "topic_data": []},
        size,
    )


def test_produce_counts_the_request_size() -> None:
    stage, _clock, _metrics = stage_for(**{"c.producer_byte_rate": 1000})
    first = produce_request(1, 10_000)
    stage.on_request(first)
    assert first.context.throttle_time_ms == 0
    second = produce_request(1, 2_000)
    stage.on_request(second)
    assert second.context.throttle_time_ms == 2000  # 12,000 B over 10 s against 1,000 B/s


def metadata_request() -> Request:
    return request(
        ApiKey.METADATA,
        12,
        {
            "topics": None,
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )


def test_request_quota_throttles_the_next_request_and_is_capped_at_a_window() -> None:
    stage, clock, _metrics = stage_for(**{"c.request_percentage": 1})
    metadata = metadata_request()
    assert stage.on_request(metadata) is None
    metadata.context.handler_ns = 500_000_000  # the handler held the loop for 0.5 s
    stage.on_response(metadata, object())
    assert metadata.context.throttle_time_ms == 0
    # 0.5 s of 10 s is 5 % against 1 %: Kafka's 40 s, capped at one window (1 s)
    after = metadata_request()
    stage.on_request(after)
    assert after.context.throttle_time_ms == 1000
    # acks=0: no response to carry a request throttle; only its bytes count
    fire_and_forget = produce_request(0, 10)
    stage.on_request(fire_and_forget)
    assert fire_and_forget.context.throttle_time_ms == 0


def test_max_of_byte_and_request_throttles_never_the_sum() -> None:
    stage, _clock, _metrics = stage_for(**{"c.producer_byte_rate": 1000, "c.request_percentage": 1})
    first = produce_request(1, 12_000)  # 2 s over the byte rate
    first.context.handler_ns = 500_000_000  # and 1 s (capped) over the request quota
    stage.on_request(first)
    stage.on_response(first, object())
    second = produce_request(1, 1_000)
    stage.on_request(second)
    assert second.context.throttle_time_ms == 3000  # byte rate: 13,000 B, 3 s; not 3 + 1


def test_inter_broker_requests_are_exempt() -> None:
    stage, _clock, _metrics = stage_for(**{"c.request_percentage": 0.0001})
    heartbeat = SimpleNamespace()
    req = Request(int(ApiKey.BROKER_HEARTBEAT), 0, 1, "c", heartbeat, 10, RequestContext())
    req.context.handler_ns = 10**9
    stage.on_request(req)
    stage.on_response(req, object())
    again = Request(int(ApiKey.BROKER_HEARTBEAT), 0, 2, "c", heartbeat, 10, RequestContext())
    stage.on_request(again)
    assert again.context.throttle_time_ms == 0


def test_the_pipeline_counts_loop_time_not_time_suspended() -> None:
    async def handler(req: Request) -> str:
        busy_until = time.perf_counter() + 0.02
        while time.perf_counter() < busy_until:  # 20 ms on the loop
            pass
        await asyncio.sleep(0.2)  # suspended: free
        return "done"

    stage, _clock, _metrics = stage_for(**{"c.request_percentage": 50})
    pipeline = RequestPipeline(handler, stages_with(stage))
    req = produce_request(1, 10)
    assert asyncio.run(pipeline(req)) == "done"
    assert 20_000_000 <= req.context.handler_ns < 200_000_000
    # a client without a request quota: its handler is not timed at all
    untimed = Request(req.api_key, req.api_version, 2, "other", req.body, 10)
    assert asyncio.run(pipeline(untimed)) == "done"
    assert untimed.context.handler_ns == 0


def test_kip_219_versions() -> None:
    assert not client_throttles(ApiKey.PRODUCE, 5) and client_throttles(ApiKey.PRODUCE, 6)
    assert not client_throttles(ApiKey.FETCH, 7) and client_throttles(ApiKey.FETCH, 8)
    assert client_throttles(ApiKey.DESCRIBE_CLUSTER, 0)  # newer than KIP-219


class TopicQuotas(ClientIdQuotas):
    def topic_quota(self, key: str, topic: str) -> Resolved | None:
        limit = self.limits.get(f"topic:{topic}.{key}")
        return None if limit is None else Resolved(limit, (("topic", topic),))


def produce_to(client_id: str, topic: str, size: int) -> Request:
    req = request(
        ApiKey.PRODUCE,
        9,
        {
            "transactional_id": None,
            "acks": 1,
            "timeout": 1000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": b"r" * size}]}
            ],
        },
        size + 100,
    )
    return Request(req.api_key, req.api_version, 1, client_id, req.body, req.size_bytes)


def test_a_topic_quota_holds_all_clients_of_the_topic_together() -> None:
    clock = Clock()
    metrics = Metrics(clock=clock)
    source = TopicQuotas(**{"topic:t.producer_byte_rate": 1000})
    stage = ThrottleStage(BrokerQuotas(metrics, QUOTA_WINDOWS, lambda: source), metrics)
    first = produce_to("a", "t", 8_000)
    stage.on_request(first)
    assert first.context.throttle_time_ms == 0
    second = produce_to("b", "t", 4_000)  # another client, same topic: 12,000 B over 10 s
    stage.on_request(second)
    assert second.context.throttle_time_ms == 2000
    other = produce_to("b", "u", 50_000)  # another topic has no quota
    stage.on_request(other)
    assert other.context.throttle_time_ms == 0
    rate = metrics.metric(MetricName.of("kafka.server", "Produce", "byte-rate", {"topic": "t"}))
    assert rate is not None and rate.value() == pytest.approx(1200)


def test_a_quota_added_later_reaches_a_client_that_had_none() -> None:
    clock = Clock()
    metrics = Metrics(clock=clock)
    source = ClientIdQuotas()
    stage = ThrottleStage(BrokerQuotas(metrics, QUOTA_WINDOWS, lambda: source), metrics)
    free = produce_request(1, 50_000)
    stage.on_request(free)
    assert free.context.throttle_time_ms == 0 and not free.context.time_handler
    source.limits["c.producer_byte_rate"] = 1000
    source.version += 1
    first, second = produce_request(1, 10_000), produce_request(1, 2_000)
    stage.on_request(first)
    stage.on_request(second)
    assert (first.context.throttle_time_ms, second.context.throttle_time_ms) == (0, 2000)
