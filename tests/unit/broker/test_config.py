"""Broker settings: Kafka names, topic defaults shared with the controller, bad values."""

from __future__ import annotations

import pytest

from sparklog.broker.config import BrokerConfig


def test_defaults_are_kafkas():
    c = BrokerConfig.from_properties({})
    assert c.socket_request_max_bytes == 104_857_600
    assert c.message_max_bytes == 1_048_588
    assert c.fetch_max_bytes == 57_671_680
    assert c.log_retention_check_interval_ms == 300_000
    assert c.broker_heartbeat_interval_ms == 2000 and c.broker_session_timeout_ms == 9000
    assert c.listener_host_port == ("127.0.0.1", 0)


def test_topic_defaults_by_broker_or_topic_name():
    c = BrokerConfig.from_properties({"log.retention.ms": "5", "segment.bytes": "4096"})
    assert c.default_log_config.retention_ms == 5
    assert c.default_log_config.segment_bytes == 4096
    c = BrokerConfig.from_properties({"log.retention.hours": "2", "message.max.bytes": "100"})
    assert c.default_log_config.retention_ms == 7_200_000
    assert c.message_max_bytes == 100
    assert c.log_config_for({"retention.ms": "9"}).retention_ms == 9


def test_unknown_names_are_kept_not_fatal_and_bad_values_are():
    c = BrokerConfig.from_properties(
        {"no.such.setting": "1", "group.initial.rebalance.delay.ms": "0"}
    )
    assert c.unknown == ("no.such.setting",)
    with pytest.raises(ValueError, match="socket.request.max.bytes"):
        BrokerConfig.from_properties({"socket.request.max.bytes": "lots"})
    with pytest.raises(ValueError, match="log.cleaner.enable"):
        BrokerConfig.from_properties({"log.cleaner.enable": "maybe"})


def test_listeners_and_cleaner_settings():
    c = BrokerConfig.from_properties(
        {"listeners": "PLAINTEXT://10.0.0.5:9092", "log.cleaner.backoff.ms": "50"}
    )
    assert c.listener_host_port == ("10.0.0.5", 9092)
    assert c.cleaner.backoff_ms == 50
    props = c.broker_properties()
    assert (
        props["log.cleaner.backoff.ms"] == "50"
        and props["listeners"] == "PLAINTEXT://10.0.0.5:9092"
    )


def test_fetch_session_settings_have_kafkas_names_and_defaults_in_the_conf_file():
    from pathlib import Path

    conf = Path(__file__).parents[3] / "conf" / "sparklog-defaults.conf"
    entries = dict(line.split("=", 1) for line in conf.read_text().splitlines() if "=" in line[:80])
    names = [
        "max.incremental.fetch.session.cache.slots",
        "min.incremental.fetch.session.eviction.ms",
    ]
    props = BrokerConfig.from_properties({}).broker_properties()
    assert (
        {n: props[n] for n in names}
        == {n: entries[n] for n in names}
        == {
            names[0]: "1000",
            names[1]: "120000",
        }
    )
    c = BrokerConfig.from_properties({names[0]: "0", names[1]: "5"})
    assert (c.max_incremental_fetch_session_cache_slots, c.unknown) == (0, ())
    assert c.min_incremental_fetch_session_eviction_ms == 5


def test_replication_settings_have_kafkas_names_and_defaults_in_the_conf_file():
    from pathlib import Path

    conf = Path(__file__).parents[3] / "conf" / "sparklog-defaults.conf"
    entries = dict(line.split("=", 1) for line in conf.read_text().splitlines() if "=" in line[:80])
    props = BrokerConfig.from_properties({}).broker_properties()
    names = [n for n in props if n.startswith("replica.") or n == "num.replica.fetchers"]
    assert sorted(names) == [
        "num.replica.fetchers",
        "replica.fetch.backoff.ms",
        "replica.fetch.max.bytes",
        "replica.fetch.min.bytes",
        "replica.fetch.response.max.bytes",
        "replica.fetch.wait.max.ms",
        "replica.lag.time.max.ms",
        "replica.socket.timeout.ms",
    ]
    assert {n: entries[n] for n in names} == {n: props[n] for n in names}
    assert (
        props["replica.fetch.wait.max.ms"] == "500" and props["replica.lag.time.max.ms"] == "30000"
    )
    c = BrokerConfig.from_properties(
        {"num.replica.fetchers": "4", "replica.fetch.wait.max.ms": "50"}
    )
    assert (c.num_replica_fetchers, c.replica_fetch_wait_max_ms, c.unknown) == (4, 50, ())


def test_the_decompressed_batch_bound_is_a_broker_setting_in_the_conf_file():
    """Issue 27: sparklog's own bound on what a client batch may unpack to (compression
    bombs); its default is Kafka's socket.request.max.bytes."""
    from pathlib import Path

    name = "sparklog.batch.decompressed.max.bytes"
    conf = Path(__file__).parents[3] / "conf" / "sparklog-defaults.conf"
    entries = dict(line.split("=", 1) for line in conf.read_text().splitlines() if "=" in line[:80])
    c = BrokerConfig.from_properties({})
    assert c.sparklog_batch_decompressed_max_bytes == c.socket_request_max_bytes
    assert entries[name] == c.broker_properties()[name] == "104857600"
    c = BrokerConfig.from_properties({name: "2097152"})
    assert (c.sparklog_batch_decompressed_max_bytes, c.unknown) == (2 << 20, ())
    for bad in ("-1", "2147483648", "lots"):
        with pytest.raises(ValueError, match=name):
            BrokerConfig.from_properties({name: bad})
