"""The process's Prometheus endpoint over HTTP on a running cluster: Kafka's `RequestMetrics`
counted by the brokers', the controller's and the coordinator's measure stage, parsed with
prometheus_client's own text parser."""

from __future__ import annotations

import json
import signal
import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparklog.cluster.embedded import EmbeddedCluster
from tests.integration import broker_wire as wire
from tests.integration.conftest import TEST_CONFIG
from tests.integration.test_cli import Served


@pytest.fixture(scope="module")
def metrics_cluster(tmp_path_factory):
    """Two brokers; the process serves its metrics on a free port."""
    config = {**TEST_CONFIG, "metrics.prometheus.port": "-1"}
    with EmbeddedCluster(
        brokers=2, data_dir=tmp_path_factory.mktemp("metrics"), config=config
    ) as running:
        yield running


def scrape(port: int) -> list:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return list(text_string_to_metric_families(response.read().decode()))


def total(families: list, sample_name: str, **labels: str) -> float:
    """The sum of the samples of `sample_name` whose labels include `labels`."""
    return sum(
        s.value
        for f in families
        for s in f.samples
        if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def test_every_server_of_the_process_shares_one_discoverable_port(metrics_cluster):
    port = metrics_cluster.metrics_port
    assert port > 0
    assert metrics_cluster.controller.metrics_port == port
    assert all(b.metrics_port == port for b in metrics_cluster.brokers)
    assert metrics_cluster.coordinator.metrics_port == port
    families = scrape(port)
    # brokers' heartbeats reach the controller, which counts them
    assert total(
        families,
        "kafka_network_requestmetrics_requests_total",
        request="BrokerHeartbeat",
        server="controller",
    )


async def _produce_and_fetch(bootstrap: str, topic: str) -> int:
    conn = await wire.connect(bootstrap)
    try:
        created = await wire.create_topic(conn, topic, partitions=1)
        assert created.error_code == 0
        md = await wire.metadata(conn, [topic])
        leader = md.topics[0].partitions[0].leader_id
        broker = next(b for b in md.brokers if b.node_id == leader)
        leader_conn = await wire.connect(f"{broker.host}:{broker.port}")
        try:
            for i in range(3):
                response = await wire.produce(leader_conn, topic, wire.batch([b"v%d" % i]))
                assert response.error_code == 0
            # a partition that does not exist: an error counted in ErrorsPerSec
            bad = await wire.produce(leader_conn, topic, wire.batch([b"x"]), partition=7)
            assert bad.error_code != 0
            await wire.fetch(leader_conn, topic, 0)
        finally:
            await leader_conn.close()
        return int(leader)
    finally:
        await conn.close()


def test_broker_request_metrics_count_each_produce_and_fetch(metrics_cluster):
    port = metrics_cluster.metrics_port
    before = scrape(port)  # other tests of the module may have produced: count the change
    leader = wire.run(_produce_and_fetch(metrics_cluster.bootstrap_servers, "metrics-rm"))
    server = f"broker-{leader}"
    families = scrape(port)

    def added(name: str, **labels: str) -> float:
        return total(families, name, server=server, **labels) - total(
            before, name, server=server, **labels
        )

    requests = "kafka_network_requestmetrics_requests_total"
    assert added(requests, request="Produce") == 4
    errors = "kafka_network_requestmetrics_errors_total"
    assert added(errors, request="Produce", error="NONE") == 3
    assert added(errors, request="Produce") == 4
    assert added("kafka_network_requestmetrics_totaltimems_count", request="Produce") == 4
    quantiles = {
        s.labels["quantile"]
        for f in families
        if f.name == "kafka_network_requestmetrics_totaltimems"
        for s in f.samples
        if s.labels.get("request") == "Produce" and "quantile" in s.labels
    }
    assert quantiles == {"0.50", "0.75", "0.95", "0.98", "0.99", "0.999"}
    for name in (
        "requestqueuetimems",
        "localtimems",
        "remotetimems",
        "throttletimems",
        "responsequeuetimems",
        "responsesendtimems",
        "requestbytes",
    ):
        assert added(f"kafka_network_requestmetrics_{name}_count", request="Produce") == 4, name
    # a consumer's Fetch is counted as Fetch and as FetchConsumer
    consumer = total(families, requests, request="FetchConsumer", server=server)
    assert consumer >= 1
    assert total(families, requests, request="Fetch", server=server) >= consumer
    # the broker forwarded CreateTopics to the controller: that wait is its remote time
    assert (
        total(families, "kafka_network_requestmetrics_remotetimems_sum", request="CreateTopics") > 0
    )
    assert total(families, "kafka_server_kafkaserver_brokerstate", server=server) == 3  # RUNNING
    # the listener counted the two connections; the loop's idle share is a ratio
    created = "kafka_server_socket_server_metrics_connection_creation_total"
    assert total(families, created, listener="PLAINTEXT", server=server) >= 2
    idle = "kafka_network_socketserver_networkprocessoravgidle_percent"
    assert 0 <= total(families, idle, server=server) <= 1
    # bytes of the requests: each Produce carried its batch
    assert (
        total(
            families,
            "kafka_network_requestmetrics_requestbytes_sum",
            request="Produce",
            server=server,
        )
        > 4 * 60
    )


def test_follower_fetches_are_fetch_follower(metrics_cluster):
    async def create() -> None:
        conn = await wire.connect(metrics_cluster.bootstrap_servers)
        try:
            created = await wire.create_topic(conn, "metrics-rf2", replication_factor=2)
            assert created.error_code == 0
        finally:
            await conn.close()
        metrics_cluster.wait_for_isr("metrics-rf2", 0, 2)
        leader = metrics_cluster.leader_of("metrics-rf2", 0)
        index = metrics_cluster.broker_index(leader)
        conn = await wire.connect(metrics_cluster.brokers[index].bootstrap)
        try:  # acks=all: answered once the follower fetched the record and asked for more
            response = await wire.produce(conn, "metrics-rf2", wire.batch([b"r"]), acks=-1)
            assert response.error_code == 0
        finally:
            await conn.close()

    wire.run(create())
    families = scrape(metrics_cluster.metrics_port)
    assert total(families, "kafka_network_requestmetrics_requests_total", request="FetchFollower")


def test_broker_processes_serve_their_own_endpoint_which_the_drivers_sd_lists(tmp_path):
    config = {**TEST_CONFIG, "metrics.prometheus.port": "-1"}
    with EmbeddedCluster(
        brokers=1, data_dir=tmp_path, config=config, broker_processes=True
    ) as cluster:
        driver, broker = cluster.metrics_endpoints()
        assert driver == f"127.0.0.1:{cluster.metrics_port}"
        with urllib.request.urlopen(f"http://{driver}/sd", timeout=30) as response:
            groups = json.loads(response.read())
        assert {"targets": [broker], "labels": {"broker_id": "0"}} in groups
        assert groups[0]["targets"] == [driver]

        async def ask() -> None:
            conn = await wire.connect(cluster.bootstrap_servers)
            try:
                await wire.metadata(conn, None)
            finally:
                await conn.close()

        wire.run(ask())
        families = scrape(int(broker.rsplit(":", 1)[1]))
        # one server in that process: no `server` label, the JMX exporter's names as they are
        assert total(families, "kafka_network_requestmetrics_requests_total", request="Metadata")
        assert not any("server" in s.labels for f in families for s in f.samples)


def test_serve_prints_where_its_metrics_are_and_serves_them(tmp_path):
    with socket.socket() as probe:  # a port free a moment ago: serve binds it by number
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    served = Served(
        "--master",
        "none",
        "--brokers",
        "1",
        "--data-dir",
        str(tmp_path / "served"),
        "--config",
        f"metrics.prometheus.port={port}",
    )
    try:
        families = scrape(port)
        assert total(families, "kafka_network_requestmetrics_requests_total", server="controller")
    finally:
        code, err = served.stop(signal.SIGTERM)
    assert code == 0, err
    assert f"metrics: http://127.0.0.1:{port}/metrics" in err


def test_a_fetch_waiting_in_purgatory_counts_its_wait_as_remote_time(metrics_cluster):
    async def wait() -> int:
        conn = await wire.connect(metrics_cluster.bootstrap_servers)
        try:
            assert (await wire.create_topic(conn, "metrics-wait")).error_code == 0
            leader = metrics_cluster.leader_of("metrics-wait", 0)
            index = metrics_cluster.broker_index(leader)
            leader_conn = await wire.connect(metrics_cluster.brokers[index].bootstrap)
            try:  # nothing to read: the fetch waits its whole max wait for data
                await wire.fetch(leader_conn, "metrics-wait", 0, max_wait_ms=300)
            finally:
                await leader_conn.close()
            return leader
        finally:
            await conn.close()

    before = scrape(metrics_cluster.metrics_port)
    leader = wire.run(wait())
    after = scrape(metrics_cluster.metrics_port)
    remote = "kafka_network_requestmetrics_remotetimems_sum"
    labels = {"request": "FetchConsumer", "server": f"broker-{leader}"}
    # a wait cannot end before its max wait when no data comes: a lower bound, not a speed
    assert total(after, remote, **labels) - total(before, remote, **labels) >= 250
