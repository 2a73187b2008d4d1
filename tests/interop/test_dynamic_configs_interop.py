"""Dynamic broker configs and group configs (issue 29 item 5) with real clients: Kafka's
`kafka-configs` (ConfigCommand) on BROKER resources, confluent-kafka's
incremental_alter_configs on BROKER and GROUP resources, and a group's own
`consumer.session.timeout.ms` / `consumer.heartbeat.interval.ms` reaching a KIP-848 member."""

from __future__ import annotations

import asyncio
import re
import time
import uuid

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.protocol import codec, kio_build
from sparklog.protocol.api_versions import BROKER_APIS, ApiKey
from sparklog.protocol.async_client import AsyncKafkaConnection

from .java_tools import classpath_or_fail
from .test_kafka_tools import tool

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.interop

GROUP_RESOURCE = 32


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(
        brokers=1,
        data_dir=tmp_path_factory.mktemp("dynamic-configs"),
        config={"broker.heartbeat.interval.ms": "200"},
    ) as running:
        yield running


@pytest.fixture(scope="module")
def admin(cluster):
    return confluent_admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def wait_until(check, what: str, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def alter(admin, resource, *ops):
    changed = confluent_admin.ConfigResource(
        resource.restype, resource.name, incremental_configs=list(ops)
    )
    (future,) = admin.incremental_alter_configs([changed]).values()
    return future.result(30)


def broker_log_config(cluster, topic: str):
    broker = cluster.brokers[0]
    log = broker.log_manager.get_log(topic, 0)
    return None if log is None else log.config


def test_config_command_sets_a_cluster_wide_retention_that_reaches_topics(cluster, admin):
    classpath_or_fail()
    bs, topic = cluster.bootstrap_servers, f"dyn-{uuid.uuid4().hex[:8]}"
    tool("TopicCommand", "--bootstrap-server", bs, "--create", "--topic", topic,
         "--partitions", "1", "--replication-factor", "1")  # fmt: skip
    try:
        tool("ConfigCommand", "--bootstrap-server", bs, "--entity-type", "brokers",
             "--entity-default", "--alter", "--add-config", "log.retention.ms=4321000")  # fmt: skip
        described = tool("ConfigCommand", "--bootstrap-server", bs, "--entity-type", "brokers",
                         "--entity-name", "0", "--describe", "--all")  # fmt: skip
        line = next(x for x in described.splitlines() if x.strip().startswith("log.retention.ms="))
        assert "log.retention.ms=4321000 sensitive=false" in line, line
        assert "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=4321000" in line, line
        default = tool("ConfigCommand", "--bootstrap-server", bs, "--entity-type", "brokers",
                       "--entity-default", "--describe")  # fmt: skip
        assert "log.retention.ms=4321000" in default, default
        # the broker applies it to a topic without its own retention.ms, without a restart
        wait_until(
            lambda: getattr(broker_log_config(cluster, topic), "retention_ms", None) == 4321000,
            "the broker to apply the cluster-wide log.retention.ms",
        )
        topic_desc = tool("ConfigCommand", "--bootstrap-server", bs, "--entity-type", "topics",
                          "--entity-name", topic, "--describe", "--all")  # fmt: skip
        assert re.search(r"retention\.ms=4321000 .*DYNAMIC_DEFAULT_BROKER_CONFIG", topic_desc)

        refused = _tool_failure(bs, "--entity-default", "--add-config", "num.partitions=3")
        assert "Cannot update these configs dynamically" in refused and "num.partitions" in refused
    finally:
        tool("ConfigCommand", "--bootstrap-server", bs, "--entity-type", "brokers",
             "--entity-default", "--alter", "--delete-config", "log.retention.ms")  # fmt: skip
    wait_until(
        lambda: getattr(broker_log_config(cluster, topic), "retention_ms", None) == 604_800_000,
        "the broker to drop the cluster-wide log.retention.ms",
    )


def _tool_failure(bs: str, *args: str) -> str:
    import subprocess

    cmd = ["java", "-Xmx512m", "-Dlog4j2.rootLogger.level=ERROR", "-cp", classpath_or_fail(),
           "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", bs,
           "--entity-type", "brokers", "--alter", *args]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0, done.stdout
    return done.stdout + done.stderr


def test_confluent_message_max_bytes_per_broker_changes_the_produce_check(cluster, admin):
    topic = f"dyn-mmb-{uuid.uuid4().hex[:8]}"
    (created,) = admin.create_topics([confluent_admin.NewTopic(topic, 1, 1)]).values()
    created.result(30)
    broker = confluent_admin.ConfigResource(confluent_admin.ResourceType.BROKER, "0")
    op = confluent_admin.ConfigEntry(
        "message.max.bytes", "2000", incremental_operation=confluent_admin.AlterConfigOpType.SET
    )
    alter(admin, broker, op)
    try:
        wait_until(
            lambda: getattr(broker_log_config(cluster, topic), "max_message_bytes", None) == 2000,
            "the broker to apply message.max.bytes",
        )
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": cluster.bootstrap_servers, "message.max.bytes": 1_000_000}
        )
        errors = []
        producer.produce(topic, b"x" * 10_000, on_delivery=lambda err, msg: errors.append(err))
        producer.flush(30)
        assert errors and errors[0] is not None
        assert errors[0].code() == confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE, errors[0]
        (entries,) = admin.describe_configs([broker]).values()
        entry = entries.result(30)["message.max.bytes"]
        assert (entry.value, entry.source) == (
            "2000",
            confluent_admin.ConfigSource.DYNAMIC_BROKER_CONFIG.value,
        )
        assert not entry.is_read_only
    finally:
        alter(
            admin,
            broker,
            confluent_admin.ConfigEntry(
                "message.max.bytes",
                None,
                incremental_operation=confluent_admin.AlterConfigOpType.DELETE,
            ),
        )


def _ask(cluster, key: ApiKey, data: dict, address: tuple[str, int] | None = None):
    async def go():
        host, port = address or cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
        conn = await AsyncKafkaConnection(host, int(port), client_id="dyn-test").connect()
        try:
            version = conn.version_for(key, BROKER_APIS[key])
            return await conn.request(kio_build.build(codec.request_schema(key, version), data))
        finally:
            await conn.close()

    return asyncio.run(go())


def _alter_group(cluster, group: str, configs: dict[str, str]):
    answer = _ask(
        cluster,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        {
            "resources": [
                {
                    "resource_type": GROUP_RESOURCE,
                    "resource_name": group,
                    "configs": [
                        {"name": n, "config_operation": 0, "value": v} for n, v in configs.items()
                    ],
                }
            ],
            "validate_only": False,
        },
    )
    (result,) = answer.responses
    return int(result.error_code), result.error_message


def test_a_group_config_sets_a_kip848_members_heartbeat_interval_and_session(cluster):
    group = f"dyn-group-{uuid.uuid4().hex[:8]}"
    assert _alter_group(
        cluster,
        group,
        {"consumer.heartbeat.interval.ms": "7000", "consumer.session.timeout.ms": "50000"},
    ) == (0, None)
    code, message = _alter_group(cluster, group, {"consumer.session.timeout.ms": "1000"})
    assert code == 40
    assert message == "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive."
    code, message = _alter_group(cluster, group, {"share.session.timeout.ms": "50000"})
    assert code == 40 and "share groups" in message
    found = _ask(
        cluster,
        ApiKey.FIND_COORDINATOR,
        {"key_type": 0, "coordinator_keys": [group], "key": group},
    )
    coordinator = found.coordinators[0] if getattr(found, "coordinators", None) else found
    address = (str(coordinator.host), int(coordinator.port))
    answer = _ask(
        cluster,
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        {
            "group_id": group,
            "member_id": uuid.uuid4().hex,
            "member_epoch": 0,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout": 30_000,
            "subscribed_topic_names": [],
            "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": [],
        },
        address,
    )
    assert int(answer.error_code) == 0, answer
    assert int(kio_build.millis(answer.heartbeat_interval)) == 7000
    # the member's session is the group's 50 s, not the broker's 45 s
    assert cluster.coordinator.core.consumer.session_timeout_ms(group) == 50_000
