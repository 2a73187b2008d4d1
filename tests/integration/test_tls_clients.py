"""Real clients over TLS against a sparklog broker whose listener is SSL (mTLS required):
confluent-kafka produces and consumes in a group, kcat lists metadata; Fetch's file ranges go
through TLS (sendfile would put unencrypted bytes on a TLS connection, which no client could
read). The broker serves `listeners=SSL://...,PLAINTEXT://...` (tests/support/tls_cluster.py)."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from tests.integration.conftest import TEST_CONFIG
from tests.support.certs import TestCA
from tests.support.tls_cluster import TlsCluster

confluent_kafka = pytest.importorskip("confluent_kafka")
admin_client = pytest.importorskip("confluent_kafka.admin")


@pytest.fixture(scope="module")
def tls_cluster(tls_ca, tmp_path_factory):
    with TlsCluster(
        tls_ca, brokers=1, data_dir=tmp_path_factory.mktemp("tls"), config=TEST_CONFIG
    ) as running:
        yield running


def _conf(cluster, ca, client, **extra):
    return {"bootstrap.servers": cluster.bootstrap_servers, **ca.librdkafka_props(client), **extra}


def test_confluent_kafka_produces_and_consumes_in_a_group_over_mtls(tls_cluster, tls_ca):
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    alice = tls_ca.client("alice")
    producer = confluent_kafka.Producer(
        _conf(tls_cluster, tls_ca, alice, acks="all", **{"enable.idempotence": True})
    )
    values = [b"%05d" % i + b"x" * 2000 for i in range(300)]  # ~600 KB: several Fetch ranges
    errors = []
    for v in values:
        producer.produce(topic, value=v, on_delivery=lambda err, _m: err and errors.append(err))
    assert producer.flush(30) == 0 and errors == []

    consumer = confluent_kafka.Consumer(
        _conf(
            tls_cluster,
            tls_ca,
            tls_ca.client("bob"),
            **{"group.id": f"g-{topic}", "auto.offset.reset": "earliest"},
        )
    )
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < len(values) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                got.append(message.value())
        consumer.commit(asynchronous=False)
        committed = consumer.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=10)
    finally:
        consumer.close()
    assert got == values
    assert committed[0].offset == len(values)
    assert {"User:alice", "User:bob"} <= tls_cluster.principals.seen


def test_a_client_without_a_certificate_or_the_ca_is_refused(tls_cluster, tls_ca, tmp_path):
    before = tls_cluster.brokers[0].server.failed_tls_handshakes
    stranger = TestCA(tmp_path / "other")
    for conf in (
        _conf(tls_cluster, tls_ca, None),  # no client certificate: ssl.client.auth=required
        _conf(tls_cluster, stranger, stranger.client("mallory")),  # another CA
    ):
        admin = admin_client.AdminClient(conf)
        with pytest.raises(confluent_kafka.KafkaException):
            admin.list_topics(timeout=3)
    assert tls_cluster.brokers[0].server.failed_tls_handshakes > before


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
def test_kcat_lists_metadata_over_mtls(tls_cluster, tls_ca):
    carol = tls_ca.client("carol")
    args = ["kcat", "-b", tls_cluster.bootstrap_servers, "-L", "-J", "-m", "10"]
    for key, value in tls_ca.librdkafka_props(carol).items():
        args += ["-X", f"{key}={value}"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert '"brokers"' in out.stdout
    assert "User:carol" in tls_cluster.principals.seen


def test_kafka_python_over_mtls(tls_cluster, tls_ca):
    kafka = pytest.importorskip("kafka")
    dave = tls_ca.client("dave")
    ssl_conf = {
        "security_protocol": "SSL",
        "ssl_cafile": str(tls_ca.ca_path),
        "ssl_certfile": str(dave.cert_path),
        "ssl_keyfile": str(dave.key_path),
    }
    topic = f"tls-kp-{uuid.uuid4().hex[:8]}"
    producer = kafka.KafkaProducer(bootstrap_servers=tls_cluster.bootstrap_servers, **ssl_conf)
    try:
        for i in range(50):
            producer.send(topic, b"kp%d" % i)
        producer.flush(30)
    finally:
        producer.close(5)
    consumer = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=tls_cluster.bootstrap_servers,
        auto_offset_reset="earliest",
        consumer_timeout_ms=15_000,
        **ssl_conf,
    )
    got = []
    try:
        for message in consumer:  # ends after consumer_timeout_ms without records
            got.append(message.value)
            if len(got) == 50:
                break
    finally:
        consumer.close()
    assert got == [b"kp%d" % i for i in range(50)]
    assert "User:dave" in tls_cluster.principals.seen


def test_aiokafka_over_mtls(tls_cluster, tls_ca):
    aiokafka = pytest.importorskip("aiokafka")
    import asyncio
    import ssl

    erin = tls_ca.client("erin")
    context = ssl.create_default_context(cafile=str(tls_ca.ca_path))
    context.load_cert_chain(str(erin.cert_path), str(erin.key_path))
    topic = f"tls-aio-{uuid.uuid4().hex[:8]}"

    async def go():
        common = {
            "bootstrap_servers": tls_cluster.bootstrap_servers,
            "security_protocol": "SSL",
            "ssl_context": context,
        }
        producer = aiokafka.AIOKafkaProducer(**common)
        await producer.start()
        try:
            for i in range(50):
                await producer.send_and_wait(topic, b"aio%d" % i)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(
            topic, group_id=f"g-{topic}", auto_offset_reset="earliest", **common
        )
        await consumer.start()
        got = []
        try:
            async with asyncio.timeout(30):
                while len(got) < 50:
                    batch = await consumer.getmany(timeout_ms=500)
                    got += [m.value for ms in batch.values() for m in ms]
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(go()) == [b"aio%d" % i for i in range(50)]
    assert "User:erin" in tls_cluster.principals.seen


def test_sparklogs_blocking_connection_over_mtls_with_sends_and_reads_in_parallel(
    tls_cluster, tls_ca
):
    """sparklog's blocking BrokerConnection on a TLS socket: its reader thread receives while
    other threads send (one SSL object used by two threads, as the plaintext path does)."""
    from concurrent.futures import ThreadPoolExecutor

    from sparklog.client.broker_connection import BrokerConnection
    from sparklog.protocol.api_versions import ApiKey
    from sparklog.protocol.outbound import ClientSecurity

    metadata_all = {
        "topics": None,
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    broker = tls_cluster.brokers[0]
    security = ClientSecurity.of("SSL", tls_ca.client_props(tls_ca.client("frank")))
    conn = BrokerConnection(0, broker.host, broker.port, security=security)
    conn.connect(10_000)
    try:

        def burst(_i: int) -> int:
            futures = [conn.send(ApiKey.METADATA, metadata_all) for _ in range(100)]
            return sum(1 for f in futures if f.result(timeout=60) is not None)

        with ThreadPoolExecutor(4) as pool:
            assert sum(pool.map(burst, range(8))) == 800
    finally:
        conn.close()
    assert "User:frank" in tls_cluster.principals.seen


def test_describe_configs_lists_the_ssl_settings_with_secrets_null(tmp_path):
    from confluent_kafka.admin import ConfigResource, ResourceType

    secret = "do-not-show-me"
    config = {**TEST_CONFIG, "ssl.key.password": secret, "ssl.keystore.location": "/k.pem"}
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=config) as cluster:
        admin = admin_client.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        resource = ConfigResource(ResourceType.BROKER, "0")
        entries = admin.describe_configs([resource])[resource].result(10)
    password = entries["ssl.key.password"]
    assert (password.value, password.is_sensitive) == (None, True)
    assert entries["ssl.keystore.location"].value == "/k.pem"
    assert entries["ssl.client.auth"].value == "none"
    assert entries["ssl.principal.mapping.rules"].value == "DEFAULT"
    assert secret not in repr({k: (e.value, e.is_sensitive) for k, e in entries.items()})
