"""sparklog's own transactional producer and read_committed consumer: commit, abort,
offsets in a transaction, a fenced zombie, and prepared transactions ended together by
`end_transactions` (the Spark sink's path), where a replayed key commits nothing twice."""

from __future__ import annotations

import time
import uuid

import pytest

from sparklog.broker.embedded import EmbeddedCluster
from sparklog.client import (
    AdminClient,
    KafkaConsumer,
    KafkaProducer,
    NewTopic,
    TopicPartition,
    TransactionStateError,
    end_transactions,
)
from sparklog.errors import ProducerFencedError

from .conftest import TEST_CONFIG


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(
        brokers=1, data_dir=tmp_path_factory.mktemp("own-txn"), config=TEST_CONFIG
    ) as running:
        yield running


def topic(cluster, partitions: int = 3) -> str:
    name = f"own-{uuid.uuid4().hex[:8]}"
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(name, partitions)])
    return name


def producer(cluster, tid: str) -> KafkaProducer:
    p = KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": tid})
    p.init_transactions()
    return p


def values(
    cluster, name: str, isolation: str = "read_committed", wait_s: float = 2.0, partitions: int = 3
) -> list:
    consumer = KafkaConsumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(name, p) for p in range(partitions)])
    got: list = []
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        got.extend(r.value for r in consumer.poll(100))
    consumer.close()
    return sorted(got)


def test_commit_abort_and_offsets_in_a_transaction(cluster):
    name = topic(cluster)
    with producer(cluster, f"own-{name}") as p:
        p.begin_transaction()
        for i in range(6):
            p.send(name, value=b"kept-%d" % i)
        p.send_offsets_to_transaction({(name, 0): 42}, "own-group")
        p.commit_transaction()
        p.begin_transaction()
        for i in range(6):
            p.send(name, value=b"dropped-%d" % i).add_done_callback(lambda f: None)
        p.flush()
        p.abort_transaction()
        with pytest.raises(TransactionStateError, match="begin_transaction"):
            p.send(name, value=b"outside")
    assert values(cluster, name) == [b"kept-%d" % i for i in range(6)]
    assert len(values(cluster, name, "read_uncommitted")) == 12, "aborted records are in the log"
    committed = cluster.coordinator.call(lambda core: core.fetch_offsets("own-group", None))
    assert committed[(name, 0)].committed_offset == 42


def test_a_zombie_is_fenced_by_its_successor(cluster):
    name = topic(cluster, 1)
    zombie = producer(cluster, f"zombie-{name}")
    zombie.begin_transaction()
    zombie.send(name, value=b"zombie")
    zombie.flush()
    with producer(cluster, f"zombie-{name}") as successor:
        successor.begin_transaction()
        successor.send(name, value=b"successor")
        successor.commit_transaction()
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    zombie.close()
    assert values(cluster, name, partitions=1) == [b"successor"]


def test_prepared_transactions_end_together_and_a_replay_commits_nothing_twice(cluster):
    name = topic(cluster)
    key = f"query-{name}:batch-0"

    def prepared(tag: bytes) -> list:
        handles = []
        for task in range(3):
            with producer(cluster, f"{name}-task-{task}") as p:
                p.begin_transaction()
                p.send(name, value=tag + b"-%d" % task, partition=task)
                handles.append(p.prepare_transaction())
        return handles

    first = prepared(b"first")
    assert values(cluster, name, wait_s=1) == [], "nothing visible before the decision"
    assert end_transactions(cluster.bootstrap_servers, key, True, first).outcome == "committed"
    replay = end_transactions(cluster.bootstrap_servers, key, True, prepared(b"replay"))
    assert replay.replayed and replay.outcome == "already-committed"
    aborted = end_transactions(cluster.bootstrap_servers, key + "-x", False, prepared(b"gone"))
    assert aborted.outcome == "aborted"
    assert values(cluster, name) == [b"first-0", b"first-1", b"first-2"]
    assert len(values(cluster, name, "read_uncommitted")) == 9


def test_compaction_removes_aborted_records_of_a_compacted_topic(cluster):
    name = f"compact-{uuid.uuid4().hex[:8]}"
    configs = {
        "cleanup.policy": "compact",
        "segment.bytes": "400",
        "min.cleanable.dirty.ratio": "0.01",
    }
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(name, 1, configs=configs)])
    with producer(cluster, f"compact-{name}") as p:
        p.begin_transaction()
        for i in range(5):
            p.send(name, key=b"k%d" % i, value=b"aborted-%d" % i, partition=0)
        p.flush()
        p.abort_transaction()
        for n in range(6):  # later commits roll segments, so the aborted ones become cleanable
            p.begin_transaction()
            for i in range(5):
                p.send(name, key=b"k%d" % i, value=b"kept-%d-%d" % (n, i), partition=0)
            p.commit_transaction()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        raw = values(cluster, name, "read_uncommitted", wait_s=0.5, partitions=1)
        if not any(v.startswith(b"aborted") for v in raw):
            break
    assert not any(v.startswith(b"aborted") for v in raw), "the cleaner dropped aborted records"
    assert sorted(values(cluster, name, partitions=1))[-5:] == [b"kept-5-%d" % i for i in range(5)]
