"""A record batch damaged on a real broker's disk, and readers that stop at it (issue 27 item 6):
confluent-kafka (the oracle for which records precede the damage) and sparklog's consumer,
`poll()` or `poll_arrow()`, native core on or off."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition

from sparklog.client import KafkaConsumer
from sparklog.errors import KafkaError
from sparklog.records import iter_batches, native

#: Safety net for loops that wait for an error or a record (never an assertion about speed).
WAIT_S = 30


@dataclass(frozen=True)
class Damage:
    """The batch whose bytes were changed on disk: its first offset and the one after it, and
    the flipped bit (file, byte, mask) to `repair` it."""

    base_offset: int
    next_offset: int
    log_file: Path
    at: int
    mask: int = 0x20

    def repair(self) -> None:
        """Flip the bit back, as restoring the segment from a good copy would."""
        with open(self.log_file, "r+b") as f:
            f.seek(self.at)
            byte = f.read(1)[0]
            f.seek(self.at)
            f.write(bytes([byte ^ self.mask]))


def produce_batches(bootstrap: str, topic: str, batches: int, per_batch: int) -> list[bytes]:
    """`batches` x `per_batch` values into partition 0, one flush per batch (so the log holds
    many batches); returns the values in offset order."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    values = []
    for b in range(batches):
        for i in range(per_batch):
            value = b"value-%05d-" % (b * per_batch + i) + b"x" * 40
            producer.produce(topic, value, partition=0)
            values.append(value)
        assert producer.flush(30) == 0
    return values


def damage_batch_holding(partition_dir: Path, offset: int) -> Damage:
    """Flip one bit of the last value in the batch holding `offset` in the partition's first
    segment: its CRC-32C no longer matches. The broker keeps running, as a disk fault lets it."""
    log_file = sorted(partition_dir.glob("*.log"))[0]
    data = log_file.read_bytes()
    at = 0
    for batch in iter_batches(data):
        size = len(batch.data)
        if batch.header.base_offset <= offset <= batch.header.last_offset:
            damage = Damage(
                batch.header.base_offset,
                batch.header.next_offset,
                log_file,
                at + size - 2,  # inside the last record's value (no headers follow)
            )
            damage.repair()  # the same flip damages it
            return damage
        at += size
    raise AssertionError(f"no batch holds offset {offset} in {log_file}")


def oracle_read(bootstrap: str, topic: str, *, check_crcs: bool) -> tuple[list[tuple], int]:
    """confluent-kafka's records of partition 0 before its first error, and that error's code."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "corrupt-oracle",
            "enable.auto.commit": False,
            "check.crcs": check_crcs,
            "fetch.error.backoff.ms": 50,
        }
    )
    consumer.assign([CkTopicPartition(topic, 0, 0)])
    got: list[tuple] = []
    try:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                return got, msg.error().code()
            got.append((msg.offset(), msg.value()))
        raise AssertionError(f"confluent-kafka saw no error within {WAIT_S} s after {len(got)}")
    finally:
        consumer.close()


@dataclass
class SparklogRead:
    records: list[tuple] = field(default_factory=list)
    errors: list[KafkaError] = field(default_factory=list)  # any other than expected is kept
    polls_after_first_error: int = 0
    after_seek: list[tuple] = field(default_factory=list)
    #: of `poll(0)` calls made while the damage was known, how many raised
    zero_polls: int = 0
    zero_polls_raised: int = 0


def sparklog_read(
    bootstrap: str, topic: str, how: str, *, skip_to: int, rest: int, errors_wanted: int = 3
) -> SparklogRead:
    """sparklog's consumer on partition 0 from offset 0 with `how` ("poll", "poll_arrow", or
    "poll_arrow-python": the pure-Python decoder): the (offset, value) records until
    `errors_wanted` polls raised, then, after a seek to `skip_to` (past the damage), the
    `rest` records there."""
    native.set_enabled(how != "poll_arrow-python")
    try:
        with KafkaConsumer(
            {"bootstrap.servers": bootstrap, "max.poll.records": 100, "fetch.max.wait.ms": 100}
        ) as consumer:
            consumer.assign([(topic, 0)])
            consumer.seek((topic, 0), 0)
            result = SparklogRead()
            _read(consumer, how, result, lambda: len(result.errors) >= errors_wanted)
            consumer.seek((topic, 0), skip_to)
            after = SparklogRead()
            _read(consumer, how, after, lambda: len(after.records) >= rest or after.errors)
            assert not after.errors, after.errors
            result.after_seek = after.records
            return result
    finally:
        native.set_enabled(True)


def read_through_repair(
    bootstrap: str, topic: str, how: str, *, repair: Callable[[], None], total: int
) -> tuple[SparklogRead, SparklogRead]:
    """sparklog's consumer on partition 0 from offset 0, with no seek after that: the records
    until 3 polls raised, then 5 `poll(0)` calls (each should raise too); then `repair()` (the
    damaged copy is fixed, or leadership moves to a good one) and the records until `total`
    came. Returns both phases; errors while the refetch is not yet served count in the second."""
    native.set_enabled(how != "poll_arrow-python")
    try:
        with KafkaConsumer(
            {"bootstrap.servers": bootstrap, "max.poll.records": 100, "fetch.max.wait.ms": 100}
        ) as consumer:
            consumer.assign([(topic, 0)])
            consumer.seek((topic, 0), 0)
            before = SparklogRead()
            _read(consumer, how, before, lambda: len(before.errors) >= 3)
            for _ in range(5):
                before.zero_polls += 1
                try:
                    before.records += _poll(consumer, how, 0)
                except KafkaError as e:
                    before.errors.append(e)
                    before.zero_polls_raised += 1
            repair()
            after = SparklogRead()
            _read(consumer, how, after, lambda: len(before.records) + len(after.records) >= total)
            return before, after
    finally:
        native.set_enabled(True)


def _poll(consumer: KafkaConsumer, how: str, timeout_ms: int) -> list[tuple]:
    if how == "poll":
        return [(r.offset, r.value) for r in consumer.poll(timeout_ms)]
    batch = consumer.poll_arrow(timeout_ms)
    return list(zip(batch["offset"].to_pylist(), batch["value"].to_pylist(), strict=True))


def _read(consumer: KafkaConsumer, how: str, into: SparklogRead, done) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done() and time.monotonic() < deadline:
        if into.errors:
            into.polls_after_first_error += 1
        try:
            into.records += _poll(consumer, how, 200)
        except KafkaError as e:
            into.errors.append(e)
