"""The brokers' own object-store options for topic tables (`remote.table.storage.options.*`):
merged over any `storage.options.*` a broker has, refusing unsafe renames under their own name,
sensitive everywhere (DescribeConfigs, Spark's conf redaction), and sent to brokers."""

from __future__ import annotations

import pytest

from sparklog.broker.config import BrokerConfig
from sparklog.settings import REGISTRY, SERVER_SCOPES
from sparklog.spark.redaction import is_secret_setting
from sparklog.storage.object_store import StorageLocationError, without_storage_options
from sparklog.storage.remote.config import remote_table_storage_options

SECRET = "AWS_SECRET_ACCESS_KEY"


def test_the_brokers_options_override_storage_options_key_by_key():
    props = {
        "remote.table.storage.options.AWS_REGION": "eu-west-1",
        f"remote.table.storage.options.{SECRET}": "broker-secret",
        "storage.options.AWS_REGION": "us-east-1",
        "storage.options.AWS_ENDPOINT_URL": "http://store:9000",
        "remote.table.root": "s3://bucket/tables",
    }
    assert remote_table_storage_options(props) == {
        "AWS_REGION": "eu-west-1",
        SECRET: "broker-secret",
        "AWS_ENDPOINT_URL": "http://store:9000",
    }
    assert remote_table_storage_options({}) == {}


def test_unsafe_renames_are_refused_under_the_settings_own_name():
    props = {"remote.table.storage.options.AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    with pytest.raises(StorageLocationError, match=r"^remote\.table\.storage\.options\.AWS_S3"):
        remote_table_storage_options(props)


def test_the_settings_are_sensitive_and_reach_brokers():
    name = f"remote.table.storage.options.{SECRET}"
    setting = REGISTRY.find(name, SERVER_SCOPES)
    assert setting is not None and setting.sensitive
    assert is_secret_setting(name)
    driver = {name: "broker-secret", f"storage.options.{SECRET}": "driver-secret"}
    assert without_storage_options(driver) == {name: "broker-secret"}
    config = BrokerConfig.from_properties(driver)
    assert name not in config.unknown
    assert "broker-secret" not in repr(config.described_settings())
