"""The requests and replies nodes exchange on the simulated network.

They carry what Kafka's RPCs carry for replication (field names follow the Kafka schemas);
values, not bytes: the wire codec has its own tests. Error codes are sparklog's Kafka codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparklog.metadata.alter_partition import IsrChange, IsrChangeOutcome

from .sim_log import SimRecord

TopicPartition = tuple[str, int]


# -- broker -> controller ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RegisterBroker:
    broker_id: int
    incarnation_id: str
    previous_broker_epoch: int = -1  # KIP-966: the clean-shutdown marker's epoch, else -1


@dataclass(frozen=True, slots=True)
class RegisterReply:
    error_code: int
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class Heartbeat:
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_shut_down: bool = False


@dataclass(frozen=True, slots=True)
class MetadataFetch:
    """Fetch of the metadata log from `offset` (long-polled by the controller)."""

    offset: int


@dataclass(frozen=True, slots=True)
class MetadataFetchReply:
    base_offset: int
    records: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class AlterPartition:
    broker_id: int
    broker_epoch: int
    changes: tuple[IsrChange, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionReply:
    error_code: int
    outcomes: tuple[IsrChangeOutcome, ...] = ()


# -- follower -> leader -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetForLeaderEpoch:
    tp: TopicPartition
    replica_id: int
    current_leader_epoch: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class OffsetForLeaderEpochReply:
    error_code: int
    leader_epoch: int = -1
    end_offset: int = -1


@dataclass(frozen=True, slots=True)
class ListOffsets:
    """A follower's ListOffsets after OFFSET_OUT_OF_RANGE: the leader's log start and end."""

    tp: TopicPartition
    current_leader_epoch: int


@dataclass(frozen=True, slots=True)
class ListOffsetsReply:
    error_code: int
    log_start_offset: int = -1
    log_end_offset: int = -1


@dataclass(frozen=True, slots=True)
class Fetch:
    """A Fetch for one partition; `replica_id` -1 is a consumer (reads below the HW)."""

    tp: TopicPartition
    replica_id: int
    current_leader_epoch: int
    fetch_offset: int


@dataclass(frozen=True, slots=True)
class FetchReply:
    error_code: int
    records: tuple[SimRecord, ...] = ()
    high_watermark: int = -1


# -- clients -> brokers -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Produce:
    """acks=all, one record, idempotent (producer id + sequence)."""

    tp: TopicPartition
    producer_id: int
    sequence: int
    value: str


@dataclass(frozen=True, slots=True)
class ProduceReply:
    error_code: int
    offset: int = -1


@dataclass(frozen=True, slots=True)
class MetadataRequest:
    pass


@dataclass(frozen=True, slots=True)
class MetadataReply:
    """(tp, leader id, leader epoch) per partition, from the answering broker's image."""

    leaders: tuple[tuple[TopicPartition, int, int], ...]
