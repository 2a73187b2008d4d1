"""The cluster metadata image: what the metadata log says, applied record by record.

Theory of operation (Kafka's `MetadataImage` + the `replay` methods of the control managers):
the controller's state is the log `__cluster_metadata-0`; each record is a JSON object with a
`type` (see docs/architecture.md §2). `MetadataImage.apply(record)` folds one record in and
moves `offset` (the next metadata offset, i.e. how many records were applied) by one. The
controller applies its own records right after persisting them; a broker builds the same image
by fetching the log (`apply_batches`). Sans-IO: no clock, no files.

Invariants: a partition's leader is -1 or a member of its ISR, and the ISR is a subset of its
replicas; its eligible leader replicas (ELR, KIP-966) are replicas outside the ISR; a
reassignment's adding and removing replicas are disjoint subsets of the replicas (records
without them leave them unchanged); leader and partition epochs never go backwards; a
RegisterBroker record's `broker_epoch` is its own offset (Kafka's broker epoch). Finalized feature levels
(`FeatureLevel` records, Kafka's `FeatureLevelRecord`) gate behaviour that changes what the log
means: `eligible.leader.replicas.version` >= 1 turns on KIP-966's Eligible Leader Replicas.
ACL and SCRAM credential records (Kafka's `AccessControlEntryRecord`,
`UserScramCredentialRecord` and their removals) are folded in by `acls.py` and `scram.py`,
client quotas (`ClientQuota`, Kafka's `ClientQuotaRecord`) by `quotas.py`.

The records' type names, their JSON codec, the broker and partition registrations and the
partition invariants' check live in `log_records.py`; the topics' image (`TopicImage`) and the
record handlers here. A record that breaks these rules (or an unknown type) raises `MetadataRecordError` and leaves the
image unchanged: the log came from disk or a peer, so it is input, not our bug.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import asdict, replace
from types import MappingProxyType
from typing import Any

from sparklog.metadata.acls import ACCESS_CONTROL_ENTRY, REMOVE_ACCESS_CONTROL_ENTRY, AclsImage
from sparklog.metadata.log_records import (
    CLEAR_ELR,
    CONFIG,
    FEATURE_LEVEL,
    FENCE_BROKER,
    LEADER_CHANGE,
    PARTITION,
    PARTITION_CHANGE,
    PRODUCER_IDS,
    REGISTER_BROKER,
    REMOVE_TOPIC,
    TOPIC,
    UNFENCE_BROKER,
    UNREGISTER_BROKER,
    BrokerRegistration,
    MetadataRecordError,
    PartitionRegistration,
    check_partition,
    decode_record,
)
from sparklog.metadata.quotas import CLIENT_QUOTA, QuotasImage
from sparklog.metadata.scram import (
    REMOVE_USER_SCRAM_CREDENTIAL,
    USER_SCRAM_CREDENTIAL,
    ScramCredentials,
)
from sparklog.protocol.api_versions import TRANSACTION_VERSION_FEATURE
from sparklog.records import iter_batches
from sparklog.security.acl import AclBinding
from sparklog.security.listeners import endpoints_from_record, endpoints_to_record

#: KIP-966's feature (Kafka's `EligibleLeaderReplicasVersion`): level 1 (ELRV_1) turns Eligible
#: Leader Replicas on; Kafka 4.1+ finalizes it on new clusters, and so does sparklog.
ELR_FEATURE = "eligible.leader.replicas.version"
ELR_FEATURE_LEVEL = 1
#: Kafka's `TransactionVersion` feature: level 2 is transactions v2 (KIP-890 part 2: partitions
#: added by the first transactional produce, an epoch bump at every end), which Kafka 4.x
#: finalizes on new clusters and so does sparklog; level 0/1 keep the brokers to part 1.
TRANSACTION_VERSION_LEVEL = 2
#: The features sparklog supports and their level ranges (ApiVersions' SupportedFeatures,
#: `kafka-features.sh describe`): ELR and transaction.version; sparklog's metadata records are
#: its own, so it announces no `metadata.version`, and it serves groups below the versions
#: `group.version` > 0 would switch on.
SUPPORTED_FEATURES = MappingProxyType(
    {
        ELR_FEATURE: (0, ELR_FEATURE_LEVEL),
        TRANSACTION_VERSION_FEATURE: (0, TRANSACTION_VERSION_LEVEL),
    }
)
#: `Config` record resource types (Kafka's `ConfigResource.Type`, lower-cased).
TOPIC_RESOURCE = "topic"
BROKER_RESOURCE = "broker"
GROUP_RESOURCE = "group"
#: Kafka's `ConfigResource.Type` code of each resource type a `Config` record may name.
CONFIG_RESOURCE_CODES = {TOPIC_RESOURCE: 2, BROKER_RESOURCE: 4, GROUP_RESOURCE: 32}


class TopicImage:
    """A topic and its partitions by index. Read-only for callers; only the image mutates it."""

    __slots__ = ("name", "partitions", "topic_id")

    def __init__(self, name: str, topic_id: uuid.UUID) -> None:
        self.name = name
        self.topic_id = topic_id
        self.partitions: dict[int, PartitionRegistration] = {}

    @property
    def replication_factor(self) -> int:
        first = self.partitions.get(0)
        return len(first.replicas) if first is not None else 0

    def __repr__(self) -> str:
        return f"TopicImage({self.name}, {self.topic_id}, partitions={len(self.partitions)})"


class MetadataImage:
    """Brokers, topics, partitions, configs and id counters as of metadata offset `offset`."""

    def __init__(self) -> None:
        self.offset = 0  # the next metadata offset: records [0, offset) are applied
        self.next_producer_id = 0  # first producer id not yet handed out in a block
        self.highest_broker_id = -1  # the highest broker id ever registered
        self._brokers: dict[int, BrokerRegistration] = {}
        self._topics: dict[uuid.UUID, TopicImage] = {}
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._configs: dict[tuple[str, str], dict[str, str]] = {}
        self._features: dict[str, int] = {}
        self._acls = AclsImage()  # metadata/acls.py
        self._credentials = ScramCredentials()  # metadata/scram.py
        self._quotas = QuotasImage()  # metadata/quotas.py

    # -- reads ------------------------------------------------------------------------------

    @property
    def brokers(self) -> Mapping[int, BrokerRegistration]:
        return MappingProxyType(self._brokers)

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self._brokers.get(broker_id)

    def is_unfenced(self, broker_id: int) -> bool:
        broker = self._brokers.get(broker_id)
        return broker is not None and not broker.fenced

    def unfenced_brokers(self) -> list[BrokerRegistration]:
        """Brokers that may lead partitions and are shown to clients, sorted by id."""
        return [b for _, b in sorted(self._brokers.items()) if not b.fenced]

    @property
    def topics_by_id(self) -> Mapping[uuid.UUID, TopicImage]:
        return MappingProxyType(self._topics)

    def topic(self, name: str) -> TopicImage | None:
        topic_id = self._topic_ids.get(name)
        return None if topic_id is None else self._topics[topic_id]

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        return self._topics.get(topic_id)

    def topic_names(self) -> list[str]:
        return sorted(self._topic_ids)

    def partition(self, topic_id: uuid.UUID, partition: int) -> PartitionRegistration | None:
        topic = self._topics.get(topic_id)
        return None if topic is None else topic.partitions.get(partition)

    def partitions(self) -> Iterator[PartitionRegistration]:
        """Every partition, topics in creation order, partitions by index."""
        for topic in self._topics.values():
            for index in sorted(topic.partitions):
                yield topic.partitions[index]

    def configs(self, resource_type: str, resource_name: str) -> Mapping[str, str]:
        """The overrides set on a resource (topic configs, dynamic broker configs, a group's
        configs); a BROKER resource's name is a broker id, or "" for the cluster default."""
        return MappingProxyType(self._configs.get((resource_type, resource_name), {}))

    def configs_of_type(self, resource_type: str) -> Iterator[tuple[str, Mapping[str, str]]]:
        """(resource name, overrides) of every resource of a type that has overrides (the
        topics with a `leader.replication.throttled.replicas`, say), without visiting the rest."""
        for (kind, name), configs in self._configs.items():
            if kind == resource_type:
                yield name, MappingProxyType(configs)

    def topic_config(self, name: str) -> Mapping[str, str]:
        return self.configs(TOPIC_RESOURCE, name)

    @property
    def finalized_features(self) -> Mapping[str, int]:
        """Feature name -> finalized level (absent = level 0, Kafka's default)."""
        return MappingProxyType(self._features)

    @property
    def elr_enabled(self) -> bool:
        """KIP-966's Eligible Leader Replicas are on (Kafka's `isElrFeatureEnabled`)."""
        return self._features.get(ELR_FEATURE, 0) >= ELR_FEATURE_LEVEL

    @property
    def transaction_version(self) -> int:
        """The finalized `transaction.version` (2: brokers add partitions for TV2 produces)."""
        return self._features.get(TRANSACTION_VERSION_FEATURE, 0)

    @property
    def acls(self) -> Mapping[uuid.UUID, AclBinding]:
        """Every ACL by id (what the authorizer is fed from); `acls_image` has the lookups."""
        return self._acls.bindings

    @property
    def acls_image(self) -> AclsImage:
        return self._acls

    @property
    def credentials(self) -> ScramCredentials:
        """The SCRAM credentials: a `CredentialStore` that follows this image as it moves."""
        return self._credentials

    @property
    def quotas(self) -> QuotasImage:
        """The client quotas (`ClientQuota` records) and the lookups enforcers resolve with."""
        return self._quotas

    # -- apply ------------------------------------------------------------------------------

    def apply(self, record: Mapping[str, Any]) -> None:
        """Apply one record at `offset` and advance `offset`; MetadataRecordError if invalid."""
        kind = record.get("type")
        handler = _HANDLERS.get(kind)  # type: ignore[arg-type]
        if handler is None:
            raise MetadataRecordError(
                f"unknown metadata record type {kind!r} at offset {self.offset}"
            )
        try:
            handler(self, record)
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, MetadataRecordError):
                raise
            raise MetadataRecordError(
                f"malformed {kind} record at offset {self.offset}: {e!r}"
            ) from None
        self.offset += 1

    def apply_batches(self, data: bytes | bytearray | memoryview) -> int:
        """Apply fetched v2 batches of JSON records, skipping those below `offset`.

        A Fetch returns whole batches, so the first one may start before the fetch offset.
        A partial batch at the end is ignored (fetched again next time). Returns how many
        records were applied; a gap in offsets raises MetadataRecordError.
        """
        applied = 0
        for batch in iter_batches(data, allow_partial_tail=True):
            if batch.header.last_offset < self.offset:
                continue
            batch.ensure_valid()
            for record in batch.records():
                if record.offset < self.offset:
                    continue
                if record.offset != self.offset:
                    raise MetadataRecordError(
                        f"metadata offset {record.offset} follows {self.offset - 1}: records missing"
                    )
                self.apply(decode_record(record.value))
                applied += 1
        return applied

    def _register_broker(self, r: Mapping[str, Any]) -> None:
        broker = BrokerRegistration(
            broker_id=int(r["broker_id"]),
            broker_epoch=int(r["broker_epoch"]),
            incarnation_id=str(r["incarnation_id"]),
            host=str(r["host"]),
            port=int(r["port"]),
            rack=r.get("rack"),
            executor_id=r.get("executor_id"),
            data_dir=r.get("data_dir"),
            task_attempt=int(r.get("task_attempt", -1)),
            fenced=True,
            metrics_endpoint=r.get("metrics_endpoint"),
            endpoints=endpoints_from_record(r.get("endpoints", ())),
        )
        if broker.broker_epoch != self.offset:
            raise MetadataRecordError(
                f"RegisterBroker for broker {broker.broker_id} carries epoch "
                f"{broker.broker_epoch} but sits at offset {self.offset}"
            )
        self._brokers[broker.broker_id] = broker
        self.highest_broker_id = max(self.highest_broker_id, broker.broker_id)

    def _registered(self, r: Mapping[str, Any]) -> BrokerRegistration:
        broker_id, epoch = int(r["broker_id"]), int(r["broker_epoch"])
        broker = self._brokers.get(broker_id)
        if broker is None or broker.broker_epoch != epoch:
            raise MetadataRecordError(
                f"{r['type']} for broker {broker_id} epoch {epoch}: no such registration"
            )
        return broker

    def _fence_broker(self, r: Mapping[str, Any]) -> None:
        broker = self._registered(r)
        self._brokers[broker.broker_id] = _replace_broker(broker, fenced=True)

    def _unfence_broker(self, r: Mapping[str, Any]) -> None:
        broker = self._registered(r)
        self._brokers[broker.broker_id] = _replace_broker(broker, fenced=False)

    def _unregister_broker(self, r: Mapping[str, Any]) -> None:
        del self._brokers[self._registered(r).broker_id]

    def _topic(self, r: Mapping[str, Any]) -> None:
        name, topic_id = str(r["name"]), uuid.UUID(r["topic_id"])
        if name in self._topic_ids or topic_id in self._topics:
            raise MetadataRecordError(f"topic {name} ({topic_id}) already exists")
        self._topics[topic_id] = TopicImage(name, topic_id)
        self._topic_ids[name] = topic_id

    def _partition(self, r: Mapping[str, Any]) -> None:
        topic = self._topic_for(r)
        partition = PartitionRegistration(
            topic_id=topic.topic_id,
            partition=int(r["partition"]),
            replicas=tuple(int(b) for b in r["replicas"]),
            isr=tuple(int(b) for b in r["isr"]),
            leader=int(r["leader"]),
            leader_epoch=int(r["leader_epoch"]),
            partition_epoch=int(r["partition_epoch"]),
            adding_replicas=tuple(int(b) for b in r.get("adding_replicas", ())),
            removing_replicas=tuple(int(b) for b in r.get("removing_replicas", ())),
            elr=tuple(int(b) for b in r.get("eligible_leader_replicas", ())),
            last_known_elr=tuple(int(b) for b in r.get("last_known_elr", ())),
        )
        if partition.partition in topic.partitions:
            raise MetadataRecordError(
                f"partition {topic.name}-{partition.partition} already exists"
            )
        check_partition(topic.name, partition)
        topic.partitions[partition.partition] = partition

    def _partition_change(self, r: Mapping[str, Any]) -> None:
        topic = self._topic_for(r)
        index = int(r["partition"])
        old = topic.partitions.get(index)
        if old is None:
            raise MetadataRecordError(f"PartitionChange for unknown partition {topic.name}-{index}")
        new = PartitionRegistration(
            topic_id=old.topic_id,
            partition=index,
            replicas=tuple(int(b) for b in r.get("replicas", old.replicas)),
            isr=tuple(int(b) for b in r["isr"]),
            leader=int(r["leader"]),
            leader_epoch=int(r["leader_epoch"]),
            partition_epoch=int(r["partition_epoch"]),
            # Absent fields keep their value (Kafka's PartitionChangeRecord: null = unchanged).
            adding_replicas=tuple(int(b) for b in r.get("adding_replicas", old.adding_replicas)),
            removing_replicas=tuple(
                int(b) for b in r.get("removing_replicas", old.removing_replicas)
            ),
            elr=tuple(int(b) for b in r.get("eligible_leader_replicas", old.elr)),
            last_known_elr=tuple(int(b) for b in r.get("last_known_elr", old.last_known_elr)),
        )
        if new.leader_epoch < old.leader_epoch or new.partition_epoch <= old.partition_epoch:
            raise MetadataRecordError(
                f"PartitionChange for {topic.name}-{index} moves epochs backwards: leader epoch "
                f"{old.leader_epoch} -> {new.leader_epoch}, partition epoch "
                f"{old.partition_epoch} -> {new.partition_epoch}"
            )
        check_partition(topic.name, new)
        topic.partitions[index] = new

    def _topic_for(self, r: Mapping[str, Any]) -> TopicImage:
        topic = self._topics.get(uuid.UUID(r["topic_id"]))
        if topic is None:
            raise MetadataRecordError(f"{r['type']} for unknown topic id {r['topic_id']}")
        return topic

    def _config(self, r: Mapping[str, Any]) -> None:
        key = (str(r["resource_type"]), str(r["resource_name"]))
        if key[0] not in CONFIG_RESOURCE_CODES:
            raise MetadataRecordError(f"Config record for unknown resource type {key[0]!r}")
        name, value = str(r["name"]), r.get("value")
        configs = self._configs.setdefault(key, {})
        if value is None:
            configs.pop(name, None)
            if not configs:
                del self._configs[key]
        else:
            configs[name] = str(value)

    def _remove_topic(self, r: Mapping[str, Any]) -> None:
        topic = self._topic_for(r)
        del self._topics[topic.topic_id]
        del self._topic_ids[topic.name]
        self._configs.pop((TOPIC_RESOURCE, topic.name), None)

    def _feature_level(self, r: Mapping[str, Any]) -> None:
        name, level = str(r["name"]), int(r["feature_level"])
        if level < 0:
            raise MetadataRecordError(f"FeatureLevel {name} has a negative level {level}")
        if level == 0:
            self._features.pop(name, None)  # Kafka: level 0 = not finalized
        else:
            self._features[name] = level

    def _clear_elr(self, r: Mapping[str, Any]) -> None:
        """Kafka's `ClearElrRecord`: min.insync.replicas changed (for one topic, or for all when
        `topic_name` is empty) or ELR was turned off; ELR and last known ELR are forgotten."""
        name = str(r.get("topic_name") or "")
        if name and name not in self._topic_ids:
            raise MetadataRecordError(f"ClearElr for unknown topic {name}")
        topics = [self._topics[self._topic_ids[name]]] if name else list(self._topics.values())
        for topic in topics:
            for index, p in topic.partitions.items():
                if p.elr or p.last_known_elr:
                    topic.partitions[index] = replace(p, elr=(), last_known_elr=())

    def _producer_ids(self, r: Mapping[str, Any]) -> None:
        next_id = int(r["next_producer_id"])
        if next_id <= self.next_producer_id:
            raise MetadataRecordError(
                f"ProducerIds moves the next producer id back from {self.next_producer_id} to {next_id}"
            )
        self.next_producer_id = next_id

    # -- snapshots --------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy of the whole image (the snapshot's `image`)."""
        return {
            "offset": self.offset,
            "next_producer_id": self.next_producer_id,
            "highest_broker_id": self.highest_broker_id,
            "brokers": [
                asdict(b) | {"endpoints": endpoints_to_record(b.endpoints)}
                for _, b in sorted(self._brokers.items())
            ],
            "topics": [
                {
                    "name": t.name,
                    "topic_id": str(t.topic_id),
                    "partitions": [t.partitions[i].to_record() for i in sorted(t.partitions)],
                }
                for t in self._topics.values()
            ],
            "configs": [
                {"resource_type": k[0], "resource_name": k[1], "configs": dict(sorted(v.items()))}
                for k, v in sorted(self._configs.items())
            ],
            "features": dict(sorted(self._features.items())),
            "acls": self._acls.to_list(),
            "scram_credentials": self._credentials.to_list(),
            "client_quotas": self._quotas.to_list(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MetadataImage:
        """Rebuild an image from `to_dict` output; MetadataRecordError when it does not parse."""
        image = cls()
        try:
            image.offset = int(data["offset"])
            image.next_producer_id = int(data["next_producer_id"])
            image.highest_broker_id = int(data["highest_broker_id"])
            for b in data["brokers"]:
                endpoints = endpoints_from_record(b.get("endpoints", ()))
                image._brokers[int(b["broker_id"])] = BrokerRegistration(
                    **(b | {"endpoints": endpoints})
                )
            for t in data["topics"]:
                image._topic({"name": t["name"], "topic_id": t["topic_id"]})
                for p in t["partitions"]:
                    image._partition(p)
            for c in data["configs"]:
                key = (str(c["resource_type"]), str(c["resource_name"]))
                image._configs[key] = {str(k): str(v) for k, v in c["configs"].items()}
            # snapshots from before feature levels have none (every feature at level 0)
            image._features = {str(k): int(v) for k, v in data.get("features", {}).items()}
            # ... and before ACLs and SCRAM credentials, none of them
            image._acls = AclsImage.from_list(data.get("acls", ()))
            image._credentials = ScramCredentials.from_list(data.get("scram_credentials", ()))
            # ... and before client quotas, none
            image._quotas = QuotasImage.from_list(data.get("client_quotas", ()))
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, MetadataRecordError):
                raise
            raise MetadataRecordError(f"malformed metadata image: {e!r}") from None
        return image

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MetadataImage):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"MetadataImage(offset={self.offset}, brokers={sorted(self._brokers)}, "
            f"topics={self.topic_names()})"
        )


_HANDLERS = {
    REGISTER_BROKER: MetadataImage._register_broker,
    FENCE_BROKER: MetadataImage._fence_broker,
    UNFENCE_BROKER: MetadataImage._unfence_broker,
    UNREGISTER_BROKER: MetadataImage._unregister_broker,
    TOPIC: MetadataImage._topic,
    PARTITION: MetadataImage._partition,
    PARTITION_CHANGE: MetadataImage._partition_change,
    CONFIG: MetadataImage._config,
    REMOVE_TOPIC: MetadataImage._remove_topic,
    PRODUCER_IDS: MetadataImage._producer_ids,
    FEATURE_LEVEL: MetadataImage._feature_level,
    CLEAR_ELR: MetadataImage._clear_elr,
    LEADER_CHANGE: lambda image, record: None,
    ACCESS_CONTROL_ENTRY: lambda image, record: image._acls.replay_create(record),
    REMOVE_ACCESS_CONTROL_ENTRY: lambda image, record: image._acls.replay_remove(record),
    USER_SCRAM_CREDENTIAL: lambda image, record: image._credentials.replay(record),
    REMOVE_USER_SCRAM_CREDENTIAL: lambda image, record: image._credentials.replay_remove(record),
    CLIENT_QUOTA: lambda image, record: image._quotas.replay(record),
}


def _replace_broker(broker: BrokerRegistration, *, fenced: bool) -> BrokerRegistration:
    return replace(broker, fenced=fenced)
