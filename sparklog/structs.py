"""Shared value types and wire sentinels, defined once (STYLE.md rule 15).

Every layer imports these (records, storage, broker, controller, coordinator, client, spark),
so this module imports nothing from sparklog. Names and values are Kafka's; each cites the
Kafka class that defines it.
"""

from __future__ import annotations

import enum
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A topic name and partition index (Kafka's `TopicPartition`). A named tuple, so a plain
    `("t", 0)` is equal to it and hashes the same: either works as a dict key or set member,
    and tuples order as before (by topic, then partition)."""

    topic: str
    partition: int


# -- ListOffsets timestamps (Kafka's ListOffsetsRequest) --------------------------------------

#: The log end offset (or, read_committed, the last stable offset).
LATEST_TIMESTAMP = -1
#: The log start offset.
EARLIEST_TIMESTAMP = -2
#: The offset of the record with the largest timestamp (KIP-734).
MAX_TIMESTAMP = -3
#: The local log's start offset when part of the log is tiered (KIP-405).
EARLIEST_LOCAL_TIMESTAMP = -4
#: The highest offset uploaded to the remote tier (KIP-1005).
LATEST_TIERED_TIMESTAMP = -5


class IsolationLevel(enum.IntEnum):
    """Fetch and ListOffsets isolation (Kafka's `IsolationLevel`): how far a read may go, the
    high watermark or the last stable offset."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


# -- record batch fields (Kafka's RecordBatch) ------------------------------------------------

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

# -- partitions and replicas -------------------------------------------------------------------

#: A partition without a leader (Kafka's `LeaderAndIsr.NO_LEADER`).
NO_LEADER = -1
#: No leader epoch known (Kafka's `OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH`,
#: `RecordBatch.NO_PARTITION_LEADER_EPOCH` on the wire).
UNDEFINED_EPOCH = -1
#: No end offset known for an epoch (`OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET`).
UNDEFINED_EPOCH_OFFSET = -1
#: The replica id a consumer's Fetch carries (Kafka's `FetchRequest.CONSUMER_REPLICA_ID`).
CONSUMER_REPLICA_ID = -1
INT32_MAX = 2**31 - 1

# -- node ids of the driver's servers -----------------------------------------------------------

#: The controller's node id in DescribeCluster(endpoint_type=2) answers (KIP-919).
CONTROLLER_NODE_ID = 3000
#: The group coordinator's node id when it answers FindCoordinator itself (asked directly, or
#: when forwarded before a broker puts itself in its place); broker ids stay far below it.
GROUP_COORDINATOR_NODE_ID = 3001

# -- the metadata log (Kafka's Topic.CLUSTER_METADATA_TOPIC_PARTITION) -------------------------

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
