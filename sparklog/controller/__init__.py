"""The driver-side controller (KRaft-like, single node): broker registration and leases, topic
admin, replica placement, leader election, ISR changes (AlterPartition), controlled shutdown,
leader balancing, partition reassignment and the metadata log (docs/architecture.md §2-4).

What brokers share with it (the `MetadataImage`, AlterPartition values, the config vocabulary)
is in `sparklog.metadata`; brokers never import this package. The launchers use
`ControllerServer`. The names below load their module on first use, so importing the sans-IO
core does not pull in the asyncio server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparklog.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from .cluster_control import (
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
    from .leader_balance import ElectionType
    from .metadata_log import MetadataLog
    from .partition_change import elect_leader, partition_change
    from .placement import UsableBroker, place_replicas
    from .quorum_controller import PRODUCER_ID_BLOCK_SIZE, ProducerIdsBlock, QuorumController
    from .reassignment import OngoingReassignment
    from .replication_control import CreateTopicResult, NewPartitions, NewTopic, validate_topic_name
    from .results import ApiError, ControllerResult
    from .server import ControllerServer

_MODULES = {
    "BrokerHeartbeat": "cluster_control",
    "BrokerHeartbeatReply": "cluster_control",
    "BrokerIdNotRegisteredError": "cluster_control",
    "BrokerLaunchFacts": "cluster_control",
    "BrokerRegistrationRequest": "cluster_control",
    "DuplicateBrokerRegistrationError": "cluster_control",
    "InconsistentClusterIdError": "cluster_control",
    "broker_client_id": "cluster_control",
    "parse_broker_client_id": "cluster_control",
    "ElectionType": "leader_balance",
    "MetadataLog": "metadata_log",
    "elect_leader": "partition_change",
    "partition_change": "partition_change",
    "UsableBroker": "placement",
    "place_replicas": "placement",
    "PRODUCER_ID_BLOCK_SIZE": "quorum_controller",
    "ProducerIdsBlock": "quorum_controller",
    "QuorumController": "quorum_controller",
    "OngoingReassignment": "reassignment",
    "CreateTopicResult": "replication_control",
    "NewPartitions": "replication_control",
    "NewTopic": "replication_control",
    "validate_topic_name": "replication_control",
    "ApiError": "results",
    "ControllerResult": "results",
    "ControllerServer": "server",
}

__getattr__ = lazy_getattr(__name__, {n: f"{__name__}.{m}" for n, m in _MODULES.items()})

__all__ = [
    "PRODUCER_ID_BLOCK_SIZE",
    "ApiError",
    "BrokerHeartbeat",
    "BrokerHeartbeatReply",
    "BrokerIdNotRegisteredError",
    "BrokerLaunchFacts",
    "BrokerRegistrationRequest",
    "ControllerResult",
    "ControllerServer",
    "CreateTopicResult",
    "DuplicateBrokerRegistrationError",
    "ElectionType",
    "InconsistentClusterIdError",
    "MetadataLog",
    "NewPartitions",
    "NewTopic",
    "OngoingReassignment",
    "ProducerIdsBlock",
    "QuorumController",
    "UsableBroker",
    "broker_client_id",
    "elect_leader",
    "parse_broker_client_id",
    "partition_change",
    "place_replicas",
    "validate_topic_name",
]
