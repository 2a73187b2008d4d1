"""Topic administration by real Kafka tools against sparklog brokers: confluent-kafka's
AdminClient, kafka-python's KafkaAdminClient and `kcat -L`, each checked against what
sparklog's own AdminClient sees (and the other way round)."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import uuid

import pytest

from sparklog.client import AdminClient, NewTopic
from sparklog.cluster.embedded import EmbeddedCluster

pytestmark = pytest.mark.interop

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")
kafka_admin = pytest.importorskip("kafka.admin")
kafka_errors = pytest.importorskip("kafka.errors")

LIBRDKAFKA = {"broker.address.family": "v4"}
KCAT = shutil.which("kcat")
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory):
    with EmbeddedCluster(
        brokers=3,
        data_dir=tmp_path_factory.mktemp("admin-interop"),
        config={"broker.heartbeat.interval.ms": "200"},
    ) as running:
        yield running


@pytest.fixture(scope="module")
def sparklog_admin(cluster3):
    with AdminClient({"bootstrap.servers": cluster3.bootstrap_servers}) as admin:
        yield admin


@pytest.fixture(scope="module")
def confluent(cluster3):
    return confluent_admin.AdminClient(
        {"bootstrap.servers": cluster3.bootstrap_servers, **LIBRDKAFKA}
    )


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def results(futures: dict) -> dict:
    return {name: future.result(TIMEOUT_S) for name, future in futures.items()}


def layout(
    admin: AdminClient, topic: str
) -> list[tuple[int, int, tuple[int, ...], tuple[int, ...]]]:
    """(partition, leader, replicas, isr) of every partition, as sparklog's admin sees them."""
    description = admin.describe_topics([topic])[topic]
    return sorted(
        (p.partition, p.leader, tuple(p.replicas), tuple(p.isr)) for p in description.partitions
    )


def test_confluent_admin_create_list_describe_delete(cluster3, confluent, sparklog_admin):
    name = unique("cf")
    created = confluent.create_topics(
        [
            confluent_admin.NewTopic(
                name, 6, 1, config={"retention.ms": "7200000", "cleanup.policy": "compact"}
            )
        ],
        operation_timeout=TIMEOUT_S,
    )
    assert results(created) == {name: None}

    # sparklog's admin sees it, leaders spread over the three brokers
    assert [(p, leader) for p, leader, _r, _i in layout(sparklog_admin, name)] == [
        (p, p % 3) for p in range(6)
    ]

    listed = confluent.list_topics(timeout=TIMEOUT_S)
    assert sorted(listed.brokers) == [0, 1, 2]  # brokers only: not the driver's coordinator
    assert {b.port for b in listed.brokers.values()} == {
        int(s.rsplit(":", 1)[1]) for s in cluster3.bootstrap_servers.split(",")
    }
    partitions = listed.topics[name].partitions
    assert sorted(
        (p.id, p.leader, tuple(p.replicas), tuple(p.isrs)) for p in partitions.values()
    ) == layout(sparklog_admin, name)

    described = results(confluent.describe_topics(confluent_kafka.TopicCollection([name])))[name]
    assert described.name == name
    assert [(p.id, p.leader.id) for p in described.partitions] == [(p, p % 3) for p in range(6)]
    topic_id = sparklog_admin.describe_topics([name])[name].topic_id
    assert _uuid_bytes(described.topic_id) == _uuid_bytes(topic_id)

    configs = results(confluent.describe_configs([confluent_admin.ConfigResource("topic", name)]))
    (entries,) = configs.values()
    assert entries["retention.ms"].value == "7200000"
    assert entries["cleanup.policy"].value == "compact"
    assert entries["segment.bytes"].value == "1073741824"  # a default from sparklog-defaults.conf

    grown = confluent.create_partitions([confluent_admin.NewPartitions(name, 8)])
    assert results(grown) == {name: None}
    assert len(layout(sparklog_admin, name)) == 8

    assert results(confluent.delete_topics([name], operation_timeout=TIMEOUT_S)) == {name: None}
    assert name not in sparklog_admin.list_topics()


def test_clients_see_brokers_only_so_every_listed_node_can_host_a_replica(cluster3, confluent):
    """Issue 29 item 1: the driver's coordinator was listed as node 3001 beside the brokers,
    and clients take that list as replica candidates: librdkafka's admin test asked for RF =
    number of nodes, and for an assignment over every node, and got INVALID_REPLICATION_FACTOR
    and INVALID_REPLICA_ASSIGNMENT. Groups still find their coordinator (a broker)."""
    described = confluent.describe_cluster(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    ids = sorted(node.id for node in described.nodes)
    assert ids == sorted(b.node_id for b in cluster3.brokers)
    assert sorted(confluent.list_topics(timeout=TIMEOUT_S).brokers) == ids

    by_factor, by_assignment = unique("rf"), unique("ra")
    assignment = [[ids[(p + i) % len(ids)] for i in range(len(ids))] for p in range(2)]
    created = confluent.create_topics(
        [
            confluent_admin.NewTopic(by_factor, 2, len(ids)),
            confluent_admin.NewTopic(
                by_assignment, num_partitions=len(assignment), replica_assignment=assignment
            ),
        ],
        operation_timeout=TIMEOUT_S,
    )
    assert results(created) == {by_factor: None, by_assignment: None}
    for name in (by_factor, by_assignment):
        cluster3.wait_for_isr(name, 0, len(ids))

    found = confluent.describe_consumer_groups(["any-group"])["any-group"].result(TIMEOUT_S)
    assert found.coordinator.id in ids


def test_confluent_admin_errors_carry_kafka_codes(cluster3, confluent, sparklog_admin):
    name = unique("cf-err")
    sparklog_admin.create_topics([NewTopic(name, 1, 1)])
    cases = {
        "exists": (
            confluent.create_topics([confluent_admin.NewTopic(name, 1, 1)]),
            36,
        ),
        "rf": (
            confluent.create_topics([confluent_admin.NewTopic(unique("rf"), 1, 4)]),
            38,
        ),
        "name": (
            confluent.create_topics([confluent_admin.NewTopic("bad/name", 1, 1)]),
            17,
        ),
        "missing": (confluent.delete_topics([unique("missing")]), 3),
    }
    for case, (futures, code) in cases.items():
        (future,) = futures.values()
        with pytest.raises(confluent_kafka.KafkaException) as raised:
            future.result(TIMEOUT_S)
        assert raised.value.args[0].code() == code, case  # Kafka's error codes


def test_kafka_python_admin_and_sparklog_admin_agree(cluster3, sparklog_admin):
    admin = kafka_admin.KafkaAdminClient(bootstrap_servers=cluster3.bootstrap_servers)
    try:
        name = unique("kp")
        admin.create_topics(
            [kafka_admin.NewTopic(name, 4, 1, topic_configs={"retention.ms": "600000"})]
        )
        assert name in admin.list_topics()
        assert [(p, leader) for p, leader, _r, _i in layout(sparklog_admin, name)] == [
            (p, p % 3) for p in range(4)
        ]
        (described,) = admin.describe_topics([name])
        assert sorted((p["partition_index"], p["leader_id"]) for p in described["partitions"]) == [
            (p, p % 3) for p in range(4)
        ]
        with pytest.raises(kafka_errors.TopicAlreadyExistsError):
            admin.create_topics([kafka_admin.NewTopic(name, 1, 1)])

        other = unique("sl")
        sparklog_admin.create_topics([NewTopic(other, 2, 1)])
        assert other in admin.list_topics()
        admin.delete_topics([name, other])
        assert not {name, other} & set(sparklog_admin.list_topics())
    finally:
        admin.close()


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (make kcat)")
def test_kcat_lists_every_topic_partition_and_leader(cluster3, sparklog_admin):
    topics = {unique("kc"): n for n in (1, 3, 5)}
    sparklog_admin.create_topics([NewTopic(name, n, 1) for name, n in topics.items()])
    result = subprocess.run(
        [KCAT, "-b", cluster3.bootstrap_servers, "-X", "broker.address.family=v4", "-L"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout

    brokers = {int(i): f"{h}:{p}" for i, h, p in re.findall(r"broker (\d+) at ([\d.]+):(\d+)", out)}
    assert brokers == {b.node_id: b.bootstrap for b in cluster3.brokers}
    seen: dict[str, list[tuple[int, int, tuple[int, ...], tuple[int, ...]]]] = {}
    current = None
    for line in out.splitlines():
        if m := re.match(r'\s+topic "([^"]+)" with (\d+) partitions:', line):
            current = m.group(1)
            seen[current] = []
        elif m := re.match(
            r"\s+partition (\d+), leader (-?\d+), replicas: ([\d,]*), isrs: ([\d,]*)", line
        ):
            ids = lambda s: tuple(int(x) for x in s.split(",") if x)  # noqa: E731
            seen[current].append(
                (int(m.group(1)), int(m.group(2)), ids(m.group(3)), ids(m.group(4)))
            )
    assert set(seen) == set(sparklog_admin.list_topics())  # all topics, not only ours
    for name, count in topics.items():
        assert sorted(seen[name]) == layout(sparklog_admin, name)
        assert len(seen[name]) == count


def _uuid_bytes(value: object) -> bytes:
    """A topic id's 16 bytes, from a UUID, its string, or librdkafka's base64 (no padding)."""
    if isinstance(value, uuid.UUID):
        return value.bytes
    text = str(value)
    if len(text) == 22:
        return base64.b64decode(text + "==")
    return uuid.UUID(text).bytes
