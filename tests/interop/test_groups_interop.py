"""Consumer groups with real Kafka clients as oracles: confluent-kafka (eager range and
cooperative-sticky), kafka-python and aiokafka form groups of three on sparklog's driver-side
coordinator, split the partitions without overlap, and consume every record once; a member
killed with SIGKILL is evicted after its session timeout; committed offsets survive a
coordinator restart; the clients' admin APIs list, describe and read group offsets."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.broker.coordinator_forwarding import coordinator_broker
from sparklog.cluster.embedded import EmbeddedCluster

pytestmark = pytest.mark.interop

PARTITIONS = 6
RECORDS = 600
SESSION_MS = 2000
CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.min.session.timeout.ms": "1000",
    "num.partitions": str(PARTITIONS),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(brokers=2, data_dir=tmp_path_factory.mktemp("groups"), config=CONFIG) as c:
        yield c


def new_topic(cluster: EmbeddedCluster, records: int = RECORDS) -> str:
    topic = f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(records):
        producer.produce(topic, key=b"%d" % i, value=b"v%d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    return topic


def confluent_consumer(cluster: EmbeddedCluster, group: str, **extra) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": 300,
            "enable.auto.commit": False,
            **extra,
        }
    )


def consume_all(consumers: list[Consumer], records: int, timeout_s: float = 60) -> list[set]:
    """Poll every consumer in turn until `records` distinct values arrived; each one's values
    (a partition that moves before anything was committed is read again by its new owner, as
    in Kafka, so the sets may overlap)."""
    seen: list[set] = [set() for _ in consumers]
    deadline = time.monotonic() + timeout_s
    while len(set().union(*seen)) < records and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                seen[i].add(m.value())
    return seen


def assignments(consumers: list[Consumer]) -> list[set[int]]:
    return [{tp.partition for tp in c.assignment()} for c in consumers]


def wait_for_split(consumers: list[Consumer], timeout_s: float = 30) -> list[set[int]]:
    """Poll until the members' assignments cover every partition without overlap."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.05)
        split = assignments(consumers)
        covered = set().union(*split) == set(range(PARTITIONS))
        if all(split) and sum(len(s) for s in split) == PARTITIONS and covered:
            return split
    raise AssertionError(f"no clean split within {timeout_s} s: {assignments(consumers)}")


GROUP_PROTOCOLS = {
    "eager-range": {"partition.assignment.strategy": "range"},
    "cooperative-sticky": {"partition.assignment.strategy": "cooperative-sticky"},
    # KIP-848: the coordinator assigns (uniform), members reconcile incrementally
    "consumer-protocol": {"group.protocol": "consumer"},
}


@pytest.mark.parametrize("protocol", list(GROUP_PROTOCOLS))
def test_confluent_group_of_three_splits_partitions_and_reads_each_record_once(cluster, protocol):
    topic, group = new_topic(cluster), f"grp-{uuid.uuid4().hex[:6]}"
    settings = dict(GROUP_PROTOCOLS[protocol])
    if protocol == "consumer-protocol":  # session and heartbeat are the broker's settings
        consumers = [
            Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False, **settings})
            for _ in range(3)
        ]  # fmt: skip
    else:
        consumers = [confluent_consumer(cluster, group, **settings) for _ in range(3)]
    try:
        for c in consumers:
            c.subscribe([topic])
        seen = consume_all(consumers, RECORDS)
        split = wait_for_split(consumers)
        assert sorted(len(s) for s in split) == [2, 2, 2]
        assert len(set().union(*seen)) == RECORDS  # every record reached the group
        for c in consumers:
            c.commit(asynchronous=False)
        committed = consumers[0].committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10
        )
        assert [tp.offset for tp in committed] == [RECORDS // PARTITIONS] * PARTITIONS
    finally:
        for c in consumers:
            c.close()


def test_kafka_python_group_of_three(cluster):
    from kafka import KafkaConsumer

    topic, group = new_topic(cluster), f"kp-{uuid.uuid4().hex[:6]}"
    consumers = [
        KafkaConsumer(
            topic,
            bootstrap_servers=cluster.bootstrap_servers,
            group_id=group,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=300,
            enable_auto_commit=False,
        )
        for _ in range(3)
    ]
    try:
        seen: list[set] = [set() for _ in consumers]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for i, c in enumerate(consumers):
                for records in c.poll(timeout_ms=50).values():
                    seen[i].update(r.value for r in records)
            split = [{tp.partition for tp in c.assignment()} for c in consumers]
            # Settled: every record seen, and each owner's position past the end of what it
            # owns (records its previous owner read before a rebalance are not the new
            # owner's position, which is what commit() stores).
            caught_up = all(
                c.position(tp) >= RECORDS // PARTITIONS for c in consumers for tp in c.assignment()
            )
            if sum(len(s) for s in seen) >= RECORDS and all(split) and caught_up:
                break
        split = [{tp.partition for tp in c.assignment()} for c in consumers]
        assert set().union(*split) == set(range(PARTITIONS)) and sum(map(len, split)) == 6
        assert len(set().union(*seen)) == RECORDS
        for c in consumers:
            c.commit()
    finally:
        for c in consumers:
            c.close()
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        offsets = admin.list_group_offsets({group: None})
        offsets = offsets.get(group, offsets)
        assert {tp.partition: o.offset for tp, o in offsets.items()} == dict.fromkeys(
            range(PARTITIONS), RECORDS // PARTITIONS
        )
        listed = admin.list_groups()
        names = {g["group_id"] if isinstance(g, dict) else g[0] for g in listed}
        assert group in names
        described = admin.describe_groups([group])[group]
        assert (described["group_state"], described["protocol_type"]) == ("Empty", "consumer")
        assert described["members"] == []  # every member closed and left
    finally:
        admin.close()


def test_aiokafka_group_of_three(cluster):
    from aiokafka import AIOKafkaConsumer

    topic, group = new_topic(cluster), f"aio-{uuid.uuid4().hex[:6]}"

    async def run() -> tuple[list[set], list[set[int]]]:
        consumers = [
            AIOKafkaConsumer(
                topic,
                bootstrap_servers=cluster.bootstrap_servers,
                group_id=group,
                auto_offset_reset="earliest",
                session_timeout_ms=6000,
                heartbeat_interval_ms=300,
                enable_auto_commit=False,
            )
            for _ in range(3)
        ]
        for c in consumers:
            await c.start()
        seen: list[set] = [set() for _ in consumers]
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for i, c in enumerate(consumers):
                    batches = await c.getmany(timeout_ms=50)
                    for records in batches.values():
                        seen[i].update(r.value for r in records)
                split = [{tp.partition for tp in c.assignment()} for c in consumers]
                done = sum(len(s) for s in seen) >= RECORDS
                if done and sum(map(len, split)) == PARTITIONS and all(split):
                    break
            return seen, [{tp.partition for tp in c.assignment()} for c in consumers]
        finally:
            for c in consumers:
                await c.stop()

    seen, split = asyncio.run(run())
    assert set().union(*split) == set(range(PARTITIONS)) and all(split)
    assert len(set().union(*seen)) == RECORDS


_KILLED_MEMBER = f"""
import sys, time
from confluent_kafka import Consumer
c = Consumer({{"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "session.timeout.ms": {SESSION_MS}, "heartbeat.interval.ms": 300}})
c.subscribe([sys.argv[3]])
told = False
while True:
    c.poll(0.1)
    if c.assignment() and not told:
        print("assigned", flush=True)
        told = True
"""


def test_a_member_killed_with_sigkill_is_evicted_and_its_partitions_move(cluster):
    topic, group = new_topic(cluster, records=6), f"kill-{uuid.uuid4().hex[:6]}"
    survivor = confluent_consumer(cluster, group)
    survivor.subscribe([topic])
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_MEMBER, cluster.bootstrap_servers, group, topic],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assigned = threading.Event()
        threading.Thread(
            target=lambda: "assigned" in child.stdout.readline() and assigned.set(), daemon=True
        ).start()
        deadline = time.monotonic() + 30
        while not assigned.is_set() and time.monotonic() < deadline:
            survivor.poll(0.05)  # the survivor must keep polling to rejoin
        assert assigned.is_set(), "the second member never got partitions"
        deadline = time.monotonic() + 20
        while len(assignments([survivor])[0]) != PARTITIONS // 2 and time.monotonic() < deadline:
            survivor.poll(0.05)
        assert len(assignments([survivor])[0]) == PARTITIONS // 2
        os.kill(child.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        while len(assignments([survivor])[0]) < PARTITIONS and time.monotonic() - killed_at < 20:
            survivor.poll(0.05)
        moved_after_s = time.monotonic() - killed_at
        assert assignments([survivor])[0] == set(range(PARTITIONS))
        assert moved_after_s >= SESSION_MS / 1000 * 0.9, "evicted before its session ended"
    finally:
        child.kill()
        child.wait()
        survivor.close()


def test_committed_offsets_survive_a_coordinator_restart(cluster):
    topic, group = new_topic(cluster), f"rst-{uuid.uuid4().hex[:6]}"
    first = confluent_consumer(cluster, group)
    first.subscribe([topic])
    consume_all([first], RECORDS // 2)
    first.commit(asynchronous=False)
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    before = {tp.partition: max(tp.offset, 0) for tp in first.committed(partitions, timeout=10)}
    assert 0 < sum(before.values()) < RECORDS
    first.close()
    cluster.restart_coordinator()
    second = confluent_consumer(cluster, group)
    try:
        second.subscribe([topic])
        rest = consume_all([second], RECORDS - sum(before.values()))[0]
        assert len(rest) == RECORDS - sum(before.values())
        committed = second.committed(partitions, timeout=10)
        assert {tp.partition: max(tp.offset, 0) for tp in committed} == before
    finally:
        second.close()


def test_confluent_admin_lists_and_describes_groups(cluster):
    topic, group = new_topic(cluster, records=6), f"adm-{uuid.uuid4().hex[:6]}"
    members = [confluent_consumer(cluster, group, **{"client.id": f"m{i}"}) for i in range(2)]
    try:
        for c in members:
            c.subscribe([topic])
        wait_for_split(members)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        listed = admin.list_consumer_groups().result(30)
        ours = [g for g in listed.valid if g.group_id == group]
        assert len(ours) == 1 and ours[0].state.name == "STABLE"
        described = admin.describe_consumer_groups([group])[group].result(30)
        assert described.state.name == "STABLE"
        assert sorted(m.client_id for m in described.members) == ["m0", "m1"]
        parts = sorted(
            tp.partition for m in described.members for tp in m.assignment.topic_partitions
        )
        assert parts == list(range(PARTITIONS))
        # a broker (chosen by the group id), which forwards to the driver's coordinator, in an
        # Envelope carrying each member's own address
        ids = sorted(b.node_id for b in cluster.brokers)
        assert described.coordinator.id == coordinator_broker(group, ids)
        assert {m.host for m in described.members} == {"/127.0.0.1"}
    finally:
        for c in members:
            c.close()


def test_a_consumer_protocol_member_that_leaves_hands_its_partitions_over(cluster):
    topic, group = new_topic(cluster, records=6), f"kip848-{uuid.uuid4().hex[:6]}"
    settings = {"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                "group.protocol": "consumer"}  # fmt: skip
    first, second = Consumer(settings), Consumer(settings)
    try:
        for c in (first, second):
            c.subscribe([topic])
        split = wait_for_split([first, second])
        assert sorted(len(s) for s in split) == [3, 3]
        second.close()
        deadline = time.monotonic() + 20
        while len(first.assignment()) < PARTITIONS and time.monotonic() < deadline:
            first.poll(0.05)
        assert {tp.partition for tp in first.assignment()} == set(range(PARTITIONS))
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        listed = [g for g in admin.list_consumer_groups().result(30).valid if g.group_id == group]
        assert len(listed) == 1 and listed[0].type.name == "CONSUMER"
    finally:
        first.close()


def test_a_stable_group_carries_on_through_a_coordinator_restart(cluster):
    topic, group = new_topic(cluster, records=6), f"carry-{uuid.uuid4().hex[:6]}"
    # a session long enough for a coordinator restart on a loaded machine (replaying the
    # group from Delta took more than the default 2 s there once)
    members = [
        confluent_consumer(cluster, group, **{"session.timeout.ms": 10_000}) for _ in range(2)
    ]
    try:
        for c in members:
            c.subscribe([topic])
        before = wait_for_split(members)
        cluster.restart_coordinator()  # the group comes back from Delta: same generation
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        for i in range(60):
            producer.produce(topic, value=b"after-%d" % i, partition=i % PARTITIONS)
        assert producer.flush(30) == 0
        wanted, got = {b"after-%d" % i for i in range(60)}, set()
        deadline = time.monotonic() + 30
        while not wanted <= got and time.monotonic() < deadline:
            for c in members:
                m = c.poll(0.05)
                if m is not None and m.error() is None:
                    got.add(m.value())
        assert wanted <= got
        assert assignments(members) == before  # no rebalance moved anything
        for c in members:
            c.commit(asynchronous=False)
    finally:
        for c in members:
            c.close()


def test_a_group_created_by_a_standalone_commit_stays_until_deleted(cluster):
    """Issue 29 item 2: OffsetCommit with generation -1 and no member (a consumer committing
    without subscribing, or `kafka-consumer-groups --reset-offsets`) creates an Empty group
    that lives as long as its offsets. The coordinator's 50 ms tick once forgot the group while
    its offsets were still being written (7 tries in 20): describe then said Dead and
    DeleteGroups answered GROUP_ID_NOT_FOUND. Twenty groups in a row make that near certain."""
    topic = new_topic(cluster, records=0)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for attempt in range(20):
        group = f"standalone-{attempt}-{uuid.uuid4().hex[:6]}"
        committer = confluent_consumer(cluster, group)
        try:
            offsets = [TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 7)]
            committer.commit(offsets=offsets, asynchronous=False)
        finally:
            committer.close()
        described = admin.describe_consumer_groups([group])[group].result(30)
        assert described.state.name == "EMPTY", (attempt, described.state)
        admin.delete_consumer_groups([group])[group].result(30)  # raises on GROUP_ID_NOT_FOUND
        described = admin.describe_consumer_groups([group])[group].result(30)
        assert described.state.name == "DEAD", (attempt, described.state)
