"""Kafka's `DelayedProduce`: an acks=all produce waiting in the purgatory
(`delayed.DelayedOperations`) until every partition's high watermark passed its batch with at
least min.insync.replicas in the ISR, or its timeout passed (REQUEST_TIMED_OUT).

Also `ProduceResult`, one partition's answer (Kafka's `PartitionResponse`). Thread-safety: none;
use from the broker's event loop only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparklog.broker.delayed import DelayedOperations, wait_until
from sparklog.errors import KafkaError, RequestTimedOutError
from sparklog.storage.log_validator import RecordError
from sparklog.structs import TopicPartition

if TYPE_CHECKING:
    from sparklog.broker.replica_base import HostedPartition


@dataclass(frozen=True, slots=True)
class ProduceResult:
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: tuple[RecordError, ...] = ()  # KIP-467: the records that failed validation


class DelayedProduce:
    """The partitions of one acks=all produce still waiting: `required` maps each to the offset
    its high watermark must reach; outcomes land in `results`."""

    def __init__(
        self,
        required: dict[TopicPartition, int],
        results: dict[TopicPartition, ProduceResult],
        hosted: Callable[[str, int], HostedPartition],
    ) -> None:
        self.pending = dict(required)
        self.results = results
        self._hosted = hosted

    def try_complete(self, woken: set | None) -> bool:
        """Kafka's `tryComplete`: drop each (woken) partition whose ISR reached its batch or
        that failed (it answers with its error); done when none is left."""
        pending, results = self.pending, self.results
        for tp in list(pending) if woken is None else [t for t in woken if t in pending]:
            offset = pending[tp]
            try:
                hosted = self._hosted(*tp)
                min_isr = hosted.log.config.min_insync_replicas
                if not hosted.partition.acks_all_satisfied(offset, min_isr):
                    continue
            except KafkaError as e:
                results[tp] = ProduceResult(e.code, error_message=str(e))
            del pending[tp]
        return not pending

    async def wait(self, operations: DelayedOperations, timeout_ms: int) -> None:
        """Wait until complete or `timeout_ms` passed; what is still pending then times out."""
        await wait_until(operations, list(self.pending), self.try_complete, timeout_ms / 1000)
        for tp in self.pending:
            self.results[tp] = ProduceResult(
                RequestTimedOutError.code,
                error_message=f"{tp[0]}-{tp[1]}: the ISR did not reach the batch in {timeout_ms} ms",
            )
