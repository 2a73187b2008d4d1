"""The sans-IO controller core (Kafka's `QuorumController`, single node).

Theory of operation: every operation reads the current `MetadataImage`, validates, and returns
a `ControllerResult` = the response plus the metadata records that make it true. The caller
(`server.py`, or a test) appends those records to the metadata log as ONE batch, then calls
`replay(records)`, then announces the response — persisted before announced. Operations never
mutate the image themselves, so a refused request changes nothing; only the in-memory lease
table (`heartbeats`) and the launcher's shutdown requests live outside the log.

Records of one result are computed against the image before any of them is applied, so an
operation that would need to see its own effects is split: `tick` fences at most one broker
per call (like Kafka's `maybeFenceOneStaleBroker`); the caller repeats it until its response is
None, persisting every result (the last one may carry reassignment completions and
preferred-leader elections; the two never touch the same partition). Broker epochs are the offsets of RegisterBroker records: the core computes them as
`image.offset + position in the batch`, which holds because the caller appends at the log end,
and the log end always equals `image.offset`.

Time comes in as `now_ms`; nothing here reads a clock, opens a file or a socket.
Not thread-safe: one owner (the controller's event loop) drives it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparklog.controller import acl_control, quota_control, scram_control
from sparklog.controller.cluster_control import (
    BrokerHeartbeat,
    BrokerHeartbeatManager,
    BrokerHeartbeatReply,
    BrokerIdNotRegisteredError,
    BrokerRegistrationRequest,
    check_broker_epoch,
    check_registration,
    register_broker_record,
)
from sparklog.controller.config_control import ConfigurationControl, effective_config
from sparklog.controller.isr_control import alter_partition
from sparklog.controller.leader_balance import elect_leaders, rebalance_leaders
from sparklog.controller.reassignment import (
    OngoingReassignment,
    alter_partition_reassignments,
    complete_reassignments,
    list_partition_reassignments,
)
from sparklog.controller.replication_control import (
    CreateTopicResult,
    NewPartitions,
    NewTopic,
    ReplicationControl,
)
from sparklog.controller.results import ApiError, ControllerResult
from sparklog.errors import (
    InvalidUpdateVersionError,
    StaleBrokerEpochError,
    UnknownServerError,
)
from sparklog.metadata.alter_partition import IsrChange, IsrChangeOutcome
from sparklog.metadata.configs import (
    AlterConfigOp,
    ConfigEntry,
    ConfigResource,
    ControllerConfig,
)
from sparklog.metadata.image import (
    BROKER_RESOURCE,
    ELR_FEATURE,
    ELR_FEATURE_LEVEL,
    SUPPORTED_FEATURES,
    TRANSACTION_VERSION_FEATURE,
    TRANSACTION_VERSION_LEVEL,
    MetadataImage,
)
from sparklog.metadata.log_records import (
    CLEAR_ELR,
    CONFIG,
    FEATURE_LEVEL,
    FENCE_BROKER,
    LEADER_CHANGE,
    PRODUCER_IDS,
    UNFENCE_BROKER,
    UNREGISTER_BROKER,
)
from sparklog.metadata.quotas import ClientQuotaEntity
from sparklog.security.acl import AclBinding
from sparklog.security.acl_filter import AclBindingFilter
from sparklog.structs import TopicPartition

logger = logging.getLogger(__name__)

#: Producer ids per AllocateProducerIds block (Kafka's `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`).
PRODUCER_ID_BLOCK_SIZE = 1000
_LONG_MAX = 2**63 - 1

Records = tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class ProducerIdsBlock:
    broker_id: int
    producer_id_start: int
    producer_id_len: int


class QuorumController:
    """Registration, leases, controlled shutdown, topic admin, configs, ISR changes, leader
    elections and balancing, reassignments, producer ids, ACLs and SCRAM credentials over one
    metadata image."""

    def __init__(
        self,
        config: ControllerConfig,
        cluster_id: str,
        image: MetadataImage | None = None,
        *,
        topic_id_factory: Callable[[], uuid.UUID] = uuid.uuid4,
        acl_id_factory: Callable[[], uuid.UUID] = uuid.uuid4,
    ) -> None:
        #: the settings the controller started with; `config` adds the cluster-wide dynamic
        #: broker configs of the image (refreshed as they are replayed)
        self.static_config = config
        self.cluster_id = cluster_id
        self.image = image if image is not None else MetadataImage()
        self.config = effective_config(config, self.image)
        self.heartbeats = BrokerHeartbeatManager(config.broker_session_timeout_ms)
        self.replication = ReplicationControl(self.image, self.config, topic_id_factory)
        self.configs = ConfigurationControl(self.image, lambda: self.config)
        self._acl_id_factory = acl_id_factory
        self._next_node_id = 0
        self._shutdown_all = False
        self._shutdown_brokers: set[int] = set()
        # Brokers that asked to shut down (Kafka's CONTROLLED_SHUTDOWN state): never unfenced
        # or elected again until they register anew. In memory, like Kafka's heartbeat manager.
        self._controlled_shutdown: set[int] = set()
        self._next_rebalance_ms: int | None = None

    def activate(self, now_ms: int) -> None:
        """Give every unfenced broker of a replayed image a fresh lease (Kafka's
        `ClusterControlManager.activate`): after a controller restart, brokers that heartbeat
        within the session timeout keep their leaderships; the others are fenced then."""
        for broker in self.image.unfenced_brokers():
            self.heartbeats.touch(broker.broker_id, now_ms)

    def bootstrap(self, *, eligible_leader_replicas: bool = True) -> ControllerResult[None]:
        """The first records of a new cluster (Kafka's bootstrap metadata, written when the
        metadata log is empty): the finalized feature levels. Like Kafka 4.1+, a new cluster
        runs with Eligible Leader Replicas and transaction version 2 (Kafka 4.0's bootstrap
        metadata version finalizes `transaction.version=2`); a cluster whose log predates them
        keeps level 0 until `update_features` raises it. Nothing when the log is not empty."""
        if self.image.offset != 0:
            return ControllerResult(None)
        records = [
            {
                "type": FEATURE_LEVEL,
                "name": TRANSACTION_VERSION_FEATURE,
                "feature_level": TRANSACTION_VERSION_LEVEL,
            }
        ]
        if eligible_leader_replicas:
            records.insert(
                0, {"type": FEATURE_LEVEL, "name": ELR_FEATURE, "feature_level": ELR_FEATURE_LEVEL}
            )
        return ControllerResult(None, tuple(records))

    def update_features(self, name: str, level: int) -> ControllerResult[None]:
        """UpdateFeatures of one feature (`eligible.leader.replicas.version` 0-1,
        `transaction.version` 0-2). Turning ELR off forgets every ELR (Kafka writes a
        ClearElrRecord for all topics)."""
        if name not in SUPPORTED_FEATURES:
            known = ", ".join(SUPPORTED_FEATURES)
            raise InvalidUpdateVersionError(f"Unknown feature {name}; sparklog has {known}")
        low, high = SUPPORTED_FEATURES[name]
        if not low <= level <= high:
            raise InvalidUpdateVersionError(
                f"Invalid update version {level} for feature {name}: supported {low}-{high}"
            )
        if self.image.finalized_features.get(name, 0) == level:
            return ControllerResult(None)
        records: list[dict[str, Any]] = [
            {"type": FEATURE_LEVEL, "name": name, "feature_level": level}
        ]
        if name == ELR_FEATURE and level < ELR_FEATURE_LEVEL:
            records.append({"type": CLEAR_ELR, "topic_name": ""})
        return ControllerResult(None, tuple(records))

    def claim_leadership(
        self, leader_id: int, incarnation_id: str, host: str, pid: int, wall_ms: int
    ) -> ControllerResult[None]:
        """The `LeaderChange` record a starting controller commits before it serves (KRaft's
        new leader writes its LeaderChangeMessage first): the log's next offset becomes this
        controller's, so a controller started earlier on the same log (a zombie driver) loses
        its next write and stops, instead of fencing its successor. The process facts only
        name the new owner in the zombie's message; `wall_ms` is wall-clock time."""
        record = {
            "type": LEADER_CHANGE,
            "leader_id": leader_id,
            "incarnation_id": incarnation_id,
            "host": host,
            "pid": pid,
            "activated_ms": wall_ms,
        }
        return ControllerResult(None, (record,))

    def replay(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Apply persisted records to the image (call after the metadata log append)."""
        for record in records:
            self.image.apply(record)
            if record.get("type") == CONFIG and record.get("resource_type") == BROKER_RESOURCE:
                # a cluster-wide dynamic topic default (log.retention.ms, min.insync.replicas,
                # ...) reaches the topics the controller creates and elects for
                self.config = effective_config(self.static_config, self.image)
                self.replication.config = self.config

    # -- launcher hooks ---------------------------------------------------------------------

    def next_node_id(self) -> int:
        """A fresh broker id: one above every id registered or handed out before."""
        node_id = max(self._next_node_id, self.image.highest_broker_id + 1)
        self._next_node_id = node_id + 1
        return node_id

    def request_shutdown(self, broker_id: int | None = None) -> None:
        """Make heartbeats of `broker_id` (every broker when None) answer should_shut_down."""
        if broker_id is None:
            self._shutdown_all = True
        else:
            self._shutdown_brokers.add(broker_id)

    def should_shut_down(self, broker_id: int) -> bool:
        return self._shutdown_all or broker_id in self._shutdown_brokers

    # -- brokers ----------------------------------------------------------------------------

    def register_broker(
        self, now_ms: int, request: BrokerRegistrationRequest
    ) -> ControllerResult[int]:
        """BrokerRegistration: the new broker epoch. Raises DuplicateBrokerRegistrationError,
        InconsistentClusterIdError or BrokerIdNotRegisteredError (negative id)."""
        check_registration(
            self.image,
            self.heartbeats,
            self.cluster_id,
            request,
            now_ms,
            shut_down=request.broker_id in self._controlled_shutdown,
        )
        existing = self.image.broker(request.broker_id)
        records: list[dict[str, Any]] = []
        same_process = existing is not None and existing.incarnation_id == request.incarnation_id
        if existing is not None and not existing.fenced or not same_process:
            # The old registration goes away: its leaderships and ISR places first. A new
            # process that cannot show the clean-shutdown epoch of the registration it replaces
            # may have lost its unflushed log tail, so with ELR it also leaves every ELR
            # (Kafka's ClusterControlManager.registerBroker -> handleBrokerShutdown, KIP-966).
            clean = same_process or (
                existing is not None and request.previous_broker_epoch == existing.broker_epoch
            )
            if not clean and self.image.elr_enabled:
                logger.info(
                    "broker %d registers without a clean shutdown of epoch %s (previous broker "
                    "epoch %d): it leaves every ISR and ELR",
                    request.broker_id,
                    existing.broker_epoch if existing is not None else "none",
                    request.previous_broker_epoch,
                )
            records.extend(self.replication.on_broker_shutdown(request.broker_id, clean=clean))
        if existing is not None and existing.incarnation_id != request.incarnation_id:
            self._shutdown_brokers.discard(request.broker_id)
        self._controlled_shutdown.discard(request.broker_id)  # a new process, maybe the same
        broker_epoch = self.image.offset + len(records)
        records.append(register_broker_record(request, broker_epoch))
        self.heartbeats.touch(request.broker_id, now_ms)
        return ControllerResult(broker_epoch, tuple(records))

    def heartbeat(
        self, now_ms: int, request: BrokerHeartbeat
    ) -> ControllerResult[BrokerHeartbeatReply]:
        """BrokerHeartbeat: renew the lease; unfence a caught-up broker, fence one that asks."""
        broker_id = request.broker_id
        broker = self.image.broker(broker_id)
        if broker is None or broker.broker_epoch != request.broker_epoch:
            try:
                check_broker_epoch(self.image, broker_id, request.broker_epoch)
            except StaleBrokerEpochError as e:
                # An older epoch means a newer registration took the id: that process must go.
                older = broker is not None and request.broker_epoch < broker.broker_epoch
                reply = BrokerHeartbeatReply(
                    should_shut_down=older, error_code=e.code, error_message=str(e)
                )
                return ControllerResult(reply)
        assert broker is not None
        self.heartbeats.touch(broker_id, now_ms)
        caught_up = request.current_metadata_offset > broker.broker_epoch
        records: list[dict[str, Any]] = []
        fenced = broker.fenced
        if request.want_shut_down:
            # Kafka's controlled shutdown: leaderships move to other ISR members and the broker
            # leaves every ISR that has other members. Fencing does exactly that, in this one
            # persisted batch, so it may stop as soon as this reply (after the commit) arrives.
            self._controlled_shutdown.add(broker_id)
        if request.want_fence or request.want_shut_down:
            if not broker.fenced:
                records = self._fence(broker_id)
            fenced = True
        elif (
            broker.fenced
            and caught_up
            and not self.should_shut_down(broker_id)
            and broker_id not in self._controlled_shutdown
        ):
            records = self._unfence(broker_id)
            fenced = False
        # KRaft answers shouldShutDown once a broker in controlled shutdown leads nothing
        # another replica could lead: true here as soon as its fence is committed.
        should_shut_down = self.should_shut_down(broker_id) or request.want_shut_down
        reply = BrokerHeartbeatReply(
            is_caught_up=caught_up, is_fenced=fenced, should_shut_down=should_shut_down
        )
        return ControllerResult(reply, tuple(records))

    def unregister_broker(self, broker_id: int) -> ControllerResult[None]:
        """UnregisterBroker: forget the broker (its partitions lose it as leader)."""
        broker = self.image.broker(broker_id)
        if broker is None:
            raise BrokerIdNotRegisteredError(f"Broker ID {broker_id} is not currently registered")
        records = self.replication.on_broker_fenced(broker_id)
        records.append(
            {"type": UNREGISTER_BROKER, "broker_id": broker_id, "broker_epoch": broker.broker_epoch}
        )
        self.heartbeats.remove(broker_id)
        return ControllerResult(None, tuple(records))

    def tick(self, now_ms: int) -> ControllerResult[int | None]:
        """Periodic work. Fences at most one unfenced broker whose lease expired and returns
        its id; call again (after persisting) until the response is None. The result whose
        response is None may still carry records — completed reassignments and, every
        `leader.imbalance.check.interval.seconds`, preferred-leader elections — and must be
        persisted like any other."""
        unfenced = [b.broker_id for b in self.image.unfenced_brokers()]
        stale = self.heartbeats.first_stale(now_ms, unfenced)
        if stale is not None:
            return ControllerResult(stale, tuple(self._fence(stale)))
        min_isr_of = self.replication.elr_min_isr
        records = complete_reassignments(self.image, self.is_active, min_isr_of)
        if self._rebalance_due(now_ms):
            records.extend(
                rebalance_leaders(
                    self.image,
                    self.is_active,
                    self.config.leader_imbalance_per_broker_percentage,
                    min_isr_of,
                )
            )
        return ControllerResult(None, tuple(records))

    def _rebalance_due(self, now_ms: int) -> bool:
        """Every `leader.imbalance.check.interval.seconds`, the first one an interval after
        the first tick (Kafka schedules it after the interval too)."""
        if not self.config.auto_leader_rebalance_enable:
            return False
        interval_ms = self.config.leader_imbalance_check_interval_seconds * 1000
        if self._next_rebalance_ms is None:
            self._next_rebalance_ms = now_ms + interval_ms
        if now_ms < self._next_rebalance_ms:
            return False
        self._next_rebalance_ms = now_ms + interval_ms
        return True

    def _fence(self, broker_id: int) -> list[dict[str, Any]]:
        broker = self.image.broker(broker_id)
        assert broker is not None and not broker.fenced
        records = self.replication.on_broker_fenced(broker_id)
        records.append(
            {"type": FENCE_BROKER, "broker_id": broker_id, "broker_epoch": broker.broker_epoch}
        )
        return records

    def _unfence(self, broker_id: int) -> list[dict[str, Any]]:
        broker = self.image.broker(broker_id)
        assert broker is not None and broker.fenced
        record = {
            "type": UNFENCE_BROKER,
            "broker_id": broker_id,
            "broker_epoch": broker.broker_epoch,
        }
        return [record, *self.replication.on_broker_unfenced(broker_id)]

    def is_active(self, broker_id: int) -> bool:
        """Whether `broker_id` may lead or join an ISR: registered, unfenced, not shutting down."""
        return self.image.is_unfenced(broker_id) and broker_id not in self._controlled_shutdown

    # -- ISR changes ------------------------------------------------------------------------

    def alter_partition(
        self,
        now_ms: int,
        broker_id: int,
        broker_epoch: int,
        changes: Sequence[IsrChange],
        *,
        member_epochs: Mapping[tuple[uuid.UUID, int], Sequence[int]] | None = None,
    ) -> ControllerResult[list[IsrChangeOutcome]]:
        """AlterPartition from a partition leader: one outcome per change, in request order.

        Raises StaleBrokerEpochError (the request's top-level error) when `broker_epoch` is not
        the broker's current one; everything else is a per-partition error code.
        `member_epochs` (AlterPartition v3) are the proposed members' broker epochs.
        """
        del now_ms  # kept for symmetry with the other broker RPCs
        check_broker_epoch(self.image, broker_id, broker_epoch)
        outcomes, records = alter_partition(
            self.image,
            broker_id,
            changes,
            self.is_active,
            member_epochs,
            min_isr_of=self.replication.elr_min_isr,
        )
        return ControllerResult(outcomes, tuple(records))

    # -- leaders and reassignments ----------------------------------------------------------

    def elect_leaders(
        self, election_type: int, partitions: Sequence[TopicPartition] | None
    ) -> ControllerResult[list[tuple[TopicPartition, ApiError]]]:
        """ElectLeaders (KIP-460): PREFERRED (0) or UNCLEAN (1) elections; None = every
        partition (then partitions not needing one are left out of the results)."""
        results, records = elect_leaders(
            self.image, election_type, partitions, self.is_active, self.replication.elr_min_isr
        )
        return ControllerResult(results, tuple(records))

    def alter_partition_reassignments(
        self,
        reassignments: Sequence[tuple[TopicPartition, Sequence[int] | None]],
        *,
        allow_replication_factor_change: bool = True,
    ) -> ControllerResult[list[tuple[TopicPartition, ApiError]]]:
        """AlterPartitionReassignments (KIP-455): a target replica list starts (or changes) a
        reassignment, None cancels one; per-partition results in request order."""
        results, records = alter_partition_reassignments(
            self.image,
            reassignments,
            self.is_active,
            self.replication.unclean_leader_election_enabled,
            allow_replication_factor_change=allow_replication_factor_change,
            min_isr_of=self.replication.elr_min_isr,
        )
        return ControllerResult(results, tuple(records))

    def list_partition_reassignments(
        self, partitions: Sequence[TopicPartition] | None = None
    ) -> list[OngoingReassignment]:
        """ListPartitionReassignments: the reassignments in progress (of `partitions`)."""
        return list_partition_reassignments(self.image, partitions)

    # -- topics -----------------------------------------------------------------------------

    def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False
    ) -> ControllerResult[list[CreateTopicResult]]:
        """CreateTopics: per-topic results in request order."""
        results, records = self.replication.create_topics(topics, validate_only=validate_only)
        return ControllerResult(results, tuple(records))

    def delete_topics(self, names: Sequence[str]) -> ControllerResult[list[tuple[str, ApiError]]]:
        """DeleteTopics: per-name results in request order."""
        results, records = self.replication.delete_topics(names)
        return ControllerResult(results, tuple(records))

    def create_partitions(
        self, topics: Sequence[NewPartitions], *, validate_only: bool = False
    ) -> ControllerResult[list[tuple[str, ApiError]]]:
        """CreatePartitions: per-topic results in request order."""
        results, records = self.replication.create_partitions(topics, validate_only=validate_only)
        return ControllerResult(results, tuple(records))

    # -- configs (config_control.py) --------------------------------------------------------

    def describe_configs(
        self,
        resource: ConfigResource,
        keys: Sequence[str] | None = None,
        *,
        include_synonyms: bool = False,
    ) -> tuple[ApiError, list[ConfigEntry]]:
        return self.configs.describe(resource, keys, include_synonyms=include_synonyms)

    def incremental_alter_configs(
        self,
        resources: Sequence[tuple[ConfigResource, Sequence[AlterConfigOp]]],
        *,
        validate_only: bool = False,
    ) -> ControllerResult[list[tuple[ConfigResource, ApiError]]]:
        """IncrementalAlterConfigs (SET/DELETE/APPEND/SUBTRACT): per-resource results."""
        return self.configs.incremental_alter(resources, validate_only=validate_only)

    def alter_configs(
        self,
        resources: Sequence[tuple[ConfigResource, Mapping[str, str | None]]],
        *,
        validate_only: bool = False,
    ) -> ControllerResult[list[tuple[ConfigResource, ApiError]]]:
        """AlterConfigs (legacy): the given configs replace all of a resource's overrides."""
        return self.configs.alter(resources, validate_only=validate_only)

    # -- ACLs and SCRAM credentials (acl_control.py, scram_control.py) -----------------------

    def create_acls(self, bindings: Sequence[AclBinding]) -> ControllerResult[list[ApiError]]:
        """CreateAcls: one result per binding, in request order."""
        results, records = acl_control.create_acls(self.image, bindings, self._acl_id_factory)
        return ControllerResult(results, tuple(records))

    def delete_acls(
        self, filters: Sequence[AclBindingFilter]
    ) -> ControllerResult[list[tuple[ApiError, list[AclBinding]]]]:
        """DeleteAcls: per filter, an error or the bindings it deleted."""
        results, records = acl_control.delete_acls(self.image, filters)
        return ControllerResult(results, tuple(records))

    def alter_user_scram_credentials(
        self,
        deletions: Sequence[scram_control.ScramDeletion],
        upsertions: Sequence[scram_control.ScramUpsertion],
    ) -> ControllerResult[list[tuple[str, ApiError]]]:
        """AlterUserScramCredentials: one result per user."""
        results, records = scram_control.alter_user_scram_credentials(
            self.image, deletions, upsertions
        )
        return ControllerResult(results, tuple(records))

    # -- client quotas (quota_control.py) ----------------------------------------------------

    def alter_client_quotas(
        self,
        alterations: Sequence[quota_control.QuotaAlteration],
        *,
        validate_only: bool = False,
        unresolvable: Iterable[str] = (),
    ) -> ControllerResult[list[tuple[ClientQuotaEntity, ApiError]]]:
        """AlterClientQuotas: one result per entity (`unresolvable`: ip host names that did
        not resolve)."""
        results, records = quota_control.alter_client_quotas(
            self.image, alterations, validate_only=validate_only, unresolvable=set(unresolvable)
        )
        return ControllerResult(results, tuple(records))

    # -- producer ids -----------------------------------------------------------------------

    def allocate_producer_ids(
        self, broker_id: int, broker_epoch: int
    ) -> ControllerResult[ProducerIdsBlock]:
        """AllocateProducerIds: the next block of PRODUCER_ID_BLOCK_SIZE ids for a broker."""
        check_broker_epoch(self.image, broker_id, broker_epoch)
        return self.producer_ids_block(broker_id)

    def producer_ids_block(self, owner_id: int) -> ControllerResult[ProducerIdsBlock]:
        """The next block of producer ids, for a broker or the driver's coordinator."""
        broker_id = owner_id
        start = self.image.next_producer_id
        if start > _LONG_MAX - PRODUCER_ID_BLOCK_SIZE:
            raise UnknownServerError(
                "Exhausted all producerIds as the next block's end would overflow"
            )
        record = {
            "type": PRODUCER_IDS,
            "broker_id": broker_id,
            "next_producer_id": start + PRODUCER_ID_BLOCK_SIZE,
        }
        block = ProducerIdsBlock(broker_id, start, PRODUCER_ID_BLOCK_SIZE)
        return ControllerResult(block, (record,))
