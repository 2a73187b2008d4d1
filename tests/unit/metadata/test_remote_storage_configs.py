"""Kafka's remote-storage topic config rules (`LogConfig.validateTopicLogConfigValues`)."""

from __future__ import annotations

import pytest

from sparklog.errors import InvalidConfigError
from sparklog.metadata.configs import ControllerConfig, validate_remote_storage
from sparklog.storage.config import LogConfig


def check(props: dict[str, object], *, system: bool = True, was: bool = False) -> None:
    validate_remote_storage(
        LogConfig.from_properties(props), system_enabled=system, was_enabled=was
    )


def refusal(props: dict[str, object], **kw: bool) -> str:
    with pytest.raises(InvalidConfigError) as e:
        check(props, **kw)
    assert e.value.code == InvalidConfigError.code == 40
    return str(e.value)


def test_a_delete_topic_may_tier():
    check({"remote.storage.enable": "true", "retention.ms": 1000, "local.retention.ms": 500})
    check({"remote.storage.enable": "true", "local.retention.bytes": -2, "retention.bytes": 10})
    check({"remote.storage.enable": "false"}, system=False)


def test_system_disabled_refused():
    assert refusal({"remote.storage.enable": "true"}, system=False) == (
        "Tiered Storage functionality is disabled in the broker. Topic cannot be configured "
        "with remote log storage."
    )


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete,compact"])
def test_compacted_topic_refused(policy):
    assert refusal({"remote.storage.enable": "true", "cleanup.policy": policy}) == (
        "Remote log storage only supports topics with cleanup.policy=delete or "
        "cleanup.policy being an empty list."
    )


def test_local_retention_above_retention_refused():
    props = {"remote.storage.enable": "true", "retention.ms": 1000, "local.retention.ms": 2000}
    assert refusal(props) == (
        "Invalid value 2000 for configuration local.retention.ms: Value must not be more than "
        "retention.ms property value: 1000"
    )
    props = {"remote.storage.enable": "true", "retention.bytes": 100, "local.retention.bytes": -1}
    assert refusal(props) == (
        "Invalid value -1 for configuration local.retention.bytes: Value must not be -1 as "
        "retention.bytes value is set as 100."
    )


def test_disabling_needs_delete_on_disable():
    assert refusal({"remote.storage.enable": "false"}, was=True).startswith(
        "It is invalid to disable remote storage without deleting remote data."
    )
    check({"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}, was=True)


def test_copy_disable_needs_identical_retention():
    props = {
        "remote.storage.enable": "true",
        "remote.log.copy.disable": "true",
        "retention.ms": 1000,
        "local.retention.ms": 500,
    }
    assert "`local.retention.ms` and `retention.ms` must be set to the identical" in refusal(props)


def test_controller_reads_the_system_flag():
    assert ControllerConfig.from_properties(
        {"remote.log.storage.system.enable": "true"}
    ).remote_log_storage_system_enable
    assert not ControllerConfig.from_properties({}).remote_log_storage_system_enable
