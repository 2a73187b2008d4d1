"""sparklog's producer and consumer honour a broker's `throttle_time_ms` (KIP-219).

The broker here is a real one whose pipeline's "throttle" slot holds a test stage answering a
fixed throttle time to one client id, so the client side is tested on its own: after a
throttled response the client sends that broker nothing until the time has passed (the
broker's own clock shows the gap between its requests), nothing fails, and the client's
`produce-throttle-time-*` / `fetch-throttle-time-*` metrics show the throttle.
"""

from __future__ import annotations

import time
import uuid

import pytest

from sparklog.client import AdminClient, KafkaConsumer, KafkaProducer, NewTopic
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.connection import Request
from sparklog.protocol.pipeline import RequestStage

THROTTLE_MS = 300


class FixedThrottle(RequestStage):
    """Throttles every `api_key` request of `client_id` by `throttle_ms`; notes when each
    such request reached the broker (its monotonic clock, ms)."""

    name = "throttle"

    def __init__(self, client_id: str, api_key: int, throttle_ms: int) -> None:
        self.client_id = client_id
        self.api_key = api_key
        self.throttle_ms = throttle_ms
        self.arrivals: list[float] = []

    def on_request(self, request: Request) -> None:
        if request.client_id == self.client_id and request.api_key == self.api_key:
            self.arrivals.append(time.monotonic() * 1000)
            request.context.throttle_time_ms = self.throttle_ms
        return None


@pytest.fixture(scope="module")
def admin(cluster):
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as client:
        yield client


@pytest.fixture
def throttling(cluster):
    """Install a `FixedThrottle` in the broker's pipeline; the original is put back after."""
    server = cluster.brokers[0].server
    original = server.pipeline

    def install(stage: FixedThrottle) -> FixedThrottle:
        server.pipeline = original.with_stage(stage)
        return stage

    yield install
    server.pipeline = original


def new_topic(admin: AdminClient) -> str:
    name = f"throttled-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 1, 1)])
    return name


def gaps(arrivals: list[float]) -> list[float]:
    return [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]


def test_producer_waits_out_the_throttle_before_its_next_produce(cluster, admin, throttling):
    topic = new_topic(admin)
    client_id = f"p-{uuid.uuid4().hex[:6]}"
    stage = throttling(FixedThrottle(client_id, ApiKey.PRODUCE, THROTTLE_MS))
    settings = {"bootstrap.servers": cluster.bootstrap_servers, "client.id": client_id}
    with KafkaProducer(settings) as producer:
        futures = []
        for i in range(4):  # the next record is ready the moment the last one is acknowledged
            futures.append(producer.send(topic, value=b"v%d" % i))
            producer.flush()
        assert [f.result(timeout=10).offset for f in futures] == [0, 1, 2, 3]  # slower, not failed
        group = producer.metrics()["producer-metrics"]
    assert len(stage.arrivals) == 4
    # the broker's clock: no Produce came before the previous response's throttle had passed
    assert min(gaps(stage.arrivals)) >= THROTTLE_MS
    assert group["produce-throttle-time-max"] == THROTTLE_MS
    assert 0 < group["produce-throttle-time-avg"] <= THROTTLE_MS


def test_consumer_waits_out_the_throttle_before_its_next_fetch(cluster, admin, throttling):
    topic = new_topic(admin)
    with KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers}) as producer:
        for i in range(30):
            producer.send(topic, value=b"r%d" % i)
            if i % 10 == 9:
                producer.flush()  # three batches: three fetches at least, one at a time
    client_id = f"c-{uuid.uuid4().hex[:6]}"
    stage = throttling(FixedThrottle(client_id, ApiKey.FETCH, THROTTLE_MS))
    settings = {
        "bootstrap.servers": cluster.bootstrap_servers,
        "client.id": client_id,
        "max.partition.fetch.bytes": "1",  # one batch per fetch
        "fetch.max.bytes": "1",
    }
    with KafkaConsumer(settings) as consumer:
        consumer.assign([(topic, 0)])
        consumer.seek((topic, 0), 0)
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 30 and time.monotonic() < deadline:
            got.extend(r.value for r in consumer.poll(500))
        group = consumer.metrics()["consumer-fetch-manager-metrics"]
        arrivals = list(stage.arrivals)  # (closing sends one last Fetch closing the session)
    assert got == [b"r%d" % i for i in range(30)]
    assert len(arrivals) >= 3
    assert min(gaps(arrivals)) >= THROTTLE_MS
    assert group["fetch-throttle-time-max"] == THROTTLE_MS
