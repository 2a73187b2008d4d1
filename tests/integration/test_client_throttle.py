"""sparklog's producer and consumer honour a broker's `throttle_time_ms` (KIP-219).

The broker here is a real one whose pipeline's "throttle" slot holds a test stage answering a
fixed throttle time to one client id, so the client side is tested on its own: after a
throttled response the client sends that broker nothing until the time has passed (the
broker's own clock shows the gap between its requests), nothing fails, and the client's
`produce-throttle-time-*` / `fetch-throttle-time-*` metrics show the throttle. Then the same
clients against the broker's real quotas (set with AlterClientQuotas), and the admin client
against the real controller mutation quota (KIP-599).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid

import pyarrow as pa
import pytest

from sparklog.client import AdminClient, KafkaConsumer, KafkaProducer, NewTopic
from sparklog.client.admin_quotas import QuotaAlteration
from sparklog.client.broker_connection import BrokerConnection, now_ms
from sparklog.errors import ThrottlingQuotaExceededError
from sparklog.protocol import kio_build
from sparklog.protocol.api_versions import ApiKey
from sparklog.spark.options import parse_sink_options
from sparklog.spark.writer import write_task
from tests.support.throttle_stage import FixedThrottle, throttle_installer

THROTTLE_MS = 300


@pytest.fixture(scope="module")
def admin(cluster):
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as client:
        yield client


@pytest.fixture
def throttling(cluster):
    with throttle_installer(cluster) as install:
        yield install


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


def test_a_spark_write_task_reports_how_long_brokers_throttled_it(cluster, admin, throttling):
    topic = new_topic(admin)
    client_id = f"w-{uuid.uuid4().hex[:6]}"
    stage = throttling(FixedThrottle(client_id, ApiKey.PRODUCE, THROTTLE_MS))
    options = parse_sink_options(
        {
            "kafka.bootstrap.servers": cluster.bootstrap_servers,
            "kafka.client.id": client_id,
            "topic": topic,
        }
    )
    batches = [pa.record_batch({"value": pa.array([b"x%d" % i for i in range(5)])})]
    message = write_task(options, ("value",), iter(batches))
    assert message.records == 5  # slower, never failed
    assert stage.arrivals
    # every Produce response said THROTTLE_MS; the task's message adds them up
    assert message.throttle_time_ms == THROTTLE_MS * len(stage.arrivals)


def test_a_request_sent_while_throttled_does_not_time_out_for_the_mute(cluster, throttling):
    # KIP-219: the broker mutes a throttled connection, so a request sent meanwhile waits in
    # its socket; the client's request timeout must not count that wait
    client_id = f"m-{uuid.uuid4().hex[:6]}"
    throttling(FixedThrottle(client_id, ApiKey.METADATA, 1_000))
    server = cluster.brokers[0].server
    handler = server.handler
    seen: list[int] = []

    mute_until: list[float] = []

    async def muted(request):  # the second Metadata waits as a muted connection would
        if request.client_id == client_id and request.api_key == ApiKey.METADATA:
            seen.append(request.correlation_id)
            if mute_until:  # (a broker muting by itself has held it until then already)
                await asyncio.sleep(max(0.0, mute_until[0] - time.monotonic()))
            else:
                mute_until.append(time.monotonic() + 1.0)
        return await handler(request)

    server.handler = muted
    try:
        host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
        conn = BrokerConnection(0, host, int(port), client_id=client_id, request_timeout_ms=400)
        conn.connect(5_000)
        try:
            fields = {
                "topics": [],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            }
            conn.send(ApiKey.METADATA, fields).result(timeout=10)
            assert conn.throttle.delay_ms(now_ms()) > 0
            # sent at once (bypassing the client's own wait): answered ~1 s later, > 400 ms
            assert conn.send(ApiKey.METADATA, fields).result(timeout=10) is not None
        finally:
            conn.close()
    finally:
        server.handler = handler
    assert len(seen) == 2


@pytest.mark.parametrize("always", [False, True], ids=["once", "always"])
def test_admin_retries_only_the_topics_refused_for_the_mutation_quota(cluster, admin, always):
    # KIP-599: CreateTopics v6+ refuses topics over controller_mutation_rate with
    # THROTTLING_QUOTA_EXCEEDED and a throttle time; Kafka's admin client retries just those,
    # until its timeout, and then raises the quota error
    client_id = f"a-{uuid.uuid4().hex[:6]}"
    first, second = f"q-{uuid.uuid4().hex[:6]}", f"q-{uuid.uuid4().hex[:6]}"
    server = cluster.brokers[0].server
    handler = server.handler
    calls: list[list[str]] = []
    arrivals: list[float] = []
    template: list[dict] = []

    async def over_quota_once(request):  # the broker's answer as a mutation quota gives it
        if request.client_id != client_id or request.api_key != ApiKey.CREATE_TOPICS:
            return await handler(request)
        calls.append(sorted(t.name for t in request.body.topics))
        arrivals.append(time.monotonic() * 1000)
        if len(calls) > 1 and not always:
            return await handler(request)
        accepted = [t for t in request.body.topics if t.name == first]
        body = dataclasses.replace(request.body, topics=tuple(accepted))
        done = await handler(dataclasses.replace(request, body=body))
        results = [dataclasses.asdict(t) for t in done.topics]
        template.extend(results[:1])  # the first answer's shape, for the refused entries
        refused = {
            **template[0],
            "name": second,
            "error_code": ThrottlingQuotaExceededError.code,
            "error_message": "The throttling quota has been exceeded.",
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": None,
        }
        request.context.throttle_time_ms = THROTTLE_MS
        return kio_build.response(request, {"topics": [*results, refused]})

    server.handler = over_quota_once
    try:
        with AdminClient(
            {"bootstrap.servers": cluster.bootstrap_servers, "client.id": client_id}
        ) as quota_admin:
            topics = [NewTopic(first, 1, 1), NewTopic(second, 1, 1)]
            if always:
                with pytest.raises(ThrottlingQuotaExceededError, match="throttled 300 ms"):
                    quota_admin.create_topics(topics, timeout_ms=1_000)
            else:
                quota_admin.create_topics(topics)
    finally:
        server.handler = handler
    if always:
        assert calls[0] == sorted([first, second]) and calls[1] == [second]
        assert first in admin.list_topics() and second not in admin.list_topics()
        return
    # the accepted topic is never sent again (it would come back TOPIC_ALREADY_EXISTS)
    assert calls == [sorted([first, second]), [second]]
    assert arrivals[1] - arrivals[0] >= THROTTLE_MS  # after the throttle time
    assert {first, second} <= set(admin.list_topics())


def test_admin_creates_every_topic_through_a_real_mutation_quota(cluster, admin, client_quota):
    # the brokers' and controller's ControllerMutationQuotaManager (KIP-599), not a stand-in
    client_id = f"mq-{uuid.uuid4().hex[:6]}"
    client_quota(client_id, "controller_mutation_rate", 2.0)  # 22 partitions of burst
    prefix = f"mq-{uuid.uuid4().hex[:6]}"
    # a: 22 → 2 credits; b: admitted whole → -2; c: refused for ~1 s, then retried alone
    topics = [NewTopic(f"{prefix}-a", 20, 1), NewTopic(f"{prefix}-b", 4, 1)]
    topics.append(NewTopic(f"{prefix}-c", 1, 1))
    with AdminClient(
        {"bootstrap.servers": cluster.bootstrap_servers, "client.id": client_id}
    ) as quota_admin:
        quota_admin.create_topics(topics)
    assert {t.name for t in topics} <= set(admin.list_topics())


# -- under the broker's real client quotas (KIP-13 byte rates, KIP-219 muting) ------------

#: 50 KB/s: the quota's Rate spans at least quota.window.num − 1 = 10 windows of 1 s, so a
#: client may send 10 s of quota (500 KB) at once before it is throttled, as in Kafka; a run
#: of `elapsed_s` must stay within quota × (elapsed_s + 10) × 1.05
QUOTA_BYTES_PER_S = 50_000
BURST_S = 10
RECORD = b"x" * 1_000


@pytest.fixture
def client_quota(admin):
    """Set a client-id's byte-rate quota through AlterClientQuotas; removed after the test."""
    set_: list[QuotaAlteration] = []

    def apply(client_id: str, key: str, limit: float) -> None:
        admin.alter_client_quotas([QuotaAlteration({"client-id": client_id}, {key: limit})])
        set_.append(QuotaAlteration({"client-id": client_id}, {key: None}))

    yield apply
    admin.alter_client_quotas(set_)


def test_producer_flat_out_is_held_to_its_quota_and_fails_nothing(cluster, admin, client_quota):
    topic = new_topic(admin)
    client_id = f"qp-{uuid.uuid4().hex[:6]}"
    client_quota(client_id, "producer_byte_rate", QUOTA_BYTES_PER_S)
    settings = {"bootstrap.servers": cluster.bootstrap_servers, "client.id": client_id}
    with KafkaProducer(settings) as producer:
        start = time.monotonic()
        # ~540 KB flat out: a little past the 500 KB the quota's window lets through at once
        futures = [producer.send(topic, value=RECORD) for _ in range(520)]
        producer.flush()
        elapsed = time.monotonic() - start
        group = producer.metrics()["producer-metrics"]
    assert all(f.exception() is None for f in futures)  # slower, never failed
    assert group["produce-throttle-time-max"] > 0
    stored = cluster.brokers[0].replica_manager.hosted(topic, 0).log.size_in_bytes
    assert stored <= QUOTA_BYTES_PER_S * (elapsed + BURST_S) * 1.05


def test_consumer_flat_out_is_held_to_its_quota_and_reads_in_order(cluster, admin, client_quota):
    topic = new_topic(admin)
    with KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers}) as producer:
        for i in range(560):  # ~580 KB: a little past what the quota's window lets through
            producer.send(topic, key=b"%d" % i, value=RECORD)
    client_id = f"qc-{uuid.uuid4().hex[:6]}"
    client_quota(client_id, "consumer_byte_rate", QUOTA_BYTES_PER_S)
    settings = {"bootstrap.servers": cluster.bootstrap_servers, "client.id": client_id}
    got: list[bytes] = []
    with KafkaConsumer(settings) as consumer:
        consumer.assign([(topic, 0)])
        consumer.seek((topic, 0), 0)
        start = time.monotonic()
        throttled = 0.0
        while not throttled > 0 and time.monotonic() - start < 30:
            got.extend(r.key for r in consumer.poll(200))
            group = consumer.metrics()["consumer-fetch-manager-metrics"]
            throttled = group["fetch-throttle-time-max"]
        elapsed = time.monotonic() - start
    assert throttled > 0
    assert len(got) * len(RECORD) <= QUOTA_BYTES_PER_S * (elapsed + BURST_S) * 1.05
    assert got == [b"%d" % i for i in range(len(got))]  # in order, nothing skipped
