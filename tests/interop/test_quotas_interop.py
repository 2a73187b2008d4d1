"""Client quotas administered by Kafka's own kafka-configs.sh (`ConfigCommand --entity-type
users|clients|ips`, which sends AlterClientQuotas / DescribeClientQuotas through Kafka's Java
admin client) against sparklog."""

from __future__ import annotations

import pytest

from sparklog.cluster.embedded import EmbeddedCluster

from .test_acls_interop import tool

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(
        brokers=1,
        data_dir=tmp_path_factory.mktemp("quotas-interop"),
        config={"broker.heartbeat.interval.ms": "200"},
    ) as running:
        yield running


def configs(bs: str, *args: str) -> str:
    return tool("ConfigCommand", "--bootstrap-server", bs, *args)


def test_kafka_configs_sh_sets_describes_and_deletes_client_quotas(cluster):
    bs = cluster.bootstrap_servers
    configs(bs, "--alter", "--entity-type", "users", "--entity-name", "alice",
            "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")  # fmt: skip
    configs(bs, "--alter", "--entity-type", "users", "--entity-name", "alice",
            "--entity-type", "clients", "--entity-name", "app",
            "--add-config", "request_percentage=50")  # fmt: skip
    configs(bs, "--alter", "--entity-type", "clients", "--entity-default",
            "--add-config", "consumer_byte_rate=4194304")  # fmt: skip
    configs(bs, "--alter", "--entity-type", "ips", "--entity-name", "127.0.0.5",
            "--add-config", "connection_creation_rate=10")  # fmt: skip

    alice = configs(bs, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert "producer_byte_rate=1048576.0" in alice and "consumer_byte_rate=2097152.0" in alice
    pair = configs(bs, "--describe", "--entity-type", "users", "--entity-name", "alice",
                   "--entity-type", "clients", "--entity-name", "app")  # fmt: skip
    assert "request_percentage=50.0" in pair, pair
    clients = configs(bs, "--describe", "--entity-type", "clients")
    assert "consumer_byte_rate=4194304.0" in clients, clients
    ips = configs(bs, "--describe", "--entity-type", "ips", "--entity-name", "127.0.0.5")
    assert "connection_creation_rate=10" in ips, ips

    quotas = cluster.controller.controller.image.quotas
    assert quotas.client_quota("producer_byte_rate", "alice", "x").limit == 1048576  # type: ignore[union-attr]
    resolved = quotas.client_quota("request_percentage", "alice", "app")
    assert resolved is not None and resolved.limit == 50
    assert quotas.client_quota("consumer_byte_rate", "bob", "x").limit == 4194304  # type: ignore[union-attr]
    assert quotas.ip_quota("127.0.0.5").limit == 10  # type: ignore[union-attr]

    configs(bs, "--alter", "--entity-type", "users", "--entity-name", "alice",
            "--delete-config", "producer_byte_rate")  # fmt: skip
    alice = configs(bs, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert "producer_byte_rate" not in alice and "consumer_byte_rate=2097152.0" in alice
