"""sparklog's own consumer in consumer groups: subscribe with the classic protocol and with
KIP-848, partitions split without overlap, commits and committed offsets, auto commit, a
restarted member resumes at the group's offsets, a member that stops polling leaves, pattern
subscriptions, and clear errors for what is not served."""

from __future__ import annotations

import time
import uuid

import pytest

from sparklog.client import AdminClient, KafkaConsumer, KafkaProducer, NewTopic
from sparklog.cluster.embedded import EmbeddedCluster

PARTITIONS, RECORDS = 6, 120
CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "200",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedCluster(brokers=1, data_dir=tmp_path_factory.mktemp("cg"), config=CONFIG) as c:
        yield c


def topic_with_records(cluster, prefix: str = "own") -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(topic, PARTITIONS)])
    with KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers}) as producer:
        for i in range(RECORDS):
            producer.send(topic, value=b"%d" % i, partition=i % PARTITIONS)
        producer.flush()
    return topic


def member(cluster, group: str, protocol: str = "classic", **extra) -> KafkaConsumer:
    return KafkaConsumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "group.protocol": protocol,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 3000,
            "heartbeat.interval.ms": 200,
            **extra,
        }
    )


def poll_until(consumers, done, timeout_s: float = 30) -> list[set]:
    seen: list[set] = [set() for _ in consumers]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            seen[i].update(r.value for r in c.poll(20))
        if done(consumers, seen):
            return seen
    raise AssertionError(
        f"not done in {timeout_s} s: {[sorted(c.assignment()) for c in consumers]}"
    )


def split_evenly(consumers, seen) -> bool:
    sizes = [len(c.assignment()) for c in consumers]
    covered = {tp.partition for c in consumers for tp in c.assignment()}
    return sizes == [PARTITIONS // len(consumers)] * len(consumers) and len(covered) == PARTITIONS


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_three_members_split_partitions_read_everything_and_commit(cluster, protocol):
    topic, group = topic_with_records(cluster), f"own-{protocol}-{uuid.uuid4().hex[:6]}"
    assigned: list[list] = []
    consumers = [
        member(cluster, group, protocol, **{"enable.auto.commit": False}) for _ in range(3)
    ]
    try:
        for c in consumers:
            c.subscribe([topic], on_assign=assigned.append)

        def caught_up(cs, s) -> bool:  # every owner read its partitions to the end
            ends = [c.position(tp) for c in cs for tp in c.assignment()]
            return split_evenly(cs, s) and ends == [RECORDS // PARTITIONS] * PARTITIONS

        seen = poll_until(consumers, caught_up)
        assert len(set().union(*seen)) == RECORDS and assigned
        for c in consumers:
            c.commit()
        committed = consumers[0].committed([(topic, p) for p in range(PARTITIONS)])
        assert set(committed.values()) == {RECORDS // PARTITIONS}
    finally:
        for c in consumers:
            c.close()
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        assert admin.describe_group(group).members == ()  # every member left on close


def test_auto_commit_and_a_restarted_member_resumes_at_the_committed_offsets(cluster):
    topic, group = topic_with_records(cluster), f"own-auto-{uuid.uuid4().hex[:6]}"
    first = member(cluster, group, **{"auto.commit.interval.ms": 100})
    first.subscribe([topic])
    seen = poll_until([first], lambda cs, s: len(s[0]) == RECORDS)[0]
    first.close()  # commits its positions
    with KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers}) as producer:
        for i in range(RECORDS, RECORDS + 12):
            producer.send(topic, value=b"%d" % i, partition=i % PARTITIONS)
        producer.flush()
    second = member(cluster, group)
    try:
        second.subscribe([topic])
        rest = poll_until([second], lambda cs, s: len(s[0]) >= 12)[0]
        assert rest == {b"%d" % i for i in range(RECORDS, RECORDS + 12)} and not rest & seen
    finally:
        second.close()


def test_a_member_that_stops_polling_leaves_and_its_partitions_move(cluster):
    topic, group = topic_with_records(cluster), f"own-slow-{uuid.uuid4().hex[:6]}"
    busy = member(cluster, group)
    slow = member(cluster, group, **{"max.poll.interval.ms": 1500})
    try:
        for c in (busy, slow):
            c.subscribe([topic])
        poll_until([busy, slow], split_evenly)
        deadline = time.monotonic() + 20  # only `busy` polls from here on
        while len(busy.assignment()) < PARTITIONS and time.monotonic() < deadline:
            busy.poll(50)
        assert len(busy.assignment()) == PARTITIONS
    finally:
        busy.close()
        slow.close()


def test_pattern_subscription_and_unserved_settings(cluster):
    topic = topic_with_records(cluster, prefix="pattern")
    c = member(cluster, f"own-pattern-{uuid.uuid4().hex[:6]}")
    try:
        c.subscribe(pattern=r"pattern-.*")
        assert topic in c.subscription()
        poll_until([c], lambda cs, s: len(cs[0].assignment()) >= PARTITIONS)
    finally:
        c.close()
    with pytest.raises(ValueError, match="partition.assignment.strategy"):
        member(cluster, "g", **{"partition.assignment.strategy": "nope"}).subscribe([topic])


def test_cooperative_members_keep_their_partitions_through_a_rebalance(cluster):
    topic, group = topic_with_records(cluster), f"own-coop-{uuid.uuid4().hex[:6]}"
    revoked: list[list] = []
    coop = {"partition.assignment.strategy": "cooperative-sticky"}
    first = member(cluster, group, **coop)
    first.subscribe([topic], on_revoke=revoked.append)
    poll_until([first], lambda cs, s: len(cs[0].assignment()) == PARTITIONS)
    second = member(cluster, group, **coop)
    try:
        second.subscribe([topic])
        poll_until([first, second], split_evenly)
        # first gave up only the three that moved, never all six (eager would)
        assert revoked and all(len(r) == PARTITIONS // 2 for r in revoked)
    finally:
        first.close()
        second.close()
