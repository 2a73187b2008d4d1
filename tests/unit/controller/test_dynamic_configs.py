"""Dynamic broker configs and group configs on the sans-IO controller (issue 29 item 5): what
is stored, what is refused with Kafka's codes and wording, what the controller applies, and
how DescribeConfigs lists the sources."""

from __future__ import annotations

import pytest

from sparklog.coordinator.group.consumer_heartbeat import ConsumerConfig, ConsumerGroups
from sparklog.errors import InvalidConfigError, InvalidRequestError
from sparklog.metadata.configs import (
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    ControllerConfig,
    OpType,
)
from sparklog.metadata.image import BROKER_RESOURCE, GROUP_RESOURCE
from sparklog.settings import REGISTRY, Scope, UpdateMode
from sparklog.storage.cleaner import CleanerConfig
from sparklog.storage.log_cleaner import LogCleaner

from .harness import Harness

BROKER, GROUP = ConfigResourceType.BROKER, ConfigResourceType.GROUP


@pytest.fixture
def h() -> Harness:
    harness = Harness(ControllerConfig.from_properties({"log.retention.hours": "1"}))
    harness.start_brokers(1)
    return harness


def alter(h: Harness, kind: int, name: str, *ops: AlterConfigOp):
    result = h.controller.incremental_alter_configs([(ConfigResource(kind, name), ops)])
    ((_, error),) = h.commit(result)
    return error


def test_the_registry_marks_what_brokers_apply_at_runtime():
    retention = REGISTRY.find("log.retention.ms")
    assert retention is not None and retention.dynamic == UpdateMode.CLUSTER_WIDE
    backoff = REGISTRY.find("log.cleaner.backoff.ms", (Scope.BROKER,))
    assert backoff is not None and backoff.dynamic == UpdateMode.CLUSTER_WIDE
    partitions = REGISTRY.find("num.partitions")
    assert partitions is not None and partitions.dynamic == UpdateMode.READ_ONLY


def test_a_cluster_wide_retention_is_a_broker_config_record_the_controller_applies(h):
    assert h.controller.config.topic_defaults.retention_ms == 3_600_000
    op = AlterConfigOp("log.retention.ms", OpType.SET, "7200000")
    assert alter(h, BROKER, "", op).is_success
    assert dict(h.image.configs(BROKER_RESOURCE, "")) == {"log.retention.ms": "7200000"}
    assert h.controller.config.topic_defaults.retention_ms == 7_200_000
    assert h.controller.static_config.topic_defaults.retention_ms == 3_600_000
    assert alter(h, BROKER, "", AlterConfigOp("log.retention.ms", OpType.DELETE)).is_success
    assert h.controller.config.topic_defaults.retention_ms == 3_600_000


@pytest.mark.parametrize(
    ("name", "ops", "code", "message"),
    [
        (
            "",
            [AlterConfigOp("num.partitions", OpType.SET, "3")],
            InvalidRequestError.code,
            "Cannot update these configs dynamically: [num.partitions]",
        ),
        (
            "0",
            [AlterConfigOp("log.retention.hours", OpType.SET, "3")],
            InvalidRequestError.code,
            "Cannot update these configs dynamically: [log.retention.hours]",
        ),
        (
            "",
            [AlterConfigOp("log.retention.ms", OpType.SET, "soon")],
            InvalidRequestError.code,
            "Invalid value soon for configuration log.retention.ms: Not a number of type LONG",
        ),
        (
            "",
            [AlterConfigOp("log.retention.ms", OpType.APPEND, "1")],
            InvalidConfigError.code,
            "Config value append is not allowed for config key: log.retention.ms",
        ),
        (
            "abc",
            [AlterConfigOp("log.retention.ms", OpType.SET, "1")],
            InvalidRequestError.code,
            "Node id must be an integer, but it is: abc",
        ),
    ],
)
def test_broker_config_refusals_are_kafkas(h, name, ops, code, message):
    error = alter(h, BROKER, name, *ops)
    assert (error.code, error.message) == (code, message)
    assert not h.image.configs(BROKER_RESOURCE, name)


def test_a_custom_broker_config_is_kept_as_kafka_keeps_it(h):
    assert alter(h, BROKER, "", AlterConfigOp("my.custom", OpType.SET, "1")).is_success
    error, entries = h.controller.describe_configs(ConfigResource(BROKER, ""))
    assert error.is_success
    (custom,) = entries
    assert (custom.name, custom.value, custom.source, custom.read_only) == (
        "my.custom",
        "1",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
        True,
    )


def test_describe_a_broker_lists_synonyms_in_kafkas_order(h):
    alter(h, BROKER, "", AlterConfigOp("log.retention.ms", OpType.SET, "7200000"))
    alter(h, BROKER, "0", AlterConfigOp("log.retention.ms", OpType.SET, "9000000"))
    error, entries = h.controller.describe_configs(
        ConfigResource(BROKER, "0"), ["log.retention.ms"], include_synonyms=True
    )
    (e,) = entries
    assert (e.value, e.source, e.read_only) == (
        "9000000",
        ConfigSource.DYNAMIC_BROKER_CONFIG,
        False,
    )
    assert [(s.name, s.value, s.source) for s in e.synonyms] == [
        ("log.retention.ms", "9000000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", "7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", "1", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]


def test_group_configs_are_validated_against_the_broker_bounds_and_stored(h):
    op = AlterConfigOp("consumer.session.timeout.ms", OpType.SET, "50000")
    assert alter(h, GROUP, "g", op).is_success
    assert dict(h.image.configs(GROUP_RESOURCE, "g")) == {"consumer.session.timeout.ms": "50000"}
    low = alter(h, GROUP, "g", AlterConfigOp("consumer.session.timeout.ms", OpType.SET, "1000"))
    assert (low.code, low.message) == (
        InvalidConfigError.code,
        "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive.",
    )
    share = alter(h, GROUP, "g", AlterConfigOp("share.session.timeout.ms", OpType.SET, "50000"))
    assert share.code == InvalidConfigError.code and "share groups (KIP-932)" in share.message
    empty = alter(h, GROUP, "", op)
    assert (empty.code, empty.message) == (
        InvalidRequestError.code,
        "Default group resources are not allowed.",
    )
    error, entries = h.controller.describe_configs(ConfigResource(GROUP, "g"))
    by_name = {e.name: e for e in entries}
    assert by_name["consumer.session.timeout.ms"].source == ConfigSource.GROUP_CONFIG
    assert by_name["consumer.heartbeat.interval.ms"].value == "5000"


def test_bounds_come_from_the_coordinators_settings():
    config = ControllerConfig.from_properties({"group.consumer.max.session.timeout.ms": "90000"})
    h = Harness(config)
    h.start_brokers(1)
    op = AlterConfigOp("consumer.session.timeout.ms", OpType.SET, "80000")
    assert alter(h, GROUP, "g", op).is_success


def test_a_groups_own_configs_drive_its_members_heartbeats():
    overrides = {"slow": {"consumer.heartbeat.interval.ms": "9000"}}
    groups = ConsumerGroups(
        {}, ConsumerConfig(), lambda t: 0, list, lambda g: None, lambda g: overrides.get(g, {})
    )

    def join(group_id: str) -> dict:
        return groups.heartbeat(
            0, group_id=group_id, member_id="m", member_epoch=0, instance_id=None,
            rack_id=None, rebalance_timeout_ms=1000, subscribed_topic_names=[],
            subscribed_topic_regex=None, server_assignor=None, owned=None,
            client_id="c", client_host="h",
        )  # fmt: skip

    assert join("slow")["heartbeat_interval_ms"] == 9000
    assert join("plain")["heartbeat_interval_ms"] == 5000
    overrides["slow"]["consumer.session.timeout.ms"] = "50000"
    assert groups.session_timeout_ms("slow") == 50_000
    assert groups.groups["slow"].members["m"].heartbeat_deadline_ms == 45_000  # set at join


def test_the_cleaner_takes_new_settings_between_rounds():
    cleaner = LogCleaner(CleanerConfig(), persist_checkpoints=False)
    cleaner.reconfigure(CleanerConfig(backoff_ms=1))
    assert cleaner.config.backoff_ms == 1 and cleaner.cleaner.config.backoff_ms == 1
