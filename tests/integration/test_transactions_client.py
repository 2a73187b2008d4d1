"""sparklog's own transactional producer and read_committed consumer: commit, abort,
offsets in a transaction, a fenced zombie, and prepared transactions ended together by
`end_transactions` (the Spark sink's path), where a replayed key commits nothing twice."""

from __future__ import annotations

import time
import uuid

import pytest

from sparklog.client import (
    AdminClient,
    KafkaConsumer,
    KafkaProducer,
    NewTopic,
    TopicPartition,
    TransactionStateError,
    end_transactions,
    fence_transactions,
)
from sparklog.client.transaction_batch import transactional_id_exists
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.errors import InvalidProducerEpochError, KafkaError, ProducerFencedError

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


def test_the_producer_speaks_transactions_v2_and_each_end_bumps_its_epoch(cluster):
    """KIP-890 part 2: the cluster finalizes transaction.version 2, so the producer sends no
    AddPartitionsToTxn / AddOffsetsToTxn, and EndTxn v5 answers a bumped epoch each time."""
    name = topic(cluster)
    tid = f"own-v2-{name}"
    epochs = []
    with producer(cluster, tid) as p:
        txn = p._transaction
        assert txn is not None and txn.v2
        epochs.append(txn.producer_epoch)
        for commit in (True, False, True):
            p.begin_transaction()
            for i in range(3):
                p.send(name, value=b"%s-%d" % (b"kept" if commit else b"dropped", i))
            p.flush()
            if commit:
                p.send_offsets_to_transaction({(name, 0): len(epochs)}, "own-v2-group")
                p.commit_transaction()
            else:
                p.abort_transaction()
            epochs.append(txn.producer_epoch)
    assert epochs == [epochs[0] + i for i in range(4)]
    assert values(cluster, name) == sorted([b"kept-%d" % i for i in range(3)] * 2)
    committed = cluster.coordinator.call(lambda core: core.fetch_offsets("own-v2-group", None))
    assert committed[(name, 0)].committed_offset == 3


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


def test_fencing_aborts_an_open_transaction_and_its_producer_stays_fenced(cluster):
    """What the Spark sink's abort does for tasks that left no commit message: their open
    transactions would hold back read_committed readers until transaction.timeout.ms."""
    name = topic(cluster)
    zombie = producer(cluster, f"zombie-{name}")
    zombie.begin_transaction()
    zombie.send(name, value=b"open", partition=0).result(10)
    with producer(cluster, f"live-{name}") as live:
        live.begin_transaction()
        live.send(name, value=b"after", partition=0)
        live.commit_transaction()
    assert values(cluster, name, wait_s=1) == [], "the open transaction holds back the LSO"
    assert not transactional_id_exists(cluster.bootstrap_servers, f"never-used-{name}")
    fence_transactions(cluster.bootstrap_servers, [f"zombie-{name}", f"never-used-{name}"])
    assert values(cluster, name) == [b"after"]
    # an Empty transaction's start time is -1 on the wire, which kio's schema cannot read
    assert transactional_id_exists(cluster.bootstrap_servers, f"never-used-{name}")
    with pytest.raises((InvalidProducerEpochError, ProducerFencedError)):
        zombie.send(name, value=b"late", partition=0).result(10)
    with pytest.raises(KafkaError):
        zombie.commit_transaction()
    zombie.close(0)
    assert values(cluster, name) == [b"after"]


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


def test_a_batch_write_task_that_starts_after_the_abort_writes_nothing(cluster):
    """Spark does not wait for the tasks it cancels: one that opens its transaction after the
    driver's abort finds the abort's mark and stops before it writes."""
    import pyarrow as pa

    from sparklog.spark.options import SinkOptions
    from sparklog.spark.sink_transactions import mark_write_aborted
    from sparklog.spark.writer import SparkLogWriteAbortedError, write_task

    name = topic(cluster)
    options = SinkOptions(cluster.bootstrap_servers, name, transactional=True)
    rows = [pa.record_batch({"value": pa.array([b"late"], pa.binary())})]
    prefix = f"late-{name}"
    mark_write_aborted(options, prefix)
    with pytest.raises(SparkLogWriteAbortedError, match="aborted before this task"):
        write_task(options, ("value",), iter(rows), prefix, batch_write=True)
    assert values(cluster, name, "read_uncommitted", wait_s=1) == []


def test_a_failing_batch_write_task_aborts_its_own_transaction(cluster, monkeypatch):
    import pyarrow as pa

    from sparklog.spark import writer
    from sparklog.spark.options import SinkOptions
    from sparklog.spark.writer import write_task

    monkeypatch.setattr(writer, "COALESCE_BYTES", 1)  # send each batch as it comes

    name = topic(cluster)
    options = SinkOptions(cluster.bootstrap_servers, name, transactional=True)

    def rows():
        yield pa.record_batch({"value": pa.array([b"sent"] * 10, pa.binary())})
        yield pa.record_batch({"value": pa.array([b"sent"] * 10, pa.binary())})
        time.sleep(1)  # the sender ships them before the upstream fails
        raise ValueError("the upstream failed")

    with pytest.raises(ValueError, match="upstream failed"):
        write_task(options, ("value",), rows(), f"fails-{name}", batch_write=True)
    assert len(values(cluster, name, "read_uncommitted")) >= 10, "rows were sent"
    with producer(cluster, f"live-{name}") as live:
        live.begin_transaction()
        live.send(name, value=b"after", partition=0)
        live.commit_transaction()
    assert values(cluster, name) == [b"after"], "the failed task's transaction is not open"
