"""ISR changes proposed by partition leaders, sent to the controller (Kafka's
`AlterPartitionManager`, KIP-497).

A leader's `Partition` proposes an ISR change as an `IsrChangeProposed` event; the replica
manager hands it to `submit`. Proposals wait in `unsent` and go out together in one
AlterPartition request; only one request is in flight at a time, and what arrives meanwhile
goes with the next one. A partition keeps at most one proposal pending; a newer one (after
metadata replaced the old) replaces an unsent one, and the partition ignores a late answer to
an old one. Each answer goes to `on_outcome`, which applies it to the partition and says
whether to send the same proposal again (a retriable error); those wait `retry_backoff_ms`
first. A failure of the whole request (connection lost, the controller restarting, a top-level
error) answers every proposal in it with a retriable NETWORK_EXCEPTION, so every proposal is
eventually answered or replaced by newer metadata.

Thread-safety: none; `submit` and `run` belong to the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sparklog.broker.partition import IsrChangeProposed
from sparklog.errors import KafkaError, NetworkExceptionError
from sparklog.metadata.alter_partition import IsrChange, IsrChangeOutcome
from sparklog.structs import TopicPartition

logger = logging.getLogger(__name__)

#: Kafka retries a failed AlterPartition at once through its channel manager, whose reconnect
#: backoff is the client default `retry.backoff.ms` (100 ms); we back off the same, doubling to
#: the `retry.backoff.max.ms` default (1 s) while the controller stays unreachable.
RETRY_BACKOFF_MS = 100
RETRY_BACKOFF_MAX_MS = 1_000

#: (partition, the proposal it answers, the controller's outcome) -> send it again?
OutcomeHandler = Callable[[TopicPartition, IsrChangeProposed, IsrChangeOutcome], bool]


@dataclass(frozen=True, slots=True)
class PendingProposal:
    tp: TopicPartition
    topic_id: uuid.UUID
    proposal: IsrChangeProposed

    def to_change(self) -> IsrChange:
        return IsrChange(
            self.topic_id,
            self.tp[1],
            self.proposal.leader_epoch,
            self.proposal.partition_epoch,
            self.proposal.isr,
        )


class AlterPartitionChannel(Protocol):
    """Where AlterPartition requests go: the broker's controller client (`ControllerClient`),
    or a test's fake controller."""

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, changes: Sequence[IsrChange]
    ) -> list[IsrChangeOutcome]:
        """One outcome per change; raises the KafkaError of a top-level error."""
        ...


class AlterPartitionManager:
    """Batches ISR proposals into AlterPartition requests to `controller`."""

    def __init__(
        self,
        controller: AlterPartitionChannel,
        broker_id: int,
        broker_epoch: Callable[[], int],
        on_outcome: OutcomeHandler,
        *,
        retry_backoff_ms: int = RETRY_BACKOFF_MS,
    ) -> None:
        self.controller = controller
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.on_outcome = on_outcome
        self.retry_backoff_ms = retry_backoff_ms
        self.unsent: dict[TopicPartition, PendingProposal] = {}
        self.in_flight: dict[TopicPartition, PendingProposal] = {}
        self.requests_sent = 0
        self.failures = 0
        self._wake = asyncio.Event()

    def statistics(self) -> dict[str, int]:
        return {
            "unsent": len(self.unsent),
            "in_flight": len(self.in_flight),
            "requests_sent": self.requests_sent,
            "failures": self.failures,
        }

    def submit(self, tp: TopicPartition, topic_id: uuid.UUID, proposal: IsrChangeProposed) -> None:
        """Queue a proposal (replacing an unsent older one of the same partition)."""
        self.unsent[tp] = PendingProposal(tp, topic_id, proposal)
        self._wake.set()

    async def run(self) -> None:
        """Send what is queued, one request at a time, until cancelled."""
        while True:
            while not self.unsent:
                self._wake.clear()
                await self._wake.wait()
            if self.broker_epoch() < 0:  # not registered yet: the controller would refuse
                await asyncio.sleep(self.retry_backoff_ms / 1000)
                continue
            batch, self.unsent = self.unsent, {}
            self.in_flight = batch
            try:
                retry = await self._send(list(batch.values()))
            finally:
                self.in_flight = {}
            if retry:
                await self._requeue_after_backoff(retry)

    async def _send(self, batch: list[PendingProposal]) -> list[PendingProposal]:
        """One AlterPartition; returns the proposals to send again."""
        self.requests_sent += 1
        try:
            outcomes = await self.controller.alter_partition(
                self.broker_id, self.broker_epoch(), [p.to_change() for p in batch]
            )
        except asyncio.CancelledError:
            raise
        except (KafkaError, ConnectionError, OSError, TimeoutError) as e:
            self.failures += 1
            if self.failures in (1, 10) or self.failures % 100 == 0:
                logger.warning("AlterPartition failed (%d times): %r", self.failures, e)
            code = NetworkExceptionError.code  # retriable for the partition, whatever it was
            outcomes = [IsrChangeOutcome(p.topic_id, p.tp[1], code, repr(e)) for p in batch]
        else:
            self.failures = 0
        by_key = {(o.topic_id, o.partition): o for o in outcomes}
        retry = []
        for pending in batch:
            outcome = by_key.get((pending.topic_id, pending.tp[1]))
            if outcome is None:  # the controller skipped it: treat as not attempted, resend
                outcome = IsrChangeOutcome(
                    pending.topic_id, pending.tp[1], NetworkExceptionError.code, "no answer"
                )
            if outcome.error_code:
                logger.info(
                    "ISR change of %s-%d to %s: controller error %d (%s)",
                    *pending.tp,
                    list(pending.proposal.isr),
                    outcome.error_code,
                    outcome.error_message,
                )
            if self.on_outcome(pending.tp, pending.proposal, outcome):
                retry.append(pending)
        return retry

    async def _requeue_after_backoff(self, retry: list[PendingProposal]) -> None:
        backoff_ms = min(RETRY_BACKOFF_MAX_MS, self.retry_backoff_ms * 2 ** min(self.failures, 4))
        await asyncio.sleep(backoff_ms / 1000)
        for pending in retry:
            self.unsent.setdefault(pending.tp, pending)  # a newer proposal supersedes it
