"""Kafka's Java clients (the console producer and consumer, from the pinned JARs) over mTLS
against a sparklog broker: the JVM reads the test CA's PEM keystore (encrypted key) and PKCS12
keystore, and the broker maps each certificate's subject to its principal."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from tests.support.tls_cluster import TlsCluster

from .java_tools import classpath_or_fail

pytestmark = pytest.mark.interop

TOOLS = "org.apache.kafka.tools."


@pytest.fixture(scope="module")
def tls_cluster(tls_ca, tmp_path_factory):
    classpath_or_fail()
    with TlsCluster(
        tls_ca,
        brokers=1,
        data_dir=tmp_path_factory.mktemp("tls-java"),
        config={"broker.heartbeat.interval.ms": "200"},
    ) as running:
        yield running


def _properties(path, props: dict[str, str]):
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


def _tool(name: str, *args: str, stdin: str | None = None) -> str:
    cmd = [
        "java", "-Xmx256m", "-Dlog4j2.rootLogger.level=ERROR", "-cp", classpath_or_fail(),
        TOOLS + name, *args,
    ]  # fmt: skip
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{name}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done.stdout


def test_java_console_clients_over_mtls_with_pem_and_pkcs12_keystores(
    tls_cluster, tls_ca, tmp_path
):
    topic = f"tls-java-{uuid.uuid4().hex[:8]}"
    bs = tls_cluster.bootstrap_servers
    # the producer: a PEM keystore (encrypted PKCS#8 key + chain), PEM truststore
    producer = _properties(
        tmp_path / "producer.properties", tls_ca.client_props(tls_ca.client("java-producer"))
    )
    lines = [f"java-{i}" for i in range(20)]
    _tool(
        "ConsoleProducer", "--bootstrap-server", bs, "--topic", topic,
        "--command-config", producer, stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    # the consumer: a PKCS12 keystore
    consumer = _properties(
        tmp_path / "consumer.properties",
        tls_ca.client_props(tls_ca.client("java-consumer"), keystore="PKCS12"),
    )
    out = _tool(
        "consumer.ConsoleConsumer", "--bootstrap-server", bs, "--topic", topic, "--from-beginning",
        "--max-messages", "20", "--timeout-ms", "60000", "--command-config", consumer,
    )  # fmt: skip
    assert out.split() == lines
    assert {"User:java-producer", "User:java-consumer"} <= tls_cluster.principals.seen
