"""The driver-side controller (KRaft-like, single node): broker registration and leases, topic
admin, replica placement, leader election, ISR changes (AlterPartition), controlled shutdown,
leader balancing, partition reassignment and the metadata log (docs/architecture.md §2-4).

Brokers use `MetadataImage` (built by fetching `__cluster_metadata-0`) and the client-id
helpers; the launcher uses `ControllerServer` (sparklog.controller.server, loaded lazily).
"""

from sparklog.controller.alter_partition import IsrChange, IsrChangeOutcome
from sparklog.controller.cluster_control import (
    BrokerHeartbeat,
    BrokerHeartbeatReply,
    BrokerIdNotRegisteredError,
    BrokerLaunchFacts,
    BrokerRegistrationRequest,
    DuplicateBrokerRegistrationError,
    InconsistentClusterIdError,
    broker_client_id,
    parse_broker_client_id,
)
from sparklog.controller.configs import (
    AlterConfigOp,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ControllerConfig,
    OpType,
    describe_configs,
    effective_topic_config,
)
from sparklog.controller.image import (
    BrokerRegistration,
    MetadataImage,
    MetadataRecordError,
    PartitionRegistration,
    TopicImage,
)
from sparklog.controller.leader_balance import ElectionType
from sparklog.controller.metadata_log import MetadataLog
from sparklog.controller.partition_change import elect_leader, partition_change
from sparklog.controller.placement import UsableBroker, place_replicas
from sparklog.controller.quorum_controller import (
    PRODUCER_ID_BLOCK_SIZE,
    ProducerIdsBlock,
    QuorumController,
)
from sparklog.controller.reassignment import OngoingReassignment
from sparklog.controller.replication_control import (
    CreateTopicResult,
    NewPartitions,
    NewTopic,
    validate_topic_name,
)
from sparklog.controller.results import ApiError, ControllerResult


def __getattr__(name: str) -> object:
    # The asyncio server loads on first use, so importing the sans-IO core (a broker
    # importing `MetadataImage`) does not pull in the network edge.
    if name == "ControllerServer":
        from sparklog.controller.server import ControllerServer

        return ControllerServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "PRODUCER_ID_BLOCK_SIZE",
    "AlterConfigOp",
    "ApiError",
    "BrokerHeartbeat",
    "BrokerHeartbeatReply",
    "BrokerIdNotRegisteredError",
    "BrokerLaunchFacts",
    "BrokerRegistration",
    "BrokerRegistrationRequest",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ControllerConfig",
    "ControllerResult",
    "ControllerServer",
    "CreateTopicResult",
    "DuplicateBrokerRegistrationError",
    "ElectionType",
    "InconsistentClusterIdError",
    "IsrChange",
    "IsrChangeOutcome",
    "MetadataImage",
    "MetadataLog",
    "MetadataRecordError",
    "NewPartitions",
    "NewTopic",
    "OngoingReassignment",
    "OpType",
    "PartitionRegistration",
    "ProducerIdsBlock",
    "QuorumController",
    "TopicImage",
    "UsableBroker",
    "broker_client_id",
    "describe_configs",
    "effective_topic_config",
    "elect_leader",
    "parse_broker_client_id",
    "partition_change",
    "place_replicas",
    "validate_topic_name",
]
