"""The follower fetchers of one broker, keyed by (leader id, fetcher id) (Kafka's
`ReplicaFetcherManager` / `AbstractFetcherManager`); the fetchers themselves, and the theory of
operation of a followed partition, are in `replica_fetcher`.
"""

from __future__ import annotations

import logging
import uuid
import zlib
from collections.abc import Callable

from sparklog.broker.config import BrokerConfig
from sparklog.broker.log_manager import TopicPartition
from sparklog.broker.partition_fetch_state import PartitionFetchState
from sparklog.broker.replica_fetcher import ReplicaFetcher
from sparklog.broker.replica_fetcher_protocols import EndpointLookup, FollowerLogs
from sparklog.errors import KafkaStorageError
from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Metrics
from sparklog.metrics.replication_quota import ReplicationQuotaManager
from sparklog.protocol.outbound import server_client_security

logger = logging.getLogger(__name__)

#: Kafka's `kafka.server:type=ReplicaFetcherManager,name=MaxLag,clientId=Replica`
MAX_LAG = MetricName.of("kafka.server", "ReplicaFetcherManager", "MaxLag", {"clientId": "Replica"})


def fetcher_id_for(tp: TopicPartition, num_fetchers: int) -> int:
    """Which of a leader's fetchers follows `tp` (Kafka's `getFetcherId`, a stable hash)."""
    return (31 * zlib.crc32(tp[0].encode()) + tp[1]) % max(1, num_fetchers)


class ReplicaFetcherManager:
    """The fetchers of broker `node_id`, keyed by (leader id, fetcher id)."""

    def __init__(
        self,
        node_id: int,
        replica_manager: FollowerLogs,
        config: BrokerConfig,
        endpoint_of: EndpointLookup,
        *,
        clock_ms: Callable[[], int],
        metrics: Metrics | None = None,
    ) -> None:
        self.node_id = node_id
        self.replica_manager = replica_manager
        self.config = config
        #: security.inter.broker.protocol and the broker's own login (KIP-368 renewals included)
        self.security = server_client_security(config.listener_config)
        self.endpoint_of = endpoint_of
        self.clock_ms = clock_ms
        self._fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._assigned: dict[TopicPartition, tuple[int, int]] = {}
        # Kafka's failedPartitions: not followed until the metadata assigns them again
        self.failed_partitions: set[TopicPartition] = set()
        self.closed = False
        if metrics is not None:
            metrics.gauge(MAX_LAG, self.max_lag)

    def max_lag(self) -> float:
        """The largest lag (messages behind the leader's high watermark) of any followed
        partition (Kafka's `FetcherManagerMaxLag`), read at scrape time."""
        return float(
            max(
                (s.lag for f in self._fetchers.values() for s in f.partitions.values()),
                default=0,
            )
        )
        #: `follower.replication.throttled.rate` (KIP-73); set by the broker server
        self.quota: ReplicationQuotaManager | None = None

    def statistics(self) -> dict[str, int]:
        return {"fetchers": len(self._fetchers), "partitions": len(self._assigned)}

    def fetch_state(self, tp: TopicPartition) -> PartitionFetchState | None:
        key = self._assigned.get(tp)
        return None if key is None else self._fetchers[key].partitions.get(tp)

    def add_partition(
        self, tp: TopicPartition, topic_id: uuid.UUID, leader_id: int, leader_epoch: int
    ) -> None:
        """Follow `tp` from `leader_id` at `leader_epoch` (truncating first)."""
        self.remove_partition(tp)
        self.failed_partitions.discard(tp)
        if self.closed or leader_id < 0 or leader_id == self.node_id:
            return  # an offline partition: nobody to fetch from
        key = (leader_id, fetcher_id_for(tp, self.config.num_replica_fetchers))
        fetcher = self._fetchers.get(key)
        if fetcher is None:
            fetcher = self._fetchers[key] = ReplicaFetcher(self, *key)
            fetcher.start()
        fetcher.add(tp, PartitionFetchState(topic_id, leader_id, leader_epoch))
        self._assigned[tp] = key

    def remove_partition(self, tp: TopicPartition) -> None:
        """Stop following `tp` now; a fetcher left without partitions stops."""
        key = self._assigned.pop(tp, None)
        if key is None:
            return
        fetcher = self._fetchers[key]
        fetcher.remove(tp)
        if not fetcher.partitions:
            del self._fetchers[key]
            fetcher.stop()

    def mark_partition_failed(self, tp: TopicPartition, error: Exception, what: str) -> None:
        """Stop following `tp` after its truncation failed (Kafka's `AbstractFetcherThread`
        `doTruncate` -> `markPartitionFailed`): a replica whose cut went wrong half way may hold
        a log, producer state or high watermark that cannot be trusted, and must not fetch its
        way back into the ISR; the next leader change for `tp` tries again. An offline log dir
        was reported by its failure channel; anything else is a bug, logged with its traceback."""
        if isinstance(error, KafkaStorageError):
            logger.debug("broker %d: %s of %s-%d failed: %s", self.node_id, what, *tp, error)
        else:
            logger.error(
                "broker %d: unexpected error in %s of %s-%d",
                self.node_id,
                what,
                *tp,
                exc_info=error,
            )
        self.remove_partition(tp)
        self.failed_partitions.add(tp)
        logger.warning(
            "broker %d: partition %s-%d marked as failed; it is not followed until its "
            "leadership changes",
            self.node_id,
            *tp,
        )

    async def shutdown(self) -> None:
        """Stop every fetcher and wait for them."""
        self.closed = True
        fetchers = list(self._fetchers.values())
        self._fetchers.clear()
        self._assigned.clear()
        for fetcher in fetchers:
            fetcher.stop()
        for fetcher in fetchers:
            await fetcher.wait_stopped()
