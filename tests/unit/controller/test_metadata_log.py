"""The metadata log on disk: append, snapshot, replay on restart, and a seeded random workout
whose replayed image must equal the live one."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import pytest

from sparklog.controller.cluster_control import BrokerHeartbeat, BrokerRegistrationRequest
from sparklog.controller.metadata_log import MetadataLog
from sparklog.controller.quorum_controller import QuorumController
from sparklog.controller.replication_control import NewPartitions, NewTopic
from sparklog.errors import KafkaError
from sparklog.metadata.configs import (
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    ControllerConfig,
)
from sparklog.metadata.image import MetadataImage
from sparklog.metadata.log_records import MetadataRecordError
from sparklog.records import iter_batches
from sparklog.structs import NO_LEADER

from .harness import CLUSTER_ID


class Durable:
    """A QuorumController whose commits go through a MetadataLog in `directory`."""

    def __init__(self, directory: Path, *, snapshot_records: int = 1000, now_ms: int = 0) -> None:
        self.directory = directory
        self.now_ms = now_ms
        self.log, image = MetadataLog.open(
            directory, now_ms=now_ms, snapshot_records=snapshot_records
        )
        self.controller = QuorumController(ControllerConfig(), CLUSTER_ID, image)

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    def commit(self, result):
        if result.records:
            assert self.log.end_offset == self.image.offset
            self.log.append(result.records, self.now_ms)
            self.controller.replay(result.records)
            self.log.maybe_snapshot(self.image)
        return result.response

    def register(self, broker_id: int, incarnation: str = "") -> int:
        request = BrokerRegistrationRequest(
            broker_id, CLUSTER_ID, incarnation or f"inc-{broker_id}", "127.0.0.1", 9092
        )
        return self.commit(self.controller.register_broker(self.now_ms, request))

    def heartbeat(self, broker_id: int):
        broker = self.image.broker(broker_id)
        request = BrokerHeartbeat(broker_id, broker.broker_epoch, self.image.offset)
        return self.commit(self.controller.heartbeat(self.now_ms, request))

    def tick(self) -> list[int]:
        fenced = []
        while (broker_id := self.commit(self.controller.tick(self.now_ms))) is not None:
            fenced.append(broker_id)
        return fenced

    def close(self) -> None:
        self.log.close()


def populate(d: Durable) -> None:
    for broker_id in range(3):
        d.register(broker_id)
        d.heartbeat(broker_id)
    d.commit(d.controller.create_topics([NewTopic("a", 3, 2, configs={"retention.ms": "77"})]))
    d.commit(d.controller.create_topics([NewTopic("b", 1, 1)]))
    d.commit(d.controller.create_partitions([NewPartitions("b", 2)]))
    d.commit(d.controller.delete_topics(["b"]))
    d.commit(d.controller.allocate_producer_ids(0, d.image.broker(0).broker_epoch))
    d.controller.next_node_id()


@pytest.mark.parametrize("snapshot_records", [1000, 4, 1])
def test_restart_replays_snapshot_and_log_to_the_same_image(tmp_path, snapshot_records):
    d = Durable(tmp_path, snapshot_records=snapshot_records)
    populate(d)
    live = MetadataImage.from_dict(d.image.to_dict())
    d.close()
    snapshots = list((tmp_path / "snapshots").glob("*.json"))
    assert bool(snapshots) == (snapshot_records < 1000)
    again = Durable(tmp_path)
    assert again.image == live
    assert again.image.topic_names() == ["a"]
    assert dict(again.image.topic_config("a")) == {"retention.ms": "77"}
    assert again.image.next_producer_id == 1000
    assert again.controller.next_node_id() == 3  # above every registered id
    again.close()


def test_after_restart_every_broker_is_fenced_until_it_heartbeats(tmp_path):
    d = Durable(tmp_path)
    populate(d)
    epochs = {p.partition: p.leader_epoch for p in d.image.partitions()}
    d.close()
    d = Durable(tmp_path, now_ms=5)
    assert d.tick() == [0, 1, 2]  # no leases survive a restart
    assert all(p.leader == NO_LEADER for p in d.image.partitions())
    for broker_id in range(3):
        assert not d.heartbeat(broker_id).is_fenced
    for p in d.image.partitions():
        # Brokers were fenced one at a time, so each ISR kept its last member, now the leader.
        assert p.isr == (p.leader,) and p.leader_epoch > epochs[p.partition]
    live = MetadataImage.from_dict(d.image.to_dict())
    d.close()
    again = Durable(tmp_path)
    assert again.image == live  # epochs never go back across restarts
    again.close()


def test_append_is_one_batch_per_write_at_the_image_offset(tmp_path):
    d = Durable(tmp_path)
    d.register(0)
    d.heartbeat(0)
    result = d.controller.create_topics([NewTopic("t", 3, 1)])
    offset = d.log.end_offset
    assert d.log.append(result.records, 0) == offset
    data = d.log.read(offset, 1 << 20).records
    (batch,) = list(iter_batches(data))
    assert [json.loads(r.value)["type"] for r in batch.records()] == [
        "Topic",
        "Partition",
        "Partition",
        "Partition",
    ]
    d.close()


def test_a_log_shorter_than_the_snapshot_restarts_at_the_snapshot(tmp_path):
    d = Durable(tmp_path, snapshot_records=1)
    populate(d)
    live = MetadataImage.from_dict(d.image.to_dict())
    d.close()
    for path in (tmp_path / "__cluster_metadata-0").rglob("*"):
        if path.is_file():  # the working log, the batches and the segments
            path.unlink()
    again = Durable(tmp_path)
    assert again.image == live and again.log.end_offset == live.offset
    again.register(9)  # and writing continues at the image offset
    again.close()


def test_a_corrupt_snapshot_is_refused_by_name(tmp_path):
    name = f"snapshots/{5:020d}.json"
    (tmp_path / "snapshots").mkdir()
    (tmp_path / name).write_text("{not json")
    with pytest.raises(MetadataRecordError, match=name):
        MetadataLog.open(tmp_path, now_ms=0)


def test_seeded_random_workout_keeps_invariants_and_replays_identically(tmp_path):
    for seed in range(5):
        run_workout(tmp_path / str(seed), seed)


def run_workout(directory: Path, seed: int) -> None:
    rng = random.Random(seed)
    d = Durable(directory, snapshot_records=rng.choice([3, 50, 1000]))
    epochs: dict[tuple[uuid.UUID, int], int] = {}
    try:
        for step in range(150):
            d.now_ms += rng.choice([0, 100, 3000, 10_000])
            random_step(d, rng)
            problem = invariant_violation(d.image, epochs)
            assert problem is None, f"--seed={seed} step {step}: {problem}"
        live = MetadataImage.from_dict(d.image.to_dict())
        d.close()
        d = Durable(directory)
        assert d.image == live, f"--seed={seed}: replayed image differs"
    finally:
        d.close()


def random_step(d: Durable, rng: random.Random) -> None:
    broker_id = rng.randrange(4)
    action = rng.choice(
        ["register", "heartbeat", "heartbeat", "tick", "create", "delete", "grow", "alter"]
    )
    try:
        if action == "register":
            d.register(broker_id, rng.choice(["a", "b"]))
        elif action == "heartbeat" and d.image.broker(broker_id) is not None:
            d.heartbeat(broker_id)
        elif action == "tick":
            d.tick()
        elif action == "create":
            d.commit(
                d.controller.create_topics(
                    [NewTopic(f"t{rng.randrange(5)}", rng.randint(1, 4), rng.randint(1, 3))]
                )
            )
        elif action == "delete":
            d.commit(d.controller.delete_topics([f"t{rng.randrange(5)}"]))
        elif action == "grow":
            d.commit(
                d.controller.create_partitions(
                    [NewPartitions(f"t{rng.randrange(5)}", rng.randint(1, 6))]
                )
            )
        elif action == "alter":
            resource = ConfigResource(ConfigResourceType.TOPIC, f"t{rng.randrange(5)}")
            op = AlterConfigOp("unclean.leader.election.enable", 0, rng.choice(["true", "false"]))
            d.commit(d.controller.incremental_alter_configs([(resource, [op])]))
    except KafkaError:
        pass  # refused requests write nothing


def invariant_violation(
    image: MetadataImage, epochs: dict[tuple[uuid.UUID, int], int]
) -> str | None:
    for p in image.partitions():
        if not p.isr or not set(p.isr) <= set(p.replicas):
            return f"bad ISR {p}"
        if p.leader != NO_LEADER and (p.leader not in p.isr or not image.is_unfenced(p.leader)):
            return f"leader not a live ISR member {p}"
        key = (p.topic_id, p.partition)
        if p.leader_epoch < epochs.get(key, 0):
            return f"leader epoch went back {p}"
        epochs[key] = p.leader_epoch
    return None
