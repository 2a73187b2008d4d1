"""`python -m sparklog serve --add-scram`, `acls add|list|remove` (kafka-acls.sh's options and
listing) and `users add-scram|describe|delete` (kafka-configs.sh --entity-type users)."""

from __future__ import annotations

import signal

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from tests.support.authorizer import OPEN_AUTHORIZER

from .conftest import TEST_CONFIG
from .test_cli import Served, ok, unique, user_error


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory):
    """A controller and one broker with the StandardAuthorizer (ACLs need one), everyone allowed."""
    with EmbeddedCluster(
        brokers=1,
        data_dir=tmp_path_factory.mktemp("cli-acls"),
        config={**TEST_CONFIG, **OPEN_AUTHORIZER},
    ) as running:
        yield running


def test_acls_without_an_authorizer_name_the_setting(cluster):
    """Kafka's SECURITY_DISABLED (no `authorizer.class.name`) becomes an error naming the fix."""
    bs = cluster.bootstrap_servers
    for args in (
        ("add", "--allow-principal", "User:bob", "--operation", "Write", "--topic", "t"),
        ("list",),
        ("remove", "--topic", "t", "--force"),
    ):
        error = user_error("acls", *args, "--bootstrap-server", bs)
        assert "SECURITY_DISABLED" in error
        assert (
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer" in error
        )


def test_acls_and_users_commands(acl_cluster):
    """The short tier: one ACL and one user through the CLI against an in-process cluster."""
    bs, topic = acl_cluster.bootstrap_servers, unique("cli-acl-short")
    ok("acls", "add", "--bootstrap-server", bs, "--allow-principal", "User:bob",
       "--operation", "Write", "--topic", topic)  # fmt: skip
    assert "principal=User:bob, host=*, operation=WRITE, permissionType=ALLOW" in ok(
        "acls", "list", "--bootstrap-server", bs, "--topic", topic
    )
    ok("users", "add-scram", "--bootstrap-server", bs, "--user", "bob", "--password", "pw")
    assert "'bob' are SCRAM-SHA-512=iterations=4096" in ok(
        "users", "describe", "--bootstrap-server", bs, "--user", "bob"
    )


@pytest.mark.slow
def test_serve_add_scram_then_users_and_acls_from_the_cli(tmp_path):
    served = Served(
        "--master", "none", "--data-dir", str(tmp_path / "served"),
        "--config", "broker.heartbeat.interval.ms=200",
        *(a for k, v in OPEN_AUTHORIZER.items() for a in ("--config", f"{k}={v}")),
        "--add-scram", "SCRAM-SHA-512=[name=admin,password=admin-secret]",
    )  # fmt: skip
    try:
        bs = served.bootstrap
        assert ok("users", "describe", "--bootstrap-server", bs) == (
            "SCRAM credential configs for user-principal 'admin' are SCRAM-SHA-512=iterations=4096\n"
        )

        # a password from stdin stays out of the process list
        ok("users", "add-scram", "--bootstrap-server", bs, "--user", "alice",
           "--mechanism", "SCRAM-SHA-256", "--iterations", "8192", stdin=b"alice-secret\n")  # fmt: skip
        described = ok("users", "describe", "--bootstrap-server", bs, "--user", "alice")
        assert described == (
            "SCRAM credential configs for user-principal 'alice' are "
            "SCRAM-SHA-256=iterations=8192\n"
        )
        assert "iterations must be 4096-16384" in user_error(
            "users", "add-scram", "--bootstrap-server", bs, "--user", "x", "--iterations", "10",
            "--password", "p",
        )  # fmt: skip
        ok("users", "delete", "--bootstrap-server", bs, "--user", "alice",
           "--mechanism", "SCRAM-SHA-256")  # fmt: skip
        assert "does not exist" in user_error(
            "users", "describe", "--bootstrap-server", bs, "--user", "alice"
        )

        topic = unique("cli-acl")
        ok("acls", "add", "--bootstrap-server", bs, "--allow-principal", "User:alice",
           "--operation", "Read", "--operation", "Describe", "--topic", topic,
           "--group", "readers")  # fmt: skip
        ok("acls", "add", "--bootstrap-server", bs, "--deny-principal", "User:mallory",
           "--topic", "cli-", "--resource-pattern-type", "prefixed")  # fmt: skip
        listed = ok("acls", "list", "--bootstrap-server", bs, "--topic", topic)
        assert (
            f"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, "
            "patternType=LITERAL)`: \n"
            " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
        ) in listed
        # the default list pattern type is ANY: the name's literal ACLs; MATCH adds prefixes
        assert "User:mallory" not in listed
        matched = ok("acls", "list", "--bootstrap-server", bs, "--topic", topic,
                     "--resource-pattern-type", "match")  # fmt: skip
        assert "principal=User:mallory, host=*, operation=ALL, permissionType=DENY" in matched
        assert "User:alice" in ok("acls", "list", "--bootstrap-server", bs,
                                  "--principal", "User:alice")  # fmt: skip

        ok("acls", "remove", "--bootstrap-server", bs, "--allow-principal", "User:alice",
           "--operation", "Describe", "--topic", topic)  # fmt: skip
        listed = ok("acls", "list", "--bootstrap-server", bs, "--topic", topic)
        assert "operation=READ" in listed and "operation=DESCRIBE" not in listed
        assert "--force" in user_error("acls", "remove", "--bootstrap-server", bs, "--topic", topic)
        removed = ok("acls", "remove", "--bootstrap-server", bs, "--topic", topic, "--force")
        assert removed.startswith("Removed 1 ACL(s)")
        assert "needs a type" in user_error(
            "acls", "add", "--bootstrap-server", bs, "--allow-principal", "alice", "--topic", "t"
        )
        assert "literal or prefixed" in user_error(
            "acls", "add", "--bootstrap-server", bs, "--allow-principal", "User:a", "--topic", "t",
            "--resource-pattern-type", "match",
        )  # fmt: skip
    finally:
        code, err = served.stop(signal.SIGTERM)
    assert code == 0, err
    assert "admin-secret" not in err and "alice-secret" not in err


def test_serve_refuses_a_bad_add_scram_without_echoing_it(tmp_path):
    err = user_error(
        "serve", "--master", "none", "--data-dir", str(tmp_path),
        "--add-scram", "SCRAM-SHA-256=[name=a,password=hunter2,iterations=1]",
    )  # fmt: skip
    assert "outside 4096-16384" in err and "hunter2" not in err
