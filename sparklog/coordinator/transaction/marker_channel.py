"""Sends COMMIT/ABORT markers to partition leaders (Kafka's `TransactionMarkerChannelManager`).

Each `MarkerJob` (one decided transaction) keeps the partitions still without a marker. A round
groups every job's remaining partitions by their current leader, sends one WriteTxnMarkers
request per broker, and drops the partitions that answered without error; the rest (leader
moved, broker down, not enough replicas) wait `retry_backoff_ms` and go in the next round, to
whatever broker leads them then. A partition of a deleted topic needs no marker. When a job has
no partition left, `on_done(job)` lets the coordinator write CompleteCommit / CompleteAbort.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v2.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from kio.static.primitive import i8, i16, i32

from sparklog.coordinator.transaction.persisted import MarkerJob
from sparklog.errors import TransactionCoordinatorFencedError
from sparklog.protocol.async_client import BrokerConnections
from sparklog.protocol.outbound import PLAINTEXT, ClientSecurity
from sparklog.structs import TopicPartition

logger = logging.getLogger(__name__)

#: (broker id, host, port) of a partition's leader, None while it has none
LeaderLookup = Callable[[str, int], tuple[int, str, int] | None]


class TransactionMarkerChannel:
    """Delivers every job's markers, retrying across leader changes; runs on the loop."""

    def __init__(
        self,
        leader_of: LeaderLookup,
        partition_count: Callable[[str], int],
        on_done: Callable[[MarkerJob], None],
        *,
        retry_backoff_ms: int = 100,
        request_timeout_ms: int = 30_000,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        #: the brokers' inter-broker listener's protocol and the coordinator's login
        self.security = security
        self.leader_of = leader_of
        self.partition_count = partition_count
        self.on_done = on_done
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self._remaining: dict[MarkerJob, set[TopicPartition]] = {}
        self._connections = BrokerConnections(security, client_id="sparklog-txn-markers")
        self._wake = asyncio.Event()
        self.markers_written = 0

    def add(self, job: MarkerJob) -> None:
        self._remaining[job] = set(job.partitions)
        self._wake.set()

    def pending(self) -> int:
        return len(self._remaining)

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._remaining:
                await self._round()
                if self._remaining:
                    await asyncio.sleep(self.retry_backoff_ms / 1000)

    async def close(self) -> None:
        await self._connections.close()

    async def _round(self) -> None:
        by_broker: dict[int, tuple[str, int, dict[MarkerJob, list[TopicPartition]]]] = {}
        for job, remaining in list(self._remaining.items()):
            for tp in sorted(remaining):
                if not 0 <= tp[1] < self.partition_count(tp[0]):
                    remaining.discard(tp)  # the topic is gone, and its records with it
                    continue
                leader = self.leader_of(*tp)
                if leader is not None:
                    broker_id, host, port = leader
                    jobs = by_broker.setdefault(broker_id, (host, port, {}))[2]
                    jobs.setdefault(job, []).append(tp)
            self._maybe_done(job)
        await asyncio.gather(
            *(self._send(b, host, port, jobs) for b, (host, port, jobs) in by_broker.items())
        )

    def _maybe_done(self, job: MarkerJob) -> None:
        if job in self._remaining and not self._remaining[job]:
            del self._remaining[job]
            self.on_done(job)

    async def _send(
        self,
        broker_id: int,
        host: str,
        port: int,
        jobs: dict[MarkerJob, list[TopicPartition]],
    ) -> None:
        # one marker per producer id and request: responses are matched by producer id
        batches: list[dict[int, tuple[MarkerJob, list[TopicPartition]]]] = []
        for job, partitions in jobs.items():
            for batch in batches:
                if job.producer_id not in batch:
                    batch[job.producer_id] = (job, partitions)
                    break
            else:
                batches.append({job.producer_id: (job, partitions)})
        for batch in batches:
            try:
                conn = await self._connections.get(broker_id, host, port)
                response = await conn.request(
                    _request(batch.values()), timeout_s=self.request_timeout_ms / 1000
                )
            except (ConnectionError, OSError, TimeoutError) as e:
                logger.info("WriteTxnMarkers to broker %d failed (%s); retrying", broker_id, e)
                await self._connections.drop(broker_id)
                return
            self._on_response(broker_id, batch, response)

    def _on_response(
        self,
        broker_id: int,
        batch: dict[int, tuple[MarkerJob, list[TopicPartition]]],
        response: Any,
    ) -> None:
        for result in response.markers:
            entry = batch.get(int(result.producer_id))
            if entry is None:
                continue
            job = entry[0]
            remaining = self._remaining.get(job)
            if remaining is None:
                continue
            for topic in result.topics:
                for p in topic.partitions:
                    tp, code = (topic.name, int(p.partition_index)), int(p.error_code)
                    if code == 0:
                        remaining.discard(tp)
                        self.markers_written += 1
                    elif code == TransactionCoordinatorFencedError.code:
                        logger.error(
                            "broker %d fenced this coordinator's markers for %s; a newer "
                            "coordinator owns the transaction",
                            broker_id,
                            job.transactional_id,
                        )
                        del self._remaining[job]
                        return
                    else:
                        logger.debug("marker for %s on %s: error %d, retrying", job, tp, code)
            self._maybe_done(job)


def _request(jobs: Any) -> WriteTxnMarkersRequest:
    markers = []
    for job, partitions in jobs:
        topics: dict[str, list[int]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append(partition)
        markers.append(
            WritableTxnMarker(
                producer_id=ProducerId(job.producer_id),
                producer_epoch=i16(job.producer_epoch),
                transaction_result=job.committed,
                topics=tuple(
                    WritableTxnMarkerTopic(
                        name=TopicName(t), partition_indexes=tuple(i32(p) for p in ps)
                    )
                    for t, ps in topics.items()
                ),
                coordinator_epoch=i32(job.coordinator_epoch),
                transaction_version=i8(job.transaction_version),
            )
        )
    return WriteTxnMarkersRequest(markers=tuple(markers))
