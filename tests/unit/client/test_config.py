"""Client settings: Kafka's names and defaults, clear errors for bad and unknown settings."""

from __future__ import annotations

import pytest

from sparklog.client.config import (
    CONSUMER_SETTINGS,
    PRODUCER_SETTINGS,
    ConfigError,
    admin_config,
    consumer_config,
    parse_bootstrap_servers,
    producer_config,
)

BOOT = {"bootstrap.servers": "127.0.0.1:9092"}


def test_producer_defaults_are_kafkas():
    c = producer_config(BOOT)
    expected = {
        "batch.size": 16384,
        "linger.ms": 5,
        "buffer.memory": 33554432,
        "max.block.ms": 60000,
        "request.timeout.ms": 30000,
        "delivery.timeout.ms": 120000,
        "retries": 2147483647,
        "retry.backoff.ms": 100,
        "max.in.flight.requests.per.connection": 5,
        "metadata.max.age.ms": 300000,
        "enable.idempotence": True,
        "acks": -1,
        "compression.type": "none",
        "max.request.size": 1048576,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 1000,
    }
    assert {k: c[k] for k in expected} == expected
    assert c["bootstrap.servers"] == ("127.0.0.1:9092",)


def test_consumer_defaults_are_kafkas():
    c = consumer_config(BOOT)
    expected = {
        "fetch.min.bytes": 1,
        "fetch.max.wait.ms": 500,
        "fetch.max.bytes": 52428800,
        "max.partition.fetch.bytes": 1048576,
        "max.poll.records": 500,
        "auto.offset.reset": "latest",
        "isolation.level": "read_uncommitted",
        "metadata.max.age.ms": 300000,
        "request.timeout.ms": 30000,
        "default.api.timeout.ms": 60000,
        "check.crcs": True,
    }
    assert {k: c[k] for k in expected} == expected


def test_string_values_from_spark_options_are_converted():
    c = producer_config(
        {
            "bootstrap.servers": "127.0.0.1:1, 127.0.0.1:2",
            "linger.ms": "20",
            "enable.idempotence": "false",
            "acks": "1",
            "compression.type": "ZSTD",
        }
    )
    assert c["linger.ms"] == 20
    assert c["enable.idempotence"] is False
    assert c["acks"] == 1
    assert c["compression.type"] == "zstd"
    assert parse_bootstrap_servers(c["bootstrap.servers"]) == [("127.0.0.1", 1), ("127.0.0.1", 2)]


@pytest.mark.parametrize(
    ("acks", "normalized"), [("all", -1), ("-1", -1), (-1, -1), (0, 0), ("1", 1)]
)
def test_acks_values(acks, normalized):
    config = {**BOOT, "acks": acks, "enable.idempotence": False}
    assert producer_config(config)["acks"] == normalized


def test_unknown_setting_names_the_closest_known_one():
    with pytest.raises(
        ConfigError, match=r"unknown producer setting 'linger_ms'; did you mean 'linger.ms'"
    ):
        producer_config({**BOOT, "linger_ms": 5})
    with pytest.raises(ConfigError, match=r"'batch.sise'.*did you mean 'batch.size'"):
        producer_config({**BOOT, "batch.sise": 5})


def test_a_setting_of_another_client_kind_says_so():
    with pytest.raises(
        ConfigError, match="'fetch.min.bytes' is a consumer setting, not a producer setting"
    ):
        producer_config({**BOOT, "fetch.min.bytes": 1})
    with pytest.raises(ConfigError, match="'linger.ms' is a producer setting"):
        consumer_config({**BOOT, "linger.ms": 1})


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("linger.ms", -1, "linger.ms must be at least 0, got -1"),
        ("linger.ms", "soon", "linger.ms must be an integer, got 'soon'"),
        ("max.in.flight.requests.per.connection", 0, "must be at least 1"),
        (
            "compression.type",
            "brotli",
            "compression.type must be one of none, gzip, snappy, lz4, zstd",
        ),
        ("enable.idempotence", "yes", "enable.idempotence must be true or false"),
        ("acks", "2", "acks must be one of"),
    ],
)
def test_bad_values_name_the_setting(setting, value, message):
    with pytest.raises(ConfigError, match=message):
        producer_config({**BOOT, setting: value})


def test_bootstrap_servers_are_required_and_checked():
    with pytest.raises(ConfigError, match="bootstrap.servers is required"):
        producer_config({})
    with pytest.raises(ConfigError, match="invalid address 'localhost'"):
        parse_bootstrap_servers(("localhost",))


def test_explicit_idempotence_conflicts_are_errors():
    with pytest.raises(ConfigError, match="enable.idempotence=true needs acks must be all"):
        producer_config({**BOOT, "enable.idempotence": True, "acks": "1"})
    with pytest.raises(ConfigError, match="at most 5"):
        producer_config(
            {**BOOT, "enable.idempotence": "true", "max.in.flight.requests.per.connection": 6}
        )


def test_default_idempotence_yields_to_conflicting_settings():
    # Kafka: idempotence that was not asked for is switched off instead of failing.
    c = producer_config({**BOOT, "acks": "1"})
    assert c["enable.idempotence"] is False
    assert producer_config({**BOOT, "retries": 0})["enable.idempotence"] is False


def test_delivery_timeout_must_cover_linger_and_request_timeout():
    with pytest.raises(ConfigError, match="delivery.timeout.ms should be equal to or larger"):
        producer_config({**BOOT, "delivery.timeout.ms": 1000, "request.timeout.ms": 1000})


def test_a_transactional_id_needs_idempotence_and_a_name():
    assert producer_config({**BOOT, "transactional.id": "tx"})["transactional.id"] == "tx"
    with pytest.raises(ConfigError, match="needs enable.idempotence=true"):
        producer_config({**BOOT, "transactional.id": "tx", "enable.idempotence": False})
    with pytest.raises(ConfigError, match="must not be empty"):
        producer_config({**BOOT, "transactional.id": ""})


def test_consumer_checks_fetch_wait_against_request_timeout():
    with pytest.raises(ConfigError, match="fetch.max.wait.ms"):
        consumer_config({**BOOT, "fetch.max.wait.ms": 40000, "request.timeout.ms": 30000})


def test_admin_config_and_explicit_names():
    c = admin_config({**BOOT, "request.timeout.ms": "5000"})
    assert c["request.timeout.ms"] == 5000
    assert c.explicit == frozenset({"bootstrap.servers", "request.timeout.ms"})
    with pytest.raises(KeyError, match="not a admin setting"):
        c["linger.ms"]


def test_setting_tables_share_common_names():
    common = {"bootstrap.servers", "client.id", "request.timeout.ms", "metadata.max.age.ms"}
    assert common <= set(PRODUCER_SETTINGS) & set(CONSUMER_SETTINGS)


def test_security_settings_are_kafkas_and_secrets_stay_hidden():
    """security.protocol takes Kafka's four protocols; sasl.jaas.config and the ssl.*
    passwords are PASSWORD settings: neither repr nor a refusal shows them."""
    config = producer_config(
        {
            "bootstrap.servers": "127.0.0.1:9092",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "scram-sha-512",
            "sasl.jaas.config": 'x.ScramLoginModule required username="u" password="pw-123";',
            "ssl.keystore.password": "ks-456",
        }
    )
    assert config["sasl.mechanism"] == "SCRAM-SHA-512"
    assert "pw-123" not in repr(config) and "ks-456" not in repr(config)
    with pytest.raises(ConfigError, match="sasl.mechanism") as e:
        producer_config({"bootstrap.servers": "h:1", "sasl.mechanism": "KERBEROS5"})
    assert "GSSAPI, PLAIN" in str(e.value)
    refusal = PRODUCER_SETTINGS["sasl.jaas.config"].refusal("secret-789", "a JAAS entry")
    assert "secret-789" not in refusal and "value hidden" in refusal
