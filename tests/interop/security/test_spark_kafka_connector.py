"""Spark's own Kafka connector (`format("kafka")`, spark-sql-kafka-0-10) over SASL_SSL with
SCRAM-SHA-512, against Apache Kafka and sparklog secured the same way (conftest.py): a batch
write and a batch read back with the connector's `kafka.security.protocol`,
`kafka.sasl.mechanism`, `kafka.sasl.jaas.config` and `kafka.ssl.*` options, as User:alice."""

from __future__ import annotations

import uuid

import confluent_kafka
import pytest
from confluent_kafka.admin import NewTopic

from sparklog.jars import spark_jars_or_none
from tests.support.secure_clusters import SCRAM_USERS, SecureTarget

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,  # a SparkSession and the connector: ~1 min on a busy machine
    pytest.mark.interop,
    pytest.mark.oracle,
    pytest.mark.skipif(
        spark_jars_or_none() is None, reason="Spark's Kafka connector is not fetched: make jars"
    ),
]

ROWS = 200


@pytest.fixture(scope="module")
def spark():
    from tests.spark.conftest import build_session

    session = build_session("local[2]", __name__)
    yield session
    session.stop()


def connector_options(target: SecureTarget) -> dict[str, str]:
    """The connector's options: Kafka's client settings prefixed with `kafka.`."""
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{SCRAM_USERS["alice"]}";'
    )
    return {
        "kafka.bootstrap.servers": target.sasl_ssl,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": jaas,
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(target.ca.ca_path),
    }


def close_cached_kafka_producers(spark) -> None:
    """The connector caches producers JVM-wide: close them so they do not outlive the cluster."""
    jvm = spark._jvm
    loader = jvm.Thread.currentThread().getContextClassLoader()
    name = "org.apache.spark.sql.kafka010.producer.InternalKafkaProducerPool$"
    jvm.java.lang.Class.forName(name, True, loader).getField("MODULE$").get(None).reset()


def test_spark_kafka_connector_writes_and_reads_over_sasl_ssl(spark, target: SecureTarget) -> None:
    target.require("scram")
    topic = f"sec-spark-{uuid.uuid4().hex[:6]}"
    admin = confluent_kafka.admin.AdminClient(target.librdkafka("scram"))
    admin.create_topics([NewTopic(topic, 2, 1)], request_timeout=30)[topic].result()
    options = connector_options(target)
    try:
        rows = [(f"k{i % 7}", f"v{i}") for i in range(ROWS)]
        (
            spark.createDataFrame(rows, "key string, value string")
            .write.format("kafka")
            .options(**options)
            .option("topic", topic)
            .save()
        )
        read = (
            spark.read.format("kafka")
            .options(**options)
            .option("subscribe", topic)
            .option("groupIdPrefix", "sec-spark")  # alice's group ACLs cover `sec-*`
            .load()
            .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value")
            .collect()
        )
        assert sorted((r.key, r.value) for r in read) == sorted(rows)
    finally:
        close_cached_kafka_producers(spark)
        admin.delete_topics([topic], request_timeout=30)[topic].result()
