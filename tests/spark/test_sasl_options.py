"""format("sparklog") with the connector's security options against Apache Kafka's SASL
listener: a batch write and a batch read log in with SCRAM-SHA-512 from
`kafka.security.protocol` / `kafka.sasl.mechanism` / `kafka.sasl.jaas.config`, and the
password shows neither in the query plan (Spark's UI SQL tab and event log print it) nor in
an error."""

from __future__ import annotations

import pytest

import sparklog
from sparklog.client import AdminClient
from tests.oracle.test_client_sasl import SCRAM_MODULE, USERS, _jaas, kafka_sasl  # noqa: F401

pytestmark = [pytest.mark.spark, pytest.mark.oracle]


def _options(bootstrap: str, password: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": bootstrap.split(",")[0],
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": _jaas(SCRAM_MODULE, "alice", password),
    }


def test_batch_write_and_read_over_sasl(kafka_sasl, spark):  # noqa: F811
    sparklog.register(spark)
    options = _options(kafka_sasl, USERS["alice"])
    client = {k[len("kafka.") :]: v for k, v in options.items()}
    with AdminClient(client) as admin:
        admin.create_topics(["spark-sasl"])
    rows = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(5)], ["key", "value"])
    rows.write.format("sparklog").options(**options).option("topic", "spark-sasl").save()
    df = (
        spark.read.format("sparklog")
        .options(**options)
        .option("subscribe", "spark-sasl")
        .load()
        .selectExpr("CAST(value AS STRING) AS v")
    )
    assert sorted(r.v for r in df.collect()) == [f"v{i}" for i in range(5)]
    plan = df._jdf.queryExecution().toString()
    assert USERS["alice"] not in plan


def test_wrong_password_fails_the_read_with_kafkas_error(kafka_sasl, spark):  # noqa: F811
    sparklog.register(spark)
    # PySpark 4.2 creates the data source instance at load() (which meets the broker), 4.3
    # only when the read runs: either way the read fails with Kafka's error
    with pytest.raises(Exception, match="SaslAuthenticationFailed|Authentication failed") as e:
        spark.read.format("sparklog").options(**_options(kafka_sasl, "wrong-pw-123")).option(
            "subscribe", "spark-sasl"
        ).load().collect()
    assert "wrong-pw-123" not in str(e.value)
