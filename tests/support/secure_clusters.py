"""Secured clusters for security tests: one Apache Kafka and one sparklog per test session
(fixtures `secure_kafka` and `secure_sparklog`, registered in tests/conftest.py), each started
lazily by the first test that asks for it, both configured with the same Kafka settings
(`OracleSecurity.properties`):

  SASL_SSL   SCRAM-SHA-512/256 users created at start (Kafka: `kafka-storage format
             --add-scram`), PLAIN users from the listener's JAAS config; the admin user
             (PLAIN) is a super user;
  SSL        mTLS (`ssl.client.auth=required`), `CN=alice,...` maps to `User:alice`;
  ACLs       StandardAuthorizer, `allow.everyone.if.no.acl.found=false`; alice is granted ALL
             on topics, groups and transactional ids starting with `sec-` (PREFIXED) by the
             admin through CreateAcls, so every client cell also proves the ACLs let it through.

Each fixture gives a `SecureTarget` whose methods build each client library's settings for
`scram` (SASL_SSL, SCRAM-SHA-512 as alice) or `mtls` (SSL with alice's certificate), and the
super user's AdminClient. At start each fixture tries alice's two logins once and keeps what
failed (`login_errors`): a test needing a login that failed fails at once (`require`) instead
of after its clients' timeouts. tests/interop/security parametrizes its tests over both
(`target`).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from sparklog.jars import JarsMissing, kafka_classpath
from sparklog.oracle.kafka_security import SASL_SSL, SSL, OracleSecurity
from sparklog.oracle.kafka_server import ApacheKafka, free_port, java_available
from tests.support.certs import KeyPair, TestCA

#: SCRAM users (both mechanisms) and PLAIN users every secured cluster has
SCRAM_USERS = {"alice": "alice-secret", "mallory": "mallory-secret"}
PLAIN_USERS = {"alice": "alice-secret", "bob": "bob-secret"}
#: what alice may touch (ALL, PREFIXED): topics, groups and transactional ids
PREFIX = "sec-"
AUTHS = ("scram", "mtls")
TOPIC_DEFAULTS = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
}


@dataclass(frozen=True)
class SecureTarget:
    """A secured cluster as each client library is configured to reach it."""

    name: str
    sasl_ssl: str  # bootstrap servers of the SASL_SSL listener
    ssl: str  # bootstrap servers of the mTLS listener
    ca: TestCA
    client_cert: KeyPair  # alice's certificate (mTLS)
    security: OracleSecurity
    #: restarts the process holding the controller (and its metadata log) on its data dir
    restart_controller: Callable[[], None] = field(default=lambda: None, compare=False)
    #: auth -> why alice could not log in that way when the cluster started
    login_errors: dict[str, str] = field(default_factory=dict, compare=False)

    def require(self, auth: str) -> None:
        """Fail now when alice's `auth` login did not work at start."""
        if auth in self.login_errors:
            pytest.fail(
                f"alice cannot log in over {auth} on {self.name}: {self.login_errors[auth]}"
            )

    def probe_logins(self) -> None:
        """Try each of alice's logins once (Metadata through it), recording failures."""
        for auth in AUTHS:
            try:
                AdminClient(self.librdkafka(auth)).list_topics(timeout=15)
            except Exception as e:  # noqa: BLE001 (recorded; `require` reports it)
                self.login_errors[auth] = str(e)

    def bootstrap(self, auth: str) -> str:
        return self.sasl_ssl if auth == "scram" else self.ssl

    def librdkafka(
        self, auth: str, user: str = "alice", password: str | None = None
    ) -> dict[str, Any]:
        """confluent-kafka's and kcat's settings."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap(auth),
            "broker.address.family": "v4",
            "ssl.ca.location": str(self.ca.ca_path),
        }
        if auth == "scram":
            return config | {
                "security.protocol": "SASL_SSL",
                "sasl.mechanisms": "SCRAM-SHA-512",
                "sasl.username": user,
                "sasl.password": password or SCRAM_USERS[user],
            }
        return config | {
            "security.protocol": "SSL",
            "ssl.certificate.location": str(self.client_cert.cert_path),
            "ssl.key.location": str(self.client_cert.key_path),
        }

    def admin(self) -> AdminClient:
        """The super user's AdminClient (PLAIN over SASL_SSL)."""
        return AdminClient(
            self.security.admin_client_config(self.sasl_ssl) | {"broker.address.family": "v4"}
        )

    def ssl_context(self, auth: str) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca.ca_path))
        if auth == "mtls":
            context.load_cert_chain(self.client_cert.cert_path, self.client_cert.key_path)
        return context

    def kafka_python(self, auth: str) -> dict[str, Any]:
        """kafka-python's keyword arguments."""
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap(auth),
            "ssl_cafile": str(self.ca.ca_path),
            "ssl_check_hostname": True,
        }
        if auth == "scram":
            return kwargs | {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_plain_username": "alice",
                "sasl_plain_password": SCRAM_USERS["alice"],
            }
        return kwargs | {
            "security_protocol": "SSL",
            "ssl_certfile": str(self.client_cert.cert_path),
            "ssl_keyfile": str(self.client_cert.key_path),
        }

    def aiokafka(self, auth: str) -> dict[str, Any]:
        """aiokafka's keyword arguments."""
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap(auth),
            "ssl_context": self.ssl_context(auth),
        }
        if auth == "scram":
            return kwargs | {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_plain_username": "alice",
                "sasl_plain_password": SCRAM_USERS["alice"],
            }
        return kwargs | {"security_protocol": "SSL"}

    def java(self, auth: str) -> dict[str, str]:
        """Kafka's Java clients' settings (PEM trust store; for mTLS a PKCS12 key store, the
        broker's being PEM: both of Kafka's key store formats take part)."""
        props = {
            "bootstrap.servers": self.bootstrap(auth),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca.ca_path),
        }
        if auth == "scram":
            return props | {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required "
                    f'username="alice" password="{SCRAM_USERS["alice"]}";'
                ),
            }
        return props | {
            "security.protocol": "SSL",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.client_cert.keystore_p12()),
            "ssl.keystore.password": "test-secret",
        }


def oracle_security(ca: TestCA) -> OracleSecurity:
    return OracleSecurity(
        ca_file=ca.ca_path,
        server_ssl=ca.server_props(),  # PEM key store, key encrypted as Java 17 reads it
        scram_users=SCRAM_USERS,
        plain_users=PLAIN_USERS,
    )


def grant_alice(admin: AdminClient) -> None:
    """ALL on `sec-*` topics, groups and transactional ids for User:alice (PREFIXED)."""
    bindings = [
        AclBinding(
            kind,
            PREFIX,
            ResourcePatternType.PREFIXED,
            "User:alice",
            "*",
            AclOperation.ALL,
            AclPermissionType.ALLOW,
        )  # fmt: skip
        for kind in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID)
    ]
    for future in admin.create_acls(bindings, request_timeout=30).values():
        future.result()


def wait_for_acls(admin: AdminClient, count: int, timeout_s: float = 30) -> None:
    """Until DescribeAcls lists `count` bindings (ACLs reach brokers through the metadata log)."""
    from confluent_kafka.admin import AclBindingFilter

    any_filter = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while True:
        listed = admin.describe_acls(any_filter, request_timeout=10).result()
        if len(listed) >= count or time.monotonic() > deadline:
            assert len(listed) >= count, listed
            return
        time.sleep(0.1)


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory, tls_ca) -> SecureTarget:
    """Apache Kafka, SASL_SSL + mTLS + ACLs (see the module doc); one per session."""
    if not java_available():
        pytest.skip("java is not installed: the Apache Kafka oracle needs a JDK >= 17")
    try:
        kafka_classpath()
    except JarsMissing as e:
        pytest.fail(str(e))
    security = oracle_security(tls_ca)
    kafka = ApacheKafka(
        tmp_path_factory.mktemp("secure-kafka"),
        heap="768m",
        config=TOPIC_DEFAULTS,
        security=security,
    )
    with kafka:

        def restart() -> None:  # node 1 is the combined controller + broker
            kafka.kill(1)
            kafka.restart(1)
            kafka.wait_ready()

        target = SecureTarget(
            "kafka", kafka.bootstrap(SASL_SSL), kafka.bootstrap(SSL), tls_ca,
            tls_ca.client("alice"), security, restart,
        )  # fmt: skip
        grant_alice(target.admin())
        wait_for_acls(target.admin(), 3)
        target.probe_logins()
        yield target


def sparklog_config(security: OracleSecurity, ports: dict[str, int]) -> dict[str, str]:
    """Kafka's settings as sparklog takes them: the same listeners, TLS, SASL and ACL settings;
    no KRaft controller listener (the driver's controller has its own, see listeners.py); the
    SCRAM users as `sparklog.add.scram` (`kafka-storage format --add-scram`'s syntax, written
    by the controller at start as Kafka's format writes them into the bootstrap metadata)."""
    props = security.properties(ports, controller_port=None)
    props = {
        key: value
        for key, value in props.items()
        if "controller" not in key and not key.startswith("listener.name.controller")
    }
    scram = ";".join(security.format_arguments()[1::2])
    return TOPIC_DEFAULTS | props | {"sparklog.add.scram": scram}


@pytest.fixture(scope="session")
def secure_sparklog(tmp_path_factory, tls_ca) -> SecureTarget:
    """A sparklog cluster (controller + one broker) secured like `secure_kafka`."""
    from sparklog.cluster.embedded import EmbeddedCluster  # not for every test tier's import

    security = oracle_security(tls_ca)
    ports = {SASL_SSL: free_port(), SSL: free_port()}
    data_dir: Path = tmp_path_factory.mktemp("secure-sparklog")
    config = sparklog_config(security, ports)
    with EmbeddedCluster(brokers=1, data_dir=data_dir, config=config) as cluster:
        target = SecureTarget(
            "sparklog", f"127.0.0.1:{ports[SASL_SSL]}", f"127.0.0.1:{ports[SSL]}", tls_ca,
            tls_ca.client("alice"), security, cluster.restart_controller,
        )  # fmt: skip
        admin = target.admin()
        admin.list_topics(timeout=15)
        grant_alice(admin)
        wait_for_acls(admin, 3)
        target.probe_logins()
        yield target
