"""A byte flipped on disk inside an older batch: confluent-kafka's consumer (whose own CRC check,
`check.crcs`, is off by default) is served every batch before the damage, then gets
CORRUPT_MESSAGE for that offset, and is never handed the damaged records; other partitions
keep serving (issue 14, disk faults). sparklog's own consumer reads the same records, then raises
on every poll, fetching the partition again as Kafka's consumer does, until the application
seeks past the damage or the batch is served again: the segment repaired, or leadership moved
to a replica with a good copy (issue 27)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from sparklog.client import AdminClient, NewTopic
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.errors import CorruptBatchError
from sparklog.records import iter_batches
from tests.corrupt_log import (
    damage_batch_holding,
    oracle_read,
    produce_batches,
    read_through_repair,
    sparklog_read,
)


def test_a_flipped_byte_on_disk_is_never_served(tmp_path):
    topic = f"flip-{uuid.uuid4().hex[:6]}"
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config={"num.partitions": "2"}) as cluster:
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0})
        sent = {}
        for n in range(30):  # one flush per record: one batch per record
            value = f"value-{n:03d}".encode()
            producer.produce(topic, value, partition=n % 2)
            producer.flush(10)
            sent.setdefault(n % 2, []).append(value)

        log_file = next((cluster.broker_dir(0) / f"{topic}-0").glob("*.log"))
        data = log_file.read_bytes()
        starts, at = [], 0
        for batch in iter_batches(data):
            starts.append(at)
            at += len(batch.data)
        assert len(starts) == 15
        damaged_at = starts[6] + (starts[7] - starts[6]) - 2  # inside the 7th batch's value
        with open(log_file, "r+b") as f:
            f.seek(damaged_at)
            f.write(bytes([data[damaged_at] ^ 0x20]))

        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": f"g-{topic}",
                "enable.auto.commit": False,
                "fetch.error.backoff.ms": 50,
            }  # fmt: skip
        )
        consumer.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
        got, errors = {0: [], 1: []}, []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (errors and len(got[1]) == 15):
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                errors.append(msg.error())
            else:
                got[msg.partition()].append((msg.offset(), msg.value()))
        consumer.close()

    assert [v for _, v in got[0]] == sent[0][:6], "every batch before the damage, nothing after"
    assert [o for o, _ in got[0]] == list(range(6))
    assert [v for _, v in got[1]] == sent[1], "the other partition is untouched"
    assert errors and all(e.code() == KafkaError.INVALID_MSG for e in errors), errors


# -- sparklog's own consumer at the damage (issue 27 item 6) -------------------------------------


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """A sparklog broker whose partition 0 has a flipped bit in the batch holding offset 600 of
    1,000 (50 batches of 20): it serves the batches before it, then answers CORRUPT_MESSAGE."""
    topic = f"damaged-{uuid.uuid4().hex[:6]}"
    data_dir = tmp_path_factory.mktemp("damaged")
    with EmbeddedCluster(brokers=1, data_dir=data_dir, config={"num.partitions": "1"}) as cluster:
        values = produce_batches(cluster.bootstrap_servers, topic, 50, 20)
        damage = damage_batch_holding(cluster.broker_dir(0) / f"{topic}-0", 600)
        yield cluster, topic, values, damage


@pytest.mark.parametrize("how", ["poll", "poll_arrow", "poll_arrow-python"])
def test_sparklogs_consumer_reads_up_to_a_batch_the_broker_refuses_then_raises(damaged, how):
    """The broker answers CORRUPT_MESSAGE at the damaged batch. sparklog's consumer used to
    retry that for ever (no error, no log line); now it delivers what confluent-kafka delivers,
    then raises CorruptBatchError naming topic, partition and offset on every poll (while it
    fetches the partition again, in case the batch gets served), until the application seeks
    past the batch."""
    cluster, topic, values, damage = damaged
    want, code = oracle_read(cluster.bootstrap_servers, topic, check_crcs=False)
    assert code == KafkaError.INVALID_MSG
    assert want == [(o, values[o]) for o in range(damage.base_offset)]

    read = sparklog_read(cluster.bootstrap_servers, topic, how, skip_to=damage.next_offset, rest=40)
    assert read.records == want, "every record before the damaged batch, once, in order"
    assert len(read.errors) == 3 and read.polls_after_first_error == 2, "every poll raises"
    error = read.errors[0]
    assert all(isinstance(e, CorruptBatchError) for e in read.errors), read.errors
    assert (error.topic, error.partition, error.offset) == (topic, 0, damage.base_offset)
    assert f"{topic}-0 at offset {damage.base_offset}" in str(error)
    assert error.code == 2 and not error.retriable and "CORRUPT_MESSAGE" in str(error)
    assert error.refetching, "the consumer keeps fetching a batch the broker refused"
    assert read.after_seek[:40] == [
        (o, values[o]) for o in range(damage.next_offset, damage.next_offset + 40)
    ]


def assert_read_through_repair(before, after, values, damage) -> None:
    """Every record before the damage, then errors on every poll while it is refused
    (`poll(0)` too), then, with no seek, every record after it: each once, in order."""
    assert before.records == [(o, values[o]) for o in range(damage.base_offset)]
    assert len(before.errors) == 8 and before.polls_after_first_error == 2, "every poll raises"
    assert before.zero_polls_raised == before.zero_polls == 5, "poll(0) raises too"
    assert before.records + after.records == list(enumerate(values)), "all, once, in order"
    for error in before.errors + after.errors:
        assert isinstance(error, CorruptBatchError), error
        assert (error.partition, error.offset, error.refetching) == (0, damage.base_offset, True)


@pytest.mark.parametrize("how", ["poll", "poll_arrow"])
def test_a_refused_batch_is_read_without_a_seek_once_its_segment_is_repaired(tmp_path, how):
    """The broker refuses a batch damaged on its disk, then the bytes are restored (a repair
    from a good copy): the consumer, which kept fetching the partition (as Kafka's does), goes
    on by itself. It used to raise until a seek."""
    topic = f"repaired-{uuid.uuid4().hex[:6]}"
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config={"num.partitions": "1"}) as cluster:
        values = produce_batches(cluster.bootstrap_servers, topic, 10, 20)
        damage = damage_batch_holding(cluster.broker_dir(0) / f"{topic}-0", 100)
        before, after = read_through_repair(
            cluster.bootstrap_servers, topic, how, repair=damage.repair, total=len(values)
        )
    assert_read_through_repair(before, after, values, damage)


def test_a_refused_batch_is_read_from_a_good_replica_after_a_leader_move(tmp_path):
    """RF=2: the leader's copy of a batch is damaged on disk (the follower's is good), the
    leader refuses it; once the leader stops and the follower leads, the consumer reads the
    batch and everything after it from the good copy, with no seek."""
    topic = f"moved-{uuid.uuid4().hex[:6]}"
    with EmbeddedCluster(brokers=2, data_dir=tmp_path) as cluster:
        with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            admin.create_topics([NewTopic(topic, 1, 2)])
        values = produce_batches(cluster.bootstrap_servers, topic, 10, 20)
        cluster.wait_for_isr(topic)
        leader = cluster.leader_of(topic)
        damage = damage_batch_holding(cluster.broker_dir(leader) / f"{topic}-0", 100)

        def move_leadership() -> None:
            cluster.stop_broker(cluster.broker_index(leader))
            cluster.wait_for_leader(topic, not_on=leader)

        before, after = read_through_repair(
            cluster.bootstrap_servers, topic, "poll", repair=move_leadership, total=len(values)
        )
    assert_read_through_repair(before, after, values, damage)
