"""Clusters with the remote tier on, and the steps Kafka's tiered-storage integration tests
are written in (`TieredStorageTestBuilder`: create a topic whose segments hold N batches,
produce, expect offloads, expect the earliest local offset, list offsets, delete records),
for sparklog's `tests/integration/test_tiered_*.py`.

The tier's settings are Kafka's (`remote.log.storage.system.enable`, `remote.storage.enable`,
`local.retention.*`) plus sparklog's `remote.table.root` (a directory the brokers and the test
share: one Delta table per topic under it) and `remote.table.freshness.ms`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sparklog.client.admin import AdminClient, ConfigResource, NewTopic
from sparklog.storage.remote.schema import table_location

T = TypeVar("T")

LIBRDKAFKA = {"broker.address.family": "v4"}

#: Broker settings on top of the integration tests' short intervals: the copy task every
#: 100 ms, short back-offs, so a test sees uploads within a second or two.
TIER_BROKER_SETTINGS = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "100",
    "remote.log.manager.task.retry.backoff.ms": "100",
    "remote.log.manager.task.retry.backoff.max.ms": "1000",
    "remote.fetch.max.wait.ms": "500",
}

#: One batch of a record produced by `produce` (~80 bytes) fills a segment of this size, so
#: every batch rolls a new segment (Kafka's tests: `maxBatchCountPerSegment` = 1).
ONE_BATCH_SEGMENT_BYTES = 100


def tier_settings(root: Path | str, base: Mapping[str, str]) -> dict[str, str]:
    return {**base, **TIER_BROKER_SETTINGS, "remote.table.root": str(root)}


def tier_topic_configs(**overrides: object) -> dict[str, str]:
    """A tiered topic whose segments hold one batch and whose local copy goes as soon as it is
    tiered (`local.retention.ms` = 1, Kafka's tests use the same trick)."""
    configs = {
        "remote.storage.enable": "true",
        "segment.bytes": str(ONE_BATCH_SEGMENT_BYTES),
        "local.retention.ms": "1",
    }
    configs.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    return configs


def wait_until(condition: Callable[[], T], what: str, timeout_s: float = 30.0) -> T:
    """Poll `condition` until it returns something true; its value. Exceptions count as
    not yet (a broker restarting, a table half created) and the last one is reported."""
    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - reported on timeout
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}") from last
        time.sleep(0.1)


class Tier:
    """A running cluster with the tier on: admin calls, produce steps and the table's view."""

    def __init__(self, cluster: Any, root: Path | str, storage_options: Mapping[str, str] = ()):
        self.cluster = cluster
        self.root = str(root)
        self.storage_options = dict(storage_options)
        self._admin: AdminClient | None = None
        self._admin_bootstrap = ""

    @property
    def admin(self) -> AdminClient:
        """An admin client of the running brokers (a new one after a broker restarted on
        another port)."""
        if self._admin is None or self._admin_bootstrap != self.bootstrap:
            self.close()
            self._admin_bootstrap = self.bootstrap
            self._admin = AdminClient({"bootstrap.servers": self._admin_bootstrap})
        return self._admin

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_servers

    def location(self, topic: str) -> str:
        return table_location(self.root, topic)

    # -- topics ------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str | None = None,
        partitions: int = 1,
        replication_factor: int = 1,
        configs: Mapping[str, str] | None = None,
        assignment: Mapping[int, Sequence[int]] | None = None,
    ) -> str:
        name = name or f"tiered-{uuid.uuid4().hex[:8]}"
        new = NewTopic(
            name,
            -1 if assignment else partitions,
            -1 if assignment else replication_factor,
            configs=dict(tier_topic_configs() if configs is None else configs),
            replica_assignment={p: list(r) for p, r in assignment.items()} if assignment else None,
        )
        self.admin.create_topics([new])
        count = len(assignment) if assignment else partitions
        for p in range(count):
            wait_until(lambda p=p: self.cluster.leader_of(name, p) >= 0, f"{name}-{p} leader")
        return name

    def topic_id(self, topic: str) -> uuid.UUID:
        return uuid.UUID(str(self.admin.describe_topics([topic])[topic].topic_id))

    def alter_topic(self, topic: str, **settings: str | None) -> None:
        """Incremental alter of topic settings, Kafka names with underscores for dots (None
        deletes one)."""
        changes = {k.replace("_", "."): v for k, v in settings.items()}
        self.admin.incremental_alter_configs({ConfigResource("topic", topic): changes})

    # -- offsets -----------------------------------------------------------------------------

    def list_offset(self, topic: str, partition: int, spec: int) -> int:
        """ListOffsets at the leader: -1 latest, -2 earliest, -4 earliest local, -5 latest
        tiered, or a timestamp; the offset answered."""
        got = self.admin.list_offsets({(topic, partition): spec})
        return next(iter(got.values())).offset

    def delete_records(self, topic: str, partition: int, before: int) -> int:
        return next(iter(self.admin.delete_records({(topic, partition): before}).values()))

    def local_segments(self, topic: str, partition: int, broker_index: int = 0) -> list[int]:
        """Base offsets of the local segment files of a replica, sorted."""
        node = self.cluster.brokers[broker_index].node_id
        directory = self.cluster.broker_dir(node) / f"{topic}-{partition}"
        return sorted(int(f.stem) for f in directory.glob("*.log"))

    def wait_tiered(
        self, topic: str, ends: Mapping[int, int], timeout_s: float = 30.0
    ) -> dict[int, int | None]:
        """Wait until the table's app transactions say `ends` were copied."""
        from tests.support.tier_verifier import wait_for_tier

        return wait_for_tier(
            self.location(topic),
            ends,
            topic_id=self.topic_id(topic),
            storage_options=self.storage_options,
            timeout_s=timeout_s,
        )

    def table_ranges(self, topic: str) -> dict[int, tuple[int, int]]:
        """[first, last + 1) of each partition's rows in the table; {} without a table."""
        from tests.support.tier_verifier import table_ranges

        return table_ranges(self.location(topic), self.storage_options)

    def verify(self, topic: str, partitions: int = 1, timeout_s: float = 60.0) -> Any:
        from tests.support.tier_verifier import verify_topic

        return verify_topic(
            self.bootstrap,
            topic,
            self.location(topic),
            partitions=list(range(partitions)),
            storage_options=self.storage_options,
            topic_id=self.topic_id(topic),
            timeout_s=timeout_s,
        ).assert_ok()


# ---------------------------------------------------------------------------- producing


def produce(
    bootstrap: str,
    topic: str,
    values: Sequence[bytes],
    *,
    partition: int = 0,
    timestamps: Sequence[int] | None = None,
    one_batch_each: bool = True,
    idempotent: bool = True,
) -> list[int]:
    """Produce `values` (key k<i>, a header) to one partition, acks=all; their offsets.
    `one_batch_each` sends each in its own batch (so each fills a one-batch segment)."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            **LIBRDKAFKA,
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": idempotent,
            "linger.ms": 0 if one_batch_each else 5,
            **({"batch.num.messages": 1} if one_batch_each else {}),
        }
    )
    offsets: list[int] = []

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        offsets.append(msg.offset())

    for i, value in enumerate(values):
        producer.produce(
            topic,
            value,
            key=b"k" + value,
            partition=partition,
            headers=[("i", str(i).encode())],
            timestamp=timestamps[i] if timestamps else 0,
            on_delivery=delivered,
        )
        if one_batch_each:
            producer.flush(30)
    assert producer.flush(30) == 0
    return sorted(offsets)


def produce_transactions(
    bootstrap: str,
    topic: str,
    transactions: Sequence[tuple[Sequence[bytes], bool]],
    *,
    partitions: Sequence[int],
) -> None:
    """Transactions of ONE producer (one producer id), each writing its values to each of
    `partitions`, then committed (True) or aborted (False), in order. Aborted records are
    sent before the abort (librdkafka purges unsent records on abort)."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            **LIBRDKAFKA,
            "bootstrap.servers": bootstrap,
            "transactional.id": f"tier-{uuid.uuid4().hex[:8]}",
        }
    )
    producer.init_transactions(30)
    for values, commit in transactions:
        producer.begin_transaction()
        for p in partitions:
            for value in values:
                producer.produce(topic, value, key=b"t", partition=p)
        if commit:
            producer.commit_transaction(30)
        else:
            assert producer.flush(30) == 0
            producer.abort_transaction(30)


def produce_transaction(
    bootstrap: str, topic: str, values: Sequence[bytes], *, commit: bool, partitions: Sequence[int]
) -> None:
    """One transaction of a new producer writing `values` to each of `partitions`."""
    produce_transactions(bootstrap, topic, [(values, commit)], partitions=partitions)


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**LIBRDKAFKA, "bootstrap.servers": bootstrap, "group.id": "tier-hw"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def consume_values(
    bootstrap: str, topic: str, partition: int, start: int, count: int, **conf: Any
) -> list[tuple[int, bytes | None]]:
    """`count` records of one partition from `start` (offset, value), any isolation level."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **LIBRDKAFKA,
            "bootstrap.servers": bootstrap,
            "group.id": "tier-read",
            "enable.auto.commit": False,
            **conf,
        }
    )
    out: list[tuple[int, bytes | None]] = []
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + 30
        while len(out) < count and time.monotonic() < deadline:
            for message in consumer.consume(count - len(out), 0.5):
                if message.error() is None:
                    out.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return out
