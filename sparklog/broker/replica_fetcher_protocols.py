"""What a replica fetcher (`replica_fetcher.ReplicaFetcher`) needs of the broker: the followed
logs and the only writes a follower makes to them (the replica manager), and its owner (the
`ReplicaFetcherManager`). Split out of `replica_fetcher` to keep it readable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from sparklog.broker.config import BrokerConfig
from sparklog.metrics.replication_quota import ReplicationQuotaManager
from sparklog.protocol.outbound import ClientSecurity
from sparklog.storage.log import Log
from sparklog.structs import TopicPartition

#: broker id -> its listener (host, port) per the metadata image, None when it has none.
EndpointLookup = Callable[[int], "tuple[str, int] | None"]


#: What a follower's Fetch says about one partition, (leader epoch, fetch offset, log start
#: offset); an unchanged one is not sent again within a fetch session (KIP-227). A plain tuple:
#: one is built per followed partition per round, and a NamedTuple costs ten times as much.
FollowerFetch = tuple[int, int, int]


class FollowedPartition(Protocol):
    """A partition this broker follows (the replica manager's `HostedPartition`)."""

    @property
    def log(self) -> Log: ...


class FollowerLogs(Protocol):
    """What the fetchers need from the broker's replica manager: its followed logs, and the
    only writes a follower makes to them (appends of fetched batches and truncations)."""

    def following(self, tp: TopicPartition, leader_epoch: int) -> FollowedPartition:
        """The partition, if this broker still follows it at `leader_epoch`; else raises."""
        ...

    def log_start_offset(self, tp: TopicPartition) -> int:
        """The hosted log's start offset, -1 when not hosted."""
        ...

    def append_fetched(
        self,
        tp: TopicPartition,
        leader_epoch: int,
        records: bytes,
        *,
        leader_high_watermark: int,
        leader_log_start_offset: int,
    ) -> int:
        """Append batches fetched from the leader; returns the new log end offset."""
        ...

    def truncate_follower(self, tp: TopicPartition, leader_epoch: int, offset: int) -> int:
        """Cut a followed log to `offset`; returns the new log end offset."""
        ...

    def truncate_fully_follower(self, tp: TopicPartition, leader_epoch: int, offset: int) -> int:
        """Empty a followed log and restart it at `offset`."""
        ...

    async def rebuild_from_tier(
        self, tp: TopicPartition, leader_epoch: int, local_start: int, log_start: int
    ) -> int:
        """Restart a followed log at the leader's local log start, from the remote tier."""
        ...


class FetcherOwner(Protocol):
    """What a fetcher uses of the `ReplicaFetcherManager` that owns it."""

    node_id: int
    replica_manager: FollowerLogs
    config: BrokerConfig
    #: the client side of the inter-broker listener (`outbound.server_client_security`)
    security: ClientSecurity
    endpoint_of: EndpointLookup
    clock_ms: Callable[[], int]
    #: `follower.replication.throttled.rate` (KIP-73), None: no throttle
    quota: ReplicationQuotaManager | None

    def mark_partition_failed(self, tp: TopicPartition, error: Exception, what: str) -> None: ...
