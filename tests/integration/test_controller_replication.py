"""Replication on the controller side over real sockets: AlterPartition through the broker's
`ControllerClient`; then failover, controlled shutdown, reassignment and controller restarts
on three in-process brokers (`EmbeddedCluster`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sparklog.broker.controller_client import ControllerClient
from sparklog.client import AdminClient, KafkaConsumer, KafkaProducer, NewTopic
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.controller.server import ControllerServer
from sparklog.errors import (
    ElectionNotNeededError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    StaleBrokerEpochError,
    UnknownTopicOrPartitionError,
)
from sparklog.metadata.alter_partition import IsrChange
from sparklog.protocol import codec
from sparklog.protocol.api_versions import ApiKey

from .conftest import TEST_CONFIG
from .test_controller import FakeBroker, create_topics, ms, schema

WAIT_S = 30.0


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[ControllerServer]:
    server = ControllerServer(tmp_path / "controller").start_in_thread()
    yield server
    server.stop()


def test_alter_partition_round_trip_through_the_controller_client(controller):
    async def scenario() -> None:
        async with FakeBroker(controller, 0) as b0, FakeBroker(controller, 1) as b1:
            await b0.start()
            await b1.start()
            (created,) = (await create_topics(b0, ("t", 1, 2))).topics
            assert created.error_code == 0
            await b0.catch_up()
            (p,) = b0.image.topic("t").partitions.values()
            leader = p.leader
            client = ControllerClient(controller.bootstrap)
            try:
                epoch = b0.broker_epoch if leader == 0 else b1.broker_epoch
                shrink = IsrChange(p.topic_id, 0, p.leader_epoch, p.partition_epoch, (leader,))
                (out,) = await client.alter_partition(leader, epoch, [shrink])
                assert (out.error_code, out.leader_id, out.isr) == (0, leader, (leader,))
                assert (out.leader_epoch, out.partition_epoch) == (p.leader_epoch, 1)
                # The same proposal again is stale now (partition epoch 0 -> 1).
                stale = IsrChange(p.topic_id, 0, p.leader_epoch + 1, 1, (leader, 1 - leader))
                ghost = IsrChange(p.topic_id, 0, p.leader_epoch, 1, (leader, 7))
                outs = await client.alter_partition(leader, epoch, [stale])
                assert [o.error_code for o in outs] == [FencedLeaderEpochError.code]
                outs = await client.alter_partition(leader, epoch, [ghost])
                assert [o.error_code for o in outs] == [IneligibleReplicaError.code]
                grow = IsrChange(p.topic_id, 0, p.leader_epoch, 1, (leader, 1 - leader))
                (out,) = await client.alter_partition(leader, epoch, [grow])
                assert (out.error_code, out.isr, out.partition_epoch) == (
                    0,
                    (leader, 1 - leader),
                    2,
                )
                with pytest.raises(StaleBrokerEpochError):
                    await client.alter_partition(leader, epoch + 1000, [grow])
            finally:
                await client.close()
            registration = controller.metadata_image().topic("t").partitions[0]
            assert (registration.isr, registration.partition_epoch) == ((leader, 1 - leader), 2)

    asyncio.run(scenario())


def test_alter_partition_v2_elect_leaders_and_reassignments_over_the_wire(controller):
    async def scenario() -> None:
        async with FakeBroker(controller, 0) as b0, FakeBroker(controller, 1) as b1:
            await b0.start()
            await b1.start()
            assert (await create_topics(b0, ("w", 1, 2))).topics[0].error_code == 0
            await b0.catch_up()
            p = b0.image.topic("w").partitions[0]
            leader = b0 if p.leader == 0 else b1
            v2 = schema(ApiKey.ALTER_PARTITION, 2)
            body = codec.request_schema(ApiKey.ALTER_PARTITION, 2)(
                broker_id=leader.broker_id,
                broker_epoch=leader.broker_epoch,
                topics=(
                    v2.TopicData(
                        topic_id=p.topic_id,
                        partitions=(
                            v2.PartitionData(
                                partition_index=0,
                                leader_epoch=p.leader_epoch,
                                new_isr=(p.leader,),
                                partition_epoch=p.partition_epoch,
                            ),
                        ),
                    ),
                ),
            )
            response = await leader.conn.request(body)
            (out,) = response.topics[0].partitions
            assert (out.error_code, tuple(out.isr), out.partition_epoch) == (0, (p.leader,), 1)

            elect = schema(ApiKey.ELECT_LEADERS, 2)
            response = await b0.call(
                ApiKey.ELECT_LEADERS,
                election_type=0,
                topic_partitions=(elect.TopicPartitions(topic="w", partitions=(0, 7)),),
                timeout=ms(1000),
            )
            codes = [
                (r.partition_id, r.error_code)
                for r in response.replica_election_results[0].partition_result
            ]
            assert codes == [
                (0, ElectionNotNeededError.code),
                (7, UnknownTopicOrPartitionError.code),
            ]

            move = schema(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 1)
            response = await b0.call(
                ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                timeout=ms(1000),
                allow_replication_factor_change=True,
                topics=(
                    move.ReassignableTopic(
                        name="w",
                        partitions=(
                            move.ReassignablePartition(partition_index=0, replicas=(1, 0)),
                            move.ReassignablePartition(partition_index=3, replicas=None),
                        ),
                    ),
                ),
            )
            results = [(r.partition_index, r.error_code) for r in response.responses[0].partitions]
            assert results == [(0, 0), (3, UnknownTopicOrPartitionError.code)]
            response = await b0.call(
                ApiKey.LIST_PARTITION_REASSIGNMENTS, timeout=ms(1000), topics=None
            )
            assert response.error_code == 0 and response.topics == ()  # a reordering completes

    asyncio.run(scenario())


# -- three in-process brokers -----------------------------------------------------------------


@pytest.fixture
def cluster3(tmp_path: Path) -> Iterator[EmbeddedCluster]:
    """A fresh controller + 3 brokers per test: these tests break the cluster on purpose."""
    config = {**TEST_CONFIG, "replica.lag.time.max.ms": "2000"}
    with EmbeddedCluster(brokers=3, data_dir=tmp_path / "cluster", config=config) as cluster:
        yield cluster


def wait_until(what: str, condition: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    """Poll `condition` until it is truthy; TimeoutError naming `what` otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached in {timeout_s} s")
        time.sleep(0.05)


def create(cluster: EmbeddedCluster, name: str, replicas: list[int], **configs: str) -> None:
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic(name, configs=configs, replica_assignment={0: replicas})])
    cluster.wait_for_isr(name, 0, timeout_s=WAIT_S)


def produce(cluster: EmbeddedCluster, topic: str, values: list[bytes]) -> list[int]:
    """Send with acks=all; the offsets (every send must succeed)."""
    with KafkaProducer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "retries": 20}
    ) as producer:
        futures = [producer.send(topic, v, partition=0) for v in values]
        producer.flush(int(WAIT_S * 1000))
        return [f.result(timeout=WAIT_S).offset for f in futures]


def consume(cluster: EmbeddedCluster, topic: str, count: int) -> list[bytes]:
    with KafkaConsumer(
        {"bootstrap.servers": cluster.bootstrap_servers, "auto.offset.reset": "earliest"}
    ) as consumer:
        consumer.assign([(topic, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < count and time.monotonic() < deadline:
            got.extend(r.value for r in consumer.poll(500))
        return got


def registration(cluster: EmbeddedCluster, topic: str) -> Any:
    return cluster.controller.metadata_image().topic(topic).partitions[0]


def log_end_offset(cluster: EmbeddedCluster, node_id: int, topic: str) -> int | None:
    log_ = cluster.brokers[cluster.broker_index(node_id)].log_manager.get_log(topic, 0)
    return None if log_ is None else log_.log_end_offset


@pytest.mark.parametrize("unclean", [False, True])
def test_a_dead_isr_leaves_the_partition_offline_unless_unclean_election_is_on(cluster3, unclean):
    create(cluster3, "u", [0, 1], **{"unclean.leader.election.enable": str(unclean).lower()})
    assert produce(cluster3, "u", [b"a", b"b"]) == [0, 1]
    cluster3.kill_broker(1)  # the follower: the ISR shrinks to [0]
    wait_until("ISR [0]", lambda: registration(cluster3, "u").isr == (0,))
    cluster3.kill_broker(0)  # the last ISR member
    wait_until("broker 0 fenced", lambda: cluster3.controller.metadata_image().broker(0).fenced)
    cluster3.restart_broker(1)  # live again, but it was not in the ISR
    if unclean:
        assert cluster3.wait_for_leader("u", 0, timeout_s=WAIT_S) == 1
        assert registration(cluster3, "u").isr == (1,)
    else:
        # Its unfencing is the write that would elect it: once it is unfenced, it was not.
        wait_until(
            "broker 1 unfenced", lambda: not cluster3.controller.metadata_image().broker(1).fenced
        )
        p = registration(cluster3, "u")
        # KIP-966: the ISR may be empty; the last member is an eligible leader replica
        assert (p.leader, p.isr, p.elr) == (-1, (), (0,))
        # It returns after a crash (no clean-shutdown marker), so it is no longer eligible;
        # but it was the last leader, which Kafka elects when no replica is (last resort).
        cluster3.restart_broker(0)
        assert cluster3.wait_for_leader("u", 0, timeout_s=WAIT_S) == 0
        assert consume(cluster3, "u", 2) == [b"a", b"b"]


def test_controlled_shutdown_moves_leadership_first_and_acks_all_keeps_working(cluster3):
    create(cluster3, "c", [0, 1, 2], **{"min.insync.replicas": "2"})
    before = registration(cluster3, "c")
    assert before.leader == 0
    assert produce(cluster3, "c", [b"x"] * 5) == list(range(5))
    cluster3.stop_broker(0)  # graceful: heartbeats with want_shut_down first
    after = registration(cluster3, "c")
    assert after.leader in (1, 2) and 0 not in after.isr
    assert after.leader_epoch == before.leader_epoch + 1
    assert cluster3.controller.metadata_image().broker(0).fenced
    assert produce(cluster3, "c", [b"y"] * 5) == list(range(5, 10))
    assert consume(cluster3, "c", 10) == [b"x"] * 5 + [b"y"] * 5


def test_reassignment_moves_a_partition_from_0_1_to_1_2(cluster3):
    create(cluster3, "r", [0, 1])
    values = [f"v{i}".encode() for i in range(20)]
    produce(cluster3, "r", values)
    assert log_end_offset(cluster3, 2, "r") is None
    with AdminClient({"bootstrap.servers": cluster3.bootstrap_servers}) as admin:
        admin.alter_partition_reassignments({("r", 0): [1, 2]})
        wait_until("reassignment done", lambda: not admin.list_partition_reassignments())
    p = registration(cluster3, "r")
    assert p.replicas == (1, 2) and set(p.isr) == {1, 2} and p.leader in (1, 2)
    assert log_end_offset(cluster3, 2, "r") == 20
    wait_until("broker 0 deletes its replica", lambda: log_end_offset(cluster3, 0, "r") is None)
    assert consume(cluster3, "r", 20) == values


def test_controller_restart_keeps_epochs_monotonic_and_one_leader(cluster3):
    create(cluster3, "k", [0, 1, 2])
    produce(cluster3, "k", [b"1", b"2"])
    before = registration(cluster3, "k")
    cluster3.restart_controller()
    after = wait_until("a leader", lambda: (p := registration(cluster3, "k")).leader >= 0 and p)
    assert after.leader_epoch >= before.leader_epoch
    assert after.partition_epoch >= before.partition_epoch
    leaders = [
        b.node_id
        for b in cluster3.brokers
        if (hosted := b.replica_manager.partitions.get(("k", 0))) is not None
        and hosted.partition.is_leader
    ]
    assert leaders == [after.leader]
    assert produce(cluster3, "k", [b"3"]) == [2]
    assert consume(cluster3, "k", 3) == [b"1", b"2", b"3"]
