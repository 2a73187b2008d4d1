"""DescribeQuorum (KIP-595, KIP-853) for the driver's controller: a one-voter quorum.

sparklog's metadata log has one writer, the controller on the driver, so the quorum Kafka's
`kafka-metadata-quorum.sh describe` asks about has one voter, which is always the leader and
always caught up: its log end offset is the high watermark. The brokers are the observers, as
in KRaft (they replicate `__cluster_metadata` without voting); what they have applied is what
each reported in its last BrokerHeartbeat (`current_metadata_offset`), at that heartbeat's
wall-clock time. Brokers forward the request here, as Kafka's brokers forward it to the active
controller; it needs DESCRIBE on the cluster (`metadata.admin_authz`).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from sparklog.controller.controller_context import ControllerContext
from sparklog.errors import UnknownTopicOrPartitionError
from sparklog.protocol import kio_build
from sparklog.protocol.connection import Request
from sparklog.structs import CONTROLLER_NODE_ID, METADATA_PARTITION, METADATA_TOPIC

#: KIP-853's directory ids are not kept by sparklog: Kafka's "no directory id" (ZERO_UUID)
_NO_DIRECTORY_ID = uuid.UUID(int=0)
#: The controller's listener name in DescribeQuorum v2's node list (Kafka's default
#: `controller.listener.names`)
CONTROLLER_LISTENER_NAME = "CONTROLLER"


@dataclass(frozen=True, slots=True)
class ObserverState:
    """A broker's last report: the metadata offset it had applied, when (wall-clock ms), and
    when it last had everything the controller had written."""

    log_end_offset: int
    last_fetch_ms: int
    last_caught_up_ms: int


class QuorumObservers:
    """The brokers' metadata progress as their heartbeats report it.

    Not thread-safe: owned by the controller's event loop. Bounded by the brokers ever
    registered (one entry each, replaced on every heartbeat)."""

    def __init__(self) -> None:
        self._states: dict[int, ObserverState] = {}

    def on_heartbeat(self, broker_id: int, metadata_offset: int, end_offset: int) -> None:
        # wall-clock: DescribeQuorum reports timestamps that other processes compare
        now_ms = int(time.time() * 1000)
        previous = self._states.get(broker_id)
        caught_up_ms = now_ms if metadata_offset >= end_offset else -1
        if caught_up_ms < 0 and previous is not None:
            caught_up_ms = previous.last_caught_up_ms
        self._states[broker_id] = ObserverState(metadata_offset, now_ms, caught_up_ms)

    def get(self, broker_id: int) -> ObserverState | None:
        return self._states.get(broker_id)


def describe_quorum_response(
    server: ControllerContext, observers: QuorumObservers, request: Request
) -> Any:
    """The answer to a DescribeQuorum for `__cluster_metadata-0` (any other partition gets
    UNKNOWN_TOPIC_OR_PARTITION, as Kafka's raft layer answers)."""
    assert server.metadata_log is not None and server.controller is not None  # serving
    end_offset = server.metadata_log.end_offset
    now_ms = int(time.time() * 1000)
    voter = {
        "replica_id": CONTROLLER_NODE_ID,
        "replica_directory_id": _NO_DIRECTORY_ID,
        "log_end_offset": end_offset,
        "last_fetch_timestamp": -1,  # Kafka reports -1 for the leader itself
        "last_caught_up_timestamp": now_ms,
    }
    observer_rows = []
    for broker_id in sorted(server.controller.image.brokers):
        state = observers.get(broker_id)
        observer_rows.append(
            {
                "replica_id": broker_id,
                "replica_directory_id": _NO_DIRECTORY_ID,
                "log_end_offset": -1 if state is None else state.log_end_offset,
                "last_fetch_timestamp": -1 if state is None else state.last_fetch_ms,
                "last_caught_up_timestamp": -1 if state is None else state.last_caught_up_ms,
            }
        )
    topics = []
    for topic in request.body.topics:
        partitions = []
        for p in topic.partitions:
            known = topic.topic_name == METADATA_TOPIC and p.partition_index == METADATA_PARTITION
            partitions.append(
                {
                    "partition_index": p.partition_index,
                    "error_code": 0 if known else UnknownTopicOrPartitionError.code,
                    "error_message": None
                    if known
                    else f"sparklog's quorum is {METADATA_TOPIC}-{METADATA_PARTITION}",
                    "leader_id": CONTROLLER_NODE_ID if known else -1,
                    "leader_epoch": server.metadata_log.leader_epoch if known else -1,
                    "high_watermark": end_offset if known else -1,
                    "current_voters": [voter] if known else [],
                    "observers": observer_rows if known else [],
                }
            )
        topics.append({"topic_name": topic.topic_name, "partitions": partitions})
    listener = {"name": CONTROLLER_LISTENER_NAME, "host": server.host, "port": server.port}
    return kio_build.response(
        request,
        {
            "error_code": 0,
            "error_message": None,
            "topics": topics,
            "nodes": [{"node_id": CONTROLLER_NODE_ID, "listeners": [listener]}],
        },
    )
