"""Client quotas as cluster metadata, end to end over real sockets: set and removed through
any broker with the admin client, seen in every broker's image (the enforcers' lookups), kept
by a controller restart (snapshot + log), and caught up by a broker that was down meanwhile."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from sparklog.client import AdminClient
from sparklog.client.admin_quotas import QuotaAlteration, QuotaFilterComponent
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.errors import InvalidRequestError
from sparklog.protocol.api_versions import ApiKey
from tests.integration.broker_wire import call, connect
from tests.integration.test_security_metadata import wait_for_controller_end

P, C = "producer_byte_rate", "consumer_byte_rate"


@pytest.fixture
def cluster(tmp_path):
    config = {
        "broker.heartbeat.interval.ms": "200",
        "broker.session.timeout.ms": "3000",
        # snapshots every few records: a restart reads quotas from one, then the log
        "metadata.log.snapshot.records": "4",
    }
    with EmbeddedCluster(brokers=2, data_dir=tmp_path, config=config) as cluster:
        yield cluster


def test_quotas_reach_every_broker_survive_a_controller_restart_and_catch_up(cluster, caplog):
    caplog.set_level("INFO", logger="sparklog.security.audit")
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.alter_client_quotas(
            [
                QuotaAlteration({"user": "alice"}, {P: 1024, C: 2048}),
                QuotaAlteration({"user": None, "client-id": None}, {P: 512}),
                QuotaAlteration({"client-id-prefix": "etl-"}, {C: 4096}),
                QuotaAlteration({"ip": None}, {"connection_creation_rate": 30}),
            ]
        )
        admin.alter_client_quotas([QuotaAlteration({"user": "bob"}, {P: 1})], validate_only=True)
        with pytest.raises(InvalidRequestError, match="must be greater than 0"):
            admin.alter_client_quotas([QuotaAlteration({"user": "carol"}, {P: -1})])
        with pytest.raises(InvalidRequestError, match="Invalid configuration key bogus"):
            admin.alter_client_quotas([QuotaAlteration({"user": "carol"}, {"bogus": 1})])
        alice = admin.describe_client_quotas([QuotaFilterComponent.of_entity("user", "alice")])
        assert alice == {(("user", "alice"),): {C: 2048.0, P: 1024.0}}
        assert len(admin.describe_client_quotas()) == 4  # bob's was validate-only
    # each change is audited with the client's principal (validate-only and refusals are not)
    audited = [r.getMessage() for r in caplog.records if r.name == "sparklog.security.audit"]
    assert len(audited) == 4 and all(line.startswith("QUOTA_ALTERED") for line in audited)
    assert any(
        "CLIENT_QUOTA:user=alice producer_byte_rate=1024, consumer_byte_rate=2048" in line
        for line in audited
    ), audited
    for broker in cluster.brokers:
        wait_for_controller_end(cluster, broker)
        quotas = broker.metadata.image.quotas
        assert quotas.client_quota(P, "alice", "app").limit == 1024  # type: ignore[union-attr]
        assert quotas.client_quota(P, "dave", "app").limit == 512  # type: ignore[union-attr]
        assert quotas.client_quota(C, "dave", "etl-7").limit == 4096  # type: ignore[union-attr]
        assert quotas.ip_quota("127.0.0.1").limit == 30  # type: ignore[union-attr]

    cluster.restart_controller()
    snapshots = sorted(Path(cluster.controller.metadata_log_dir).glob("**/snapshots/*.json"))
    assert snapshots, "metadata.log.snapshot.records=4 wrote snapshots"
    assert json.loads(snapshots[-1].read_text())["image"]["client_quotas"]
    image = cluster.controller.controller.image
    assert image.quotas.client_quota(C, "alice", "x").limit == 2048  # type: ignore[union-attr]
    assert len(image.quotas) == 4

    cluster.stop_broker(1)  # down (fenced) while quotas change
    with AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.brokers[0].port}"}) as admin:
        admin.alter_client_quotas(
            [
                QuotaAlteration({"user": "alice"}, {P: None}),
                QuotaAlteration({"user": "erin", "client-id": "app"}, {P: 8}),
            ]
        )
    rejoined = cluster.restart_broker(1)
    quotas = rejoined.metadata.image.quotas
    assert quotas.client_quota(P, "alice", "app").limit == 512  # type: ignore[union-attr]
    assert quotas.client_quota(P, "erin", "app").limit == 8  # type: ignore[union-attr]
    with AdminClient({"bootstrap.servers": f"127.0.0.1:{rejoined.port}"}) as admin:
        assert (
            admin.describe_client_quotas(
                [QuotaFilterComponent.of_entity("user", "erin")], strict=True
            )
            == {}
        )
        assert admin.describe_client_quotas(
            [
                QuotaFilterComponent.of_entity("user", "erin"),
                QuotaFilterComponent.of_entity_type("client-id"),
            ]
        ) == {(("client-id", "app"), ("user", "erin")): {P: 8.0}}


def test_a_mutation_rate_set_with_alter_client_quotas_holds_create_topics(cluster):
    """The whole chain: AlterClientQuotas -> the brokers' images -> the controller mutation
    quota (KIP-599) refusing the topic past the burst with THROTTLING_QUOTA_EXCEEDED (89)."""
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.alter_client_quotas(
            [QuotaAlteration({"client-id": "creator"}, {"controller_mutation_rate": 1})]
        )
    for broker in cluster.brokers:
        wait_for_controller_end(cluster, broker)

    async def create() -> Any:
        conn = await connect(f"127.0.0.1:{cluster.brokers[0].port}", client_id="creator")
        try:
            topics = [
                {"name": name, "num_partitions": n, "replication_factor": 1,
                 "assignments": [], "configs": []}
                for name, n in (("q-a", 8), ("q-b", 8), ("q-c", 1))
            ]  # fmt: skip
            data = {"topics": topics, "timeout": 10_000, "validate_only": False}
            return await call(conn, ApiKey.CREATE_TOPICS, data, version=6)
        finally:
            await conn.close()

    codes = {t.name: t.error_code for t in asyncio.run(create()).topics}
    # 11 credits (11 windows x 1/s): q-a takes 8, q-b goes below zero, q-c is refused
    assert codes == {"q-a": 0, "q-b": 0, "q-c": 89}
