"""The proof of issue 31's metrics (§1): one cluster, every Prometheus endpoint scraped over
HTTP and parsed with `prometheus_client`'s own parser during a produce / consume / group /
transaction run, and the values move as the run says they must: bytes in equal the batches
produced, the followers' appends count as replication, lag is the records not consumed and
falls to 0 when the group commits, offset commits, transaction commits and aborts are
counted, an ISR shrink is counted after a follower stops fetching; and every series the
Grafana dashboard in docs/ plots is served."""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from sparklog.cluster.embedded import EmbeddedCluster

from .broker_wire import batch, connect, create_topic, produce, run
from .conftest import REPLICATION_CONFIG

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "sparklog-overview.json"
DEADLINE_S = 30.0
BATCHES, RECORDS_PER_BATCH = 5, 10
#: series that exist only once a client quota applies (Kafka records them only then)
QUOTA_SERIES = re.compile(r"^kafka_server_(produce|fetch|request)_")


@pytest.fixture(scope="module")
def proof_cluster(tmp_path_factory):
    """Three brokers whose followers leave the ISR a second after they stop fetching; the
    process serves every server's metrics on a free port; lag is polled every 100 ms."""
    config = {
        **REPLICATION_CONFIG,
        "metrics.prometheus.port": "-1",
        "sparklog.metrics.lag.poll.interval.ms": "100",
    }
    with EmbeddedCluster(
        brokers=3, data_dir=tmp_path_factory.mktemp("proof"), config=config
    ) as running:
        yield running


class Scrape:
    """One scrape of every endpoint of the cluster."""

    def __init__(self, endpoints: list[str]) -> None:
        self.samples: list[Any] = []
        for endpoint in endpoints:
            with urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=30) as response:
                assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                text = response.read().decode()
            for family in text_string_to_metric_families(text):
                self.samples.extend(family.samples)

    def sum(self, name: str, **labels: str) -> float:
        """The sum of `name`'s samples whose labels include `labels` (over servers)."""
        return sum(
            s.value
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    def has(self, name: str, **labels: str) -> bool:
        return any(
            s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
            for s in self.samples
        )

    def names(self) -> set[str]:
        return {s.name for s in self.samples}


def eventually(cluster, what: str, check: Callable[[Scrape], bool]) -> Scrape:
    """Scrape until `check` holds (values move asynchronously: replication, the lag poll)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        scrape = Scrape(cluster.metrics_endpoints())
        if check(scrape):
            return scrape
        assert time.monotonic() < deadline, f"not within {DEADLINE_S}s: {what}"
        time.sleep(0.1)


def produce_batches(cluster, topic: str) -> int:
    """`BATCHES` batches to the leader, acks=all; their bytes."""
    leader = cluster.brokers[cluster.broker_index(cluster.leader_of(topic))]
    batches = [
        batch([b"record-%d-%d" % (i, j) for j in range(RECORDS_PER_BATCH)]) for i in range(BATCHES)
    ]

    async def go() -> None:
        conn = await connect(leader.bootstrap)
        try:
            for data in batches:
                response = await produce(conn, topic, data, acks=-1)
                assert response.error_code == 0, response
        finally:
            await conn.close()

    run(go())
    return sum(len(b) for b in batches)


def make_topic(cluster) -> str:
    topic = f"proof-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        conn = await connect(cluster.bootstrap_servers)
        try:
            created = await create_topic(conn, topic, replication_factor=3)
            assert created.error_code == 0, created
        finally:
            await conn.close()

    run(go())
    cluster.wait_for_isr(topic, 0, 3)
    return topic


def lag(scrape: Scrape, group: str, topic: str) -> float | None:
    labels = {"group": group, "topic": topic, "partition": "0"}
    if not scrape.has("kafka_consumergroup_group_lag", **labels):
        return None
    return scrape.sum("kafka_consumergroup_group_lag", **labels)


def consume_all(cluster, group: str, topic: str, count: int) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        got, deadline = 0, time.monotonic() + DEADLINE_S
        while got < count:
            assert time.monotonic() < deadline, f"consumed {got} of {count}"
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got += 1
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def commit_offset(cluster, group: str, topic: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def transactions(cluster, topic: str) -> None:
    """One committed transaction, one aborted."""
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": uuid.uuid4().hex}
    )
    producer.init_transactions(30)
    for commit in (True, False):
        producer.begin_transaction()
        producer.produce(topic, value=b"txn", partition=0)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def dashboard_series() -> set[str]:
    """The metric names the Grafana dashboard's queries use."""
    dashboard = json.loads(DASHBOARD.read_text())
    names = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            names |= set(re.findall(r"\b(kafka_[a-z0-9_]+)", target["expr"]))
    return names


def test_every_endpoint_scraped_over_http_moves_as_the_run_says(proof_cluster):
    c = proof_cluster
    assert c.metrics_endpoints(), "the cluster serves no metrics endpoint"
    before = Scrape(c.metrics_endpoints())
    topics_before = before.sum("kafka_controller_kafkacontroller_globaltopiccount")

    # produce: bytes in are exactly the batches' bytes, the followers' appends replication
    topic = make_topic(c)
    produced_bytes = produce_batches(c, topic)
    records = BATCHES * RECORDS_PER_BATCH
    replication_before = before.sum("kafka_server_brokertopicmetrics_replicationbytesin_total")
    after = eventually(
        c,
        "both followers' appends counted as replication bytes in",
        lambda s: (
            s.sum("kafka_server_brokertopicmetrics_replicationbytesin_total") - replication_before
            >= 2 * produced_bytes
        ),
    )
    assert after.sum("kafka_server_brokertopicmetrics_bytesin_total", topic=topic) == (
        produced_bytes
    )
    assert after.sum("kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == records
    assert after.sum("kafka_controller_kafkacontroller_globaltopiccount") == topics_before + 1
    assert after.sum("kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert after.sum("kafka_controller_kafkacontroller_activebrokercount") == 3
    assert after.sum("kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert after.sum("kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert after.sum("kafka_network_requestmetrics_requests_total", request="Produce") >= BATCHES

    # a group: lag is what it has not consumed, and falls to 0 once it commits the end
    group = f"proof-{uuid.uuid4().hex[:6]}"
    commits_before = after.sum("kafka_server_group_coordinator_metrics_offset_commit_count")
    commit_offset(c, group, topic, 0)
    eventually(c, "the lag of a group at offset 0", lambda s: lag(s, group, topic) == records)
    consume_all(c, group, topic, records)
    consumed = eventually(c, "the lag back to 0", lambda s: lag(s, group, topic) == 0)
    assert consumed.sum("kafka_consumergroup_group_sum_lag", group=group) == 0
    assert consumed.sum("kafka_consumergroup_group_offset", group=group, topic=topic) == records
    assert (
        consumed.sum("kafka_server_group_coordinator_metrics_offset_commit_count")
        == commits_before + 2
    )
    assert consumed.sum("kafka_server_brokertopicmetrics_bytesout_total", topic=topic) >= (
        produced_bytes
    )
    assert consumed.sum("kafka_server_group_coordinator_metrics_batch_flush_time_ms_count") > 0

    # transactions: one commit, one abort
    txn_commits = consumed.sum(
        "kafka_server_transaction_coordinator_metrics_transaction_commit_count"
    )
    txn_aborts = consumed.sum(
        "kafka_server_transaction_coordinator_metrics_transaction_abort_count"
    )
    transactions(c, topic)
    eventually(
        c,
        "a transaction committed and one aborted",
        lambda s: (
            s.sum("kafka_server_transaction_coordinator_metrics_transaction_commit_count")
            == txn_commits + 1
            and s.sum("kafka_server_transaction_coordinator_metrics_transaction_abort_count")
            == txn_aborts + 1
        ),
    )

    # a follower stops fetching: the leader shrinks the ISR, and counts it
    tp = (topic, 0)
    leader_id = c.leader_of(topic)
    lagging = next(b for b in c.brokers if b.node_id != leader_id)
    shrinks_before = Scrape(c.metrics_endpoints()).sum(
        "kafka_server_replicamanager_isrshrinks_total"
    )
    lagging.call_in_loop(lambda: lagging.fetchers.remove_partition(tp))
    produce_batches(c, topic)  # acks=all: the leader waits, then shrinks the ISR
    shrunk = eventually(
        c,
        "the ISR shrink counted",
        lambda s: s.sum("kafka_server_replicamanager_isrshrinks_total") == shrinks_before + 1,
    )
    assert shrunk.sum("kafka_server_replicamanager_underreplicatedpartitions") == 1

    # the dashboard plots only series that are served (quota series appear with quotas)
    missing = {n for n in dashboard_series() if not QUOTA_SERIES.match(n)} - shrunk.names()
    assert not missing, f"the Grafana dashboard plots series nobody serves: {sorted(missing)}"
