"""KIP-966 with real broker processes: the last in-sync replica loses power (SIGKILL, then its
log loses the tail the OS had not written back) and comes back; the controller must not elect
it, but the eligible leader replica that left the ISR holding every acknowledged record.

RF=3, min.insync.replicas=2, acks=all: one follower stops cleanly (the ISR stays at min ISR),
the other stops cleanly too (the ISR falls to the leader alone; that follower becomes an
eligible leader replica, ELR); then the leader is killed with SIGKILL and its active segment cut
back by the last acknowledged batches, as a power loss leaves a log whose writes were in the page
cache only. It restarts first: without a clean-shutdown marker its registration carries
PreviousBrokerEpoch -1, so it leaves the ELR and the partition stays offline rather than lose
records. The ELR member comes back and leads; every acknowledged record is there.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from sparklog.client import AdminClient, KafkaConsumer, KafkaProducer, NewTopic, TopicPartition
from sparklog.cluster.embedded import EmbeddedCluster

from .conftest import REPLICATION_CONFIG

ACKED = 20
CUT_FROM = 12  # the power loss keeps offsets below this on the last ISR member


def _partition(cluster: EmbeddedCluster, topic: str):  # noqa: ANN202 - a PartitionRegistration
    found = cluster.controller.metadata_image().topic(topic)
    assert found is not None
    return found.partitions[0]


def _wait_for(what: str, condition, timeout_s: float = 30.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _lose_unflushed_tail(partition_dir: Path, cut_offset: int) -> int:
    """Cut the active segment back to the first batch at or above `cut_offset` and leave a torn
    piece of the next one (what a power loss leaves); returns how many bytes went."""
    segment = max(partition_dir.glob("*.log"))
    data = segment.read_bytes()
    position = 0
    while position + 12 <= len(data):
        base_offset = int.from_bytes(data[position : position + 8], "big")
        length = int.from_bytes(data[position + 8 : position + 12], "big")
        if base_offset >= cut_offset:
            break
        position += 12 + length
    assert position < len(data), "nothing above the cut to lose"
    torn = data[position : position + 30]
    with open(segment, "r+b") as f:
        f.truncate(position)
        f.seek(position)
        f.write(torn)
    return len(data) - position - len(torn)


@pytest.mark.parametrize(
    "processes",
    [pytest.param(True, marks=pytest.mark.slow, id="processes-sigkill"), pytest.param(False)],
)
def test_a_power_lost_last_isr_member_is_not_elected_the_eligible_replica_is(tmp_path, processes):
    """`processes`: brokers in child processes killed with SIGKILL (~25 s); else in-process
    brokers stopped as a crash would (no flush, no marker)."""
    topic = f"elr-{uuid.uuid4().hex[:8]}"
    with EmbeddedCluster(
        brokers=3, data_dir=tmp_path, config=REPLICATION_CONFIG, broker_processes=processes
    ) as cluster:
        with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            admin.create_topics([NewTopic(topic, 1, 3, {"min.insync.replicas": "2"})])
        cluster.wait_for_isr(topic, size=3)
        leader = cluster.leader_of(topic)
        first, second = [b for b in _partition(cluster, topic).replicas if b != leader]

        cluster.stop_broker(cluster.broker_index(first))  # clean: leaves at min ISR
        cluster.wait_for_isr(topic, size=2)
        config = {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}
        with KafkaProducer({**config, "linger.ms": 0}) as producer:
            for i in range(ACKED):  # one batch each, so the power loss can cut between them
                assert producer.send(topic, b"acked-%d" % i, partition=0).result(30).offset == i

        cluster.stop_broker(cluster.broker_index(second))  # clean: the ISR falls below min
        _wait_for("an ISR of the leader alone", lambda: _partition(cluster, topic).isr == (leader,))
        assert _partition(cluster, topic).elr == (second,)

        cluster.kill_broker(cluster.broker_index(leader))  # SIGKILL: no clean shutdown marker
        lost_bytes = _lose_unflushed_tail(cluster.broker_dir(leader) / f"{topic}-0", CUT_FROM)
        assert lost_bytes > 0
        _wait_for("the leader's fencing", lambda: _partition(cluster, topic).leader == -1)

        cluster.restart_broker(cluster.broker_index(leader))  # registered and unfenced
        p = _partition(cluster, topic)
        # Not elected: it may have lost acknowledged records. Offline until a safe leader is back.
        assert (p.leader, p.isr, p.elr) == (-1, (), (second,)), p

        cluster.restart_broker(cluster.broker_index(second))  # clean marker: still eligible
        assert cluster.wait_for_leader(topic) == second
        cluster.restart_broker(cluster.broker_index(first))
        cluster.wait_for_isr(topic, size=3)

        consumer = KafkaConsumer({"bootstrap.servers": cluster.bootstrap_servers})
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            values: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(values) < ACKED and time.monotonic() < deadline:
                values += [r.value for r in consumer.poll(500)]
        finally:
            consumer.close()
        # the returning power-lost broker followed and re-replicated what it had lost
        leader_dir = cluster.broker_dir(leader) / f"{topic}-0"
        _wait_for("the old leader's copy", lambda: max(leader_dir.glob("*.log")).stat().st_size > 0)
    assert values == [b"acked-%d" % i for i in range(ACKED)]
