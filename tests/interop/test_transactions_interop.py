"""Transactions with real Kafka clients as oracles (confluent-kafka, kafka-python, aiokafka).

The main test is a Jepsen-style queue: workers consume an input topic read_committed in a
consumer group, copy each batch to an output topic in a transaction together with the
consumed offsets (`send_offsets_to_transaction`, Kafka's exactly-once pattern), and abort
every few transactions on purpose; meanwhile a partition leader is killed and the driver's
coordinator restarted. Afterwards a read_committed reader must see every input record exactly
once, nothing from an aborted transaction, and the group's offsets at the end of the input.
Also: a zombie producer is fenced, a transaction left open past its timeout is aborted, and
the other clients' transactional producers commit and abort."""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.broker.coordinator_forwarding import coordinator_broker
from sparklog.cluster.embedded import EmbeddedCluster

pytestmark = pytest.mark.interop

PARTITIONS = 3
CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    "broker.heartbeat.interval.ms": "100",
    "broker.session.timeout.ms": "1500",
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.wait.max.ms": "100",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(brokers=3, data_dir=tmp_path_factory.mktemp("txn"), config=CONFIG) as c:
        yield c


def new_topic(cluster: EmbeddedCluster, prefix: str, rf: int = 3) -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, PARTITIONS, rf)])[topic].result(30)
    return topic


def read_committed(cluster: EmbeddedCluster, topic: str, want: int, timeout_s: float = 60):
    """Every record of `topic` a read_committed consumer sees, once `want` arrived or time ran
    out (and then a little longer, to catch extras)."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    extra_until = None
    while time.monotonic() < deadline:
        for m in consumer.consume(500, 0.2):
            if m.error() is None:
                values.append(m.value())
        if len(values) >= want and extra_until is None:
            extra_until = time.monotonic() + 1.0
        if extra_until is not None and time.monotonic() > extra_until:
            break
    consumer.close()
    return values


def txn_producer(cluster: EmbeddedCluster, tid: str, **extra) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "transactional.id": tid,
            "transaction.timeout.ms": 20_000,
            **extra,
        }
    )
    producer.init_transactions(30)
    return producer


class Worker(threading.Thread):
    """Consume-transform-produce with offsets in the transaction; aborts one in `abort_every`.

    Errors are handled as librdkafka documents for transactional producers (INTRODUCTION.md,
    "Handling of other errors"): a retriable error from `commit_transaction` means the commit
    is still under way and the call is repeated (a new call resumes it) until a deadline;
    `txn_requires_abort()` → `abort_transaction`; a fatal error, or an abort that fails, → a
    new producer with the same transactional id (InitProducerId fences the old one and ends
    its transaction). Each failure is recorded in `errors`; a transaction whose end is unknown
    (given up on) is in neither `aborted_tags` nor the commit count, and the consumer goes back
    to the group's committed offsets whatever happened."""

    COMMIT_DEADLINE_S = 90.0

    def __init__(self, cluster, name: str, source: str, sink: str, group: str, seed: int):
        super().__init__(name=name, daemon=True)
        self.cluster, self.source, self.sink, self.group = cluster, source, sink, group
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.committed_txns = 0
        self.aborted_tags: set[str] = set()
        self.errors: list[str] = []

    def run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.cluster.bootstrap_servers,
                "group.id": self.group,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
                # librdkafka can stay inside one transactional call past its timeout when a
                # broker it cached as coordinator left Metadata (librdkafka #5511, Kafka too):
                # the member then leaves the group on its own and the other takes over
                "max.poll.interval.ms": 15000,
            }
        )
        consumer.subscribe([self.source])
        producer = self._new_producer()
        seq = 0
        try:
            while not self.stop.is_set():
                messages = [m for m in consumer.consume(200, 0.3) if m.error() is None]
                if not messages:
                    continue
                seq += 1
                tag = f"{self.name}-{seq}"
                try:
                    producer.begin_transaction()
                    for m in messages:
                        producer.produce(self.sink, value=m.value() + b"|" + tag.encode())
                    producer.send_offsets_to_transaction(
                        consumer.position(consumer.assignment()),
                        consumer.consumer_group_metadata(),
                        30,
                    )
                    # the second transaction always aborts, so every run has aborted ones
                    # even when large consume batches make the run short
                    if seq == 2 or self.rng.random() < 0.15:
                        producer.abort_transaction(30)
                        self.aborted_tags.add(tag)
                        self._rewind(consumer)
                        continue
                    self._commit(producer)
                    self.committed_txns += 1
                except KafkaException as e:
                    producer = self._recover(producer, consumer, e.args[0], tag)
        finally:
            consumer.close()

    def _new_producer(self) -> Producer:
        return txn_producer(self.cluster, f"{self.group}-{self.name}")

    def _commit(self, producer: Producer) -> None:
        """`commit_transaction`, repeated on retriable errors until the deadline (a coordinator
        broker killed or a coordinator restarting takes a few seconds to find again)."""
        deadline = time.monotonic() + self.COMMIT_DEADLINE_S
        while True:
            try:
                producer.commit_transaction(30)
                return
            except KafkaException as e:
                error = e.args[0]
                if not error.retriable() or time.monotonic() > deadline:
                    raise
                self.errors.append(f"commit retried: {error}")
                time.sleep(0.1)

    def _recover(self, producer: Producer, consumer: Consumer, error, tag: str) -> Producer:
        """The producer to go on with after `error` ended transaction `tag`, the consumer back
        at the group's committed offsets. Never raises a KafkaException: a worker that dies
        stops consuming its partitions and the queue never drains."""
        if error.txn_requires_abort():
            try:
                producer.abort_transaction(30)
                self.aborted_tags.add(tag)
            except KafkaException as e:
                self.errors.append(f"abort failed: {e.args[0]}")
                producer = self._replace(producer)
        elif error.fatal():
            self.errors.append(f"fatal: {error}")
            producer = self._replace(producer)
        else:  # retriable past the deadline, or anything else: the outcome is unknown
            self.errors.append(f"{'retriable' if error.retriable() else 'unexpected'}: {error}")
            producer = self._replace(producer)
        while not self.stop.is_set():
            try:
                self._rewind(consumer)
                return producer
            except KafkaException as e:
                self.errors.append(f"rewind failed: {e.args[0]}")
                time.sleep(0.2)
        return producer

    def _replace(self, old: Producer) -> Producer:
        """A new producer with the same transactional id: InitProducerId fences `old` and ends
        whatever transaction it left (Kafka's coordinator completes a commit already decided
        and aborts an open one). Retried until it works or the worker is stopped."""
        while not self.stop.is_set():
            try:
                return self._new_producer()
            except KafkaException as e:
                self.errors.append(f"new producer failed: {e.args[0]}")
        return old

    @staticmethod
    def _rewind(consumer: Consumer) -> None:
        """Back to the group's committed offsets (the aborted batch is consumed again)."""
        for tp in consumer.committed(consumer.assignment(), 30):
            offset = tp.offset if tp.offset >= 0 else -2  # OFFSET_BEGINNING
            consumer.seek(TopicPartition(tp.topic, tp.partition, offset))


def test_exactly_once_queue_with_a_killed_leader_and_a_restarted_coordinator(cluster):
    source, sink = new_topic(cluster, "eos-in"), new_topic(cluster, "eos-out")
    group, total = f"eos-{uuid.uuid4().hex[:6]}", 3000
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True}
    )
    for i in range(total):
        producer.produce(source, value=b"%d" % i, partition=i % PARTITIONS)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0

    workers = [Worker(cluster, f"w{k}", source, sink, group, seed=k) for k in range(2)]
    for w in workers:
        w.start()

    def progress() -> int:
        return sum(w.committed_txns for w in workers)

    def wait_for(txns: int, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while progress() < txns and time.monotonic() < deadline:
            time.sleep(0.05)

    wait_for(3)
    leader = cluster.leader_of(sink, 0)
    victim = cluster.broker_index(leader)
    cluster.kill_broker(victim)
    wait_for(progress() + 3)
    cluster.restart_coordinator()
    wait_for(progress() + 3)
    cluster.restart_broker(victim)

    seen = read_committed(cluster, sink, total, timeout_s=120)
    for w in workers:
        w.stop.set()
    for w in workers:
        w.join(60)

    inputs = [v.split(b"|")[0] for v in seen]
    tags = {v.split(b"|")[1].decode() for v in seen}
    aborted = set().union(*(w.aborted_tags for w in workers))
    assert sorted(inputs, key=int) == [b"%d" % i for i in range(total)], (
        f"{len(inputs)} read, {len(set(inputs))} distinct of {total}; the workers' last "
        f"errors: {[(w.name, w.is_alive(), w.errors[-8:]) for w in workers]}"
    )
    assert not tags & aborted, "records of aborted transactions are invisible"
    assert aborted, "the run aborted some transactions on purpose"
    assert not [e for w in workers for e in w.errors if e.startswith("unexpected")]

    checker = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    committed = checker.committed([TopicPartition(source, p) for p in range(PARTITIONS)], 30)
    checker.close()
    assert sum(tp.offset for tp in committed) == total, "the group's offsets cover the input"


def test_a_coordinator_broker_killed_and_restarted_is_found_at_its_address(cluster):
    """The broker FindCoordinator names for a transactional id crashes and comes back before
    the controller fenced it, so FindCoordinator keeps naming it. librdkafka's transaction
    coordinator handle keeps the address it copied when that node id was first named, so the
    broker must come back on the same port (as a Kafka broker with static listeners does): on
    another one the producer dialled the dead port for minutes and this commit timed out."""
    topic = new_topic(cluster, "coord-restart")
    node_ids = sorted(b.node_id for b in cluster.brokers)
    victim = node_ids[1]
    tid = next(
        t
        for t in (f"coord-restart-{uuid.uuid4().hex[:6]}" for _ in range(1000))
        if coordinator_broker(t, node_ids) == victim
    )
    producer = txn_producer(cluster, tid)
    producer.begin_transaction()
    producer.produce(topic, value=b"before", partition=0)
    producer.commit_transaction(30)

    index = cluster.broker_index(victim)
    port = cluster.brokers[index].port
    cluster.kill_broker(index)
    cluster.restart_broker(index)
    assert cluster.brokers[index].port == port, "a restarted broker takes its last port again"

    producer.begin_transaction()
    producer.produce(topic, value=b"after", partition=0)
    producer.commit_transaction(20)
    assert sorted(read_committed(cluster, topic, 2)) == [b"after", b"before"]


def test_a_zombie_producer_is_fenced_and_its_records_never_show(cluster):
    topic = new_topic(cluster, "zombie", rf=1)
    zombie = txn_producer(cluster, "zombie-tx")
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    zombie.flush(10)
    successor = txn_producer(cluster, "zombie-tx")  # fences the first, aborting its transaction
    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=0)
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal() or error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED)
    assert read_committed(cluster, topic, 1) == [b"successor"]


def test_a_transaction_left_open_past_its_timeout_is_aborted(cluster):
    topic = new_topic(cluster, "timeout", rf=1)
    slow = txn_producer(cluster, f"slow-{uuid.uuid4().hex[:6]}", **{"transaction.timeout.ms": 1500})
    slow.begin_transaction()
    slow.produce(topic, value=b"forgotten", partition=0)
    slow.flush(10)
    time.sleep(3)
    with pytest.raises(KafkaException):
        slow.commit_transaction(30)
    after = txn_producer(cluster, f"after-{uuid.uuid4().hex[:6]}")
    after.begin_transaction()
    after.produce(topic, value=b"later", partition=0)
    after.commit_transaction(30)
    assert read_committed(cluster, topic, 1) == [b"later"], "the LSO moved past the abort"


def test_kafka_python_transactions_commit_and_abort(cluster):
    from kafka import KafkaProducer

    topic = new_topic(cluster, "kp", rf=1)
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap_servers, transactional_id=f"kp-{uuid.uuid4().hex[:6]}"
    )
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"kept", partition=0)
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send(topic, b"dropped", partition=1)
    producer.abort_transaction()
    producer.close()
    assert read_committed(cluster, topic, 1) == [b"kept"]


def test_aiokafka_transactions_commit_and_abort(cluster):
    from aiokafka import AIOKafkaProducer

    topic = new_topic(cluster, "aio", rf=1)

    async def go():
        producer = AIOKafkaProducer(
            bootstrap_servers=cluster.bootstrap_servers,
            transactional_id=f"aio-{uuid.uuid4().hex[:6]}",
        )
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait(topic, b"kept", partition=0)
            await producer.begin_transaction()
            await producer.send_and_wait(topic, b"dropped", partition=1)
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(go())
    assert read_committed(cluster, topic, 1) == [b"kept"]
