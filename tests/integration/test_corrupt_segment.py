"""A byte flipped on disk inside an older batch: confluent-kafka's consumer (whose own CRC check,
`check.crcs`, is off by default) is served every batch before the damage, then gets
CORRUPT_MESSAGE for that offset, and is never handed the damaged records; other partitions
keep serving (issue 14, disk faults)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from sparklog.broker.embedded import EmbeddedCluster
from sparklog.records import iter_batches


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
