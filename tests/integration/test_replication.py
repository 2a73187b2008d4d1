"""Replication across three in-process brokers: followers, the high watermark, the ISR, leader
epochs and failover, end to end through real sockets and real logs."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from sparklog.client.consumer import KafkaConsumer
from sparklog.client.producer import KafkaProducer
from sparklog.protocol.api_versions import ApiKey
from sparklog.records import CompressionType

from .broker_wire import batch, call, connect, create_topic, fetch, produce, records_of, run

NONE, NOT_ENOUGH_REPLICAS = 0, 19


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_topic(cluster, partitions=1, rf=3, **configs) -> str:
    topic = unique("repl")

    async def go():
        conn = await connect(cluster.bootstrap_servers)
        try:
            created = await create_topic(
                conn,
                topic,
                partitions=partitions,
                replication_factor=rf,
                configs={k.replace("_", "."): v for k, v in configs.items()},
            )
            assert created.error_code == NONE, created
        finally:
            await conn.close()

    run(go())
    for p in range(partitions):
        cluster.wait_for_isr(topic, p, rf)
    return topic


def broker(cluster, node_id):
    return cluster.brokers[cluster.broker_index(node_id)]


def produce_to(cluster, node_id, topic, values, acks=-1, partition=0, **batch_kw):
    """Produce each value as its own batch to broker `node_id`; returns the responses."""

    async def go():
        conn = await connect(broker(cluster, node_id).bootstrap)
        try:
            return [
                await produce(conn, topic, batch([v], **batch_kw), partition=partition, acks=acks)
                for v in values
            ]
        finally:
            await conn.close()

    return run(go())


def log_bytes(node, topic, partition=0) -> bytes:
    """Every segment of a replica's log, concatenated (what is on its disk)."""
    log_ = node.replica_manager.hosted(topic, partition).log
    return b"".join(log_.read_segment_bytes(s, 0, s.size_bytes) or b"" for s in log_.segments)


def wait_in_sync(cluster, topic, partition=0, timeout_s=20.0):
    """Until every running replica has the leader's log end offset as log end and HW."""
    deadline = time.monotonic() + timeout_s
    while True:
        leader = broker(cluster, cluster.leader_of(topic, partition))
        end = leader.replica_manager.hosted(topic, partition).log.log_end_offset
        states = []
        for b in cluster.brokers:
            if b.state.value == "running":
                log_ = b.replica_manager.hosted(topic, partition).log
                states.append((b.node_id, log_.log_end_offset, log_.high_watermark))
        if all(leo == end and hw == end for _, leo, hw in states):
            return end
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}-{partition} replicas not in sync at {end}: {states}")
        time.sleep(0.02)


def values_on(node, topic, partition=0) -> list[bytes]:
    log_ = node.replica_manager.hosted(topic, partition).log
    data = log_.read(0, 1 << 26, upper_bound_offset=log_.log_end_offset).records
    return [r.value for r in records_of(data)]


# -- replication and the high watermark ----------------------------------------------------------


def test_rf3_topic_replicates_byte_identically(replicated_cluster):
    c = replicated_cluster
    topic = make_topic(c, partitions=2, segment_bytes="2000")
    for p in (0, 1):
        leader = c.leader_of(topic, p)
        values = [b"p%d-%03d-" % (p, i) + b"x" * (i % 50) for i in range(120)]
        compressed = values[:40]
        responses = produce_to(c, leader, topic, values[40:], partition=p)
        responses += produce_to(
            c, leader, topic, compressed, partition=p, compression=CompressionType.GZIP
        )
        assert {r.error_code for r in responses} == {NONE}
    for p in (0, 1):
        end = wait_in_sync(c, topic, p)
        assert end == 120
        images = {b.node_id: log_bytes(b, topic, p) for b in c.brokers}
        assert len(set(images.values())) == 1, {k: len(v) for k, v in images.items()}
        leader_log = broker(c, c.leader_of(topic, p)).replica_manager.hosted(topic, p).log
        assert len(leader_log.segments) > 1, "segment.bytes=2000 rolls the log"
        for b in c.brokers:  # followers keep the leader's epochs
            follower_log = b.replica_manager.hosted(topic, p).log
            assert follower_log.epoch_cache.entries() == leader_log.epoch_cache.entries()


def test_followers_replicate_through_fetch_sessions_and_recover_a_lost_one(replicated_cluster):
    """Followers fetch through incremental sessions (KIP-227): rounds after the first list only
    what changed. When the leader drops every session (a restart, an eviction) the followers'
    next fetch gets FETCH_SESSION_ID_NOT_FOUND, opens a new session and loses nothing."""
    c = replicated_cluster
    topic = make_topic(c, partitions=4)
    leaders = {p: c.leader_of(topic, p) for p in range(4)}
    before = {b.node_id: b.apis.incremental_fetches for b in c.brokers}
    for p, leader in leaders.items():
        responses = produce_to(
            c, leader, topic, [b"a%d-%d" % (p, i) for i in range(5)], partition=p
        )
        assert {r.error_code for r in responses} == {NONE}
    for p in leaders:
        assert wait_in_sync(c, topic, p) == 5
    for leader in set(leaders.values()):
        apis = broker(c, leader).apis
        assert apis.incremental_fetches > before[leader]
        assert apis.fetch_manager.cache.sessions, "followers hold sessions on their leader"
        apis.fetch_manager.cache.sessions.clear()
    for p, leader in leaders.items():
        responses = produce_to(
            c, leader, topic, [b"b%d-%d" % (p, i) for i in range(5)], partition=p
        )
        assert {r.error_code for r in responses} == {NONE}
    for p, leader in leaders.items():
        assert wait_in_sync(c, topic, p) == 10
        want = [b"a%d-%d" % (p, i) for i in range(5)] + [b"b%d-%d" % (p, i) for i in range(5)]
        assert all(values_on(b, topic, p) == want for b in c.brokers)
        assert broker(c, leader).apis.fetch_manager.cache.sessions, "a new session was opened"


def test_acks_all_waits_for_followers_and_consumers_see_only_the_high_watermark(
    replicated_cluster,
):
    c = replicated_cluster
    topic = make_topic(c, min_insync_replicas="2")
    leader = c.leader_of(topic)
    (acked,) = produce_to(c, leader, topic, [b"one"], acks=-1)
    assert (acked.error_code, acked.base_offset) == (NONE, 0)
    # acks=all answered: every ISR member has the record, so the HW is past it everywhere soon.
    wait_in_sync(c, topic)

    async def consume():
        conn = await connect(broker(c, leader).bootstrap)
        try:
            return await fetch(conn, topic, 0)
        finally:
            await conn.close()

    got = run(consume())
    assert (got.high_watermark, [r.value for r in records_of(got.records)]) == (1, [b"one"])


def test_acks_all_survives_one_dead_broker_and_refuses_when_two_are(replicated_cluster):
    c = replicated_cluster
    topic = make_topic(c, min_insync_replicas="2")
    leader = c.leader_of(topic)
    followers = [b.node_id for b in c.brokers if b.node_id != leader]
    assert {r.error_code for r in produce_to(c, leader, topic, [b"a", b"b"])} == {NONE}
    c.kill_broker(c.broker_index(followers[0]))
    started = time.monotonic()
    (after_one,) = produce_to(c, leader, topic, [b"c"])  # waits for the ISR to shrink
    assert after_one.error_code == NONE
    assert time.monotonic() - started < 10
    assert followers[0] not in c.wait_for_isr(topic, 0, 2)
    c.kill_broker(c.broker_index(followers[1]))
    assert c.wait_for_isr(topic, 0, 1) == (leader,)
    (refused,) = produce_to(c, leader, topic, [b"d"])
    assert refused.error_code == NOT_ENOUGH_REPLICAS
    (acks_one,) = produce_to(c, leader, topic, [b"e"], acks=1)
    assert acks_one.error_code == NONE
    assert values_on(broker(c, leader), topic) == [b"a", b"b", b"c", b"e"]


def test_follower_stopped_leaves_the_isr_and_rejoins_after_catching_up(replicated_cluster):
    c = replicated_cluster
    topic = make_topic(c)
    leader = c.leader_of(topic)
    follower = next(b.node_id for b in c.brokers if b.node_id != leader)
    produce_to(c, leader, topic, [b"before-%d" % i for i in range(5)])
    c.stop_broker(c.broker_index(follower))
    assert follower not in c.wait_for_isr(topic, 0, 2)
    produce_to(c, leader, topic, [b"while-away-%d" % i for i in range(5)])
    c.restart_broker(c.broker_index(follower))
    assert sorted(c.wait_for_isr(topic, 0, 3)) == sorted(b.node_id for b in c.brokers)
    wait_in_sync(c, topic)
    assert log_bytes(broker(c, follower), topic) == log_bytes(broker(c, leader), topic)


def test_a_live_follower_that_stops_fetching_is_shrunk_by_the_leader_then_readmitted(
    replicated_cluster,
):
    c = replicated_cluster
    topic = make_topic(c)
    tp = (topic, 0)
    leader = c.leader_of(topic)
    lagging = broker(c, next(b.node_id for b in c.brokers if b.node_id != leader))
    produce_to(c, leader, topic, [b"a"])
    wait_in_sync(c, topic)
    lagging.call_in_loop(lambda: lagging.fetchers.remove_partition(tp))
    produce_to(c, leader, topic, [b"b"], acks=1)
    started = time.monotonic()
    isr = c.wait_for_isr(topic, 0, 2)  # replica.lag.time.max.ms=1000: the leader proposes
    assert lagging.node_id not in isr
    assert time.monotonic() - started < 10
    assert lagging.state.value == "running", "shrunk by the leader, not fenced"
    hosted = lagging.replica_manager.hosted(*tp)
    lagging.call_in_loop(
        lambda: lagging.fetchers.add_partition(
            tp, hosted.topic_id, hosted.partition.leader, hosted.partition.leader_epoch
        )
    )
    assert lagging.node_id in c.wait_for_isr(topic, 0, 3)
    wait_in_sync(c, topic)
    assert values_on(lagging, topic) == [b"a", b"b"]


# -- failover ------------------------------------------------------------------------------------


def test_a_returning_leader_truncates_its_divergent_suffix(replicated_cluster):
    c = replicated_cluster
    topic = make_topic(c)
    tp = (topic, 0)
    old_leader = c.leader_of(topic)
    produce_to(c, old_leader, topic, [b"committed-%d" % i for i in range(5)])
    wait_in_sync(c, topic)
    for b in c.brokers:  # the followers stop fetching, still in the ISR for a second
        if b.node_id != old_leader:
            b.call_in_loop(lambda b=b: b.fetchers.remove_partition(tp))
    responses = produce_to(c, old_leader, topic, [b"lost-%d" % i for i in range(3)], acks=1)
    assert [r.base_offset for r in responses] == [5, 6, 7]
    c.kill_broker(c.broker_index(old_leader))
    new_leader = c.wait_for_leader(topic, not_on=old_leader)
    responses = produce_to(c, new_leader, topic, [b"new-%d" % i for i in range(2)])
    assert [(r.error_code, r.base_offset) for r in responses] == [(NONE, 5), (NONE, 6)]
    c.restart_broker(c.broker_index(old_leader))
    assert len(c.wait_for_isr(topic, 0, 3)) == 3
    wait_in_sync(c, topic)
    expected = [b"committed-%d" % i for i in range(5)] + [b"new-0", b"new-1"]
    for b in c.brokers:
        assert values_on(b, topic) == expected, b.node_id
    assert log_bytes(broker(c, old_leader), topic) == log_bytes(broker(c, new_leader), topic)
    cache = broker(c, old_leader).replica_manager.hosted(*tp).log.epoch_cache
    assert [(e.epoch, e.start_offset) for e in cache.entries()][-1][1] == 5


def test_leader_killed_during_produce_loses_no_acknowledged_record(replicated_cluster):
    c = replicated_cluster
    topic = make_topic(c, min_insync_replicas="2")
    old_leader = c.leader_of(topic)
    acked: list[bytes] = []
    errors: list[BaseException] = []
    stop = threading.Event()
    producer = KafkaProducer(
        {
            "bootstrap.servers": c.bootstrap_servers,
            "acks": "all",
            "linger.ms": 0,
            "retry.backoff.ms": 50,
            "delivery.timeout.ms": 60_000,
        }
    )

    def send_forever():
        i = 0
        while not stop.is_set():
            value = b"v%05d" % i
            try:
                producer.send(topic, value, partition=0).result(timeout=60)
                acked.append(value)
            except Exception as e:  # noqa: BLE001 - collected and checked below
                errors.append(e)
            i += 1

    sender = threading.Thread(target=send_forever)
    sender.start()
    try:
        while len(acked) < 50 and not errors:
            time.sleep(0.01)
        c.kill_broker(c.broker_index(old_leader))
        count_at_kill = len(acked)
        new_leader = c.wait_for_leader(topic, not_on=old_leader)
        deadline = time.monotonic() + 30
        while len(acked) < count_at_kill + 50 and not errors and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        sender.join(60)
        producer.close()
    assert errors == []
    assert len(acked) >= count_at_kill + 50, "producing continued on the new leader"
    on_new_leader = values_on(broker(c, new_leader), topic)
    assert on_new_leader[: len(acked)] == acked  # in order, no gap, no duplicate
    assert set(acked) <= set(on_new_leader)


def test_idempotent_retry_against_a_new_leader_is_deduplicated(replicated_cluster):
    c = replicated_cluster
    topic = make_topic(c)
    old_leader = c.leader_of(topic)

    async def init_producer_id():
        conn = await connect(c.bootstrap_servers)
        try:
            r = await call(
                conn,
                ApiKey.INIT_PRODUCER_ID,
                {"transactional_id": None, "transaction_timeout": 60_000},
            )
            return r.producer_id
        finally:
            await conn.close()

    pid = run(init_producer_id())
    idempotent = {"producer_id": pid, "producer_epoch": 0}
    (first,) = produce_to(c, old_leader, topic, [b"once"], base_sequence=0, **idempotent)
    assert (first.error_code, first.base_offset) == (NONE, 0)
    wait_in_sync(c, topic)
    c.stop_broker(c.broker_index(old_leader))  # controlled: leadership moves at once
    new_leader = c.wait_for_leader(topic, not_on=old_leader)
    (retry,) = produce_to(c, new_leader, topic, [b"once"], base_sequence=0, **idempotent)
    assert (retry.error_code, retry.base_offset) == (NONE, 0)
    (nxt,) = produce_to(c, new_leader, topic, [b"twice"], base_sequence=1, **idempotent)
    assert (nxt.error_code, nxt.base_offset) == (NONE, 1)
    assert values_on(broker(c, new_leader), topic) == [b"once", b"twice"]


def test_controlled_shutdown_hands_leadership_over_before_stopping(replicated_cluster):
    c = replicated_cluster
    topic = make_topic(c)
    old_leader = c.leader_of(topic)
    produce_to(c, old_leader, topic, [b"x"])
    c.stop_broker(c.broker_index(old_leader))
    # No session timeout passed: the controlled shutdown moved the leadership.
    new_leader = c.leader_of(topic)
    assert new_leader not in (-1, old_leader)
    assert old_leader not in c.isr_of(topic)
    (after,) = produce_to(c, new_leader, topic, [b"y"])
    assert after.error_code == NONE


def test_a_broker_restarted_on_an_empty_disk_replicates_everything_again(replicated_cluster):
    c = replicated_cluster
    topic = make_topic(c, partitions=2, segment_bytes="1000")
    for p in (0, 1):
        produce_to(c, c.leader_of(topic, p), topic, [b"r%03d" % i for i in range(60)], partition=p)
    victim = c.brokers[2].node_id
    c.kill_broker(2)
    c.restart_broker(2, wipe=True)
    for p in (0, 1):
        assert len(c.wait_for_isr(topic, p, 3)) == 3
        wait_in_sync(c, topic, p)
        leader = broker(c, c.leader_of(topic, p))
        assert log_bytes(broker(c, victim), topic, p) == log_bytes(leader, topic, p)
        assert values_on(broker(c, victim), topic, p) == [b"r%03d" % i for i in range(60)]


def test_consumer_reads_everything_after_failover(replicated_cluster):
    c = replicated_cluster
    topic = make_topic(c)
    leader = c.leader_of(topic)
    produce_to(c, leader, topic, [b"m%d" % i for i in range(20)])
    wait_in_sync(c, topic)
    c.kill_broker(c.broker_index(leader))
    c.wait_for_leader(topic, not_on=leader)
    with KafkaConsumer(
        {"bootstrap.servers": c.bootstrap_servers, "auto.offset.reset": "earliest"}
    ) as consumer:
        consumer.assign([(topic, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 20 and time.monotonic() < deadline:
            got.extend(r.value for r in consumer.poll(200))
    assert got == [b"m%d" % i for i in range(20)]


@pytest.mark.parametrize("rf", [1])
def test_rf1_topics_are_unchanged_on_a_three_broker_cluster(replicated_cluster, rf):
    c = replicated_cluster
    topic = make_topic(c, partitions=3, rf=rf)
    for p in range(3):
        leader = c.leader_of(topic, p)
        assert c.isr_of(topic, p) == (leader,)
        responses = produce_to(c, leader, topic, [b"a", b"b"], partition=p)
        assert [r.base_offset for r in responses] == [0, 1]
        assert broker(c, leader).fetchers.statistics()["partitions"] == 0


def test_a_restarted_controller_keeps_replication_going(replicated_cluster):
    c = replicated_cluster
    topic = make_topic(c, min_insync_replicas="2")
    produce_to(c, c.leader_of(topic), topic, [b"before"])
    port = c.controller.port
    c.restart_controller()
    assert c.controller.port == port, "same port: the brokers reconnect on their own"
    assert len(c.wait_for_isr(topic, 0, 3)) == 3
    deadline = time.monotonic() + 20
    while True:  # the brokers rejoin and the leadership settles
        (after,) = produce_to(c, c.wait_for_leader(topic), topic, [b"after"])
        if after.error_code == NONE or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert after.error_code == NONE
    wait_in_sync(c, topic)
    assert values_on(broker(c, c.leader_of(topic)), topic) == [b"before", b"after"]
