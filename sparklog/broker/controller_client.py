"""A broker's channel to the controller (Kafka's `NodeToControllerChannelManager` and
`BrokerLifecycleManager` RPCs, plus the metadata log fetcher).

Two connections: one long-polls the metadata log (Fetch on `__cluster_metadata-0`), the other
carries registration, heartbeats, producer-id blocks and forwarded admin requests, so a
heartbeat never waits behind a 500 ms metadata poll. A broken connection is reopened on the
next call; the caller retries what failed (every RPC here is safe to resend).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sparklog.errors import error_for_code
from sparklog.metadata.alter_partition import IsrChange, IsrChangeOutcome
from sparklog.protocol import codec, kio_build
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.async_client import AsyncKafkaConnection, connect
from sparklog.protocol.outbound import PLAINTEXT, ClientSecurity, Endpoint
from sparklog.security.listeners import ListenerEndpoint, endpoints_to_record
from sparklog.structs import LATEST_TIMESTAMP, METADATA_PARTITION, METADATA_TOPIC

logger = logging.getLogger(__name__)

METADATA_FETCH_MAX_BYTES = 8 * 1024 * 1024

# The versions this client speaks (the newest both sides speak is used).
_VERSIONS = {
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.BROKER_REGISTRATION: (0, 4),
    ApiKey.BROKER_HEARTBEAT: (0, 1),
    ApiKey.ALLOCATE_PRODUCER_IDS: (0, 0),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.ALTER_PARTITION: (2, 3),
}


def parse_bootstrap(bootstrap: str) -> tuple[str, int]:
    """`host:port` (the first of a comma-separated list) -> (host, port)."""
    first = bootstrap.split(",")[0].strip()
    host, sep, port = first.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"controller address {bootstrap!r}: expected host:port")
    return host, int(port)


def launcher_client_id(
    executor_id: str | None, task_attempt: int, data_dir: str, metrics_endpoint: str | None = None
) -> str:
    """The client id carrying the launcher's facts to the controller (architecture.md §3):
    `metrics_endpoint` is where the broker's process serves Prometheus metrics (the driver's
    `/sd` lists it)."""
    metrics = f"metrics={metrics_endpoint};" if metrics_endpoint else ""
    return (
        f"sparklog-broker;executor={executor_id or 'local'};attempt={task_attempt};"
        f"{metrics}dir={data_dir}"
    )


@dataclass(frozen=True, slots=True)
class MetadataFetch:
    error_code: int
    high_watermark: int
    records: bytes


class ControllerClient:
    """RPCs to the controller at `bootstrap`."""

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "sparklog-broker",
        timeout_ms: int = 30_000,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.host, self.port = parse_bootstrap(bootstrap)
        #: the controller listener's protocol and the broker's login (`controller_client_security`)
        self.security = security
        self.client_id = client_id
        self.timeout_s = timeout_ms / 1000
        # Three connections: the broker's own RPCs (registration, heartbeats, AlterPartition),
        # the metadata long-poll, and client requests forwarded to the controller, so that a
        # huge or broken forwarded request never takes the broker's heartbeats down with it.
        self._connections: dict[str, AsyncKafkaConnection] = {}
        self._lock = asyncio.Lock()
        self.closed = False

    async def close(self) -> None:
        """Close every connection; later calls fail instead of reconnecting."""
        self.closed = True
        for conn in self._connections.values():
            with contextlib.suppress(Exception):
                await conn.close()
        self._connections.clear()

    async def _connection(self, fetch: bool, forward: bool = False) -> AsyncKafkaConnection:
        kind = "fetch" if fetch else "forward" if forward else "rpc"
        async with self._lock:
            if self.closed:
                raise ConnectionError("the controller client is closed (broker stopping)")
            conn = self._connections.get(kind)
            if conn is None or conn.closed:
                conn = await connect(
                    Endpoint(self.host, self.port),
                    self.security,
                    client_id=self.client_id,
                    timeout_s=self.timeout_s,
                )
                self._connections[kind] = conn
            return conn

    async def _call(
        self,
        api_key: ApiKey,
        data: dict[str, Any],
        *,
        fetch: bool = False,
        timeout_s: float | None = None,
    ) -> Any:
        conn = await self._connection(fetch)
        version = conn.version_for(api_key, _VERSIONS[api_key])
        body = kio_build.build(codec.request_schema(api_key, version), data)
        return await conn.request(body, timeout_s=timeout_s or self.timeout_s)

    # -- cluster and lifecycle --------------------------------------------------------------

    async def describe_cluster(self) -> tuple[str, int]:
        """(cluster id, controller id)."""
        response = await self._call(
            ApiKey.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False}
        )
        if response.error_code != 0:
            raise ConnectionError(f"DescribeCluster failed: {response.error_message}")
        return response.cluster_id, response.controller_id

    async def register(
        self,
        *,
        broker_id: int,
        cluster_id: str,
        incarnation_id: uuid.UUID,
        endpoints: Sequence[ListenerEndpoint],
        rack: str | None,
        previous_broker_epoch: int = -1,
    ) -> tuple[int, int]:
        """BrokerRegistration with every advertised listener (the first is the broker's
        default address): (error code, broker epoch)."""
        response = await self._call(
            ApiKey.BROKER_REGISTRATION,
            {
                "broker_id": broker_id,
                "cluster_id": cluster_id,
                "incarnation_id": incarnation_id,
                "listeners": endpoints_to_record(endpoints),
                "features": [],
                "rack": rack,
                "is_migrating_zk_broker": False,
                "log_dirs": [],
                "previous_broker_epoch": previous_broker_epoch,
            },
        )
        return int(response.error_code), int(response.broker_epoch)

    async def heartbeat(
        self,
        *,
        broker_id: int,
        broker_epoch: int,
        metadata_offset: int,
        want_shut_down: bool,
        want_fence: bool = False,
    ) -> Any:
        """BrokerHeartbeat; returns the response (error_code, is_fenced, should_shut_down...).
        `want_fence`: keep this broker fenced (its log dir is offline)."""
        return await self._call(
            ApiKey.BROKER_HEARTBEAT,
            {
                "broker_id": broker_id,
                "broker_epoch": broker_epoch,
                "current_metadata_offset": metadata_offset,
                "want_fence": want_fence,
                "want_shut_down": want_shut_down,
                "offline_log_dirs": [],
            },
        )

    async def allocate_producer_ids(
        self, broker_id: int, broker_epoch: int
    ) -> tuple[int, int, int]:
        """AllocateProducerIds: (error code, first id, count)."""
        response = await self._call(
            ApiKey.ALLOCATE_PRODUCER_IDS, {"broker_id": broker_id, "broker_epoch": broker_epoch}
        )
        return (
            int(response.error_code),
            int(response.producer_id_start),
            int(response.producer_id_len),
        )

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, changes: Sequence[IsrChange]
    ) -> list[IsrChangeOutcome]:
        """AlterPartition: one outcome per change (per-partition error codes inside); raises
        the KafkaError of a top-level error (e.g. StaleBrokerEpochError)."""
        conn = await self._connection(fetch=False)
        version = conn.version_for(ApiKey.ALTER_PARTITION, _VERSIONS[ApiKey.ALTER_PARTITION])
        topics: dict[uuid.UUID, list[dict[str, Any]]] = {}
        for change in changes:
            partition: dict[str, Any] = {
                "partition_index": change.partition,
                "leader_epoch": change.leader_epoch,
                "partition_epoch": change.partition_epoch,
                "leader_recovery_state": 0,
            }
            if version >= 3:  # KIP-903; -1: the members' broker epochs are not checked
                partition["new_isr_with_epochs"] = [
                    {"broker_id": b, "broker_epoch": -1} for b in change.new_isr
                ]
            else:
                partition["new_isr"] = list(change.new_isr)
            topics.setdefault(change.topic_id, []).append(partition)
        data = {
            "broker_id": broker_id,
            "broker_epoch": broker_epoch,
            "topics": [{"topic_id": t, "partitions": ps} for t, ps in topics.items()],
        }
        body = kio_build.build(codec.request_schema(ApiKey.ALTER_PARTITION, version), data)
        response = await conn.request(body, timeout_s=self.timeout_s)
        if response.error_code != 0:
            raise error_for_code(int(response.error_code))(
                f"AlterPartition from broker {broker_id} failed with error {response.error_code}"
            )
        return [
            IsrChangeOutcome(
                topic_id=topic.topic_id,
                partition=int(p.partition_index),
                error_code=int(p.error_code),
                leader_id=int(p.leader_id),
                leader_epoch=int(p.leader_epoch),
                isr=tuple(int(b) for b in p.isr),
                partition_epoch=int(p.partition_epoch),
            )
            for topic in response.topics
            for p in topic.partitions
        ]

    async def version_for(self, api_key: ApiKey, ours: tuple[int, int]) -> int:
        """The newest version of `api_key` in `ours` that the controller speaks."""
        conn = await self._connection(fetch=False, forward=True)
        return conn.version_for(api_key, ours)

    async def report_quota_usage(self, body: Any) -> Any:
        """sparklog's QuotaUsage (cluster-wide quotas) on the broker's RPC connection."""
        conn = await self._connection(fetch=False)
        return await conn.request(body, timeout_s=self.timeout_s)

    async def forward(self, body: Any, timeout_s: float | None = None) -> Any:
        """Send an admin request to the controller as it came and return its response (on
        the forwarding connection, apart from the broker's own RPCs)."""
        conn = await self._connection(fetch=False, forward=True)
        return await conn.request(body, timeout_s=timeout_s or self.timeout_s)

    # -- the metadata log -------------------------------------------------------------------

    async def fetch_metadata(self, offset: int, max_wait_ms: int) -> MetadataFetch:
        """One long-poll Fetch of `__cluster_metadata-0` from `offset`."""
        response = await self._call(
            ApiKey.FETCH,
            {
                "replica_id": -1,
                "max_wait": max_wait_ms,
                "min_bytes": 1,
                "max_bytes": METADATA_FETCH_MAX_BYTES,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": METADATA_TOPIC,
                        "partitions": [
                            {
                                "partition": METADATA_PARTITION,
                                "fetch_offset": offset,
                                "partition_max_bytes": METADATA_FETCH_MAX_BYTES,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
            },
            fetch=True,
            timeout_s=self.timeout_s + max_wait_ms / 1000,
        )
        if getattr(response, "error_code", 0):
            return MetadataFetch(int(response.error_code), -1, b"")
        partition = response.responses[0].partitions[0]
        return MetadataFetch(
            int(partition.error_code),
            int(partition.high_watermark),
            bytes(partition.records or b""),
        )

    async def metadata_end_offset(self) -> int:
        """The controller's metadata log end offset (ListOffsets latest, or a Fetch's HW)."""
        conn = await self._connection(fetch=False)
        if ApiKey.LIST_OFFSETS in conn.api_versions:
            response = await self._call(
                ApiKey.LIST_OFFSETS,
                {
                    "replica_id": -1,
                    "isolation_level": 0,
                    "topics": [
                        {
                            "name": METADATA_TOPIC,
                            "partitions": [
                                {
                                    "partition_index": METADATA_PARTITION,
                                    "timestamp": LATEST_TIMESTAMP,
                                }
                            ],
                        }
                    ],
                },
            )
            partition = response.topics[0].partitions[0]
            if partition.error_code == 0:
                return int(partition.offset)
        # The single-node controller's metadata HW is its log end offset.
        fetched = await self.fetch_metadata(2**62, 0)
        return fetched.high_watermark


class ProducerIdManager:
    """Producer ids for InitProducerId from blocks the controller allocates (Kafka's
    `RPCProducerIdManager`): the next block is requested when one is used up."""

    def __init__(self, controller: ControllerClient, broker_id: int) -> None:
        self.controller = controller
        self.broker_id = broker_id
        self.broker_epoch = -1
        self._next = 0
        self._end = 0  # the current block is [_next, _end)
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        """A producer id never handed out before; raises ConnectionError / KafkaError."""
        async with self._lock:
            if self._next >= self._end:
                code, start, count = await self.controller.allocate_producer_ids(
                    self.broker_id, self.broker_epoch
                )
                if code != 0:
                    raise error_for_code(code)(f"AllocateProducerIds failed with error {code}")
                assert count > 0 and start >= self._end, (start, count)
                self._next, self._end = start, start + count
            producer_id = self._next
            self._next += 1
            return producer_id
