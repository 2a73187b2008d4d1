"""MetadataImage: applying records, refusing bad ones unchanged, snapshots, fetched batches."""

from __future__ import annotations

import uuid

import pytest

from sparklog.metadata.image import MetadataImage
from sparklog.metadata.log_records import MetadataRecordError, encode_record
from sparklog.records import SimpleRecord, build_batch

TOPIC_ID = str(uuid.UUID(int=1))


def register(broker_id: int, epoch: int) -> dict:
    return {
        "type": "RegisterBroker",
        "broker_id": broker_id,
        "broker_epoch": epoch,
        "incarnation_id": f"inc-{broker_id}",
        "host": "127.0.0.1",
        "port": 9092,
        "rack": None,
        "executor_id": None,
        "data_dir": None,
        "task_attempt": -1,
    }


def partition(index: int, leader: int = 0, leader_epoch: int = 0, partition_epoch: int = 0) -> dict:
    return {
        "type": "Partition",
        "topic_id": TOPIC_ID,
        "partition": index,
        "replicas": [0],
        "isr": [0],
        "leader": leader,
        "leader_epoch": leader_epoch,
        "partition_epoch": partition_epoch,
    }


RECORDS = [
    register(0, 0),
    {"type": "UnfenceBroker", "broker_id": 0, "broker_epoch": 0},
    {
        "type": "Config",
        "resource_type": "topic",
        "resource_name": "t",
        "name": "retention.ms",
        "value": "9",
    },
    {"type": "Topic", "name": "t", "topic_id": TOPIC_ID},
    partition(0),
    partition(1),
    {"type": "ProducerIds", "broker_id": 0, "next_producer_id": 1000},
]


def built(records=RECORDS) -> MetadataImage:
    image = MetadataImage()
    for record in records:
        image.apply(record)
    return image


def test_apply_builds_brokers_topics_configs_and_counters():
    image = built()
    assert image.offset == len(RECORDS)
    assert image.is_unfenced(0) and image.highest_broker_id == 0
    topic = image.topic("t")
    assert topic.topic_id == uuid.UUID(TOPIC_ID) and sorted(topic.partitions) == [0, 1]
    assert image.topic_by_id(uuid.UUID(TOPIC_ID)) is topic
    assert dict(image.topic_config("t")) == {"retention.ms": "9"}
    assert image.next_producer_id == 1000


def test_remove_topic_drops_partitions_and_configs():
    image = built(RECORDS + [{"type": "RemoveTopic", "topic_id": TOPIC_ID}])
    assert image.topic("t") is None and image.topic_names() == []
    assert dict(image.topic_config("t")) == {}
    assert list(image.partitions()) == []


@pytest.mark.parametrize(
    "record",
    [
        {"type": "Nope"},
        {"type": "Topic", "name": "t", "topic_id": str(uuid.UUID(int=2))},  # name taken
        {"type": "FenceBroker", "broker_id": 0, "broker_epoch": 5},  # wrong epoch
        register(1, 3),  # epoch is not its offset
        partition(0),  # exists
        {**partition(2), "leader": 5},  # leader outside ISR
        {**partition(2), "replicas": [0, 0]},
        {
            "type": "PartitionChange",
            "topic_id": TOPIC_ID,
            "partition": 0,
            "leader": 0,
            "isr": [0],
            "leader_epoch": 0,
            "partition_epoch": 0,
        },  # partition epoch must grow
        {"type": "ProducerIds", "broker_id": 0, "next_producer_id": 10},  # backwards
        {"type": "Partition", "topic_id": "not-a-uuid"},
        {"type": "RemoveTopic"},
    ],
)
def test_bad_records_raise_and_leave_the_image_unchanged(record):
    image = built()
    before = image.to_dict()
    with pytest.raises(MetadataRecordError):
        image.apply(record)
    assert image.to_dict() == before


def test_partition_change_moves_epochs_forward_only():
    image = built()
    change = {
        "type": "PartitionChange",
        "topic_id": TOPIC_ID,
        "partition": 0,
        "leader": -1,
        "isr": [0],
        "leader_epoch": 1,
        "partition_epoch": 1,
    }
    image.apply(change)
    p = image.partition(uuid.UUID(TOPIC_ID), 0)
    assert (p.leader, p.leader_epoch, p.partition_epoch, p.is_online) == (-1, 1, 1, False)
    with pytest.raises(MetadataRecordError, match="backwards"):
        image.apply({**change, "leader": 0, "leader_epoch": 0, "partition_epoch": 2})


def test_snapshot_dict_round_trips():
    image = built()
    copy = MetadataImage.from_dict(image.to_dict())
    assert copy == image and copy is not image
    assert copy.offset == image.offset and copy.next_producer_id == 1000
    with pytest.raises(MetadataRecordError):
        MetadataImage.from_dict({"offset": 1})


def batch(records: list[dict], base_offset: int) -> bytes:
    return build_batch([SimpleRecord(encode_record(r)) for r in records], base_offset=base_offset)


def test_apply_batches_skips_what_it_has_and_ignores_a_partial_tail():
    image = built(RECORDS[:3])
    data = batch(RECORDS[:4], 0) + batch(RECORDS[4:], 4)
    assert image.apply_batches(data + batch(RECORDS[:1], 99)[:20]) == len(RECORDS) - 3
    assert image == built()
    assert image.apply_batches(data) == 0


def test_apply_batches_refuses_a_gap_and_corruption():
    image = built(RECORDS[:2])
    with pytest.raises(MetadataRecordError, match="records missing"):
        image.apply_batches(batch(RECORDS[3:], 3))
    corrupt = bytearray(batch(RECORDS[2:], 2))
    corrupt[-1] ^= 0xFF
    with pytest.raises(Exception, match="CRC"):
        image.apply_batches(bytes(corrupt))
    assert image.offset == 2
