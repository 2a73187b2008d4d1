"""Which nodes a client sees, asked of Apache Kafka and of sparklog (issue 29 item 1).

Kafka lists in Metadata and DescribeCluster only brokers, the nodes that can host replicas,
and clients use that list as replica candidates ("RF = number of brokers", an assignment over
every broker: librdkafka's admin tests, `kafka-reassign-partitions --generate`). sparklog once
listed its driver's group/transaction coordinator as node 3001 beside the brokers; now
FindCoordinator names a broker, which forwards to the coordinator (KIP-590 Envelope). So, on
both: every Metadata version and DescribeCluster list exactly the session's brokers, with their
addresses; FindCoordinator (single key and batched, GROUP and TRANSACTION keys) names a node
Metadata lists, at the host and port Metadata gives it; CreateTopics with RF = number of listed
nodes, and with an explicit assignment over every listed node, succeeds.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from sparklog.protocol.api_versions import ApiKey

from .wire import NAMES, Pair, run

pytestmark = pytest.mark.oracle

GROUP, TRANSACTION = 0, 1
COORDINATOR_NOT_AVAILABLE = 15  # Kafka, while it creates __consumer_offsets/__transaction_state
#: Metadata v1 (sparklog's lowest; Kafka 4.4 serves v0 too), v4 (allow_auto_topic_creation),
#: v9 (the first flexible one) and the newest both speak (None).
METADATA_VERSIONS = (1, 4, 9, None)
#: FindCoordinator v0 (a group id only), v1 (key_type), v3 (the last single-key one, flexible)
#: and v4 (batched keys, KIP-699), with the key types each can ask for.
FIND_COORDINATOR_CASES = [
    pytest.param(version, key_type, id=f"v{version}-{name}")
    for version in (0, 1, 3, 4)
    for key_type, name in ((GROUP, "group"), (TRANSACTION, "transaction"))
    if version > 0 or key_type == GROUP
]

Node = tuple[str, int]  # (host, port)


def expected_brokers(apache_kafka, sparklog_cluster) -> dict[str, dict[int, Node]]:
    """name -> node id -> (host, port) of each session's brokers: what Metadata must list."""
    kafka_host, _, kafka_port = apache_kafka.bootstrap_servers.rpartition(":")
    ours = {}
    for broker in sparklog_cluster.brokers:
        host, _, port = broker.bootstrap.rpartition(":")
        ours[broker.node_id] = (host, int(port))
    return {"kafka": {1: (kafka_host, int(kafka_port))}, "sparklog": ours}


async def metadata_nodes(pair: Pair, version: int | None) -> dict[str, dict[int, Node]]:
    answers = await pair.ask(
        ApiKey.METADATA,
        {
            "topics": [],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
        version,
    )
    return {n: {b["node_id"]: (b["host"], b["port"]) for b in answers[n]["brokers"]} for n in NAMES}


async def described_nodes(pair: Pair, version: int) -> dict[str, dict[int, Node]]:
    answers = await pair.ask(
        ApiKey.DESCRIBE_CLUSTER,
        {"include_cluster_authorized_operations": False, "endpoint_type": 1},
        version,
    )
    for n in NAMES:
        assert answers[n]["error_code"] == 0, (n, answers[n])
    return {
        n: {b["broker_id"]: (b["host"], b["port"]) for b in answers[n]["brokers"]} for n in NAMES
    }


def test_metadata_and_describe_cluster_list_brokers_only(brokers, apache_kafka, sparklog_cluster):
    expected = expected_brokers(apache_kafka, sparklog_cluster)

    async def go():
        async with Pair(brokers) as pair:
            listed = {}
            for version in METADATA_VERSIONS:
                listed[
                    f"Metadata v{version or pair.version(ApiKey.METADATA)}"
                ] = await metadata_nodes(pair, version)
            for version in (0, 1):
                listed[f"DescribeCluster v{version}"] = await described_nodes(pair, version)
            return listed

    for request, nodes in run(go()).items():
        assert nodes == expected, f"{request} lists {nodes}, the brokers are {expected}"


def find_coordinator_request(version: int, key_type: int, keys: list[str]) -> dict:
    if version >= 4:
        return {"key_type": key_type, "coordinator_keys": keys}
    (key,) = keys
    return {"key_type": key_type, "key": key}


def named_coordinators(answer: dict, version: int, keys: list[str]) -> dict[str, tuple]:
    """key -> (error_code, node_id, host, port) from a FindCoordinator answer of any version."""
    if version >= 4:
        return {
            c["key"]: (c["error_code"], c["node_id"], c["host"], c["port"])
            for c in answer["coordinators"]
        }
    (key,) = keys
    return {key: (answer["error_code"], answer["node_id"], answer["host"], answer["port"])}


async def find_coordinators(
    pair: Pair, version: int, key_type: int, keys: list[str], timeout_s: float = 60.0
) -> dict[str, dict[str, tuple]]:
    """name -> key -> (node_id, host, port), asking again while a broker answers
    COORDINATOR_NOT_AVAILABLE (Kafka creates its internal topic on the first FindCoordinator)."""
    found: dict[str, dict[str, tuple]] = {}
    deadline = time.monotonic() + timeout_s
    while True:
        answers = await pair.ask(
            ApiKey.FIND_COORDINATOR, find_coordinator_request(version, key_type, keys), version
        )
        found = {n: named_coordinators(answers[n], version, keys) for n in NAMES}
        codes = {n: {k: c[0] for k, c in found[n].items()} for n in NAMES}
        if all(code == 0 for n in NAMES for code in codes[n].values()):
            return {n: {k: c[1:] for k, c in found[n].items()} for n in NAMES}
        unexpected = {
            (n, k, code)
            for n in NAMES
            for k, code in codes[n].items()
            if code not in (0, COORDINATOR_NOT_AVAILABLE)
        }
        assert not unexpected, f"FindCoordinator v{version}: {unexpected}"
        assert time.monotonic() < deadline, f"FindCoordinator v{version} still answers {codes}"
        await asyncio.sleep(0.2)


@pytest.mark.parametrize(("version", "key_type"), FIND_COORDINATOR_CASES)
def test_find_coordinator_names_a_broker_metadata_lists(
    brokers, apache_kafka, sparklog_cluster, version, key_type
):
    """The node named is one Metadata lists, at the address Metadata gives it, and one of the
    session's brokers (sparklog before issue 29 named its coordinator, node 3001, which its
    Metadata listed too)."""
    expected = expected_brokers(apache_kafka, sparklog_cluster)
    base = f"coord-{uuid.uuid4().hex[:8]}"
    keys = [f"{base}-{i}" for i in range(5)] if version >= 4 else [base]

    async def go():
        async with Pair(brokers) as pair:
            found = await find_coordinators(pair, version, key_type, keys)
            return found, await metadata_nodes(pair, None)

    found, listed = run(go())
    for n in NAMES:
        assert set(found[n]) == set(keys), (n, found[n])
        for key, (node_id, host, port) in found[n].items():
            assert node_id in listed[n], (
                f"{n}: FindCoordinator v{version} names node {node_id} for {key!r}; "
                f"Metadata lists {sorted(listed[n])}"
            )
            assert (host, port) == listed[n][node_id], (n, key, node_id, host, port, listed[n])
            assert node_id in expected[n], f"{n}: node {node_id} is not a broker: {expected[n]}"


async def replica_lists(
    pair: Pair, topics: list[str], timeout_s: float = 30.0
) -> dict[str, dict[str, dict[int, list[int]]]]:
    """name -> topic -> partition -> replicas, once both brokers' Metadata has every topic
    (Kafka's metadata cache catches up with its controller a moment after CreateTopics)."""
    deadline = time.monotonic() + timeout_s
    while True:
        answers = await pair.ask(
            ApiKey.METADATA,
            {
                "topics": [{"name": t, "topic_id": None} for t in topics],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
        replicas = {
            n: {
                t["name"]: {p["partition_index"]: p["replica_nodes"] for p in t["partitions"]}
                for t in answers[n]["topics"]
                if t["error_code"] == 0
            }
            for n in NAMES
        }
        if all(replicas[n].get(t) for n in NAMES for t in topics):
            return replicas
        assert time.monotonic() < deadline, f"topics {topics} not in Metadata: {answers}"
        await asyncio.sleep(0.2)


def topics_over(node_ids: list[int], by_rf: str, by_assignment: str) -> list[dict]:
    """CreateTopics entries: `by_rf` with one partition per node and RF = the number of nodes;
    `by_assignment` with partition i on every node, leaders rotated (i-th node first)."""
    rotations = [node_ids[i:] + node_ids[:i] for i in range(len(node_ids))]
    return [
        {
            "name": by_rf,
            "num_partitions": len(node_ids),
            "replication_factor": len(node_ids),
            "assignments": [],
            "configs": [],
        },
        {
            "name": by_assignment,
            "num_partitions": -1,
            "replication_factor": -1,
            "assignments": [
                {"partition_index": i, "broker_ids": replicas}
                for i, replicas in enumerate(rotations)
            ],
            "configs": [],
        },
    ]


def test_create_topics_over_every_listed_node(brokers):
    """RF = the number of listed nodes, and an assignment over every listed node, succeed on
    both, and Metadata then gives the replicas asked for."""
    base = f"every-node-{uuid.uuid4().hex[:8]}"
    by_rf, by_assignment = f"{base}-rf", f"{base}-assigned"

    async def go():
        async with Pair(brokers) as pair:
            listed = {n: sorted(nodes) for n, nodes in (await metadata_nodes(pair, None)).items()}
            requests = {
                n: {
                    "topics": topics_over(listed[n], by_rf, by_assignment),
                    "timeout": 10_000,
                    "validate_only": False,
                }
                for n in NAMES
            }
            created = await pair.ask_each(ApiKey.CREATE_TOPICS, requests)
            for n in NAMES:
                codes = {
                    t["name"]: (t["error_code"], t["error_message"]) for t in created[n]["topics"]
                }
                assert codes == {by_rf: (0, None), by_assignment: (0, None)}, (
                    f"{n} lists nodes {listed[n]}; CreateTopics answered {codes}"
                )
            return listed, requests, await replica_lists(pair, [by_rf, by_assignment])

    listed, requests, replicas = run(go())
    for n in NAMES:
        (_, assigned) = requests[n]["topics"]
        asked = {a["partition_index"]: a["broker_ids"] for a in assigned["assignments"]}
        assert replicas[n][by_assignment] == asked, (n, replicas[n])
        assert all(sorted(r) == listed[n] for r in replicas[n][by_rf].values()), (n, replicas[n])
