"""Apache Kafka beside sparklog: one real Kafka broker (KRaft, combined mode) and one sparklog
cluster per test session, both on 127.0.0.1 with the same topic defaults, for differential tests.

Skipped only when Java is absent; missing JARs fail with the command that fetches them.
"""

from __future__ import annotations

import os

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.jars import JarsMissing, kafka_classpath
from sparklog.oracle.kafka_server import ApacheKafka, java_available

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

#: Settings both brokers get (Kafka's names); the rest are both sides' defaults.
SHARED_CONFIG = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "log.retention.check.interval.ms": "1000",
}
SPARKLOG_ONLY = {"broker.heartbeat.interval.ms": "200", "broker.session.timeout.ms": "3000"}


@pytest.fixture(scope="session")
def apache_kafka(tmp_path_factory):
    """Apache Kafka (the pinned 4.x JARs), one broker, heap 1 GiB."""
    if not java_available():
        pytest.skip("java is not installed: the Apache Kafka oracle needs a JDK >= 17")
    try:
        kafka_classpath()
    except JarsMissing as e:
        pytest.fail(str(e))
    with ApacheKafka(tmp_path_factory.mktemp("apache-kafka"), config=SHARED_CONFIG) as kafka:
        yield kafka


@pytest.fixture(scope="session")
def sparklog_cluster(tmp_path_factory):
    """A sparklog controller and one broker with the same topic defaults as `apache_kafka`."""
    with EmbeddedCluster(
        brokers=1,
        data_dir=tmp_path_factory.mktemp("sparklog-oracle"),
        config={**SHARED_CONFIG, **SPARKLOG_ONLY},
    ) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def brokers(apache_kafka, sparklog_cluster) -> dict[str, str]:
    """name -> bootstrap servers, Kafka first."""
    return {"kafka": apache_kafka.bootstrap_servers, "sparklog": sparklog_cluster.bootstrap_servers}
