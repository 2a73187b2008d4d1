"""Kafka's own command-line tools (run by their main classes from the pinned JARs) against a
sparklog cluster: topics, console producer and consumer, configs, offsets, log dirs, and the
performance tools."""

from __future__ import annotations

import re
import subprocess
import uuid

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.structs import CONTROLLER_NODE_ID

from .java_tools import classpath_or_fail

pytestmark = pytest.mark.interop

TOOLS = "org.apache.kafka.tools."


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    classpath_or_fail()
    with EmbeddedCluster(
        brokers=1,
        data_dir=tmp_path_factory.mktemp("kafka-tools"),
        config={"broker.heartbeat.interval.ms": "200"},
    ) as running:
        yield running


def tool(name: str, *args: str, stdin: str | None = None, timeout_s: float = 120) -> str:
    """Run Kafka tool `name`; returns stdout; fails the test with its output otherwise."""
    cmd = [
        "java", "-Xmx512m", "-Dlog4j2.rootLogger.level=ERROR", "-cp", classpath_or_fail(),
        TOOLS + name, *args,
    ]  # fmt: skip
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, f"{name} {args}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done.stdout


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_topic_command_create_describe_alter_list_delete(cluster):
    bs, topic = cluster.bootstrap_servers, unique("tools-topic")
    tool("TopicCommand", "--bootstrap-server", bs, "--create", "--topic", topic,
         "--partitions", "2", "--replication-factor", "1", "--config", "retention.ms=60000")  # fmt: skip
    described = tool("TopicCommand", "--bootstrap-server", bs, "--describe", "--topic", topic)
    assert re.search(rf"Topic: {topic}\s+TopicId: \S+\s+PartitionCount: 2", described), described
    assert "retention.ms=60000" in described
    tool("TopicCommand", "--bootstrap-server", bs, "--alter", "--topic", topic, "--partitions", "4")
    described = tool("TopicCommand", "--bootstrap-server", bs, "--describe", "--topic", topic)
    assert "PartitionCount: 4" in described
    assert topic in tool("TopicCommand", "--bootstrap-server", bs, "--list").split()
    tool("TopicCommand", "--bootstrap-server", bs, "--delete", "--topic", topic)
    assert topic not in tool("TopicCommand", "--bootstrap-server", bs, "--list").split()


def test_console_producer_to_console_consumer(cluster):
    bs, topic = cluster.bootstrap_servers, unique("tools-console")
    lines = [f"k{i}:value {i}" for i in range(20)]
    tool("ConsoleProducer", "--bootstrap-server", bs, "--topic", topic,
         "--property", "parse.key=true", "--property", "key.separator=:",
         stdin="\n".join(lines) + "\n")  # fmt: skip
    out = tool("consumer.ConsoleConsumer", "--bootstrap-server", bs, "--topic", topic,
               "--partition", "0", "--offset", "earliest", "--max-messages", "20",
               "--formatter-property", "print.key=true",
               "--formatter-property", "key.separator=:")  # fmt: skip
    assert out.splitlines() == lines


def test_config_command_get_offset_shell_and_log_dirs(cluster):
    bs, topic = cluster.bootstrap_servers, unique("tools-configs")
    tool("TopicCommand", "--bootstrap-server", bs, "--create", "--topic", topic,
         "--partitions", "3", "--replication-factor", "1")  # fmt: skip
    tool("ConfigCommand", "--bootstrap-server", bs, "--alter", "--entity-type", "topics",
         "--entity-name", topic, "--add-config", "retention.ms=123456,max.message.bytes=200000")  # fmt: skip
    described = tool("ConfigCommand", "--bootstrap-server", bs, "--describe",
                     "--entity-type", "topics", "--entity-name", topic)  # fmt: skip
    assert "retention.ms=123456" in described and "max.message.bytes=200000" in described
    tool("ConfigCommand", "--bootstrap-server", bs, "--alter", "--entity-type", "topics",
         "--entity-name", topic, "--delete-config", "retention.ms")  # fmt: skip
    described = tool("ConfigCommand", "--bootstrap-server", bs, "--describe",
                     "--entity-type", "topics", "--entity-name", topic)  # fmt: skip
    assert "retention.ms=123456" not in described

    tool("ConsoleProducer", "--bootstrap-server", bs, "--topic", topic,
         stdin="".join(f"v{i}\n" for i in range(30)))  # fmt: skip
    offsets = tool("GetOffsetShell", "--bootstrap-server", bs, "--topic", topic)
    ends = {int(p): int(o) for p, o in re.findall(rf"^{topic}:(\d+):(\d+)$", offsets, re.M)}
    assert set(ends) == {0, 1, 2} and sum(ends.values()) == 30, offsets
    earliest = tool("GetOffsetShell", "--bootstrap-server", bs, "--topic", topic, "--time", "-2")
    assert re.findall(rf"^{topic}:\d+:(\d+)$", earliest, re.M) == ["0", "0", "0"]

    dirs = tool("LogDirsCommand", "--bootstrap-server", bs, "--describe", "--topic-list", topic)
    assert f'"partition":"{topic}-0"' in dirs and '"logDir"' in dirs, dirs


def test_producer_performance(cluster):
    bs, topic = cluster.bootstrap_servers, unique("tools-perf")
    out = tool("ProducerPerformance", "--topic", topic, "--num-records", "20000",
               "--record-size", "100", "--throughput", "-1",
               "--producer-props", f"bootstrap.servers={bs}", "acks=all", "compression.type=lz4")  # fmt: skip
    assert re.search(r"20000 records sent, [\d.]+ records/sec", out), out


@pytest.fixture
def fast_failing_config(tmp_path):
    """Client settings that make a broken group coordinator fail in seconds, not a minute."""
    path = tmp_path / "client.properties"
    path.write_text("default.api.timeout.ms=3000\nrequest.timeout.ms=3000\n")
    return str(path)


def test_end_to_end_latency(cluster, fast_failing_config):
    bs, topic = cluster.bootstrap_servers, unique("tools-e2e")
    tool("TopicCommand", "--bootstrap-server", bs, "--create", "--topic", topic,
         "--partitions", "1", "--replication-factor", "1")  # fmt: skip
    out = tool("EndToEndLatency", "--bootstrap-server", bs, "--topic", topic,
               "--num-records", "200", "--producer-acks", "1", "--record-size", "100",
               "--command-config", fast_failing_config, timeout_s=60)  # fmt: skip
    assert re.search(r"Avg latency: [\d.]+ ms", out), out


def test_consumer_performance(cluster, fast_failing_config):
    bs, topic = cluster.bootstrap_servers, unique("tools-consumer-perf")
    tool("ConsoleProducer", "--bootstrap-server", bs, "--topic", topic,
         stdin="".join(f"v{i}\n" for i in range(100)))  # fmt: skip
    out = tool("ConsumerPerformance", "--bootstrap-server", bs, "--topic", topic,
               "--messages", "100", "--timeout", "5000",
               "--command-config", fast_failing_config, timeout_s=60)  # fmt: skip
    header, values = out.strip().splitlines()[-2:]
    stats = dict(zip((h.strip() for h in header.split(",")), values.split(","), strict=True))
    assert int(stats["data.consumed.in.nMsg"]) == 100, out


def test_consumer_groups_command_lists_and_describes_a_group(cluster, fast_failing_config):
    """Kafka's kafka-consumer-groups (Java Admin) against the driver-side coordinator."""
    bs, topic = cluster.bootstrap_servers, unique("tools-groups")
    group = unique("tools-group")
    tool("ConsoleProducer", "--bootstrap-server", bs, "--topic", topic,
         stdin="".join(f"v{i}\n" for i in range(10)))  # fmt: skip
    tool("consumer.ConsoleConsumer", "--bootstrap-server", bs, "--topic", topic, "--group", group,
         "--from-beginning", "--max-messages", "10", "--timeout-ms", "20000")  # fmt: skip
    listed = tool("consumer.group.ConsumerGroupCommand", "--bootstrap-server", bs, "--list",
                  "--command-config", fast_failing_config)  # fmt: skip
    assert group in listed.split(), listed
    described = tool("consumer.group.ConsumerGroupCommand", "--bootstrap-server", bs, "--describe",
                     "--group", group, "--command-config", fast_failing_config)  # fmt: skip
    row = next(line.split() for line in described.splitlines() if line.startswith(group))
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
    assert row[1:6] == [topic, "0", "10", "10", "0"], described


def test_java_consumer_with_the_kip848_protocol(cluster, fast_failing_config):
    """Kafka's reference KafkaConsumer with group.protocol=consumer (server-side assignment)."""
    bs, topic, group = cluster.bootstrap_servers, unique("tools-848"), unique("tools-848-group")
    tool("ConsoleProducer", "--bootstrap-server", bs, "--topic", topic,
         stdin="".join(f"v{i}\n" for i in range(10)))  # fmt: skip
    out = tool("consumer.ConsoleConsumer", "--bootstrap-server", bs, "--topic", topic,
               "--group", group, "--command-property", "group.protocol=consumer",
               "--from-beginning", "--max-messages", "10", "--timeout-ms", "30000")  # fmt: skip
    assert out.split() == [f"v{i}" for i in range(10)]
    described = tool("consumer.group.ConsumerGroupCommand", "--bootstrap-server", bs,
                     "--describe", "--group", group, "--command-config", fast_failing_config)  # fmt: skip
    row = next(line.split() for line in described.splitlines() if line.startswith(group))
    assert row[1:6] == [topic, "0", "10", "10", "0"], described


def test_metadata_quorum_command_describes_the_one_voter_quorum(cluster):
    """kafka-metadata-quorum.sh: the driver's controller is the only voter and the leader,
    the brokers are observers that report the metadata offset they have applied."""
    bs = cluster.bootstrap_servers
    status = dict(
        line.split(":", 1)
        for line in tool(
            "MetadataQuorumCommand", "--bootstrap-server", bs, "describe", "--status"
        ).splitlines()  # fmt: skip
    )
    leader = status["LeaderId"].strip()
    assert leader == str(CONTROLLER_NODE_ID)
    assert int(status["HighWatermark"]) > 0
    assert status["MaxFollowerLag"].strip() == "0"
    assert f'"id": {leader}, "endpoints": ["CONTROLLER://' in status["CurrentVoters"]
    assert status["CurrentObservers"].strip() == '[{"id": 0}]'
    rows = [
        line.split()
        for line in tool(
            "MetadataQuorumCommand", "--bootstrap-server", bs, "describe", "--replication"
        ).splitlines()[1:]  # fmt: skip
    ]
    assert [(r[0], r[-1]) for r in rows] == [(leader, "Leader"), ("0", "Observer")]
    leader_end, observer_end = int(rows[0][2]), int(rows[1][2])
    assert 0 < observer_end <= leader_end and int(rows[1][4]) > 0  # the broker's last report


def test_feature_command_describes_the_supported_feature_levels(cluster):
    out = tool("FeatureCommand", "--bootstrap-server", cluster.bootstrap_servers, "describe")
    fields = [dict(re.findall(r"(\w+): (\S+)", line)) for line in out.splitlines()]
    assert fields == [
        {
            "Feature": "eligible.leader.replicas.version",
            "SupportedMinVersion": "0",
            "SupportedMaxVersion": "1",
            "FinalizedVersionLevel": "1",
            "Epoch": fields[0]["Epoch"],
        },
        {
            "Feature": "transaction.version",
            "SupportedMinVersion": "0",
            "SupportedMaxVersion": "2",
            "FinalizedVersionLevel": "2",
            "Epoch": fields[0]["Epoch"],
        },
    ]
    assert int(fields[0]["Epoch"]) >= 0


def finalized_elr(cluster) -> str:
    out = tool("FeatureCommand", "--bootstrap-server", cluster.bootstrap_servers, "describe")
    rows = [dict(re.findall(r"(\w+): (\S+)", line)) for line in out.splitlines()]
    [elr] = [r for r in rows if r.get("Feature") == "eligible.leader.replicas.version"]
    return elr["FinalizedVersionLevel"]


def test_feature_command_downgrades_and_upgrades_eligible_leader_replicas(cluster):
    """UpdateFeatures through a broker (forwarded to the controller): Kafka's FeatureCommand
    downgrade / upgrade, its dry run, and Kafka's refusals of unsupported levels."""
    bs, feature = cluster.bootstrap_servers, "eligible.leader.replicas.version"
    assert finalized_elr(cluster) == "1"
    out = tool("FeatureCommand", "--bootstrap-server", bs, "downgrade", "--feature",
               f"{feature}=0", "--dry-run")  # fmt: skip
    assert f"{feature} can be downgraded to 0." in out
    assert finalized_elr(cluster) == "1"  # validate only
    out = tool("FeatureCommand", "--bootstrap-server", bs, "downgrade", "--feature", f"{feature}=0")
    assert out.strip() == f"{feature} was downgraded to 0."
    assert finalized_elr(cluster) != "1"
    out = tool("FeatureCommand", "--bootstrap-server", bs, "upgrade", "--feature", f"{feature}=1")
    assert out.strip() == f"{feature} was upgraded to 1."
    assert finalized_elr(cluster) == "1"

    cmd = ["java", "-Xmx512m", "-Dlog4j2.rootLogger.level=ERROR", "-cp", classpath_or_fail(),
           TOOLS + "FeatureCommand", "--bootstrap-server", bs, "upgrade", "--feature",
           f"{feature}=2"]  # fmt: skip
    refused = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0
    assert f"Invalid update version 2 for feature {feature}" in refused.stdout + refused.stderr
    assert finalized_elr(cluster) == "1"
