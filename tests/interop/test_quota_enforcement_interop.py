"""Client quotas enforced on a broker, with real clients (a port of the checks of Kafka's
`tests/kafkatest/tests/client/quota_test.py`): confluent-kafka producing and consuming flat out
under a byte-rate quota of each entity type (client-id, user, (user, client-id)) is held to the
quota, measured from the broker's own byte counts, and sees `throttle_time_ms` in librdkafka's
`throttle_cb`; a client that ignores the throttle time is held by the muted connection.

Rates from a short run: Kafka's quota `Rate` spans `quota.window.num` − 1 = 10 windows of 1 s
at least, so a client may send up to 10 s of quota at once before it is throttled (Kafka's
behaviour too); the bound a run of `elapsed_s` must respect is therefore
`quota × (elapsed_s + 10) × 1.05`, far below what an unthrottled client sends in that time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparklog.client import AdminClient
from sparklog.client.admin_quotas import QuotaAlteration
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.metadata.quotas import ClientQuotaEntity, QuotasImage, quota_record
from sparklog.metrics.metric import MetricName
from sparklog.protocol.api_versions import ApiKey
from sparklog.security.jaas import parse_login_module
from sparklog.security.sasl.enabled import SaslMechanisms, SaslServerConfig
from sparklog.security.sasl.plain import PlainUsers
from sparklog.security.session import SecurityProtocol
from tests.integration.broker_wire import batch, call, connect, create_topic, metadata, produce
from tests.interop.java_tools import compile_java

pytestmark = pytest.mark.interop

confluent_kafka = pytest.importorskip("confluent_kafka")

LIBRDKAFKA = {"broker.address.family": "v4"}
CLUSTER_CONFIG = {
    "broker.heartbeat.interval.ms": "200",
    "num.partitions": "1",
    "metrics.prometheus.port": "-1",  # scraped over HTTP
}
#: 200 KB/s: small enough that a flat-out client on loopback is throttled within a second
QUOTA_BYTES_PER_S = 200_000
#: Kafka's minimum rate window: (quota.window.num − 1) × quota.window.size.seconds
BURST_S = 10
RUN_S = 2.5
TOLERANCE = 1.05


class Quotas:
    """Quotas set on the broker's quota source: a `QuotasImage` fed `ClientQuota` records, as
    the broker's metadata image is."""

    def __init__(self) -> None:
        self.image = QuotasImage()

    def set(self, user: str | None, client_id: str | None, key: str, limit: float) -> None:
        entries: dict[str, str | None] = {}
        if user is not None:
            entries["user"] = user
        if client_id is not None:
            entries["client-id"] = client_id
        self.image.replay(quota_record(ClientQuotaEntity.of(entries), key, limit))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(
        brokers=1, data_dir=tmp_path_factory.mktemp("quotas"), config=CLUSTER_CONFIG
    ) as running:
        yield running


@pytest.fixture
def quotas(cluster: EmbeddedCluster) -> Iterator[Quotas]:
    quotas = Quotas()
    broker = cluster.brokers[0]
    broker.quotas.source = lambda: quotas.image
    yield quotas
    broker.quotas.source = lambda: broker.metadata.image.quotas


def new_topic(cluster: EmbeddedCluster) -> str:
    name = f"quota-{uuid.uuid4().hex[:8]}"

    async def make() -> None:
        conn = await connect(cluster.bootstrap_servers)
        try:
            response = await create_topic(conn, name)
            assert response.error_code == 0, response
        finally:
            await conn.close()

    asyncio.run(make())
    return name


def scraped(cluster: EmbeddedCluster, family: str, **labels: str) -> float:
    """The samples `family` with `labels` summed, from the process's Prometheus endpoint."""
    url = f"http://127.0.0.1:{cluster.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    samples = [
        sample.value
        for f in text_string_to_metric_families(text)
        for sample in f.samples
        if sample.name == family and all(sample.labels.get(k) == v for k, v in labels.items())
    ]
    assert samples, f"no {family}{labels} in the scrape"
    return sum(samples)


def new_topic_as(cluster: EmbeddedCluster, login: dict[str, str]) -> str:
    """A new topic, created over the (SASL) listener as admin."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"quota-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(
        {
            **LIBRDKAFKA,
            **login,
            "bootstrap.servers": cluster.bootstrap_servers,
            "sasl.username": "admin",
            "sasl.password": "a",
        }
    )
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


def log_bytes(cluster: EmbeddedCluster, topic: str) -> int:
    """The broker's own count: bytes in the partition's log."""
    return int(cluster.brokers[0].replica_manager.hosted(topic, 0).log.size_in_bytes)


def bound_bytes(elapsed_s: float) -> float:
    return QUOTA_BYTES_PER_S * (elapsed_s + BURST_S) * TOLERANCE


def produce_flat_out(
    cluster: EmbeddedCluster, topic: str, client_id: str, login: dict[str, str] | None = None
) -> tuple[float, list]:
    """Produce 1 KB records as fast as librdkafka takes them for RUN_S; (elapsed, throttles)."""
    throttles: list[Any] = []
    producer = confluent_kafka.Producer(
        {
            **LIBRDKAFKA,
            **(login or {}),
            "bootstrap.servers": cluster.bootstrap_servers,
            "client.id": client_id,
            "linger.ms": 2,
            "batch.size": 16_384,
            "queue.buffering.max.kbytes": 512,
            "throttle_cb": throttles.append,
        }
    )
    value = b"x" * 1000
    start = time.monotonic()
    while time.monotonic() - start < RUN_S:
        try:
            producer.produce(topic, value)
        except BufferError:
            producer.poll(0.01)
    producer.poll(0)
    elapsed = time.monotonic() - start
    producer.purge()
    producer.flush(5)
    return elapsed, throttles


@pytest.mark.parametrize(
    "entity",
    [(None, "quota-client"), ("ANONYMOUS", None), ("ANONYMOUS", "quota-client")],
    ids=["client-id", "user", "user-client-id"],
)
def test_producer_held_to_its_byte_rate_quota(
    cluster: EmbeddedCluster, quotas: Quotas, entity: tuple[str | None, str | None]
) -> None:
    user, client_id = entity
    # an override at another level that does not apply to this client changes nothing
    quotas.set(None, "someone-else", "producer_byte_rate", 10**9)
    quotas.set(user, client_id, "producer_byte_rate", QUOTA_BYTES_PER_S)
    topic = new_topic(cluster)
    elapsed, throttles = produce_flat_out(cluster, topic, "quota-client")
    sent = log_bytes(cluster, topic)
    assert sent <= bound_bytes(elapsed), (sent, elapsed)
    assert sent >= QUOTA_BYTES_PER_S * BURST_S * 0.9  # the burst went through: not just slow
    assert throttles and max(t.throttle_time for t in throttles) > 0
    broker = cluster.brokers[0]
    tags = {"user": user or "", "client-id": client_id or ""}
    rate = broker.metrics.metric(MetricName.of("kafka.server", "Produce", "byte-rate", tags))
    # the quota metric (`kafka_server_produce_byte_rate`) is what the broker counted: in a
    # run shorter than the window, everything sent over the 10 s window
    assert rate is not None
    assert rate.value() == pytest.approx(sent / BURST_S, rel=0.1)
    throttle = broker.metrics.metric(
        MetricName.of("kafka.server", "Produce", "throttle-time", tags)
    )
    assert throttle is not None and throttle.value() > 0
    # as Prometheus sees them (the JMX exporter's names for Kafka's metrics-library metrics)
    labels = {"user": tags["user"], "client_id": tags["client-id"]}
    assert scraped(cluster, "kafka_server_produce_byte_rate", **labels) > 0
    assert scraped(cluster, "kafka_server_produce_throttle_time", **labels) > 0


def filled_topic(cluster: EmbeddedCluster) -> str:
    """A new topic holding 6 MB, written without a quota (another client id)."""
    topic = new_topic(cluster)
    producer = confluent_kafka.Producer(
        {**LIBRDKAFKA, "bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 20}
    )
    for _ in range(6000):
        while True:
            try:
                producer.produce(topic, b"y" * 1000)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(30) == 0
    return topic


def test_consumer_held_to_its_byte_rate_quota(cluster: EmbeddedCluster, quotas: Quotas) -> None:
    topic = filled_topic(cluster)  # then read flat out under a quota
    quotas.set(None, "quota-consumer", "consumer_byte_rate", QUOTA_BYTES_PER_S)
    throttles: list[Any] = []
    consumer = confluent_kafka.Consumer(
        {
            **LIBRDKAFKA,
            "bootstrap.servers": cluster.bootstrap_servers,
            "client.id": "quota-consumer",
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "throttle_cb": throttles.append,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    received = 0
    start = time.monotonic()
    try:
        while time.monotonic() - start < RUN_S:
            message = consumer.poll(0.05)
            if message is not None and message.error() is None:
                received += len(message.value())
            consumer.poll(0)  # serve throttle_cb
        elapsed = time.monotonic() - start
    finally:
        consumer.close()
    # what the client got is at most what the broker sent
    assert received <= bound_bytes(elapsed), (received, elapsed)
    assert received >= QUOTA_BYTES_PER_S  # data flowed until the throttle
    assert throttles and max(t.throttle_time for t in throttles) > 0


def test_a_client_ignoring_throttle_time_is_held_by_the_muted_connection(
    cluster: EmbeddedCluster, quotas: Quotas
) -> None:
    quotas.set(None, "rude", "producer_byte_rate", QUOTA_BYTES_PER_S)
    topic = new_topic(cluster)
    payload = batch([b"z" * 1000] * 60)  # ~60 KB per request

    async def flat_out() -> float:
        conn = await connect(cluster.bootstrap_servers, client_id="rude")
        try:
            start = time.monotonic()
            while time.monotonic() - start < RUN_S:
                # never waits on its own: sends the next request as soon as it is answered
                response = await produce(conn, topic, payload)
                assert response.error_code == 0, response
            return time.monotonic() - start
        finally:
            await conn.close()

    elapsed = asyncio.run(flat_out())
    sent = log_bytes(cluster, topic)
    assert sent <= bound_bytes(elapsed) + len(payload), (sent, elapsed)
    assert sent >= QUOTA_BYTES_PER_S * BURST_S * 0.9


def test_connections_over_the_ip_rate_are_closed(cluster: EmbeddedCluster, quotas: Quotas) -> None:
    """KIP-612: `connection_creation_rate` for 127.0.0.1 at 2/s admits the 10 s window's 20
    connections opened at once; the rest are closed unanswered after their throttle time."""
    quotas.image.replay(
        quota_record(ClientQuotaEntity.of({"ip": "127.0.0.1"}), "connection_creation_rate", 2)
    )

    async def open_many(n: int) -> tuple[int, int, float]:
        start = time.monotonic()
        results = await asyncio.gather(
            *(connect(cluster.bootstrap_servers) for _ in range(n)), return_exceptions=True
        )
        elapsed = time.monotonic() - start
        served = [r for r in results if not isinstance(r, BaseException)]
        for conn in served:
            await conn.close()
        return len(served), n - len(served), elapsed

    served, closed, elapsed = asyncio.run(open_many(30))
    assert served <= 2 * (elapsed + BURST_S) * TOLERANCE, (served, elapsed)
    assert served >= 15 and closed >= 5, (served, closed)
    assert cluster.brokers[0].server.throttled_connections >= closed


def test_a_topic_byte_rate_holds_every_producer_of_the_topic(
    cluster: EmbeddedCluster, quotas: Quotas
) -> None:
    """sparklog's `topic` entity: two producers (different client ids, no client quota)
    writing one topic together are held to the topic's quota in total."""
    topic = new_topic(cluster)
    quotas.image.replay(
        quota_record(ClientQuotaEntity.of({"topic": topic}), "producer_byte_rate", 200_000)
    )
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda c: produce_flat_out(cluster, topic, c), ["tq-a", "tq-b"]))
    elapsed = max(e for e, _ in runs)
    sent = log_bytes(cluster, topic)
    assert sent <= bound_bytes(elapsed), (sent, elapsed)
    assert sent >= QUOTA_BYTES_PER_S * BURST_S * 0.9
    assert all(throttles for _, throttles in runs)  # both were throttled


def test_java_producer_held_and_reports_produce_throttle_time(
    cluster: EmbeddedCluster, quotas: Quotas, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Kafka's Java producer flat out under a client-id quota: held to it at the broker, and
    its own `produce-throttle-time-avg`/`-max` metrics show the throttling."""
    class_path = compile_java("QuotaJavaProducer.java", tmp_path_factory.mktemp("quota-java"))
    quotas.set(None, "java-quota", "producer_byte_rate", QUOTA_BYTES_PER_S)
    topic = new_topic(cluster)
    start = time.monotonic()
    done = subprocess.run(
        ["java", "-Dlog4j2.rootLogger.level=WARN", "-cp", class_path, "QuotaJavaProducer",
         cluster.bootstrap_servers, topic, "java-quota", str(int(RUN_S * 1000))],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    elapsed = time.monotonic() - start  # includes the JVM's start: a looser bound
    sent = log_bytes(cluster, topic)
    assert sent <= bound_bytes(elapsed), (sent, elapsed)
    assert result["acked"] * 1000 <= sent
    assert result["throttle_max"] and result["throttle_max"] > 0, result
    assert result["throttle_avg"] and result["throttle_avg"] > 0, result


def test_java_consumer_held_and_reports_fetch_throttle_time(
    cluster: EmbeddedCluster, quotas: Quotas, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Kafka's Java consumer reading flat out under a client-id `consumer_byte_rate`: it gets
    no more than the quota allows over the run, and its own `fetch-throttle-time-avg`/`-max`
    metrics (consumer-fetch-manager-metrics) show the throttling."""
    class_path = compile_java("QuotaJavaConsumer.java", tmp_path_factory.mktemp("quota-java-c"))
    topic = filled_topic(cluster)
    quotas.set(None, "java-quota-consumer", "consumer_byte_rate", QUOTA_BYTES_PER_S)
    start = time.monotonic()
    done = subprocess.run(
        ["java", "-Dlog4j2.rootLogger.level=WARN", "-cp", class_path, "QuotaJavaConsumer",
         cluster.bootstrap_servers, topic, "java-quota-consumer", str(int(RUN_S * 1000))],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    elapsed = time.monotonic() - start  # includes the JVM's start: a looser bound
    assert QUOTA_BYTES_PER_S <= result["received"] <= bound_bytes(elapsed), (result, elapsed)
    assert result["throttle_max"] and result["throttle_max"] > 0, result
    assert result["throttle_avg"] and result["throttle_avg"] > 0, result


def test_request_percentage_throttles_at_most_one_window_and_delays_old_versions(
    cluster: EmbeddedCluster, quotas: Quotas
) -> None:
    """KIP-124: a client with a tiny request_percentage is throttled after its loop time goes
    over, never for more than one quota window (1 s); a Metadata v5 request (before KIP-219)
    gets its answer only after the throttle time instead of a muted connection."""
    quotas.set(None, "busy", "request_percentage", 0.001)  # 0.1 ms of the loop per 10 s

    async def run() -> tuple[list[int], float, int]:
        conn = await connect(cluster.bootstrap_servers, client_id="busy")
        try:
            throttles = []
            for _ in range(4):
                response = await metadata(conn, None)
                throttles.append(int(response.throttle_time.total_seconds() * 1000))
            start = time.monotonic()
            old = await call(
                conn,
                ApiKey.METADATA,
                {"topics": None, "allow_auto_topic_creation": False},
                version=5,
            )
            return (
                throttles,
                time.monotonic() - start,
                int(old.throttle_time.total_seconds() * 1000),
            )
        finally:
            await conn.close()

    throttles, old_elapsed_s, old_throttle_ms = asyncio.run(run())
    assert max(throttles) > 0 and all(t <= 1000 for t in throttles), throttles
    assert 0 < old_throttle_ms <= 1000
    assert old_elapsed_s >= old_throttle_ms / 1000  # delayed, not answered at once


@pytest.fixture
def sasl_plain(cluster: EmbeddedCluster) -> Iterator[dict[str, str]]:
    """The broker's listener switched to SASL_PLAINTEXT (PLAIN users alice and bob) for one
    test, as test_sasl_clients.py does: quotas key on the authenticated user."""
    server = cluster.brokers[0].server
    before = server.security_protocol, server.sasl
    jaas = parse_login_module(
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="a" user_admin="a" user_alice="alice-pw" user_bob="bob-pw";'
    )
    server.security_protocol = SecurityProtocol.SASL_PLAINTEXT
    server.sasl = SaslServerConfig(
        SaslMechanisms(("PLAIN",), plain_users=PlainUsers.from_login_module(jaas))
    )
    yield {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN"}
    server.security_protocol, server.sasl = before


def test_a_user_quota_holds_all_of_its_clients_and_no_one_else(
    cluster: EmbeddedCluster, quotas: Quotas, sasl_plain: dict[str, str]
) -> None:
    """quota type user over SASL: alice's two client ids share her quota; bob, beside her
    with no quota, is never throttled and sends far more."""
    quotas.set("alice", None, "producer_byte_rate", QUOTA_BYTES_PER_S)
    alice_topic, bob_topic = new_topic_as(cluster, sasl_plain), new_topic_as(cluster, sasl_plain)

    def login(user: str) -> dict[str, str]:
        return {**sasl_plain, "sasl.username": user, "sasl.password": f"{user}-pw"}

    jobs = [
        (alice_topic, "alice-1", login("alice")),
        (alice_topic, "alice-2", login("alice")),
        (bob_topic, "bob", login("bob")),
    ]
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        runs = list(pool.map(lambda j: produce_flat_out(cluster, j[0], j[1], j[2]), jobs))
    elapsed = max(e for e, _ in runs)
    alice = log_bytes(cluster, alice_topic)
    assert alice <= bound_bytes(elapsed), (alice, elapsed)
    assert runs[0][1] and runs[1][1]  # both of alice's clients were throttled
    assert not any(t.throttle_time for t in runs[2][1])  # bob never
    assert log_bytes(cluster, bob_topic) > bound_bytes(elapsed)


def test_a_quota_altered_through_the_controller_is_enforced_then_lifted(
    cluster: EmbeddedCluster,
) -> None:
    """End to end: AlterClientQuotas (sparklog's admin client → the controller's metadata
    log → the broker's image) holds a producer; removing the quota lifts it at once."""
    entity = {"client-id": "altered"}
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.alter_client_quotas(
            [QuotaAlteration(entity, {"producer_byte_rate": QUOTA_BYTES_PER_S})]
        )
        try:
            topic = new_topic(cluster)
            elapsed, throttles = produce_flat_out(cluster, topic, "altered")
            sent = log_bytes(cluster, topic)
            assert sent <= bound_bytes(elapsed), (sent, elapsed)
            assert throttles
        finally:
            admin.alter_client_quotas([QuotaAlteration(entity, {"producer_byte_rate": None})])
    free = new_topic(cluster)
    elapsed, throttles = produce_flat_out(cluster, free, "altered")
    assert not any(t.throttle_time for t in throttles)
    assert log_bytes(cluster, free) > bound_bytes(elapsed)


@pytest.mark.parametrize(
    ("default", "override"),
    [
        ({"client-id": None}, (None, "quota-client")),
        ({"user": None}, ("ANONYMOUS", None)),
        ({"user": None, "client-id": None}, ("ANONYMOUS", "quota-client")),
    ],
    ids=["client-id", "user", "user-client-id"],
)
def test_an_override_beats_the_default_quota(
    cluster: EmbeddedCluster,
    quotas: Quotas,
    default: dict[str, str | None],
    override: tuple[str | None, str | None],
) -> None:
    """quota_test.py's override case, for each quota type: the type's `<default>` entity
    (`/clients/<default>`, `/users/<default>`, `/users/<default>/clients/<default>`) at a
    quarter of the quota, the client's own entity at the quota: it is held to its override,
    not the default (it sends more than the default allows, no more than its override does)."""
    entity = ClientQuotaEntity.of(default)
    quotas.image.replay(quota_record(entity, "producer_byte_rate", QUOTA_BYTES_PER_S / 4))
    quotas.set(*override, "producer_byte_rate", QUOTA_BYTES_PER_S)
    topic = new_topic(cluster)
    elapsed, throttles = produce_flat_out(cluster, topic, "quota-client")
    sent = log_bytes(cluster, topic)
    assert sent <= bound_bytes(elapsed), (sent, elapsed)
    assert sent > QUOTA_BYTES_PER_S / 4 * (elapsed + BURST_S) * TOLERANCE  # over the default
    assert throttles
