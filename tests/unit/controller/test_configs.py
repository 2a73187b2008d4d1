"""Cluster settings, topic config alteration (incremental and legacy) and DescribeConfigs."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparklog.errors import (
    InvalidConfigError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
)
from sparklog.metadata.configs import (
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    ConfigType,
    ControllerConfig,
    OpType,
    read_properties,
)
from sparklog.storage.config import LogConfig

from .harness import Harness

TOPIC = ConfigResourceType.TOPIC
DEFAULTS_FILE = Path(__file__).parents[3] / "conf" / "sparklog-defaults.conf"


@pytest.fixture
def h() -> Harness:
    harness = Harness(ControllerConfig.from_properties({"log.retention.hours": "1"}))
    harness.start_brokers(1)
    harness.create("t", 1, 1, configs={"cleanup.policy": "delete", "retention.ms": "5000"})
    return harness


def incremental(h: Harness, *ops: AlterConfigOp, topic: str = "t", validate_only: bool = False):
    resource = ConfigResource(TOPIC, topic)
    result = h.controller.incremental_alter_configs([(resource, ops)], validate_only=validate_only)
    ((got_resource, error),) = h.commit(result)
    assert got_resource == resource
    return error


def test_cluster_settings_and_topic_defaults_from_kafka_names():
    config = ControllerConfig.from_properties(
        {
            "num.partitions": "6",
            "default.replication.factor": "2",
            "auto.create.topics.enable": "false",
            "log.retention.hours": "2",
            "message.max.bytes": "2000000",
            "segment.bytes": "1048576",
            "log.dirs": "/ignored/broker/setting",
        }
    )
    assert (config.num_partitions, config.default_replication_factor) == (6, 2)
    assert config.auto_create_topics_enable is False
    assert config.topic_defaults.retention_ms == 2 * 3_600_000
    assert config.topic_defaults.max_message_bytes == 2_000_000
    assert config.topic_defaults.segment_bytes == 1_048_576
    assert {"log.retention.ms", "retention.ms", "num.partitions"} <= config.explicit_names


def test_finer_retention_setting_wins_over_hours():
    config = ControllerConfig.from_properties({"log.retention.hours": "2", "log.retention.ms": "7"})
    assert config.topic_defaults.retention_ms == 7


@pytest.mark.parametrize(
    "props",
    [
        {"num.partitions": "0"},
        {"auto.create.topics.enable": "yes"},
        {"broker.session.timeout.ms": "100", "broker.heartbeat.interval.ms": "200"},
        {"log.cleanup.policy": "sometimes"},
        {"auto.leader.rebalance.enable": "maybe"},
        {"leader.imbalance.check.interval.seconds": "0"},
        {"leader.imbalance.per.broker.percentage": "101"},
    ],
)
def test_bad_cluster_settings_raise_value_error_naming_the_setting(props):
    with pytest.raises(ValueError, match=next(iter(props)).split(".")[-1]):
        ControllerConfig.from_properties(props)


def test_the_shipped_defaults_file_gives_the_built_in_defaults():
    props = read_properties(DEFAULTS_FILE)
    assert ControllerConfig.from_properties(props).topic_defaults == LogConfig()
    cluster = ControllerConfig().cluster_properties()
    assert {name: props[name] for name in cluster} == cluster


def test_leader_balance_settings_with_kafka_names_and_defaults():
    defaults = ControllerConfig()
    assert defaults.auto_leader_rebalance_enable is True
    assert defaults.leader_imbalance_check_interval_seconds == 300
    assert defaults.leader_imbalance_per_broker_percentage == 10
    config = ControllerConfig.from_properties(
        {
            "auto.leader.rebalance.enable": "false",
            "leader.imbalance.check.interval.seconds": "30",
            "leader.imbalance.per.broker.percentage": "25",
        }
    )
    assert config.auto_leader_rebalance_enable is False
    assert config.leader_imbalance_check_interval_seconds == 30
    assert config.leader_imbalance_per_broker_percentage == 25


def test_incremental_set_delete_append_subtract(h):
    assert incremental(h, AlterConfigOp("retention.ms", OpType.SET, "10")).is_success
    assert h.image.topic_config("t")["retention.ms"] == "10"
    assert incremental(h, AlterConfigOp("cleanup.policy", OpType.APPEND, "compact")).is_success
    assert h.image.topic_config("t")["cleanup.policy"] == "delete,compact"
    assert incremental(h, AlterConfigOp("cleanup.policy", OpType.SUBTRACT, "delete")).is_success
    assert h.image.topic_config("t")["cleanup.policy"] == "compact"
    assert incremental(h, AlterConfigOp("retention.ms", OpType.DELETE)).is_success
    assert "retention.ms" not in h.image.topic_config("t")


def test_append_to_a_list_config_starts_from_its_default(h):
    incremental(h, AlterConfigOp("cleanup.policy", OpType.DELETE))
    assert incremental(h, AlterConfigOp("cleanup.policy", OpType.APPEND, "compact")).is_success
    assert h.image.topic_config("t")["cleanup.policy"] == "delete,compact"


@pytest.mark.parametrize(
    ("ops", "code", "message"),
    [
        (
            (AlterConfigOp("retention.ms", OpType.APPEND, "1"),),
            InvalidConfigError.code,
            "Can't APPEND to key retention.ms because its type is not LIST.",
        ),
        (
            (AlterConfigOp("bogus", OpType.SET, "1"),),
            InvalidConfigError.code,
            "Unknown topic config name: bogus",
        ),
        ((AlterConfigOp("retention.ms", OpType.SET, "x"),), InvalidConfigError.code, None),
        ((AlterConfigOp("retention.ms", 9, "1"),), InvalidRequestError.code, None),
        (
            (
                AlterConfigOp("retention.ms", OpType.SET, "1"),
                AlterConfigOp("retention.ms", OpType.DELETE),
            ),
            InvalidRequestError.code,
            "Error due to duplicate config keys",
        ),
    ],
)
def test_incremental_errors_change_nothing(h, ops, code, message):
    before = len(h.log)
    error = incremental(h, *ops)
    assert error.code == code
    if message:
        assert error.message == message
    assert len(h.log) == before


def test_alter_configs_of_missing_default_and_broker_resources(h):
    assert incremental(h, topic="nope").code == UnknownTopicOrPartitionError.code
    assert incremental(h, topic="").message == "Default topic resources are not allowed."
    broker = ConfigResource(ConfigResourceType.BROKER, "0")
    ((_, error),) = h.controller.alter_configs([(broker, {"num.partitions": "3"})]).response
    assert error.code == InvalidRequestError.code
    assert error.message == "Cannot update these configs dynamically: [num.partitions]"


def test_validate_only_alter_writes_nothing(h):
    result = h.controller.incremental_alter_configs(
        [(ConfigResource(TOPIC, "t"), [AlterConfigOp("retention.ms", OpType.SET, "1")])],
        validate_only=True,
    )
    assert result.records == () and result.response[0][1].is_success


def test_legacy_alter_configs_replaces_every_override(h):
    result = h.controller.alter_configs(
        [(ConfigResource(TOPIC, "t"), {"max.message.bytes": "100"})]
    )
    ((_, error),) = h.commit(result)
    assert error.is_success
    assert dict(h.image.topic_config("t")) == {"max.message.bytes": "100"}


def test_duplicate_resources_in_one_request_are_refused(h):
    resource = ConfigResource(TOPIC, "t")
    result = h.controller.alter_configs([(resource, {}), (resource, {})])
    assert [e.code for _, e in result.response] == [InvalidRequestError.code] * 2
    assert result.records == ()


def test_describe_topic_shows_sources_and_synonyms(h):
    error, entries = h.controller.describe_configs(
        ConfigResource(TOPIC, "t"),
        ["retention.ms", "segment.bytes", "cleanup.policy"],
        include_synonyms=True,
    )
    assert error.is_success
    by_name = {e.name: e for e in entries}
    assert sorted(by_name) == ["cleanup.policy", "retention.ms", "segment.bytes"]
    retention = by_name["retention.ms"]
    assert (retention.value, retention.source, retention.config_type) == (
        "5000",
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
        ConfigType.LONG,
    )
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("retention.ms", "5000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.ms", "3600000", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG),
    ]
    segment = by_name["segment.bytes"]
    assert (segment.value, segment.source, segment.config_type) == (
        "1073741824",
        ConfigSource.DEFAULT_CONFIG,
        ConfigType.INT,
    )
    assert by_name["cleanup.policy"].config_type == ConfigType.LIST


def test_describe_all_topic_configs_and_errors(h):
    error, entries = h.controller.describe_configs(ConfigResource(TOPIC, "t"))
    assert error.is_success and [e.name for e in entries] == sorted(LogConfig.kafka_names())
    assert all(e.synonyms == () for e in entries)
    error, entries = h.controller.describe_configs(ConfigResource(TOPIC, "nope"))
    assert error.code == UnknownTopicOrPartitionError.code and entries == []
    error, _ = h.controller.describe_configs(ConfigResource(99, "x"))
    assert error.code == InvalidRequestError.code


def test_describe_broker_shows_static_cluster_settings(h):
    error, entries = h.controller.describe_configs(
        ConfigResource(ConfigResourceType.BROKER, "0"), ["num.partitions", "log.retention.ms"]
    )
    assert error.is_success
    by_name = {e.name: e for e in entries}
    assert by_name["num.partitions"].value == "1"
    assert by_name["num.partitions"].source == ConfigSource.DEFAULT_CONFIG
    assert by_name["log.retention.ms"].value == "3600000"
    assert by_name["log.retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG
    assert by_name["num.partitions"].read_only  # static; log.retention.ms is dynamic
    assert not by_name["log.retention.ms"].read_only


def test_read_properties(tmp_path):
    path = tmp_path / "x.properties"
    path.write_text("# comment\n\nnum.partitions = 3\nlog.dirs=/a=b\n")
    assert read_properties(path) == {"num.partitions": "3", "log.dirs": "/a=b"}
    path.write_text("oops\n")
    with pytest.raises(ValueError, match="x.properties:1"):
        read_properties(path)
