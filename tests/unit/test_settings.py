"""The settings registry (Kafka's ConfigDef): one declaration per setting, parsed once, the
shipped defaults file and the docs' settings tables checked against it, DescribeConfigs
answered from it (types, sources, sensitivity)."""

from __future__ import annotations

import dataclasses
import re
import types
from pathlib import Path

import pytest

from sparklog.settings import (
    REGISTRY,
    SERVER_SCOPES,
    ConfigError,
    ConfigSource,
    ConfigType,
    Range,
    Scope,
    Setting,
)

ROOT = Path(__file__).parents[2]
CONF = ROOT / "conf" / "sparklog-defaults.conf"


def _server_settings() -> list[Setting]:
    return [
        s
        for s in REGISTRY.settings()
        if s.scope in SERVER_SCOPES and s.group not in ("inert", "internal") and not s.prefix
    ]


def test_every_scope_declares_its_settings_once():
    counts = REGISTRY.counts()
    assert set(counts) == {str(s) for s in Scope}
    assert all(counts[str(s)] > 0 for s in Scope), counts
    # one declaration per (scope, group, name); a server name belongs to one component
    seen: dict[str, Setting] = {}
    for s in REGISTRY.settings():
        if s.scope in SERVER_SCOPES and not s.prefix:
            for name in (s.name, *s.synonyms):
                other = seen.setdefault(name, s)
                assert other is s or name == other.synonyms[0] == s.synonyms[0], name


def test_the_defaults_file_agrees_with_the_registry():
    """Every `name=value` (set, or commented out as `# name=value`) is a declared default;
    every setting the cluster reads appears (a `# name:` note will do for a default-less one)."""
    lines = CONF.read_text().splitlines()
    given = {}
    for line in lines:
        m = re.match(r"^#?\s*([a-z][a-z0-9.]*[a-z0-9])\s*=(.*)$", line)
        if m:
            given[m.group(1)] = m.group(2).strip()
    noted = {m.group(1) for line in lines if (m := re.match(r"^#\s*([a-z][a-z0-9.]*):", line))}
    wrong = {}
    for name, value in given.items():
        setting = REGISTRY.find(name)
        if setting is None:
            wrong[name] = "not a setting any component declares"
        elif name == setting.name and value != setting.default_text:
            wrong[name] = f"{value!r} in the file, {setting.default_text!r} declared"
    assert not wrong, f"conf/sparklog-defaults.conf differs from the registry: {wrong}"
    missing = [s.name for s in _server_settings() if s.name not in given and s.name not in noted]
    assert not missing, f"settings missing from conf/sparklog-defaults.conf: {missing}"


def _doc_tables(path: Path):
    """(setting names, default cell) of each row of a table with a `default` column."""
    column = None
    for line in path.read_text().splitlines():
        if not line.startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if column is None:
            column = cells.index("default") if "default" in cells else -1
            continue
        if column < 0 or set(cells[0]) <= set("-: ") or column >= len(cells):
            continue
        yield re.findall(r"`([a-z][a-z0-9.]*[a-z0-9])`", cells[0]), cells[column]


@pytest.mark.parametrize(
    "doc",
    [
        "README.md",
        "docs/groups.md",
        "docs/operations.md",
        "docs/replication.md",
        "docs/transactions.md",
        "docs/security.md",
        "docs/tiered-storage.md",
    ],
)
def test_the_docs_settings_tables_agree_with_the_registry(doc):
    checked, wrong = 0, {}
    for names, default in _doc_tables(ROOT / doc):
        values = [v.strip(" `") for v in default.split(" / ")]
        if len(values) != len(names):
            values = [None] * len(names)
        for name, value in zip(names, values, strict=True):
            # a server setting, else a client one (docs/security.md's client table)
            setting = REGISTRY.find(name) or REGISTRY.find(name, (Scope.CLIENT,))
            if setting is None:
                wrong[name] = "not a declared setting"
            elif value is not None and setting.default is not None:
                checked += 1
                if value != setting.default_text:
                    wrong[name] = f"{value!r} in {doc}, {setting.default_text!r} declared"
    assert not wrong, f"{doc} differs from the registry: {wrong}"
    assert checked or doc in ("README.md", "docs/operations.md")  # defaults there are paths


@pytest.mark.parametrize(
    ("parse", "props", "named"),
    [
        ("broker", {"socket.request.max.bytes": "lots"}, "socket.request.max.bytes"),
        ("broker", {"transaction.partition.verification.enable": "yes"}, "'yes'"),
        ("topic", {"segment.bytes": "10"}, "segment.bytes must be at least 14, got '10'"),
        ("topic", {"cleanup.policy": "sometimes"}, "one of delete, compact, compact,delete"),
        ("controller", {"leader.imbalance.per.broker.percentage": "101"}, "between 0 and 100"),
        ("group", {"group.max.size": "many"}, "group.max.size must be an integer, got 'many'"),
        ("cleaner", {"log.cleaner.io.buffer.load.factor": "0"}, "in (0, 1], got '0'"),
    ],
)
def test_a_malformed_value_names_the_setting_the_value_and_the_rule(parse, props, named):
    from sparklog.broker.config import BrokerConfig
    from sparklog.coordinator.group.config import GroupConfig
    from sparklog.metadata.configs import ControllerConfig
    from sparklog.storage.cleaner import CleanerConfig
    from sparklog.storage.config import LogConfig

    parser = {
        "broker": BrokerConfig.from_properties,
        "topic": LogConfig.from_properties,
        "controller": ControllerConfig.from_properties,
        "group": GroupConfig.from_properties,
        "cleaner": CleanerConfig.from_properties,
    }[parse]
    with pytest.raises(ConfigError, match=re.escape(named)):
        parser(props)


def test_a_broker_reports_names_no_component_declares(caplog):
    """The registry replaced the broker's prefix whitelist (group., offsets., sparklog., ...):
    a coordinator's setting is known, a typo under one of those prefixes is reported (and
    ignored, as sparklog did and Kafka does, with a log line)."""
    from sparklog.broker.config import BrokerConfig

    c = BrokerConfig.from_properties(
        {
            "group.initial.rebalance.delay.ms": "0",
            "offsets.table.path": "/x",
            "metadata.log.dir": "/y",
            "log.retention.hours": "1",
            "node.id": "1",
            "group.initial.rebalance.dealy.ms": "0",
            "sparklog.no.such": "1",
        }
    )
    assert c.unknown == ("group.initial.rebalance.dealy.ms", "sparklog.no.such")


def test_the_raw_broker_reads_are_typed_settings():
    from sparklog.broker.config import BrokerConfig

    c = BrokerConfig.from_properties({})
    assert (c.sparklog_fetch_zero_copy, c.transaction_partition_verification_enable) == (
        True,
        True,
    )
    assert c.sparklog_group_coordinator_endpoint is None
    c = BrokerConfig.from_properties(
        {
            "sparklog.fetch.zero.copy": "FALSE",
            "transaction.partition.verification.enable": "false",
            "sparklog.group.coordinator.endpoint": "driver:9094",
        }
    )
    assert (c.sparklog_fetch_zero_copy, c.transaction_partition_verification_enable) == (
        False,
        False,
    )
    assert (c.sparklog_group_coordinator_endpoint, c.unknown) == ("driver:9094", ())
    source = "".join(p.read_text() for p in (ROOT / "sparklog").rglob("*.py"))
    assert "originals.get(" not in source


def _broker_entries(props):
    from sparklog.broker.admin_apis import AdminApis
    from sparklog.broker.config import BrokerConfig
    from sparklog.metadata.image import MetadataImage

    fake = types.SimpleNamespace(
        config=BrokerConfig.from_properties(props),
        metadata=types.SimpleNamespace(image=MetadataImage()),
        node_id=0,
    )
    return {e.name: e for e in AdminApis._broker_entries(fake, "0", None, True)}  # type: ignore[arg-type]


def test_broker_describe_configs_types_each_setting_as_kafka_declares_it():
    """Kafka's KafkaConfig types these INT; sparklog guessed LONG for every integer."""
    entries = _broker_entries({"socket.request.max.bytes": "5000"})
    for name in ("socket.request.max.bytes", "num.replica.fetchers", "replica.fetch.max.bytes"):
        assert entries[name].config_type == ConfigType.INT, name
    assert entries["replica.lag.time.max.ms"].config_type == ConfigType.LONG
    assert entries["log.cleaner.io.buffer.load.factor"].config_type == ConfigType.DOUBLE
    e = entries["socket.request.max.bytes"]
    assert (e.value, e.source, e.read_only, e.is_sensitive) == (
        "5000",
        ConfigSource.STATIC_BROKER_CONFIG,
        True,
        False,
    )
    assert entries["transaction.partition.verification.enable"].value == "true"
    assert "sparklog.group.coordinator.endpoint" not in entries and "node.id" not in entries


def test_a_sensitive_setting_is_described_with_a_null_value(monkeypatch):
    """Kafka answers a sensitive config (a password, a secret) with value null and
    is_sensitive true, whatever its source, and nulls its synonyms' values too."""
    from sparklog.metadata.configs import ControllerConfig, describe_topic_configs
    from sparklog.storage import config as log_config

    secret = Setting(
        "sparklog.test.secret", ConfigType.PASSWORD, None, scope=Scope.BROKER, group="test"
    )
    with REGISTRY.registered(secret):
        from sparklog.metadata.broker_configs import describe_broker_resource

        entries = describe_broker_resource(
            ControllerConfig(), "0", {}, {}, {secret.name: ("hunter2", True)}, include_synonyms=True
        )
    e = next(e for e in entries if e.name == secret.name)
    assert (e.value, e.is_sensitive, e.source) == (None, True, ConfigSource.STATIC_BROKER_CONFIG)
    assert [s.value for s in e.synonyms] == [None]
    assert REGISTRY.find(secret.name) is None  # the test registration is gone

    table = log_config.TOPIC_SETTINGS
    sensitive = dataclasses.replace(table["retention.ms"], sensitive=True)
    monkeypatch.setitem(table._by_name, "retention.ms", sensitive)
    config = ControllerConfig.from_properties({"log.retention.ms": "5"})
    (e,) = describe_topic_configs(
        {"retention.ms": "9"}, config, ["retention.ms"], include_synonyms=True
    )
    assert (e.value, e.is_sensitive, e.source) == (
        None,
        True,
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
    )
    assert [(s.name, s.value) for s in e.synonyms] == [
        ("retention.ms", None),
        ("log.retention.ms", None),
        ("log.retention.ms", None),
    ]
    (plain,) = describe_topic_configs({}, config, ["segment.bytes"])
    assert (plain.value, plain.is_sensitive) == ("1073741824", False)


def test_object_store_options_are_a_sensitive_family():
    setting = REGISTRY.find("storage.options.AWS_SECRET_ACCESS_KEY")
    assert setting is not None and setting.sensitive and setting.prefix
    assert REGISTRY.find("storage.options.") is setting  # the family's own name


def test_a_setting_parses_once_with_kafkas_types():
    s = Setting("x.ms", ConfigType.LONG, 5, Range(0), scope=Scope.BROKER)
    assert (s.parse(" 7 "), s.parse(7), s.default_text) == (7, 7, "5")
    for bad, rule in (("soon", "an integer"), (True, "an integer"), (-1, "at least 0")):
        with pytest.raises(ConfigError, match=f"x.ms must be {rule}, got"):
            s.parse(bad)
    b = Setting("x.enable", ConfigType.BOOLEAN, False, scope=Scope.SPARK_OPTION, display="xOn")
    assert b.parse(" TRUE ") is True
    with pytest.raises(ConfigError, match="option 'xOn' must be 'true' or 'false', got 'y'"):
        b.parse("y")
