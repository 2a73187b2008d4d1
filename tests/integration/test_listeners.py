"""Brokers serving several listeners (Kafka's listener model, security/listeners.py): one port
per listener, every endpoint registered, answers naming brokers give the endpoints of the
listener the request came in on, replication over `inter.broker.listener.name`, restarts
re-binding each listener's port."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import time

import pytest

from sparklog.broker.server import BrokerServer
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.errors import LeaderNotAvailableError, ListenerNotFoundError
from sparklog.protocol.api_versions import ApiKey
from sparklog.security.session import SecurityProtocol
from sparklog.settings import ConfigError
from tests.integration.broker_wire import call, connect, create_topic, host_port
from tests.integration.conftest import TEST_CONFIG

LISTENERS = {
    **TEST_CONFIG,
    "listeners": "CLIENT://127.0.0.1:0,REPLICATION://127.0.0.1:0",
    "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:PLAINTEXT",
    "inter.broker.listener.name": "REPLICATION",
}


def run(coro):
    return asyncio.run(coro)


def ports(cluster: EmbeddedCluster, listener: str) -> set[tuple[int, int]]:
    return {(b.node_id, b.servers[listener].port) for b in cluster.brokers}


async def _ask(bootstrap: str, api: ApiKey, data: dict, version: int | None = None):
    conn = await connect(bootstrap)
    try:
        return await call(conn, api, data, version)
    finally:
        await conn.close()


def _metadata(bootstrap: str, topics: list[str] | None, version: int | None = None):
    body = {
        "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    return run(_ask(bootstrap, ApiKey.METADATA, body, version))


@pytest.fixture(scope="module")
def two_listeners(tmp_path_factory):
    with EmbeddedCluster(
        brokers=2, data_dir=tmp_path_factory.mktemp("listeners"), config=LISTENERS
    ) as running:
        yield running


def test_each_listener_has_its_port_and_every_endpoint_is_registered(two_listeners):
    image = two_listeners.controller.metadata_image()
    for broker in two_listeners.brokers:
        client, replication = broker.servers["CLIENT"], broker.servers["REPLICATION"]
        assert client.port != replication.port
        assert (client.listener_name, replication.listener_name) == ("CLIENT", "REPLICATION")
        registered = image.broker(broker.node_id)
        assert [
            (e.listener_name, e.security_protocol, e.host, e.port) for e in registered.endpoints
        ] == [
            ("CLIENT", SecurityProtocol.PLAINTEXT, "127.0.0.1", client.port),
            ("REPLICATION", SecurityProtocol.PLAINTEXT, "127.0.0.1", replication.port),
        ]
        # the first listener is the broker's default address
        assert (registered.host, registered.port) == ("127.0.0.1", client.port)


@pytest.mark.parametrize("listener", ["CLIENT", "REPLICATION"])
def test_metadata_answers_the_endpoints_of_the_listener_asked(two_listeners, listener):
    bootstrap = two_listeners.brokers[0].bootstrap_of(listener)
    answer = _metadata(bootstrap, None)
    assert {(b.node_id, b.port) for b in answer.brokers} == ports(two_listeners, listener)


@pytest.mark.parametrize("listener", ["CLIENT", "REPLICATION"])
def test_a_real_client_sees_the_listener_it_bootstrapped_from(two_listeners, listener):
    admin_module = pytest.importorskip("confluent_kafka.admin")
    admin = admin_module.AdminClient(
        {"bootstrap.servers": two_listeners.brokers[1].bootstrap_of(listener)}
    )
    brokers = admin.list_topics(timeout=10).brokers
    assert {(b.id, b.port) for b in brokers.values()} == ports(two_listeners, listener)
    described = admin.describe_cluster(request_timeout=10).result(timeout=10)
    assert {(n.id, n.port) for n in described.nodes} == ports(two_listeners, listener)


def test_find_coordinator_names_a_broker_on_the_listener_asked(two_listeners):
    for listener in ("CLIENT", "REPLICATION"):
        bootstrap = two_listeners.brokers[0].bootstrap_of(listener)
        deadline = time.monotonic() + 30
        while True:  # the coordinator may still be loading its table
            answer = run(
                _ask(bootstrap, ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": ["g"]})
            )
            (found,) = answer.coordinators
            if found.error_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert found.error_code == 0
        assert (found.node_id, found.port) in ports(two_listeners, listener)


def test_followers_replicate_over_the_inter_broker_listener(two_listeners):
    bootstrap = two_listeners.brokers[0].bootstrap_of("CLIENT")

    async def go():
        conn = await connect(bootstrap)
        try:
            return await create_topic(conn, "replicated", partitions=1, replication_factor=2)
        finally:
            await conn.close()

    assert run(go()).error_code == 0
    two_listeners.wait_for_isr("replicated", 0, size=2)
    leader = two_listeners.brokers[
        two_listeners.broker_index(two_listeners.leader_of("replicated"))
    ]
    # the follower's fetcher connects to the leader's REPLICATION port (nothing else does);
    # a new partition's ISR holds both replicas at once, so the fetcher may not be there yet
    deadline = time.monotonic() + 30
    while not leader.servers["REPLICATION"].connection_count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leader.servers["REPLICATION"].connection_count >= 1


def test_a_restarted_broker_binds_each_listener_port_again(tmp_path):
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=LISTENERS) as cluster:
        before = {n: s.port for n, s in cluster.brokers[0].servers.items()}
        broker = cluster.restart_broker(0)
        assert {n: s.port for n, s in broker.servers.items()} == before
        registered = cluster.controller.metadata_image().broker(broker.node_id)
        assert {e.listener_name: e.port for e in registered.endpoints} == before


def test_a_leader_without_the_listener_asked_is_listener_not_found_from_v6(tmp_path):
    """Broker 1 serves REPLICATION only: clients on CLIENT do not see it, and a partition it
    leads answers LISTENER_NOT_FOUND (v6+) or LEADER_NOT_AVAILABLE (v0-v5), as Kafka's
    metadata cache does."""
    with EmbeddedCluster(brokers=1, data_dir=tmp_path / "c", config=LISTENERS) as cluster:
        only_replication = {**LISTENERS, "listeners": "REPLICATION://127.0.0.1:0"}
        other = BrokerServer(
            1, tmp_path / "b1", cluster.controller.bootstrap, only_replication
        ).start_in_thread()
        try:
            client = cluster.brokers[0].bootstrap_of("CLIENT")
            body = {
                "topics": [
                    {
                        "name": "on-1",
                        "num_partitions": -1,
                        "replication_factor": -1,
                        "assignments": [{"partition_index": 0, "broker_ids": [1]}],
                        "configs": [],
                    }
                ],
                "timeout": 10_000,
                "validate_only": False,
            }
            assert run(_ask(client, ApiKey.CREATE_TOPICS, body)).topics[0].error_code == 0
            cluster.wait_for_isr("on-1", 0, size=1)
            recent = _metadata(client, ["on-1"], version=12)
            old = _metadata(client, ["on-1"], version=5)
            on_replication = _metadata(other.bootstrap_of("REPLICATION"), ["on-1"], version=12)
        finally:
            other.stop()
    assert [b.node_id for b in recent.brokers] == [0]
    (p,) = recent.topics[0].partitions
    assert (p.error_code, p.leader_id) == (ListenerNotFoundError.code, -1)
    (p,) = old.topics[0].partitions
    assert (p.error_code, p.leader_id) == (LeaderNotAvailableError.code, -1)
    (p,) = on_replication.topics[0].partitions
    assert (p.error_code, p.leader_id) == (0, 1)
    assert sorted(b.node_id for b in on_replication.brokers) == [0, 1]


def test_a_listener_that_cannot_be_secured_stops_the_broker_before_it_binds(tmp_path):
    with pytest.raises(ConfigError, match="listener EXTERNAL uses SASL_SSL"):
        BrokerServer(
            1,
            tmp_path,
            "127.0.0.1:1",  # never asked: the broker refuses at construction
            {
                "listeners": "PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:SASL_SSL",
            },
        )


def test_the_driver_servers_serve_the_inter_broker_listener(two_listeners):
    for server in (two_listeners.controller, two_listeners.coordinator):
        security = server.listener_security
        assert (security.listener_name, security.security_protocol) == (
            "REPLICATION",
            SecurityProtocol.PLAINTEXT,
        )


def test_transaction_markers_reach_leaders_on_the_inter_broker_listener(tmp_path):
    """One broker, so no follower connects: the REPLICATION port's connection comes from the
    coordinator's WriteTxnMarkers."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=LISTENERS) as cluster:
        broker = cluster.brokers[0]
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": broker.bootstrap_of("CLIENT"),
                "transactional.id": "listeners-txn",
            }
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("txn-topic", b"v")
        producer.commit_transaction(30)
        # markers are written after EndTxn is answered, as in Kafka
        replication = broker.servers["REPLICATION"]
        deadline = time.monotonic() + 30
        while replication.connection_count == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert replication.connection_count >= 1


CONTROLLER_LISTENER = {
    **LISTENERS,
    "listeners": "CLIENT://127.0.0.1:0,REPLICATION://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
    "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "controller.listener.names": "CONTROLLER",
}


def test_the_controller_serves_controller_listener_names_and_brokers_do_not(tmp_path):
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=CONTROLLER_LISTENER) as cluster:
        broker = cluster.brokers[0]
        assert list(broker.servers) == ["CLIENT", "REPLICATION"]
        registered = cluster.controller.metadata_image().broker(broker.node_id)
        assert [e.listener_name for e in registered.endpoints] == ["CLIENT", "REPLICATION"]
        assert cluster.controller.listener_security.listener_name == "CONTROLLER"
        port = cluster.controller.port
        cluster.restart_controller()
        assert (cluster.controller.port, cluster.controller.listener_security.listener_name) == (
            port,
            "CONTROLLER",
        )


SERVE_LISTENERS = (
    "--config",
    "listeners=CLIENT://127.0.0.1:0,REPLICATION://127.0.0.1:0",
    "--config",
    "listener.security.protocol.map=CLIENT:PLAINTEXT,REPLICATION:PLAINTEXT",
    "--config",
    "inter.broker.listener.name=REPLICATION",
)


def test_serve_takes_the_listeners_from_its_config(tmp_path):
    from tests.integration.test_cli import Served

    served = Served("--master", "none", "--data-dir", str(tmp_path), *SERVE_LISTENERS)
    try:
        answer = _metadata(served.bootstrap, None)
        assert [(b.host, b.port) for b in answer.brokers] == [host_port(served.bootstrap)]
    finally:
        code, err = served.stop(signal.SIGTERM)
    assert code == 0, err
    (replication,) = re.findall(r"listener REPLICATION: (127\.0\.0\.1:\d+)", err)
    assert f"listener CLIENT: {served.bootstrap}" in err
    assert replication != served.bootstrap


def test_serve_refuses_a_bad_listener_configuration_with_kafkas_message(tmp_path):
    from tests.integration.test_cli import user_error

    err = user_error("serve", "--master", "none", "--data-dir", str(tmp_path), *SERVE_LISTENERS[:2])
    assert "No security protocol defined for listener CLIENT" in err


def _until(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_a_listener_may_bound_its_own_connections(tmp_path):
    config = {**LISTENERS, "listener.name.client.max.connections": "2"}
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=config) as cluster:
        broker = cluster.brokers[0]
        client, replication = broker.servers["CLIENT"], broker.servers["REPLICATION"]
        opened = [
            socket.create_connection((s.host, s.port))
            for s in (client, replication)
            for _ in range(4)
        ]
        try:
            assert _until(lambda: client.refused_connections == 2)
            assert _until(lambda: replication.connection_count >= 4)
            assert (client.connection_count, replication.refused_connections) == (2, 0)
        finally:
            for s in opened:
                s.close()


def test_advertised_listeners_are_what_clients_are_told(tmp_path):
    """`advertised.listeners` names the address to register (a port 0 takes the bound one);
    clients on each listener get that listener's advertised endpoint."""
    config = {**LISTENERS, "advertised.listeners": "CLIENT://localhost:0,REPLICATION://127.0.0.1:0"}
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=config) as cluster:
        broker = cluster.brokers[0]
        via_client = _metadata(broker.bootstrap_of("CLIENT"), None)
        via_replication = _metadata(broker.bootstrap_of("REPLICATION"), None)
    assert [(b.host, b.port) for b in via_client.brokers] == [
        ("localhost", broker.servers["CLIENT"].port)
    ]
    assert [(b.host, b.port) for b in via_replication.brokers] == [
        ("127.0.0.1", broker.servers["REPLICATION"].port)
    ]


def test_a_tls_listener_beside_a_plaintext_one_with_its_own_settings(tmp_path, tls_ca):
    """The EXTERNAL listener speaks TLS from its `listener.name.external.ssl.*` settings only;
    brokers replicate over PLAINTEXT; a TLS client sees the brokers' EXTERNAL endpoints."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    admin_module = pytest.importorskip("confluent_kafka.admin")
    config = {
        **TEST_CONFIG,
        "listeners": "PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        **{f"listener.name.external.{k}": v for k, v in tls_ca.server_props().items()},
    }
    with EmbeddedCluster(brokers=2, data_dir=tmp_path, config=config) as cluster:
        external = {(b.node_id, b.servers["EXTERNAL"].port) for b in cluster.brokers}
        bootstrap = cluster.brokers[0].bootstrap_of("EXTERNAL")
        client = {"bootstrap.servers": bootstrap, **tls_ca.librdkafka_props()}
        admin = admin_module.AdminClient(client)
        assert {(b.id, b.port) for b in admin.list_topics(timeout=10).brokers.values()} == external
        topic = admin_module.NewTopic("over-tls", num_partitions=1, replication_factor=2)
        admin.create_topics([topic])["over-tls"].result(timeout=30)
        producer = confluent_kafka.Producer({**client, "acks": "all"})
        producer.produce("over-tls", b"secret")
        assert producer.flush(30) == 0
        cluster.wait_for_isr("over-tls", 0, size=2)
        # a plaintext client of the PLAINTEXT listener is told the PLAINTEXT endpoints
        plain = _metadata(cluster.brokers[0].bootstrap_of("PLAINTEXT"), None)
        assert {(b.node_id, b.port) for b in plain.brokers} == ports(cluster, "PLAINTEXT")


def test_brokers_and_the_driver_talk_over_a_tls_inter_broker_listener(tmp_path, tls_ca):
    """INTERNAL is SSL and the inter-broker listener: followers fetch, brokers reach the
    controller and the coordinator, and the coordinator's markers reach leaders, all over TLS
    (the listener's own ssl.* settings as the client side)."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    config = {
        **TEST_CONFIG,
        "listeners": "EXTERNAL://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "EXTERNAL:PLAINTEXT,INTERNAL:SSL",
        "inter.broker.listener.name": "INTERNAL",
        **tls_ca.server_props(),
    }
    with EmbeddedCluster(brokers=2, data_dir=tmp_path, config=config) as cluster:
        assert cluster.controller.listener_security.security_protocol is SecurityProtocol.SSL
        bootstrap = cluster.brokers[0].bootstrap_of("EXTERNAL")

        async def create():
            conn = await connect(bootstrap)
            try:
                return await create_topic(conn, "tls-internal", replication_factor=2)
            finally:
                await conn.close()

        assert run(create()).error_code == 0
        cluster.wait_for_isr("tls-internal", 0, size=2)
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": "tls-internal-txn"}
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("tls-internal", b"committed")
        producer.commit_transaction(30)
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "tls-internal",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
            }
        )
        try:
            consumer.assign([confluent_kafka.TopicPartition("tls-internal", 0, 0)])
            got = None
            deadline = time.monotonic() + 30
            while got is None and time.monotonic() < deadline:  # markers make it readable
                message = consumer.poll(0.2)
                if message is not None and message.error() is None:
                    got = message.value()
        finally:
            consumer.close()
        assert got == b"committed"
        internal = [b.servers["INTERNAL"] for b in cluster.brokers]
        assert all(s.security_protocol is SecurityProtocol.SSL for s in internal)
        assert sum(s.connection_count for s in internal) >= 2  # a follower, the markers
