"""sparklog's own client over SASL_PLAINTEXT against Apache Kafka (the oracle broker): PLAIN,
SCRAM-SHA-256/512 and OAUTHBEARER (Kafka's unsecured tokens) log in, produce and consume;
a wrong password, an unknown user and a mechanism the listener lacks fail with Kafka's errors
and no secret in the message; KIP-368: a session that expires is renewed without losing
requests.

Kafka's broker is the reference here, so the client is right before sparklog's own SASL
server is tested with it. The broker keeps a PLAINTEXT listener for readiness and for
creating SCRAM users (AlterUserScramCredentials through Kafka's admin client).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from sparklog.client import AdminClient, KafkaConsumer, KafkaProducer
from sparklog.errors import (
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from sparklog.oracle.kafka_server import ApacheKafka, free_port, java_available
from tests.unit.client.test_oauth import token_server  # noqa: F401 - fixture

pytestmark = pytest.mark.oracle


PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
USERS = {"alice": "alice-secret", "bob,=x": "bob-secret"}
REAUTH_MS = 5_000  # a 250-750 ms margin between renewal and expiry, kind to a loaded machine


@pytest.fixture(scope="module")
def kafka_sasl(tmp_path_factory, tls_ca):
    """Apache Kafka with a SASL_PLAINTEXT listener enabling all four mechanisms, PLAIN users
    from the JAAS config, SCRAM users created with Kafka's admin client, sessions of
    `REAUTH_MS` (connections.max.reauth.ms)."""
    if not java_available():
        pytest.skip("java is not installed: the Apache Kafka oracle needs a JDK >= 17")
    from confluent_kafka.admin import AdminClient as CKAdmin
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    data = tmp_path_factory.mktemp("kafka-sasl")
    sasl_port, plain_only_port, ssl_port = free_port(), free_port(), free_port()
    kafka = ApacheKafka(data, config={})
    plain_port, controller_port = kafka.ports[0], kafka.controller_port
    plain_users = " ".join(f'user_{u}="{p}"' for u, p in USERS.items() if "," not in u)
    listener = "listener.name.sasl_plaintext"
    kafka.config.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},"
            f"CONTROLLER://127.0.0.1:{controller_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
            f"ONLY_PLAIN://127.0.0.1:{plain_only_port},SASL_SSL://127.0.0.1:{ssl_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{plain_port},"
            f"SASL_PLAINTEXT://127.0.0.1:{sasl_port},ONLY_PLAIN://127.0.0.1:{plain_only_port},"
            f"SASL_SSL://127.0.0.1:{ssl_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
            "SASL_PLAINTEXT:SASL_PLAINTEXT,ONLY_PLAIN:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": f"{SCRAM_MODULE} required;",
            **{f"listener.name.sasl_ssl.{k}": v for k, v in tls_ca.server_props().items()},
            "listener.name.only_plain.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.only_plain.plain.sasl.jaas.config": f"{PLAIN_MODULE} required "
            f"{plain_users};",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
            f"{listener}.plain.sasl.jaas.config": f"{PLAIN_MODULE} required {plain_users};",
            f"{listener}.scram-sha-256.sasl.jaas.config": f"{SCRAM_MODULE} required;",
            f"{listener}.scram-sha-512.sasl.jaas.config": f"{SCRAM_MODULE} required;",
            f"{listener}.oauthbearer.sasl.jaas.config": f"{OAUTH_MODULE} required;",
            "connections.max.reauth.ms": str(REAUTH_MS),
            "auto.create.topics.enable": "true",
            "num.partitions": "1",
        }
    )
    with kafka:  # starts it
        admin = CKAdmin({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 0})
        # one request per mechanism: Kafka refuses a user altered twice in one request
        for mech in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            upserts = [
                UserScramCredentialUpsertion(u, ScramCredentialInfo(mech, 4096), p.encode())
                for u, p in USERS.items()
            ]
            for future in admin.alter_user_scram_credentials(upserts).values():
                future.result(timeout=30)
        # the SASL listener, one enabling PLAIN only, a SASL_SSL one (SCRAM-SHA-512)
        yield f"127.0.0.1:{sasl_port},127.0.0.1:{plain_only_port},127.0.0.1:{ssl_port}"


def _jaas(module: str, user: str, password: str) -> str:
    escaped = user.replace("\\", "\\\\").replace('"', '\\"')
    return f'{module} required username="{escaped}" password="{password}";'


def _settings(bootstrap: str, mechanism: str, jaas: str | None, **extra) -> dict:
    return {
        "bootstrap.servers": bootstrap.split(",")[0],
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.jaas.config": jaas,
        **extra,
    }


def _round_trip(settings: dict, topic: str) -> list[bytes]:
    producer = KafkaProducer({**settings, "max.block.ms": 20_000})
    try:
        producer.send(topic, b"v1").result(timeout=20)
        producer.send(topic, b"v2").result(timeout=20)
    finally:
        producer.close()
    consumer = KafkaConsumer({**settings, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([(topic, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 2 and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(500)]
        return got
    finally:
        consumer.close()


@pytest.mark.parametrize(
    ("mechanism", "module", "user"),
    [
        ("PLAIN", PLAIN_MODULE, "alice"),
        ("SCRAM-SHA-256", SCRAM_MODULE, "alice"),
        ("SCRAM-SHA-512", SCRAM_MODULE, "bob,=x"),
    ],
)
def test_password_mechanisms_produce_and_consume(kafka_sasl, mechanism, module, user):
    settings = _settings(kafka_sasl, mechanism, _jaas(module, user, USERS[user]))
    topic = f"sasl-{mechanism.lower()}"
    assert _round_trip(settings, topic) == [b"v1", b"v2"]


def test_oauthbearer_unsecured_token_produces_and_consumes(kafka_sasl):
    jaas = f'{OAUTH_MODULE} required unsecuredLoginStringClaim_sub="carol";'
    assert _round_trip(_settings(kafka_sasl, "OAUTHBEARER", jaas), "sasl-oauth") == [b"v1", b"v2"]


def test_oauthbearer_token_from_a_callable(kafka_sasl):
    from sparklog.security.sasl.client import unsecured_jws

    calls = []

    def token() -> str:
        calls.append(1)
        return unsecured_jws({"unsecuredLoginStringClaim_sub": "dave"}, int(time.time() * 1000))

    settings = _settings(
        kafka_sasl, "OAUTHBEARER", None, **{"sasl.login.callback.handler.class": token}
    )
    admin = AdminClient(settings)
    try:
        admin.create_topics(["sasl-oauth-callable"])
    finally:
        admin.close()
    assert calls


@pytest.mark.parametrize(
    ("mechanism", "module"), [("PLAIN", PLAIN_MODULE), ("SCRAM-SHA-512", SCRAM_MODULE)]
)
def test_wrong_password_fails_with_kafkas_error_and_no_secret(kafka_sasl, mechanism, module):
    """Kafka's SASL_AUTHENTICATION_FAILED reaches the caller as itself (not as a metadata
    timeout after max.block.ms: waiting cannot fix a password), without the password."""
    settings = _settings(kafka_sasl, mechanism, _jaas(module, "alice", "not-the-password"))
    admin = AdminClient({**settings, "default.api.timeout.ms": 10_000})
    try:
        with pytest.raises(SaslAuthenticationFailedError) as e:
            admin.create_topics(["never"])
    finally:
        admin.close()
    assert "not-the-password" not in str(e.value)
    assert "Authentication failed" in str(e.value)
    producer = KafkaProducer({**settings, "max.block.ms": 60_000})
    try:
        with pytest.raises(SaslAuthenticationFailedError):
            producer.send("never", b"x").result(timeout=60)
    finally:
        producer.close()


def test_mechanism_the_listener_lacks_names_the_enabled_ones(kafka_sasl):
    """Kafka's listener answers UNSUPPORTED_SASL_MECHANISM with its enabled list, which the
    client's error shows (with the fix)."""
    only_plain = kafka_sasl.split(",")[1]
    settings = _settings(only_plain, "SCRAM-SHA-512", _jaas(SCRAM_MODULE, "alice", "pw"))
    admin = AdminClient({**settings, "default.api.timeout.ms": 10_000})
    try:
        with pytest.raises(UnsupportedSaslMechanismError, match=r"enabled: PLAIN\)"):
            admin.create_topics(["never"])
    finally:
        admin.close()


def test_expiring_session_is_renewed_without_failing_requests(kafka_sasl):
    """KIP-368: Kafka closes a connection used after its session expired; sparklog's client
    renews the session (a new connection) before that, so a long-lived producer keeps
    working across several session lifetimes."""
    settings = _settings(kafka_sasl, "SCRAM-SHA-256", _jaas(SCRAM_MODULE, "alice", USERS["alice"]))
    producer = KafkaProducer({**settings, "max.block.ms": 20_000, "retries": 0})
    try:
        producer.send("sasl-reauth", b"first").result(timeout=20)
        network = producer._network  # noqa: SLF001 (the session under test)
        node = next(n for n in network.nodes() if n >= 0)
        first = network.connection(node)
        assert first.reauthenticate_at_ms is not None
        deadline = time.monotonic() + 2 * REAUTH_MS / 1000
        sent = 0
        while time.monotonic() < deadline:
            producer.send("sasl-reauth", b"x").result(timeout=20)
            sent += 1
            time.sleep(0.05)
        assert network.connection(node) is not first
        assert first.closed
    finally:
        producer.close()
    assert sent > 0


def test_asyncio_connections_authenticate_with_inter_broker_credentials(kafka_sasl):
    """The outbound asyncio connections (replica fetchers, broker -> controller and ->
    coordinator, coordinator -> brokers) log in with the listener's inter-broker credentials
    before their first request; a wrong password is a ConnectionError naming Kafka's error."""
    from kio.schema.metadata.v12.request import MetadataRequest

    from sparklog.protocol.async_client import connect
    from sparklog.protocol.outbound import ClientSecurity, Endpoint
    from sparklog.security.sasl.client import inter_broker_sasl

    endpoint = Endpoint.parse(kafka_sasl.split(",")[0])

    def security(password: str) -> ClientSecurity:
        props = {
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": _jaas(
                SCRAM_MODULE, "alice", password
            ),
        }
        return ClientSecurity.of("SASL_PLAINTEXT", sasl=inter_broker_sasl(props, "SASL_PLAINTEXT"))

    async def go(password: str) -> int:
        conn = await connect(endpoint, security(password), client_id="replica-fetcher-test")
        try:
            request = MetadataRequest(
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
            response = await conn.request(request)
            assert conn.reauthenticate_at_ms is not None  # Kafka's session lifetime arrived
            return len(response.brokers)
        finally:
            await conn.close()

    assert asyncio.run(go(USERS["alice"])) == 1
    with pytest.raises(ConnectionError, match="SASL_AUTHENTICATION_FAILED") as e:
        asyncio.run(go("wrong-password"))
    assert "wrong-password" not in str(e.value)


def test_asyncio_connection_retires_at_its_renewal_point(kafka_sasl):
    """KIP-368 for the servers' own connections: past the renewal point the connection reads
    as closed (owners reconnect, logging in again) and its socket is released; requests
    answered before it are unaffected."""
    from kio.schema.metadata.v12.request import MetadataRequest

    from sparklog.protocol.async_client import connect
    from sparklog.protocol.outbound import ClientSecurity, Endpoint
    from sparklog.security.sasl.client import SaslClientConfig

    sasl = SaslClientConfig("PLAIN", {"username": "alice", "password": USERS["alice"]})
    security = ClientSecurity.of("SASL_PLAINTEXT", sasl=sasl)
    endpoint = Endpoint.parse(kafka_sasl.split(",")[0])
    request = MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )

    async def go() -> tuple[bool, bool, bool]:
        conn = await connect(endpoint, security)
        await conn.request(request)
        fresh = conn.closed
        await asyncio.sleep(REAUTH_MS / 1000)  # past the 85-95 % renewal point
        retired = conn.closed and conn._writer.is_closing()  # noqa: SLF001
        again = await connect(endpoint, security)
        try:
            await again.request(request)
        finally:
            await again.close()
            await conn.close()
        return fresh, retired, again.reauthenticate_at_ms is not None

    assert asyncio.run(go()) == (False, True, True)


def test_oauthbearer_token_from_a_token_endpoint(kafka_sasl, token_server):  # noqa: F811
    """KIP-768's client-credentials login: the token the endpoint issues logs in to Kafka."""
    from tests.unit.client.test_oauth import CLIENT_SECRET
    from tests.unit.client.test_oauth import _jaas as oauth_jaas

    url, served = token_server
    settings = _settings(
        kafka_sasl,
        "OAUTHBEARER",
        oauth_jaas(CLIENT_SECRET),
        **{"sasl.oauthbearer.token.endpoint.url": url},
    )
    assert _round_trip(settings, "sasl-oauth-endpoint") == [b"v1", b"v2"]
    assert len(served) == 2  # one token per client (the producer, the consumer), not per connection


def test_server_connections_log_in_with_the_listeners_credentials(kafka_sasl):
    """Each outbound connection of a broker and of the coordinator (to the controller, to the
    coordinator, produce-time verification, replica fetchers, transaction markers) is made
    with the security the broker's listener settings give it: against Kafka's SASL listener
    each one logs in (Kafka answers a session lifetime) with the broker's own credentials."""
    from sparklog.broker.config import BrokerConfig
    from sparklog.broker.controller_client import ControllerClient
    from sparklog.broker.coordinator_channel import CoordinatorChannel
    from sparklog.broker.replica_fetcher_manager import ReplicaFetcherManager
    from sparklog.broker.txn_verification import TransactionVerifier
    from sparklog.coordinator.transaction.marker_channel import TransactionMarkerChannel
    from sparklog.protocol.outbound import controller_client_security, server_client_security

    endpoint = kafka_sasl.split(",")[0]
    host, port = endpoint.split(":")
    config = BrokerConfig.from_properties(
        {
            "listeners": "REPLICATION://127.0.0.1:0",
            "listener.security.protocol.map": "REPLICATION:SASL_PLAINTEXT",
            "inter.broker.listener.name": "REPLICATION",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
            "listener.name.replication.scram-sha-256.sasl.jaas.config": _jaas(
                SCRAM_MODULE, "alice", USERS["alice"]
            ),
        }
    )
    security = server_client_security(config.listener_config)
    fetchers = ReplicaFetcherManager(1, None, config, lambda _id: None, clock_ms=lambda: 0)
    assert fetchers.security == security

    async def go() -> list[bool]:
        controller = ControllerClient(
            endpoint, security=controller_client_security(config.listener_config)
        )
        verifier = TransactionVerifier(endpoint, None, security=security)
        channel = CoordinatorChannel(endpoint, security=security)
        markers = TransactionMarkerChannel(
            lambda tp: None, lambda t: 1, lambda job: None, security=security
        )
        conns = [
            await controller._connection(False),  # noqa: SLF001
            await verifier._connection(),  # noqa: SLF001
            await channel._connect(host, int(port)),  # noqa: SLF001
            await markers._connections.get(1, host, int(port)),  # noqa: SLF001
        ]
        try:
            return [c.reauthenticate_at_ms is not None for c in conns]
        finally:
            for c in conns:
                await c.close()

    assert asyncio.run(go()) == [True, True, True, True]


def test_sasl_ssl_scram_produces_and_consumes(kafka_sasl, tls_ca):
    """SASL_SSL: TLS first (the server's chain and name checked against the trust store),
    then SCRAM-SHA-512 inside it, as Kafka's clients do."""
    trust = {k: v for k, v in tls_ca.client_props().items() if k != "security.protocol"}
    settings = {
        **_settings(
            kafka_sasl.split(",")[2],
            "SCRAM-SHA-512",
            _jaas(SCRAM_MODULE, "alice", USERS["alice"]),
        ),
        "security.protocol": "SASL_SSL",
        **trust,
    }
    assert _round_trip(settings, "sasl-ssl") == [b"v1", b"v2"]
    wrong = {**settings, "sasl.jaas.config": _jaas(SCRAM_MODULE, "alice", "nope-123")}
    admin = AdminClient({**wrong, "default.api.timeout.ms": 10_000})
    try:
        with pytest.raises(SaslAuthenticationFailedError) as e:
            admin.create_topics(["never"])
    finally:
        admin.close()
    assert "nope-123" not in str(e.value)


def test_sink_transaction_helpers_carry_the_clients_security(kafka_sasl):
    """The exactly-once sink's driver-side helpers (fencing leftover transactional ids,
    asking the coordinator about one) use the sink's kafka.* security settings too."""
    from sparklog.client.transaction_batch import fence_transactions, transactional_id_exists

    settings = _settings(kafka_sasl, "SCRAM-SHA-256", _jaas(SCRAM_MODULE, "alice", USERS["alice"]))
    bootstrap = settings.pop("bootstrap.servers")
    # fencing first: Kafka creates __transaction_state on the first transactional producer
    fence_transactions(bootstrap, ["sasl-tx-1"], 20_000, settings=settings)
    assert transactional_id_exists(bootstrap, "sasl-tx-1", 20_000, settings=settings)
    assert not transactional_id_exists(bootstrap, "sasl-tx-2", 20_000, settings=settings)


def test_cli_consume_with_a_command_config(kafka_sasl, tmp_path, capsys):
    """`python -m sparklog consume --command-config client.properties`, as Kafka's console
    consumer takes its security settings, against Kafka's SASL listener."""
    from sparklog.cli import main

    settings = _settings(kafka_sasl, "SCRAM-SHA-512", _jaas(SCRAM_MODULE, "alice", USERS["alice"]))
    bootstrap = settings.pop("bootstrap.servers")
    producer = KafkaProducer({**settings, "bootstrap.servers": bootstrap})
    try:
        producer.send("sasl-cli", b"hello").result(timeout=20)
    finally:
        producer.close()
    props = tmp_path / "client.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    code = main(
        [
            "consume",
            "--bootstrap-server",
            bootstrap,
            "--topic",
            "sasl-cli",
            "--from-beginning",
            "--max-messages",
            "1",
            "--timeout-ms",
            "20000",
            "--command-config",
            str(props),
        ]
    )
    assert code == 0
    assert "hello" in capsys.readouterr().out
