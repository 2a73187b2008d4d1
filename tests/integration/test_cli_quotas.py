"""`python -m sparklog quotas describe|alter` (kafka-configs.sh's --entity-type users|clients|ips
options and lines) against an in-process cluster, and its user errors."""

from __future__ import annotations

from .test_cli import ok, user_error


def test_quotas_alter_and_describe_like_kafka_configs(cluster):
    bs = cluster.bootstrap_servers
    ok("quotas", "alter", "--bootstrap-server", bs, "--entity-type", "users", "--entity-name",
       "cli-alice", "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")  # fmt: skip
    ok("quotas", "alter", "--bootstrap-server", bs, "--entity-type", "users", "--entity-name",
       "cli-alice", "--entity-type", "clients", "--entity-default",
       "--add-config", "request_percentage=50")  # fmt: skip
    ok("quotas", "alter", "--bootstrap-server", bs, "--entity-type", "ips", "--entity-default",
       "--add-config", "connection_creation_rate=1000")  # fmt: skip
    assert "Validated config for client-id-prefix 'cli-etl-'." in ok(
        "quotas", "alter", "--bootstrap-server", bs, "--entity-type", "client-id-prefixes",
        "--entity-name", "cli-etl-", "--add-config", "producer_byte_rate=1024", "--validate-only",
    )  # fmt: skip
    users = ok("quotas", "describe", "--bootstrap-server", bs, "--entity-type", "users")
    assert users == (
        "Quota configs for user-principal 'cli-alice' are "
        "consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0\n"
    )
    both = ok("quotas", "describe", "--bootstrap-server", bs, "--entity-type", "users",
              "--entity-name", "cli-alice", "--entity-type", "clients", "--entity-default")  # fmt: skip
    assert both == (
        "Quota configs for user-principal 'cli-alice', the default client-id are "
        "request_percentage=50.0\n"
    )
    ok("quotas", "alter", "--bootstrap-server", bs, "--entity-type", "users", "--entity-name",
       "cli-alice", "--delete-config", "producer_byte_rate")  # fmt: skip
    everything = ok("quotas", "describe", "--bootstrap-server", bs)
    assert "user-principal 'cli-alice' are consumer_byte_rate=2097152.0\n" in everything
    assert "Quota configs for the default ip are connection_creation_rate=1000.0" in everything
    assert "cli-etl-" not in everything  # validate-only wrote nothing


def test_quota_user_errors_name_the_problem(cluster):
    bs = cluster.bootstrap_servers
    error = user_error("quotas", "alter", "--bootstrap-server", bs, "--entity-type", "users",
                       "--entity-name", "cli-bob", "--add-config", "producer_byte_rate=-1")  # fmt: skip
    assert "producer_byte_rate must be greater than 0" in error
    error = user_error("quotas", "alter", "--bootstrap-server", bs, "--entity-type", "users",
                       "--entity-name", "cli-bob", "--add-config", "bogus=1")  # fmt: skip
    assert "Invalid configuration key bogus" in error
    error = user_error("quotas", "alter", "--bootstrap-server", bs, "--entity-type", "groups",
                       "--entity-name", "g", "--add-config", "producer_byte_rate=1")  # fmt: skip
    assert "--entity-type 'groups': use one of users, clients, ips" in error
    error = user_error("quotas", "alter", "--bootstrap-server", bs, "--entity-type", "users",
                       "--add-config", "producer_byte_rate=1")  # fmt: skip
    assert "--entity-name NAME or --entity-default" in error
    error = user_error("quotas", "alter", "--bootstrap-server", bs, "--entity-type", "users",
                       "--entity-name", "u", "--add-config", "producer_byte_rate=fast")  # fmt: skip
    assert "'fast' is not a number" in error
