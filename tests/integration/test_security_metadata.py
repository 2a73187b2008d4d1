"""ACLs and SCRAM credentials as cluster metadata, end to end over real sockets: the first
users from `sparklog.add.scram`, ACLs and credentials changed through any broker and seen by
every broker, a controller restart that keeps them, and a broker that was down during a change
catching up when it rejoins."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import scramp

from sparklog.client import AdminClient
from sparklog.client.admin_security import ScramUpsert
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.errors import InvalidRequestError, ResourceNotFoundError
from sparklog.protocol import codec, kio_build
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.async_client import AsyncKafkaConnection
from sparklog.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from sparklog.security.acl_filter import AclBindingFilter
from sparklog.security.credentials import ScramMechanism
from tests.support.authorizer import OPEN_AUTHORIZER

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


def allow(name: str, principal: str = "User:alice", pattern=PatternType.LITERAL) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType.TOPIC, name, pattern),
        AccessControlEntry(principal, "*", AclOperation.READ, AclPermissionType.ALLOW),
    )


def logs_in(store, mechanism: ScramMechanism, user: str, password: str) -> bool:
    """A real SCRAM exchange (scramp's client and server) against a credential store."""

    def auth(name):
        c = store.scram_credential(mechanism, name)
        return c.salt, c.stored_key, c.server_key, c.iterations

    server = scramp.ScramMechanism(mechanism.mechanism_name).make_server(auth)
    client = scramp.ScramClient([mechanism.mechanism_name], user, password)
    try:
        server.set_client_first(client.get_client_first())
        client.set_server_first(server.get_server_first())
        server.set_client_final(client.get_client_final())
        client.set_server_final(server.get_server_final())
    except scramp.ScramException:
        return False
    return True


def describe_acls_at(bootstrap: str) -> set[tuple]:
    """DescribeAcls (everything) sent to one broker: (type, name, pattern, principal, op)."""

    async def ask():
        host, port = bootstrap.rsplit(":", 1)
        conn = await AsyncKafkaConnection(host, int(port), client_id="t").connect()
        try:
            body = kio_build.build(
                codec.request_schema(ApiKey.DESCRIBE_ACLS, 3),
                {
                    "resource_type_filter": 1,
                    "resource_name_filter": None,
                    "pattern_type_filter": 1,
                    "principal_filter": None,
                    "host_filter": None,
                    "operation": 1,
                    "permission_type": 1,
                },
            )
            return await conn.request(body)
        finally:
            await conn.close()

    response = asyncio.run(ask())
    assert response.error_code == 0
    return {
        (r.resource_type, r.resource_name, r.pattern_type, a.principal, a.operation)
        for r in response.resources
        for a in r.acls
    }


@pytest.fixture
def secured_cluster(tmp_path):
    config = {
        "sparklog.add.scram": "SCRAM-SHA-512=[name=admin,password=admin-secret]",
        "broker.heartbeat.interval.ms": "200",
        "broker.session.timeout.ms": "3000",
        # snapshots every few records: a restart reads ACLs and users from one, then the log
        "metadata.log.snapshot.records": "4",
        **OPEN_AUTHORIZER,  # the ACL APIs answer SECURITY_DISABLED without an authorizer
    }
    with EmbeddedCluster(brokers=2, data_dir=tmp_path, config=config) as cluster:
        yield cluster


def test_users_and_acls_survive_a_controller_restart_and_reach_every_broker(secured_cluster):
    cluster = secured_cluster
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        # the first user, from the setting
        assert admin.describe_user_scram_credentials() == {"admin": {SHA512: 4096}}
        admin.alter_user_scram_credentials([ScramUpsert("alice", SHA256, "alice-secret", 8192)])
        admin.create_acls([allow("orders"), allow("team-", pattern=PatternType.PREFIXED)])
        with pytest.raises(InvalidRequestError, match="empty resource name"):
            admin.create_acls([allow("")])
        with pytest.raises(ResourceNotFoundError):
            admin.describe_user_scram_credentials(["nobody"])
        assert admin.describe_user_scram_credentials(["alice"]) == {"alice": {SHA256: 8192}}
        match = AclBindingFilter(ResourceType.TOPIC, "team-a", PatternType.MATCH)
        assert admin.describe_acls(match) == [allow("team-", pattern=PatternType.PREFIXED)]
    # every broker's image holds them, once it followed the metadata log that far
    expected = {(2, "orders", 3, "User:alice", 3), (2, "team-", 4, "User:alice", 3)}
    for broker in cluster.brokers:
        wait_for_controller_end(cluster, broker)
        assert describe_acls_at(f"127.0.0.1:{broker.port}") == expected
        assert logs_in(broker.metadata.image.credentials, SHA256, "alice", "alice-secret")

    cluster.restart_controller()  # the stopped controller's snapshot writes are done
    snapshots = sorted(Path(cluster.controller.metadata_log_dir).glob("**/snapshots/*.json"))
    assert snapshots, "metadata.log.snapshot.records=4 wrote snapshots"
    newest = json.loads(snapshots[-1].read_text())["image"]
    assert len(newest["acls"]) == 2 and len(newest["scram_credentials"]) == 2
    assert "admin-secret" not in snapshots[-1].read_text()
    image = cluster.controller.controller.image
    assert {(b.pattern.name, b.entry.principal) for b in image.acls.values()} == {
        ("orders", "User:alice"),
        ("team-", "User:alice"),
    }
    assert logs_in(image.credentials, SHA512, "admin", "admin-secret")
    assert logs_in(image.credentials, SHA256, "alice", "alice-secret")
    assert not logs_in(image.credentials, SHA256, "alice", "wrong")
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        assert admin.describe_user_scram_credentials() == {
            "admin": {SHA512: 4096},
            "alice": {SHA256: 8192},
        }
        deleted = admin.delete_acls([AclBindingFilter(name="orders")])
        assert deleted == [allow("orders")]
        admin.alter_user_scram_credentials(deletions=[("alice", SHA256)])
        assert set(admin.describe_user_scram_credentials()) == {"admin"}


def wait_for_controller_end(cluster, broker) -> None:
    """Until `broker` published the controller's whole metadata log (bounded)."""
    end = cluster.controller.metadata_log.end_offset
    waiting = broker.metadata.wait_for_offset(end, 10)
    assert asyncio.run_coroutine_threadsafe(waiting, broker._loop).result(15)


def test_a_broker_down_during_a_change_gets_it_when_it_rejoins(secured_cluster):
    cluster = secured_cluster
    cluster.stop_broker(1)  # controlled shutdown: fenced while the changes happen
    with AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.brokers[0].port}"}) as admin:
        admin.create_acls([allow("while-away", principal="User:bob")])
        admin.alter_user_scram_credentials([ScramUpsert("bob", SHA512, "bob-secret")])
    rejoined = cluster.restart_broker(1)
    image = rejoined.metadata.image
    assert allow("while-away", principal="User:bob") in image.acls.values()
    assert logs_in(image.credentials, SHA512, "bob", "bob-secret")
    assert (2, "while-away", 3, "User:bob", 3) in describe_acls_at(f"127.0.0.1:{rejoined.port}")


def test_acl_and_credential_changes_are_audited_with_the_clients_principal(secured_cluster, caplog):
    """With no audit table configured, changes go to the log-only sink (Kafka's authorizer
    logger); the audit engineer's Delta sink receives the same events."""
    caplog.set_level("INFO", logger="sparklog.security.audit")
    with AdminClient({"bootstrap.servers": secured_cluster.bootstrap_servers}) as admin:
        admin.create_acls([allow("audited")])
        admin.delete_acls([AclBindingFilter(name="audited")])
        admin.alter_user_scram_credentials([ScramUpsert("carol", SHA256, "carol-secret")])
        admin.alter_user_scram_credentials(deletions=[("carol", SHA256)])
    lines = [r.getMessage() for r in caplog.records if r.name == "sparklog.security.audit"]
    decisions = [line.split()[0] for line in lines]
    assert decisions == ["ACL_CREATED", "ACL_DELETED", "CREDENTIAL_ALTERED", "CREDENTIAL_DELETED"]
    assert all("User:ANONYMOUS from 127.0.0.1" in line for line in lines), lines
    assert "TOPIC:audited ALLOW User:alice READ from * (LITERAL)" in lines[0]
    assert "USER:carol mechanism 1, 4096 iterations" in lines[2]
    assert not any("carol-secret" in line for line in lines)


def test_a_crashed_broker_fenced_during_a_change_catches_up_on_rejoin(secured_cluster):
    cluster = secured_cluster
    crashed = cluster.brokers[1]
    cluster.kill_broker(1)  # no goodbye: the controller fences it when its lease runs out
    deadline = time.monotonic() + 15
    while cluster.controller.controller.image.is_unfenced(crashed.node_id):
        assert time.monotonic() < deadline, "the controller never fenced the crashed broker"
        time.sleep(0.1)
    with AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.brokers[0].port}"}) as admin:
        admin.delete_acls([AclBindingFilter()])  # whatever was there
        admin.create_acls([allow("after-crash", principal="User:dave")])
        admin.alter_user_scram_credentials([ScramUpsert("dave", SHA256, "dave-secret")])
    rejoined = cluster.restart_broker(1)
    assert list(rejoined.metadata.image.acls.values()) == [
        allow("after-crash", principal="User:dave")
    ]
    assert logs_in(rejoined.metadata.image.credentials, SHA256, "dave", "dave-secret")
