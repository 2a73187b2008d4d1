"""The kafka-*.sh counterparts of `python -m sparklog` (issue 35 §5): `--version`, `topics
alter`, `configs describe|alter`, `get-offsets`, `delete-records`, `consume --group` and `groups
describe --members|--state`, against an embedded cluster. Most run `main()` in this process
(the same code path as the shell, without an interpreter start per command)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sparklog.cli import main
from sparklog.client import AdminClient, KafkaProducer

from .test_cli import ok, unique


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def good(capsys, *argv: str) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    return out


def bad(capsys, *argv: str) -> str:
    """A user error: exit 1 and one `error: ...` line."""
    code, out, err = run(capsys, *argv)
    assert code == 1, (code, out, err)
    assert err.startswith("error: ") and "Traceback" not in err, err
    return err


def produce(bs: str, topic: str, per_partition: dict[int, int]) -> None:
    with KafkaProducer({"bootstrap.servers": bs}) as producer:
        for partition, count in per_partition.items():
            for i in range(count):
                producer.send(topic, b"v%d" % i, partition=partition)
        producer.flush()


@pytest.fixture
def topic(cluster, capsys):
    name = unique("tools")
    good(capsys, "topics", "create", "--bootstrap-server", cluster.bootstrap_servers,
         "--topic", name, "--partitions", "2")  # fmt: skip
    return name


def test_version_prints_the_installed_version():
    from importlib.metadata import version

    done = subprocess.run([sys.executable, "-m", "sparklog", "--version"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"sparklog {version('sparklog')}"


def test_topics_alter_grows_partitions_and_sets_configs(cluster, topic, capsys):
    bs = cluster.bootstrap_servers
    out = good(capsys, "topics", "alter", "--bootstrap-server", bs, "--topic", topic,
               "--partitions", "4", "--config", "retention.ms=60000")  # fmt: skip
    assert f"Topic {topic} now has 4 partitions." in out
    described = good(capsys, "topics", "describe", "--bootstrap-server", bs, "--topic", topic)
    assert "PartitionCount: 4" in described and "retention.ms=60000" in described
    good(capsys, "topics", "alter", "--bootstrap-server", bs, "--topic", topic,
         "--delete-config", "retention.ms")  # fmt: skip
    assert "retention.ms" not in good(
        capsys, "topics", "describe", "--bootstrap-server", bs, "--topic", topic
    )
    assert "can only be increased" in bad(
        capsys, "topics", "alter", "--bootstrap-server", bs, "--topic", topic, "--partitions", "3"
    )
    assert "does not exist" in bad(
        capsys, "topics", "alter", "--bootstrap-server", bs, "--topic", "nope", "--partitions", "9"
    )


def test_configs_describe_and_alter_topics_and_brokers(cluster, topic, capsys):
    bs = cluster.bootstrap_servers
    topic_args = ("--bootstrap-server", bs, "--entity-type", "topics", "--entity-name", topic)
    out = good(capsys, "configs", "alter", *topic_args,
               "--add-config", "retention.ms=120000,cleanup.policy=[compact,delete]")  # fmt: skip
    assert out == f"Completed updating config for topic {topic}.\n"
    lines = good(capsys, "configs", "describe", *topic_args).splitlines()
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    assert (
        "  retention.ms=120000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=120000}"
        in lines
    )
    assert any(line.startswith("  cleanup.policy=compact,delete ") for line in lines), lines
    good(capsys, "configs", "alter", *topic_args, "--delete-config", "retention.ms")
    described = good(capsys, "configs", "describe", *topic_args)
    assert "retention.ms" not in described
    everything = good(capsys, "configs", "describe", *topic_args, "--all")
    assert everything.startswith(f"All configs for topic {topic} are:\n")
    assert "  segment.bytes=" in everything  # a default, shown only with --all

    broker_args = ("--bootstrap-server", bs, "--entity-type", "brokers", "--entity-name", "0")
    out = good(capsys, "configs", "alter", *broker_args, "--add-config", "log.cleaner.threads=2")
    assert out == "Completed updating config for broker 0.\n"
    assert "  log.cleaner.threads=2 " in good(capsys, "configs", "describe", *broker_args)
    good(capsys, "configs", "alter", *broker_args, "--delete-config", "log.cleaner.threads")
    default_args = ("--bootstrap-server", bs, "--entity-type", "brokers", "--entity-default")
    out = good(capsys, "configs", "alter", *default_args, "--add-config",
               "log.retention.ms=7200000")  # fmt: skip
    assert out == "Completed updating default config for brokers in the cluster.\n"
    try:
        described = good(capsys, "configs", "describe", *default_args)
        assert described.startswith("Default configs for brokers in the cluster are:\n")
        assert "  log.retention.ms=7200000 " in described
    finally:
        good(capsys, "configs", "alter", *default_args, "--delete-config", "log.retention.ms")

    assert "does not exist" in bad(capsys, "configs", "describe", "--bootstrap-server", bs,
                                   "--entity-type", "topics", "--entity-name", "nope")  # fmt: skip
    assert "`quotas`" in bad(capsys, "configs", "describe", "--bootstrap-server", bs,
                             "--entity-type", "users", "--entity-name", "a")  # fmt: skip
    assert "both in --add-config and --delete-config" in bad(
        capsys, "configs", "alter", *topic_args, "--add-config", "a=1", "--delete-config", "a"
    )


def test_configs_describe_and_alter_a_group_s_own_configs(cluster, capsys):
    """kafka-configs.sh --entity-type groups: a consumer group's own session and heartbeat
    settings (GROUP config resource), validated against the broker's bounds."""
    bs, group = cluster.bootstrap_servers, unique("cfg-group")
    args = ("--bootstrap-server", bs, "--entity-type", "groups", "--entity-name", group)
    out = good(capsys, "configs", "alter", *args, "--add-config",
               "consumer.session.timeout.ms=50000,consumer.heartbeat.interval.ms=6000")  # fmt: skip
    assert out == f"Completed updating config for group {group}.\n"
    assert good(capsys, "configs", "describe", *args).splitlines() == [
        f"Dynamic configs for group {group} are:",
        "  consumer.heartbeat.interval.ms=6000 sensitive=false "
        "synonyms={GROUP_CONFIG:consumer.heartbeat.interval.ms=6000}",
        "  consumer.session.timeout.ms=50000 sensitive=false "
        "synonyms={GROUP_CONFIG:consumer.session.timeout.ms=50000}",
    ]
    assert cluster.coordinator.core.consumer.session_timeout_ms(group) == 50_000
    good(capsys, "configs", "alter", *args, "--delete-config", "consumer.heartbeat.interval.ms")
    described = good(capsys, "configs", "describe", *args)
    assert "consumer.heartbeat.interval.ms" not in described
    assert "  consumer.session.timeout.ms=50000 " in described
    everything = good(capsys, "configs", "describe", *args, "--all")
    assert everything.startswith(f"All configs for group {group} are:\n")
    assert "  consumer.heartbeat.interval.ms=5000 " in everything  # the broker's default
    assert "must be in the range 45000 to 60000" in bad(
        capsys, "configs", "alter", *args, "--add-config", "consumer.session.timeout.ms=1000"
    )
    assert "share groups" in bad(
        capsys, "configs", "alter", *args, "--add-config", "share.session.timeout.ms=50000"
    )
    assert "--entity-default is for brokers" in bad(
        capsys, "configs", "describe", "--bootstrap-server", bs, "--entity-type", "groups",
        "--entity-default",
    )  # fmt: skip


def test_get_offsets_and_delete_records(cluster, topic, capsys, tmp_path):
    bs = cluster.bootstrap_servers
    produce(bs, topic, {0: 5, 1: 3})
    args = ("get-offsets", "--bootstrap-server", bs, "--topic", topic)
    assert good(capsys, *args) == f"{topic}:0:5\n{topic}:1:3\n"
    assert good(capsys, *args, "--time", "-2") == f"{topic}:0:0\n{topic}:1:0\n"
    assert good(capsys, *args, "--partitions", "1", "--time", "latest") == f"{topic}:1:3\n"
    assert good(capsys, "get-offsets", "--bootstrap-server", bs,
                "--topic-partitions", f"{topic}:0") == f"{topic}:0:5\n"  # fmt: skip
    assert "--time 'soon'" in bad(capsys, *args, "--time", "soon")

    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 3},
                                               {"topic": topic, "partition": 1, "offset": -1}],
                                "version": 1}))  # fmt: skip
    out = good(capsys, "delete-records", "--bootstrap-server", bs, "--offset-json-file", str(plan))
    assert out.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {topic}-0\tlow_watermark: 3",
        f"partition: {topic}-1\tlow_watermark: 3",
    ]
    assert good(capsys, *args, "--time", "earliest") == f"{topic}:0:3\n{topic}:1:3\n"
    plan.write_text('{"partitions": [{"topic": "t"}]}')
    assert "bad entry" in bad(capsys, "delete-records", "--bootstrap-server", bs,
                              "--offset-json-file", str(plan))  # fmt: skip


def test_consume_as_group_commits_what_it_printed_and_groups_describe(cluster, topic, capsys):
    bs, group = cluster.bootstrap_servers, unique("console-group")
    produce(bs, topic, {0: 4, 1: 4})
    consume = ("consume", "--bootstrap-server", bs, "--topic", topic, "--group", group,
               "--from-beginning", "--timeout-ms", "30000")  # fmt: skip
    code = main([*consume, "--max-messages", "5"])
    assert code == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 5
    with AdminClient({"bootstrap.servers": bs}) as admin:
        committed = admin.list_group_offsets(group)
    assert sum(committed.values()) == 5  # the offsets after the records printed, no further
    # the next run of the same group resumes with the 3 records not printed yet
    assert main([*consume, "--max-messages", "3"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    with AdminClient({"bootstrap.servers": bs}) as admin:
        assert admin.list_group_offsets(group) == {(topic, 0): 4, (topic, 1): 4}

    state = good(capsys, "groups", "describe", "--bootstrap-server", bs, "--group", group,
                 "--state").splitlines()  # fmt: skip
    assert state[0].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                "#MEMBERS"]  # fmt: skip
    assert state[1].split()[0] == group and state[1].split()[-2:] == ["Empty", "0"]
    members = good(capsys, "groups", "describe", "--bootstrap-server", bs, "--group", group,
                   "--members")  # fmt: skip
    assert members == f"Consumer group {group!r} has no active members.\n"
    assert "--group and --partition" in bad(capsys, *consume, "--partition", "0")


def test_groups_describe_members_of_an_active_group(cluster, topic, capsys):
    from sparklog.client import KafkaConsumer

    bs, group = cluster.bootstrap_servers, unique("members")
    settings = {"bootstrap.servers": bs, "group.id": group, "client.id": "member-a"}
    with KafkaConsumer(settings) as consumer:
        consumer.subscribe([topic])
        for _ in range(100):
            consumer.poll(100)
            if len(consumer.assignment()) == 2:
                break
        lines = good(capsys, "groups", "describe", "--bootstrap-server", bs, "--group", group,
                     "--members", "--verbose").splitlines()  # fmt: skip
        assert lines[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                    "ASSIGNMENT"]  # fmt: skip
        row = lines[1].split()
        assert row[0] == group and row[3] == "member-a" and row[4] == "2"
        assert row[5] == f"{topic}(0,1)"
        state = good(capsys, "groups", "describe", "--bootstrap-server", bs, "--group", group,
                     "--state").splitlines()  # fmt: skip
        assert state[1].split()[-2:] == ["Stable", "1"]


def test_describing_an_unknown_group_exits_non_zero(cluster):
    from .test_cli import user_error

    bs = cluster.bootstrap_servers
    for flags in ((), ("--members",), ("--state",)):
        message = user_error("groups", "describe", "--bootstrap-server", bs, "--group",
                             "no-such-group", *flags)  # fmt: skip
        assert "Consumer group 'no-such-group' does not exist" in message
    assert "no-such-group" not in ok("groups", "list", "--bootstrap-server", bs)
