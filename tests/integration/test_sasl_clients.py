"""SASL_PLAINTEXT against a sparklog broker with real clients: confluent-kafka (librdkafka),
kafka-python (including SaslHandshake v0 with raw tokens), aiokafka; PLAIN and SCRAM-SHA-256/512;
Kafka's wire behaviour for bad logins, unexpected requests, stalled handshakes and expired
sessions, checked with raw sockets.

The broker's one listener is switched to SASL_PLAINTEXT in the fixture (its connections are
created from the server's `security_protocol` and `sasl`), so each test can set its own limits
(receive size, re-authentication, handshake bound) on the same cluster; SASL configured the
Kafka way (listeners, JAAS settings) is `test_sasl_listeners.py`'s.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from sparklog.client.request_builder import build_request
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.errors import (
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.connection import NEED_DATA, ClientConnection
from sparklog.security.credentials import ScramMechanism
from sparklog.security.jaas import parse_login_module
from sparklog.security.sasl.enabled import SaslMechanisms, SaslServerConfig
from sparklog.security.sasl.plain import PlainUsers
from sparklog.security.sasl.scram import InMemoryCredentialStore
from sparklog.security.session import SecurityProtocol
from tests.integration.conftest import TEST_CONFIG

PASSWORD = "alice-secret-pw"
ENABLED = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _mechanisms() -> SaslMechanisms:
    store = InMemoryCredentialStore()  # scramp's credential maker: real SCRAM credentials
    for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        store.add_password(mechanism, "alice", PASSWORD)
    jaas = parse_login_module(
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="admin" password="admin-pw" user_admin="admin-pw" user_alice="{PASSWORD}";'
    )
    return SaslMechanisms(
        ENABLED, plain_users=PlainUsers.from_login_module(jaas), credentials=store
    )


MECHANISMS = _mechanisms()


@pytest.fixture(scope="module")
def sasl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    # the first SCRAM user of the cluster's own credentials (controller metadata)
    config = {
        **TEST_CONFIG,
        "sparklog.add.scram": f"SCRAM-SHA-512=[name=carol,password={PASSWORD}]",
    }
    with EmbeddedCluster(brokers=1, data_dir=tmp_path_factory.mktemp("sasl"), config=config) as c:
        server = c.brokers[0].server
        server.security_protocol = SecurityProtocol.SASL_PLAINTEXT
        server.sasl = SaslServerConfig(MECHANISMS)
        yield c


@pytest.fixture
def server(sasl_cluster: EmbeddedCluster) -> Iterator[Any]:
    """The broker's SASL server, its limits restored after each test."""
    server = sasl_cluster.brokers[0].server
    yield server
    server.sasl = SaslServerConfig(MECHANISMS)


def _topic() -> str:
    return f"sasl-{uuid.uuid4().hex[:8]}"


def _rdkafka(cluster: EmbeddedCluster, mechanism: str, password: str = PASSWORD) -> dict[str, str]:
    return {
        "bootstrap.servers": cluster.bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": "alice",
        "sasl.password": password,
    }


@pytest.mark.parametrize("mechanism", ENABLED)
def test_confluent_kafka_produces_and_consumes_in_a_group(
    sasl_cluster: EmbeddedCluster, mechanism: str
) -> None:
    topic = _topic()
    producer = Producer(_rdkafka(sasl_cluster, mechanism))
    for i in range(5):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            **_rdkafka(sasl_cluster, mechanism),
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                got.append(message.value())
            if len(got) == 5:
                break
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert got == [f"m{i}".encode() for i in range(5)]


def test_confluent_kafka_wrong_password_is_an_authentication_error(
    sasl_cluster: EmbeddedCluster, server: Any
) -> None:
    before = server.failed_authentications
    errors: list[KafkaError] = []
    producer = Producer(
        {**_rdkafka(sasl_cluster, "SCRAM-SHA-512", "wrong"), "error_cb": errors.append}
    )
    for _ in range(50):
        producer.poll(0.2)
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            break
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, errors
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in auth[0].str()
    assert server.failed_authentications > before
    del producer  # librdkafka would keep retrying in the background


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_kafka_python_handshake_v0_with_raw_tokens(
    sasl_cluster: EmbeddedCluster, mechanism: str
) -> None:
    from kafka import KafkaConsumer

    topic = _topic()
    producer = Producer(_rdkafka(sasl_cluster, "PLAIN"))
    producer.produce(topic, b"x")
    assert producer.flush(30) == 0
    # broker version 0.10.1 makes kafka-python send SaslHandshake v0 and then bare tokens
    # (KAFKA-18270); Metadata is refused before authentication, so topics() proves the login
    consumer = KafkaConsumer(
        bootstrap_servers=sasl_cluster.bootstrap_servers,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_plain_username="alice",
        sasl_plain_password=PASSWORD,
        api_version=(0, 10, 1),
    )
    try:
        assert topic in consumer.topics()
    finally:
        consumer.close()


def test_kafka_python_current_protocol_produces(sasl_cluster: EmbeddedCluster) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=sasl_cluster.bootstrap_servers,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="alice",
        sasl_plain_password=PASSWORD,
    )
    try:
        assert producer.send(_topic(), b"kp").get(timeout=30).offset == 0
    finally:
        producer.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_aiokafka_produces_and_consumes(sasl_cluster: EmbeddedCluster, mechanism: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = _topic()
    common = {
        "bootstrap_servers": sasl_cluster.bootstrap_servers,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "alice",
        "sasl_plain_password": PASSWORD,
    }

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"a1")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **common)
        await consumer.start()
        try:
            message = await asyncio.wait_for(consumer.getone(), 30)
            return [message.value]
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [b"a1"]


# -- the wire, with raw sockets ---------------------------------------------------------


class Wire:
    """A blocking Kafka-protocol client on a raw socket."""

    def __init__(self, cluster: EmbeddedCluster) -> None:
        broker = cluster.brokers[0]
        self.sock = socket.create_connection((broker.host, broker.port), timeout=10)
        self.conn = ClientConnection("wire")

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def call(self, api: ApiKey, version: int, **fields: Any) -> Any:
        _cid, data = self.conn.send_request(build_request(api, version, fields))
        self.sock.sendall(data)
        while (response := self.conn.next_response()) is NEED_DATA:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed by the broker")
            self.conn.receive_data(chunk)
        return response[1]

    def closed(self, wait_s: float = 10.0) -> bool:
        """Whether the broker closes the connection within `wait_s` (everything it sends
        before that is skipped)."""
        self.sock.settimeout(wait_s)
        try:
            while self.sock.recv(65536):
                pass
            return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True


def _metadata(wire: Wire) -> Any:
    return wire.call(
        ApiKey.METADATA,
        12,
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def test_requests_before_authentication_are_refused_then_closed(
    sasl_cluster: EmbeddedCluster,
) -> None:
    with Wire(sasl_cluster) as wire:
        versions = wire.call(
            ApiKey.API_VERSIONS, 3, client_software_name="t", client_software_version="1"
        )
        served = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert served[ApiKey.SASL_HANDSHAKE] == (0, 1) and served[ApiKey.SASL_AUTHENTICATE] == (
            0,
            2,
        )
        cluster = wire.call(ApiKey.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False)
        assert cluster.error_code == IllegalSaslStateError.code
        assert wire.closed()
    with Wire(sasl_cluster) as wire, pytest.raises(ConnectionError):
        _metadata(wire)  # no top-level error code to answer with: closed


def test_unsupported_mechanism_answers_the_enabled_list(sasl_cluster: EmbeddedCluster) -> None:
    with Wire(sasl_cluster) as wire:
        response = wire.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="GSSAPI")
        assert response.error_code == UnsupportedSaslMechanismError.code
        assert list(response.mechanisms) == list(ENABLED)
        assert wire.closed()


def test_failed_login_gets_58_with_kafkas_message_then_close(sasl_cluster: EmbeddedCluster) -> None:
    with Wire(sasl_cluster) as wire:
        wire.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")
        response = wire.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\x00alice\x00nope")
        assert response.error_code == SaslAuthenticationFailedError.code
        assert response.error_message == "Authentication failed: Invalid username or password"
        assert wire.closed()


def test_oversized_token_is_refused(sasl_cluster: EmbeddedCluster, server: Any) -> None:
    server.sasl = SaslServerConfig(MECHANISMS, max_receive_size=4096)
    with Wire(sasl_cluster) as wire:
        wire.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")
        with pytest.raises(ConnectionError):
            wire.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\x00alice\x00" + b"p" * 8192)


def test_stalled_handshake_is_closed(sasl_cluster: EmbeddedCluster, server: Any) -> None:
    server.sasl = SaslServerConfig(MECHANISMS, handshake_timeout_ms=300)
    before = server.handshake_timeouts
    with Wire(sasl_cluster) as wire:
        wire.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-512")
        wire.sock.sendall(struct.pack(">i", 100) + b"\x00" * 10)  # a token that never ends
        assert wire.closed()
    assert server.handshake_timeouts == before + 1


def test_expired_session_is_closed_at_its_next_request(
    sasl_cluster: EmbeddedCluster, server: Any
) -> None:
    server.sasl = SaslServerConfig(MECHANISMS, connections_max_reauth_ms=300)
    before = server.expired_sessions
    with Wire(sasl_cluster) as wire:
        wire.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")
        response = wire.call(
            ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=f"\x00alice\x00{PASSWORD}".encode()
        )
        assert response.session_lifetime.total_seconds() * 1000 == 300
        assert _metadata(wire).brokers
        wire.sock.settimeout(0.6)  # let the session run out (the client does not re-authenticate)
        with pytest.raises(TimeoutError):
            wire.sock.recv(1)
        with pytest.raises(ConnectionError):
            _metadata(wire)
    assert server.expired_sessions == before + 1


def test_confluent_kafka_reauthenticates_before_its_session_expires(
    sasl_cluster: EmbeddedCluster, server: Any
) -> None:
    server.sasl = SaslServerConfig(MECHANISMS, connections_max_reauth_ms=1_500)
    expired = server.expired_sessions
    logins = server.authentications
    producer = Producer(_rdkafka(sasl_cluster, "SCRAM-SHA-512"))
    topic = _topic()
    for i in range(8):  # ~4 s of traffic: two or three sessions on one connection
        producer.produce(topic, f"r{i}".encode())
        assert producer.flush(30) == 0
        producer.poll(0.5)
    assert server.expired_sessions == expired
    # bootstrap + broker connections, then at least one re-authentication on the same socket
    assert server.authentications - logins >= 3


async def _failing_login(host: str, port: int, frames: bytes) -> int:
    """One connection sending a handshake and a wrong password; the SaslAuthenticate error
    code it got (-1: closed without one)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(frames)
        conn = ClientConnection("bad")
        conn.send_request(build_request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))
        conn.send_request(build_request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"x"}))
        codes = []
        while len(codes) < 2:
            chunk = await reader.read(65536)
            if not chunk:
                return -1
            conn.receive_data(chunk)
            while (response := conn.next_response()) is not NEED_DATA:
                codes.append(response[1].error_code)
        assert await reader.read(1) == b""  # then closed by the broker
        return codes[1]
    finally:
        writer.close()


def _failing_logins(cluster: EmbeddedCluster, count: int) -> tuple[list[int], float]:
    """`count` connections failing authentication at once, while a good client produces;
    their error codes and how long the good client's produce took (seconds)."""
    broker = cluster.brokers[0]
    conn = ClientConnection("bad")
    frames = conn.send_request(build_request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))[1]
    frames += conn.send_request(
        build_request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\x00alice\x00wrong"})
    )[1]
    producer = Producer(_rdkafka(cluster, "SCRAM-SHA-512"))
    topic = _topic()
    producer.produce(topic, b"warm")
    assert producer.flush(30) == 0

    async def run() -> tuple[list[int], float]:
        logins = [
            asyncio.create_task(_failing_login(broker.host, broker.port, frames))
            for _ in range(count)
        ]
        loop = asyncio.get_running_loop()
        started = loop.time()
        producer.produce(topic, b"during the storm")
        remaining = await loop.run_in_executor(None, producer.flush, 60)
        took = loop.time() - started
        assert remaining == 0
        return list(await asyncio.gather(*logins)), took

    return asyncio.run(run())


def test_a_thousand_failing_logins_at_once_leave_the_broker_serving(
    sasl_cluster: EmbeddedCluster, server: Any
) -> None:
    before = server.failed_authentications
    codes, took = _failing_logins(sasl_cluster, 1000)
    print(f"good client's produce during 1,000 failing logins: {took * 1000:.0f} ms")
    assert codes == [SaslAuthenticationFailedError.code] * 1000
    assert server.failed_authentications - before >= 1000
    assert server.connection_count < 50  # every failed connection was closed


def _oauth_producer(cluster: EmbeddedCluster, **extra: Any) -> Producer:
    return Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            **extra,
        }
    )


def test_confluent_kafka_oauthbearer_with_librdkafkas_unsecured_token(
    sasl_cluster: EmbeddedCluster, server: Any
) -> None:
    from sparklog.security.sasl.oauthbearer import UnsecuredJwsValidator

    mechanisms = SaslMechanisms(("OAUTHBEARER",), token_validator=UnsecuredJwsValidator())
    server.sasl = SaslServerConfig(mechanisms)
    before = server.authentications
    producer = _oauth_producer(
        sasl_cluster,
        **{
            "enable.sasl.oauthbearer.unsecure.jwt": True,
            "sasl.oauthbearer.config": "principal=svc",
        },
    )
    producer.produce(_topic(), b"token")
    assert producer.flush(30) == 0
    assert server.authentications > before


def test_confluent_kafka_oauthbearer_with_a_signed_jwt_checked_against_a_jwks_file(
    sasl_cluster: EmbeddedCluster, server: Any, tmp_path: Any
) -> None:
    import json
    import time

    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    from sparklog.security.sasl.oauthbearer import JwksValidator, load_jwks

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    public.update(kid="k1", alg="RS256")
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [public]}))
    validator = JwksValidator(lambda: load_jwks(jwks.as_uri()), expected_audience=["kafka"])
    server.sasl = SaslServerConfig(SaslMechanisms(("OAUTHBEARER",), token_validator=validator))

    def token(signer: Any) -> Any:
        def oauth_cb(_config: str) -> tuple[str, float]:
            expiry = time.time() + 600
            claims = {"sub": "svc", "aud": "kafka", "exp": int(expiry), "iat": int(time.time())}
            return jwt.encode(claims, signer, algorithm="RS256", headers={"kid": "k1"}), expiry

        return oauth_cb

    producer = _oauth_producer(sasl_cluster, oauth_cb=token(key))
    producer.produce(_topic(), b"signed")
    assert producer.flush(30) == 0

    forged = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    errors: list[KafkaError] = []
    producer = _oauth_producer(sasl_cluster, oauth_cb=token(forged), error_cb=errors.append)
    for _ in range(50):
        producer.poll(0.2)
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            break
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    del producer  # librdkafka would keep retrying in the background


def test_a_failed_login_reaches_the_audit_sink_without_the_password(
    sasl_cluster: EmbeddedCluster, server: Any
) -> None:
    events: list[Any] = []

    class Recording:
        def record(self, event: Any) -> None:
            events.append(event)

    saved = server.audit
    server.audit = Recording()
    try:
        with Wire(sasl_cluster) as wire:
            wire.call(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")
            wire.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\x00alice\x00hunter2-secret")
            assert wire.closed()
    finally:
        server.audit = saved
    (event,) = events
    assert (event.decision, event.api, event.listener) == (
        "AUTHENTICATION_FAILED",
        "SASL_AUTHENTICATE",
        server.listener_name,
    )
    assert event.client_address == "127.0.0.1" and event.detail.startswith("PLAIN: ")
    assert "hunter2" not in repr(event)


def test_scram_logins_use_the_clusters_credentials_as_the_controller_changes_them(
    sasl_cluster: EmbeddedCluster, server: Any
) -> None:
    """SCRAM against the broker's metadata image: the first user from sparklog.add.scram, a
    second one created with AlterUserScramCredentials by the first, both logging in."""
    import time

    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, UserScramCredentialUpsertion
    from confluent_kafka.admin import ScramMechanism as Mech

    from sparklog.security.sasl.scram import CredentialsSource

    broker = sasl_cluster.brokers[0]
    config = SaslServerConfig(SaslMechanisms(("SCRAM-SHA-512",), credentials=CredentialsSource()))
    config.bind_credentials(lambda: broker.metadata.image.credentials)
    server.sasl = config
    carol = {**_rdkafka(sasl_cluster, "SCRAM-SHA-512"), "sasl.username": "carol"}
    admin = AdminClient(carol)
    upsert = UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(Mech.SCRAM_SHA_512, 4096), b"dave-pw"
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while (
        broker.metadata.image.credentials.scram_credential(ScramMechanism.SCRAM_SHA_512, "dave")
        is None
    ):  # the broker follows the controller's metadata log
        assert time.monotonic() < deadline, "dave's credential never reached the broker"
        time.sleep(0.05)
    producer = Producer({**carol, "sasl.username": "dave", "sasl.password": "dave-pw"})
    producer.produce(_topic(), b"dave")
    assert producer.flush(30) == 0


def test_sasl_ssl_scram_512_with_confluent_kafka_and_kafka_python(
    sasl_cluster: EmbeddedCluster, server: Any, tls_ca: Any
) -> None:
    """SASL_SSL: the TLS handshake first (the TLS part's), then SASL over it."""
    from kafka import KafkaProducer

    from sparklog.security.ssl_factory import SslConfig, server_context

    saved = server.security_protocol, server.ssl_context
    server.security_protocol = SecurityProtocol.SASL_SSL
    server.ssl_context = server_context(SslConfig.of(tls_ca.server_props()))
    try:
        topic = _topic()
        tls = {"ssl.ca.location": str(tls_ca.ca_path)}
        producer = Producer(
            {**_rdkafka(sasl_cluster, "SCRAM-SHA-512"), "security.protocol": "SASL_SSL", **tls}
        )
        producer.produce(topic, b"over tls")
        assert producer.flush(30) == 0
        python = KafkaProducer(
            bootstrap_servers=sasl_cluster.bootstrap_servers,
            security_protocol="SASL_SSL",
            ssl_cafile=str(tls_ca.ca_path),
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="alice",
            sasl_plain_password=PASSWORD,
        )
        try:
            assert python.send(topic, b"kafka-python over tls").get(timeout=30).offset == 1
        finally:
            python.close()
        errors: list[KafkaError] = []
        wrong = Producer(
            {
                **_rdkafka(sasl_cluster, "SCRAM-SHA-512", "wrong"),
                "security.protocol": "SASL_SSL",
                "error_cb": errors.append,
                **tls,
            }
        )
        for _ in range(50):
            wrong.poll(0.2)
            if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
                break
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
        del wrong  # librdkafka would keep retrying in the background
    finally:
        server.security_protocol, server.ssl_context = saved


@pytest.mark.parametrize(
    ("mechanism", "module"),
    [
        ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
        ("SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ],
)
def test_sparklogs_own_client_logs_in_produces_and_fails_a_wrong_password(
    sasl_cluster: EmbeddedCluster, mechanism: str, module: str
) -> None:
    from sparklog.client import AdminClient, KafkaProducer

    def settings(password: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": sasl_cluster.bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.jaas.config": f'{module} required username="alice" password="{password}";',
        }

    producer = KafkaProducer({**settings(PASSWORD), "max.block.ms": 20_000})
    try:
        assert producer.send(_topic(), b"own client").result(timeout=20).offset == 0
    finally:
        producer.close()
    admin = AdminClient({**settings("wrong"), "default.api.timeout.ms": 10_000})
    try:
        with pytest.raises(SaslAuthenticationFailedError) as info:
            admin.list_topics()
        assert "wrong" not in str(info.value)
    finally:
        admin.close()
