"""Which sparklog settings hold secrets, and whether Spark's redaction regexes hide them."""

from __future__ import annotations

import pytest

from sparklog.spark.redaction import (
    SPARK_REDACTION_REGEX,
    SUGGESTED_REDACTION_REGEX,
    is_secret_setting,
    options_regex_covering_secrets,
    unredacted_secrets,
)


@pytest.mark.parametrize(
    "name",
    [
        "sasl.jaas.config",
        "listener.name.client.plain.sasl.jaas.config",
        "kafka.sasl.jaas.config",
        "ssl.keystore.password",
        "listener.name.internal.ssl.key.password",
        "ssl.keystore.key",
        "ssl.truststore.password",
    ],
)
def test_secret_settings(name):
    assert is_secret_setting(name)


@pytest.mark.parametrize(
    "name", ["listeners", "sasl.mechanism", "ssl.keystore.location", "num.partitions"]
)
def test_plain_settings(name):
    assert not is_secret_setting(name)


def test_spark_default_regex_misses_a_jaas_table_and_an_inline_key():
    """Spark's default redacts by key or value: a JAAS config with `password=` is covered, a
    PlainLoginModule user table or a PEM key is not; the suggested regex covers both."""
    entries = [
        ("spark.sparklog.listener.name.c.plain.sasl.jaas.config", 'x required user_a="pw1";'),
        ("spark.sparklog.sasl.jaas.config", 'x required username="a" password="pw2";'),
        ("spark.sparklog.ssl.keystore.key", "-----BEGIN PRIVATE KEY-----..."),
        ("spark.sparklog.ssl.keystore.password", "pw3"),
        ("spark.sparklog.num.partitions", "3"),
        ("spark.other.secret", "x"),
    ]
    assert unredacted_secrets(entries, None, "spark.sparklog.") == [
        "spark.sparklog.listener.name.c.plain.sasl.jaas.config",
        "spark.sparklog.ssl.keystore.key",
    ]
    assert unredacted_secrets(entries, SPARK_REDACTION_REGEX, "spark.sparklog.") != []
    assert unredacted_secrets(entries, SUGGESTED_REDACTION_REGEX, "spark.sparklog.") == []


def test_options_regex_is_widened_once():
    wider = options_regex_covering_secrets(None)
    assert wider is not None and wider.startswith("(?i)url|")
    assert options_regex_covering_secrets(wider) is None


def test_start_refuses_secrets_the_spark_conf_would_show():
    from pyspark import SparkConf

    from sparklog.spark.cluster import ClusterStartError, _check_secrets_redacted

    conf = SparkConf(loadDefaults=False)
    conf.set("spark.sparklog.ssl.keystore.key", "-----BEGIN PRIVATE KEY----- k3y")
    with pytest.raises(ClusterStartError, match="spark.sparklog.ssl.keystore.key") as e:
        _check_secrets_redacted(conf)
    assert "k3y" not in str(e.value)
    conf.set("spark.redaction.regex", SUGGESTED_REDACTION_REGEX)
    _check_secrets_redacted(conf)


def test_cluster_client_settings_are_the_default_for_its_dataframes():
    """sparklog.start(config={"kafka.security.protocol": ..., "kafka.sasl.*": ...}): servers
    never see the kafka.* entries; format("sparklog") without a bootstrap of its own reads and
    writes the cluster with them; options naming another cluster do not get them."""
    from sparklog.spark.cluster import split_client_settings
    from sparklog.spark.register import data_source_class

    settings = {
        "num.partitions": "3",
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": 'x.PlainLoginModule required username="u" password="p";',
    }
    client = split_client_settings(settings)
    assert settings == {"num.partitions": "3"}
    assert client["security.protocol"] == "SASL_PLAINTEXT"
    cls = data_source_class("127.0.0.1:9092", client)
    source = cls({"subscribe": "t"})._source_options(streaming=False)
    assert source.consumer_config()["sasl.mechanism"] == "PLAIN"
    sink = cls({"topic": "t"})._sink_options()
    assert sink.producer_config()["security.protocol"] == "SASL_PLAINTEXT"
    other = cls({"subscribe": "t", "kafka.bootstrap.servers": "10.0.0.1:9092"})
    assert "security.protocol" not in other._source_options(streaming=False).consumer_config()
