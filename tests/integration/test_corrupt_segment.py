"""A byte flipped on disk inside an older batch: confluent-kafka's consumer (whose own CRC check,
`check.crcs`, is off by default) is served every batch before the damage, then gets
CORRUPT_MESSAGE for that offset, and is never handed the damaged records; other partitions
keep serving (issue 14, disk faults). sparklog's own consumer reads the same records, then raises
on every poll until the application seeks past the damage (issue 27)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from sparklog.broker.embedded import EmbeddedCluster
from sparklog.errors import CorruptBatchError
from sparklog.records import iter_batches
from tests.corrupt_log import damage_batch_holding, oracle_read, produce_batches, sparklog_read


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
    then raises CorruptBatchError naming topic, partition and offset on every poll, until the
    application seeks past the batch."""
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
    assert read.after_seek[:40] == [
        (o, values[o]) for o in range(damage.next_offset, damage.next_offset + 40)
    ]
