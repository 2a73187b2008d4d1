"""One confluent-kafka (librdkafka) scenario in which an idempotent producer writes a record
twice, run against sparklog (`tests/interop/test_idempotent_epoch_bump.py`) and Apache Kafka
(`tests/oracle/test_differential_idempotence.py`): the soak's duplicate "around an isolated
leader" (issue 27) reproduced on purpose.

Topic `a` has two replicas (leader `leader`, follower `follower`) and min.insync.replicas=2;
topic `b` one replica and max.message.bytes=1000. With the follower killed, record a1 is
appended by the leader but its acks=all wait runs out (REQUEST_TIMED_OUT, or
NOT_ENOUGH_REPLICAS_AFTER_APPEND: librdkafka marks it possibly persisted and queues a retry,
which then meets NOT_ENOUGH_REPLICAS). A record too large for `b` fails permanently; with
`enable.gapless.guarantee=false` (the default) librdkafka then bumps the producer epoch itself
and renumbers every queued message from sequence 0 — a1 included. Once the follower is back,
a1 is accepted again in the new epoch: the broker cannot know it (Kafka's
`ProducerStateEntry.findDuplicateBatch` compares within one epoch). librdkafka issue 4953.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JOBS = Path(__file__).resolve().parents[1] / "jobs"
#: fast ISR shrink, so a1 waits for acks in vain; both brokers get it
BROKER_CONFIG = {"replica.lag.time.max.ms": "1000"}


def soak_duplicates() -> Any:
    """`jobs/soak_duplicates.py` (the jobs dir is not a package)."""
    spec = importlib.util.spec_from_file_location("soak_duplicates", JOBS / "soak_duplicates.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("soak_duplicates", module)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Outcome:
    reports: list[tuple[str, bytes, str | None, int | None]]  # topic, value, error, offset
    records: list[tuple[int, bytes]]  # topic a, partition 0: (offset, value)
    copies: dict[str, Any]  # soak_duplicates.classify_duplicates of the values read twice


def run(
    bootstrap: str,
    log_dirs: Path,
    *,
    leader: int,
    follower: int,
    kill_follower: Callable[[], None],
    restart_follower: Callable[[], None],
) -> Outcome:
    import confluent_kafka
    from confluent_kafka.admin import AdminClient, NewTopic

    client = {"bootstrap.servers": bootstrap, "broker.address.family": "v4"}
    topics = [
        NewTopic("a", 1, replica_assignment=[[leader, follower]],
                 config={"min.insync.replicas": "2"}),
        NewTopic("b", 1, replica_assignment=[[leader]], config={"max.message.bytes": "1000"}),
    ]  # fmt: skip
    admin = AdminClient(client)  # referenced until its futures are done
    for future in admin.create_topics(topics).values():
        future.result(30)
    reports: list[tuple[str, bytes, str | None, int | None]] = []

    def delivered(err: Any, msg: Any) -> None:
        reports.append((msg.topic(), msg.value()[:2], err and err.name(), msg.offset()))

    producer = confluent_kafka.Producer(
        {**client, "enable.idempotence": True, "acks": "all", "linger.ms": 0,
         "request.timeout.ms": 1500, "retry.backoff.ms": 200, "message.timeout.ms": 60_000}
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while len(reports) < 2 or any(error for _, _, error, _ in reports):
        assert time.monotonic() < deadline, f"no warm-up delivery: {reports}"
        reports.clear()
        producer.produce("a", b"a0", on_delivery=delivered)
        producer.produce("b", b"b0", on_delivery=delivered)
        producer.flush(10)
    kill_follower()
    producer.produce("a", b"a1", on_delivery=delivered)
    _poll(producer, 4.0)  # a1 written, its acks=all wait times out; retries meet the short ISR
    producer.produce("b", b"b1" + b"x" * 3000, on_delivery=delivered)  # MESSAGE_TOO_LARGE
    _poll(producer, 2.0)  # librdkafka bumps the epoch and renumbers a1 from sequence 0
    restart_follower()
    assert producer.flush(60) == 0, "a1 was never delivered"
    records = _read_a(client)
    values: dict[bytes, list[tuple[int, int]]] = {}
    for offset, value in records:
        values.setdefault(value, []).append((0, offset))
    twice = {v.decode(): where for v, where in values.items() if len(where) > 1}
    copies = soak_duplicates().classify_duplicates(log_dirs, "a", twice)
    return Outcome(reports, records, copies)


def _poll(producer: Any, seconds: float) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        producer.poll(0.1)


def _read_a(client: dict[str, str]) -> list[tuple[int, bytes]]:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {**client, "group.id": "epoch-bump", "enable.auto.commit": False}
    )
    consumer.assign([confluent_kafka.TopicPartition("a", 0, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        got += [(m.offset(), m.value()) for m in consumer.consume(100, 0.2) if not m.error()]
    _poll_more = time.monotonic() + 1.0  # anything past the third record would show here
    while time.monotonic() < _poll_more:
        got += [(m.offset(), m.value()) for m in consumer.consume(100, 0.2) if not m.error()]
    consumer.close()
    return got
