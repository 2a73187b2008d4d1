"""SASL configured the Kafka way: a broker listener `listener.security.protocol.map`s to
SASL_PLAINTEXT, `sasl.enabled.mechanisms`, PLAIN users in
`listener.name.<l>.plain.sasl.jaas.config`, SCRAM users from the cluster's own credentials
(`sparklog.add.scram`, then AlterUserScramCredentials), brokers replicating over a PLAINTEXT
inter-broker listener. Real clients log in; a wrong password is refused."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.security.credentials import ScramMechanism as StoredMechanism
from tests.integration.conftest import TEST_CONFIG

SHA_512 = StoredMechanism.SCRAM_SHA_512
CONFIG = {
    **TEST_CONFIG,
    "listeners": "CLIENTS://127.0.0.1:0,INTERNAL://127.0.0.1:0",
    "listener.security.protocol.map": "CLIENTS:SASL_PLAINTEXT,INTERNAL:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
    "listener.name.clients.plain.sasl.jaas.config": (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_admin="admin-secret" user_alice="alice-secret";'
    ),
    "sparklog.add.scram": "SCRAM-SHA-512=[name=carol,password=carol-secret]",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(brokers=2, data_dir=tmp_path_factory.mktemp("sasl-l"), config=CONFIG) as c:
        yield c


def _client(
    cluster: EmbeddedCluster, mechanism: str, user: str, password: str
) -> dict[str, object]:
    return {
        "bootstrap.servers": cluster.brokers[0].bootstrap_of("CLIENTS"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def test_plain_and_scram_users_produce_to_a_replicated_topic(cluster: EmbeddedCluster) -> None:
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(_client(cluster, "SCRAM-SHA-512", "carol", "carol-secret"))
    admin.create_topics([NewTopic(topic, 1, 2)])[topic].result(30)
    for mechanism, user, password in (
        ("PLAIN", "alice", "alice-secret"),
        ("SCRAM-SHA-512", "carol", "carol-secret"),
    ):
        producer = Producer({**_client(cluster, mechanism, user, password), "acks": "all"})
        producer.produce(topic, user.encode())
        assert producer.flush(30) == 0
    # clients only ever saw (and logged in to) the brokers' CLIENTS endpoints
    assert sum(b.servers["CLIENTS"].authentications for b in cluster.brokers) >= 3
    assert all(b.servers["INTERNAL"].authentications == 0 for b in cluster.brokers)


def test_a_user_created_with_alter_user_scram_credentials_logs_in(cluster: EmbeddedCluster) -> None:
    admin = AdminClient(_client(cluster, "SCRAM-SHA-512", "carol", "carol-secret"))
    upsert = UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"dave-secret"
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    for broker in cluster.brokers:  # each broker follows the controller's metadata log
        while broker.metadata.image.credentials.scram_credential(SHA_512, "dave") is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    producer = Producer(_client(cluster, "SCRAM-SHA-512", "dave", "dave-secret"))
    producer.produce(f"dave-{uuid.uuid4().hex[:6]}", b"hello")
    assert producer.flush(30) == 0


def test_a_wrong_password_is_refused(cluster: EmbeddedCluster) -> None:
    errors: list[KafkaError] = []
    producer = Producer(
        {**_client(cluster, "SCRAM-SHA-512", "carol", "wrong"), "error_cb": errors.append}
    )
    for _ in range(50):
        producer.poll(0.2)
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            break
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_cluster_with_sasl_everywhere(tmp_path, mechanism: str) -> None:
    """One SASL_PLAINTEXT listener, also the inter-broker one (so the driver's controller and
    coordinator serve it too): brokers replicate, reach the controller and the coordinator, and
    the coordinator writes transaction markers, all logged in with PLAIN or SCRAM
    (sasl.mechanism.inter.broker.protocol, the broker's own username/password in the JAAS
    config; SCRAM checked against the cluster's credentials on brokers, controller and
    coordinator); no plaintext port is left open."""
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="broker" password="broker-secret" '
        'user_broker="broker-secret" user_alice="alice-secret";'
    )
    config = {
        **TEST_CONFIG,
        "listeners": "SECURE://127.0.0.1:0",
        "listener.security.protocol.map": "SECURE:SASL_PLAINTEXT",
        "inter.broker.listener.name": "SECURE",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": mechanism,
        "listener.name.secure.plain.sasl.jaas.config": jaas,
        "listener.name.secure.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="broker" password="broker-secret";'
        ),
        "sparklog.add.scram": "SCRAM-SHA-512=[name=broker,password=broker-secret]",
    }
    with EmbeddedCluster(brokers=2, data_dir=tmp_path, config=config) as cluster:
        assert all(list(b.servers) == ["SECURE"] for b in cluster.brokers)
        client = {
            "bootstrap.servers": cluster.brokers[0].bootstrap_of("SECURE"),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }
        topic = f"everywhere-{uuid.uuid4().hex[:6]}"
        admin = AdminClient(client)
        admin.create_topics([NewTopic(topic, 1, 2)])[topic].result(30)
        producer = Producer({**client, "acks": "all", "transactional.id": f"tx-{topic}"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, b"committed")
        producer.commit_transaction(30)
        # the follower's fetcher logged in to the leader's listener as well as the clients
        assert sum(b.servers["SECURE"].authentications for b in cluster.brokers) >= 4
        assert all(b.servers["SECURE"].failed_authentications == 0 for b in cluster.brokers)
