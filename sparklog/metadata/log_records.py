"""The metadata log's records: their type names, the JSON codec (`encode_record`,
`decode_record`), `MetadataRecordError` for a record that cannot be applied, and the broker and
partition registrations records carry (Kafka's `BrokerRegistration`, `PartitionRegistration`)
with the partition invariants (`check_partition`). `image.MetadataImage` folds the records in;
ACL and SCRAM credential records are named in `acls.py` and `scram.py`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.security.listeners import ListenerEndpoint, normalised
from sparklog.security.session import SecurityProtocol
from sparklog.structs import NO_LEADER

REGISTER_BROKER = "RegisterBroker"
FENCE_BROKER = "FenceBroker"
UNFENCE_BROKER = "UnfenceBroker"
UNREGISTER_BROKER = "UnregisterBroker"
TOPIC = "Topic"
PARTITION = "Partition"
PARTITION_CHANGE = "PartitionChange"
CONFIG = "Config"
REMOVE_TOPIC = "RemoveTopic"
PRODUCER_IDS = "ProducerIds"
FEATURE_LEVEL = "FeatureLevel"
CLEAR_ELR = "ClearElr"
#: A controller's first write at start (KRaft's LeaderChangeMessage, written by a new leader
#: before it serves): it claims the log, so an older controller still running loses its next
#: write. Changes nothing in the image but the offset.
LEADER_CHANGE = "LeaderChange"

Record = dict[str, Any]


class MetadataRecordError(ValueError):
    """A metadata record that cannot be applied (unknown type, dangling id, epoch regression)."""


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A registered broker (Kafka's `BrokerRegistration`); `broker_epoch` = its record's offset."""

    broker_id: int
    broker_epoch: int
    incarnation_id: str
    host: str
    port: int
    rack: str | None = None
    executor_id: str | None = None
    data_dir: str | None = None
    task_attempt: int = -1
    fenced: bool = True
    #: `host:port` where the broker's process serves Prometheus metrics (None: none)
    metrics_endpoint: str | None = None
    #: every advertised listener (Kafka's `BrokerRegistration.listeners`); `host`/`port` are
    #: the first's. Registrations from before listeners were recorded have one PLAINTEXT.
    endpoints: tuple[ListenerEndpoint, ...] = ()

    def endpoint(self, listener_name: str) -> ListenerEndpoint | None:
        """The broker's endpoint on `listener_name` (Kafka's `BrokerRegistration.node`), None
        when it has no such listener."""
        name = normalised(listener_name)
        endpoints = self.endpoints or (
            ListenerEndpoint("PLAINTEXT", SecurityProtocol.PLAINTEXT, self.host, self.port),
        )
        return next((e for e in endpoints if e.listener_name == name), None)


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """One partition's replica set and leadership (Kafka's `PartitionRegistration`)."""

    topic_id: uuid.UUID
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    # KIP-455: during a reassignment `replicas` = target + the old replicas not in it;
    # adding = target - old, removing = old - target (both empty when none is in progress).
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    # KIP-966: replicas that left the ISR while it was below min.insync.replicas, so hold every
    # committed record (the high watermark does not move then) and may lead when the ISR is
    # empty; and the last leader before the partition lost its leader (Kafka's LastKnownElr
    # with `useLastKnownLeaderInBalancedRecovery`), the last resort once ISR and ELR are empty.
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @property
    def is_online(self) -> bool:
        return self.leader != NO_LEADER

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replicas once the reassignment in progress completes (`replicas` when none)."""
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """The replicas before the reassignment in progress (what a cancel reverts to)."""
        return tuple(r for r in self.replicas if r not in self.adding_replicas)

    def to_record(self) -> Record:
        """The `Partition` record that creates this registration (reassignment fields only
        while one is in progress, so records of images without them stay as they were)."""
        record: Record = {
            "type": PARTITION,
            "topic_id": str(self.topic_id),
            "partition": self.partition,
            "replicas": list(self.replicas),
            "isr": list(self.isr),
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "partition_epoch": self.partition_epoch,
        }
        if self.adding_replicas:
            record["adding_replicas"] = list(self.adding_replicas)
        if self.removing_replicas:
            record["removing_replicas"] = list(self.removing_replicas)
        if self.elr:
            record["eligible_leader_replicas"] = list(self.elr)
        if self.last_known_elr:
            record["last_known_elr"] = list(self.last_known_elr)
        return record


def check_partition(topic: str, p: PartitionRegistration) -> None:
    if p.partition < 0 or not p.replicas or len(set(p.replicas)) != len(p.replicas):
        raise MetadataRecordError(f"partition {topic}-{p.partition} has bad replicas {p.replicas}")
    if not set(p.isr) <= set(p.replicas):
        raise MetadataRecordError(f"{topic}-{p.partition}: ISR {p.isr} not within {p.replicas}")
    if p.leader != NO_LEADER and p.leader not in p.isr:
        raise MetadataRecordError(f"{topic}-{p.partition}: leader {p.leader} not in ISR {p.isr}")
    if not set(p.elr) <= set(p.replicas) or set(p.elr) & set(p.isr):
        raise MetadataRecordError(
            f"{topic}-{p.partition}: ELR {p.elr} not within {p.replicas} or overlaps ISR {p.isr}"
        )
    adding, removing = set(p.adding_replicas), set(p.removing_replicas)
    if not (adding | removing) <= set(p.replicas) or adding & removing:
        raise MetadataRecordError(
            f"{topic}-{p.partition}: adding {p.adding_replicas} / removing "
            f"{p.removing_replicas} do not fit replicas {p.replicas}"
        )


def encode_record(record: Mapping[str, Any]) -> bytes:
    """A metadata record as the UTF-8 JSON value stored in the log."""
    return json.dumps(record, separators=(",", ":"), sort_keys=True).encode()


def decode_record(value: bytes | None) -> Record:
    """The JSON object in a metadata record's value; MetadataRecordError if it is not one."""
    try:
        record = json.loads(value) if value is not None else None
    except ValueError as e:
        raise MetadataRecordError(f"metadata record value is not JSON: {e}") from None
    if not isinstance(record, dict):
        raise MetadataRecordError(f"metadata record value is not a JSON object: {value!r:.80}")
    return record
