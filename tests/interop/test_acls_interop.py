"""ACLs and SCRAM users administered by real clients against sparklog: confluent-kafka's
AdminClient running librdkafka's own admin test sequence (0081-admin.c: CreateAcls,
DescribeAcls, DeleteAcls), and Kafka's kafka-acls.sh / kafka-configs.sh (`AclCommand`,
`ConfigCommand --entity-type users`)."""

from __future__ import annotations

import subprocess
import uuid

import pytest
import scramp

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.security.credentials import ScramMechanism
from tests.support.authorizer import OPEN_AUTHORIZER

from .java_tools import classpath_or_fail

pytestmark = pytest.mark.interop

admin_mod = pytest.importorskip("confluent_kafka.admin")
AclBinding, AclBindingFilter = admin_mod.AclBinding, admin_mod.AclBindingFilter
ResourceType, PatternType = admin_mod.ResourceType, admin_mod.ResourcePatternType
AclOperation, AclPermissionType = admin_mod.AclOperation, admin_mod.AclPermissionType

TOPIC, PREFIXED, LITERAL, MATCH = (
    ResourceType.TOPIC,
    PatternType.PREFIXED,
    PatternType.LITERAL,
    PatternType.MATCH,
)
READ, WRITE, ALLOW = AclOperation.READ, AclOperation.WRITE, AclPermissionType.ALLOW
ANY_OP, ANY_PERM = AclOperation.ANY, AclPermissionType.ANY


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(
        brokers=1,
        data_dir=tmp_path_factory.mktemp("acls-interop"),
        config={"broker.heartbeat.interval.ms": "200", **OPEN_AUTHORIZER},
    ) as running:
        yield running


@pytest.fixture
def admin(cluster):
    return admin_mod.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def unique(prefix: str) -> str:
    return f"rdkafkatest_{prefix}_{uuid.uuid4().hex[:8]}"


def wait(futures: dict):
    return {k: f.result(timeout=15) for k, f in futures.items()}


def test_librdkafka_0081_create_acls(admin):
    base = unique("do_test_CreateAcls")
    bindings = [
        AclBinding(TOPIC, f"{base}_1", PREFIXED, "User:test1", "*", READ, ALLOW),
        AclBinding(TOPIC, f"{base}_2", LITERAL, "User:test2", "*", WRITE, ALLOW),
    ]
    results = wait(admin.create_acls(bindings, request_timeout=10))
    assert set(results) == set(bindings) and all(r is None for r in results.values())


def test_librdkafka_0081_describe_acls(admin):
    topic = unique("do_test_DescribeAcls")
    wait(
        admin.create_acls(
            [
                AclBinding(TOPIC, topic, PREFIXED, "User:test1", "*", READ, ALLOW),
                AclBinding(TOPIC, topic, LITERAL, "User:test2", "*", WRITE, ALLOW),
            ]
        )
    )
    found = admin.describe_acls(
        AclBindingFilter(TOPIC, topic, MATCH, None, None, ANY_OP, ANY_PERM), request_timeout=10
    ).result(timeout=15)
    assert len(found) == 2
    by_principal = {b.principal: b for b in found}
    test1, test2 = by_principal["User:test1"], by_principal["User:test2"]
    assert (test1.restype, test1.name, test1.resource_pattern_type) == (TOPIC, topic, PREFIXED)
    assert (test1.host, test1.operation, test1.permission_type) == ("*", READ, ALLOW)
    assert (test2.resource_pattern_type, test2.operation) == (LITERAL, WRITE)

    found = admin.describe_acls(
        AclBindingFilter(TOPIC, topic, LITERAL, None, None, WRITE, ANY_PERM)
    ).result(timeout=15)
    assert len(found) == 1
    assert (found[0].principal, found[0].resource_pattern_type) == ("User:test2", LITERAL)


def test_librdkafka_0081_delete_acls(admin):
    base = unique("do_test_DeleteAcls")
    topic1, topic2 = f"{base}_1", f"{base}_2"
    wait(
        admin.create_acls(
            [
                AclBinding(TOPIC, topic1, PREFIXED, "User:test1", "*", READ, ALLOW),
                AclBinding(TOPIC, topic1, LITERAL, "User:test2", "*", WRITE, ALLOW),
                AclBinding(TOPIC, topic2, LITERAL, "User:test2", "*", WRITE, ALLOW),
            ]
        )
    )
    match1 = AclBindingFilter(TOPIC, topic1, MATCH, None, None, ANY_OP, ANY_PERM)
    assert len(admin.describe_acls(match1).result(timeout=15)) == 2
    (deleted,) = wait(admin.delete_acls([match1])).values()
    assert {(b.name, b.principal, b.resource_pattern_type, b.operation) for b in deleted} == {
        (topic1, "User:test1", PREFIXED, READ),
        (topic1, "User:test2", LITERAL, WRITE),
    }
    assert admin.describe_acls(match1).result(timeout=15) == []
    literal2 = AclBindingFilter(TOPIC, topic2, LITERAL, None, None, ANY_OP, ANY_PERM)
    (deleted,) = wait(admin.delete_acls([literal2])).values()
    assert [(b.name, b.principal) for b in deleted] == [(topic2, "User:test2")]


def test_confluent_kafka_scram_users(admin, cluster):
    user = f"u-{uuid.uuid4().hex[:6]}"
    upsert = admin_mod.UserScramCredentialUpsertion(
        user,
        admin_mod.ScramCredentialInfo(admin_mod.ScramMechanism.SCRAM_SHA_256, 8192),
        b"confluent-secret",
    )
    wait(admin.alter_user_scram_credentials([upsert]))
    described = wait(admin.describe_user_scram_credentials([user]))
    (info,) = described[user].scram_credential_infos
    assert (info.mechanism, info.iterations) == (admin_mod.ScramMechanism.SCRAM_SHA_256, 8192)
    stored = cluster.controller.controller.image.credentials.scram_credential(
        ScramMechanism.SCRAM_SHA_256, user
    )
    assert logs_in(stored, user, "confluent-secret")
    deletion = admin_mod.UserScramCredentialDeletion(user, admin_mod.ScramMechanism.SCRAM_SHA_256)
    wait(admin.alter_user_scram_credentials([deletion]))
    with pytest.raises(Exception, match="RESOURCE_NOT_FOUND|does not exist"):
        wait(admin.describe_user_scram_credentials([user]))


def logs_in(credential, user: str, password: str) -> bool:
    def auth(_name):
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    server = scramp.ScramMechanism("SCRAM-SHA-256").make_server(auth)
    client = scramp.ScramClient(["SCRAM-SHA-256"], user, password)
    server.set_client_first(client.get_client_first())
    client.set_server_first(server.get_server_first())
    server.set_client_final(client.get_client_final())
    client.set_server_final(server.get_server_final())
    return True


def tool(name: str, *args: str, timeout_s: float = 120) -> str:
    cmd = [
        "java", "-Xmx512m", "-Dlog4j2.rootLogger.level=ERROR", "-cp", classpath_or_fail(),
        "org.apache.kafka.tools." + name, *args,
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, f"{name} {args}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done.stdout


def test_kafka_acls_sh_adds_lists_and_removes(cluster):
    bs, topic, group = cluster.bootstrap_servers, unique("acl-tool"), unique("acl-group")
    tool("AclCommand", "--bootstrap-server", bs, "--add", "--allow-principal", "User:alice",
         "--allow-host", "10.0.0.1", "--operation", "Read", "--operation", "Describe",
         "--topic", topic, "--group", group)  # fmt: skip
    tool("AclCommand", "--bootstrap-server", bs, "--add", "--deny-principal", "User:mallory",
         "--operation", "All", "--topic", topic[:12], "--resource-pattern-type", "prefixed")  # fmt: skip
    listed = tool("AclCommand", "--bootstrap-server", bs, "--list", "--topic", topic)
    assert f"name={topic}, patternType=LITERAL" in listed, listed
    assert "principal=User:alice, host=10.0.0.1, operation=READ, permissionType=ALLOW" in listed
    listed = tool("AclCommand", "--bootstrap-server", bs, "--list", "--topic", topic,
                  "--resource-pattern-type", "match")  # fmt: skip
    assert "operation=ALL, permissionType=DENY" in listed, listed
    tool("AclCommand", "--bootstrap-server", bs, "--remove", "--force", "--topic", topic)
    listed = tool("AclCommand", "--bootstrap-server", bs, "--list", "--topic", topic)
    assert "User:alice" not in listed
    assert "User:alice" in tool("AclCommand", "--bootstrap-server", bs, "--list", "--group", group)


def test_kafka_configs_sh_manages_scram_users(cluster):
    bs, user = cluster.bootstrap_servers, f"tool-{uuid.uuid4().hex[:6]}"
    # one mechanism per request: Kafka refuses a user altered twice in one (DUPLICATE_RESOURCE)
    for config in ("SCRAM-SHA-256=[iterations=8192,password=tool-secret]",
                   "SCRAM-SHA-512=[password=x]"):  # fmt: skip
        tool("ConfigCommand", "--bootstrap-server", bs, "--alter", "--entity-type", "users",
             "--entity-name", user, "--add-config", config)  # fmt: skip
    described = tool("ConfigCommand", "--bootstrap-server", bs, "--describe",
                     "--entity-type", "users", "--entity-name", user)  # fmt: skip
    assert "SCRAM-SHA-256=iterations=8192" in described, described
    assert "SCRAM-SHA-512=iterations=4096" in described, described
    image = cluster.controller.controller.image
    assert logs_in(image.credentials.scram_credential(ScramMechanism.SCRAM_SHA_256, user),
                   user, "tool-secret")  # fmt: skip
    tool("ConfigCommand", "--bootstrap-server", bs, "--alter", "--entity-type", "users",
         "--entity-name", user, "--delete-config", "SCRAM-SHA-512")  # fmt: skip
    described = tool("ConfigCommand", "--bootstrap-server", bs, "--describe",
                     "--entity-type", "users", "--entity-name", user)  # fmt: skip
    assert "SCRAM-SHA-512" not in described and "SCRAM-SHA-256" in described
