"""The produce path of the replica manager (Kafka's `ReplicaManager.appendRecords`): append each
partition's batches as leader, then, for acks=all, park the request as a `DelayedProduce` until
the ISR reached the batches. Thread-safety: use from the broker's event loop only.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparklog.broker.delayed_produce import DelayedProduce, ProduceResult
from sparklog.broker.replica_base import (
    EXPECTED_PRODUCE_ERRORS,
    HostedPartition,
    ReplicaManagerBase,
    error_code_of,
)
from sparklog.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidRequiredAcksError,
    MessageTooLargeError,
)
from sparklog.protocol import cooperative
from sparklog.protocol.request_metrics import remote_wait
from sparklog.records.batch import batch_size_at
from sparklog.records.errors import InvalidCrcError
from sparklog.storage.log_validator import RecordValidationError
from sparklog.storage.producer_append_info import AppendOrigin
from sparklog.structs import TopicPartition


class AppendPath(ReplicaManagerBase):
    """Leader appends: `append_records` (Produce, WriteTxnMarkers)."""

    async def append_records(
        self,
        acks: int,
        timeout_ms: int,
        entries: Mapping[TopicPartition, bytes | None],
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        transaction_version: int = 0,
    ) -> dict[TopicPartition, ProduceResult]:
        """Append each partition's batches as leader; acks=-1 waits for the high watermark.
        `origin=COORDINATOR` appends transaction markers (WriteTxnMarkers) of
        `transaction_version` (2: the marker's epoch must be above the data's, KIP-890)."""
        if acks not in (0, 1, -1):
            message = f"acks={acks}: Kafka accepts 0, 1 or -1 (all)"
            return {
                tp: ProduceResult(InvalidRequiredAcksError.code, error_message=message)
                for tp in entries
            }
        now_ms = self._clock_ms()
        results: dict[TopicPartition, ProduceResult] = {}
        required: dict[TopicPartition, int] = {}
        for tp, records in entries.items():
            # a produce to many partitions lets other connections run between appends
            if cooperative.due(1 + (len(records) >> 14 if records else 0)):
                await cooperative.pause()
            results[tp], next_offset = self._append_one(
                tp, records, acks, now_ms, origin, transaction_version
            )
            if acks == -1 and next_offset is not None:
                required[tp] = next_offset
        if required:
            await self._await_acks_all(required, results, timeout_ms)
        return results

    def _append_one(
        self,
        tp: TopicPartition,
        records: bytes | None,
        acks: int,
        now_ms: int,
        origin: AppendOrigin,
        transaction_version: int = 0,
    ) -> tuple[ProduceResult, int | None]:
        hosted = None
        try:
            self.dir_failures.check()
            hosted = self.hosted(*tp)
            hosted.partition.check_leader()
            if acks == -1:
                hosted.partition.check_enough_replicas(hosted.log.config.min_insync_replicas)
            if records is None:
                raise CorruptMessageError(f"produce to {tp[0]}-{tp[1]} carried null records")
            first_size = batch_size_at(records, 0)
            if (
                origin is AppendOrigin.CLIENT
                and first_size is not None
                and first_size < len(records)
            ):
                raise InvalidRecordError(  # as Kafka's LogValidator: clients send one batch
                    f"produce to {tp[0]}-{tp[1]} carried more than one record batch; Kafka's "
                    "clients send one batch per partition and request"
                )
            info = hosted.log.append_as_leader(
                records,
                hosted.partition.leader_epoch,
                now_ms,
                origin=origin,
                decompressed_max_bytes=self.decompressed_max_bytes,
                transaction_version=transaction_version,
            )
        except Exception as e:  # noqa: BLE001 - becomes this partition's error code
            self._on_storage_error(e, f"produce to {tp[0]}-{tp[1]}")
            self._count_failed_produce(hosted, records, e)
            code, message = error_code_of(e, f"produce to {tp[0]}-{tp[1]}")
            record_errors = tuple(e.record_errors) if isinstance(e, RecordValidationError) else ()
            return ProduceResult(code, error_message=message, record_errors=record_errors), None
        if not info.duplicate:
            # every leader append, transaction markers (WriteTxnMarkers) too, as Kafka's
            # appendToLocalLog counts them: BytesIn then matches what the log grew by
            hosted.stats.on_appended(info.valid_bytes, info.records_count)
            events = hosted.partition.on_leader_append(hosted.log.log_end_offset)
            self._apply_events(tp, hosted, events)  # wakes waiters when there are events
            if not events:
                self._notify_appended(tp, hosted)  # follower fetches wait for appends, not the HW
        result = ProduceResult(
            0, info.first_offset, info.log_append_time_ms, hosted.log.log_start_offset
        )
        return result, info.last_offset + 1

    def _count_failed_produce(
        self, hosted: HostedPartition | None, records: bytes | None, e: Exception
    ) -> None:
        """Kafka's failed-produce metrics: the request counted, unexpected errors counted as
        failed, a batch over max.message.bytes as rejected bytes, a CRC mismatch as an invalid
        CRC (`UnifiedLog.analyzeAndValidateRecords`)."""
        stats = hosted.stats if hosted is not None else self.topic_stats.unhosted()
        rejected = len(records) if records and isinstance(e, MessageTooLargeError) else 0
        stats.on_produce_failed(not isinstance(e, EXPECTED_PRODUCE_ERRORS), rejected)
        if isinstance(e, InvalidCrcError) and self.topic_stats.enabled:
            self.topic_stats.invalid_message_crc_records.count += 1

    async def _await_acks_all(
        self,
        required: dict[TopicPartition, int],
        results: dict[TopicPartition, ProduceResult],
        timeout_ms: int,
    ) -> None:
        """Kafka's `DelayedProduce`: done when every partition's HW passed its batch."""
        self.delayed_produces += 1
        try:
            with remote_wait():  # the request's RemoteTimeMs
                await DelayedProduce(required, results, self.hosted).wait(self.delayed, timeout_ms)
        finally:
            self.delayed_produces -= 1
