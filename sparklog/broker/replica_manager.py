"""The partitions a broker hosts and the reads and writes on them (Kafka's `ReplicaManager`).

`apply_metadata` reconciles the hosted partitions with the metadata image: it opens or creates
the log of every partition assigned here, hands the registration to the sans-IO `Partition`
(leader, follower), applies the events it returns (high watermark to the log, follower fetchers
started or stopped, ISR proposals sent, waiting requests woken) and deletes the logs of
partitions that left. Produce appends through the leader's log; acks=all waits until the high
watermark passes the batch. Fetch reads up to the high watermark (read_uncommitted), the last
stable offset (read_committed) or the log end (followers, whose fetch position moves the high
watermark and the ISR) and long-polls through `DelayedOperations` until `min_bytes` are there
or `max_wait_ms` passed. Every leader append wakes waiting fetches, so followers see it at once.

Replication hooks (set by the broker; None in tests without replication): `fetchers` follows
partitions this broker does not lead (`replica_fetcher_manager.ReplicaFetcherManager`), and
`alter_partition` carries ISR proposals to the controller (`isr_manager.AlterPartitionManager`).
The fetchers write through `append_fetched` / `truncate_follower`, which check that the
partition is still followed at the fetcher's leader epoch.

Errors are per partition, as Kafka answers them: every `KafkaError` becomes its code, a corrupt
batch CORRUPT_MESSAGE, anything unexpected UNKNOWN_SERVER_ERROR (logged). Thread-safety: use from
the broker's event loop only (logs guard themselves against the background threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Collection, Generator, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from sparklog.broker.delayed import DelayedOperations, FollowerFetches, wait_until
from sparklog.broker.log_manager import LogManager
from sparklog.broker.partition import (
    BecameFollower,
    BecameLeader,
    Event,
    HighWatermarkAdvanced,
    IsrChangeProposed,
    Partition,
    PartitionRegistration,
    Role,
)
from sparklog.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidRequiredAcksError,
    KafkaError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from sparklog.protocol import cooperative
from sparklog.records.batch import batch_size_at, read_header
from sparklog.records.errors import CorruptRecordError
from sparklog.records.file_records import FileRecords
from sparklog.storage.config import LogConfig
from sparklog.storage.log import Log
from sparklog.storage.log_validator import RecordError, RecordValidationError
from sparklog.storage.producer_state import AppendOrigin
from sparklog.storage.txn_index import AbortedTxn
from sparklog.structs import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, IsolationLevel, TopicPartition

logger = logging.getLogger(__name__)

DELETE_TO_HIGH_WATERMARK = -1  # DeleteRecords offset -1 = up to the high watermark


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """What the replica manager needs to know about one topic from the image."""

    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration]
    config: LogConfig


@dataclass(slots=True)
class HostedPartition:
    partition: Partition
    log: Log
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class ProduceResult:
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: tuple[RecordError, ...] = ()  # KIP-467: the records that failed validation


@dataclass(frozen=True, slots=True)
class FetchPartition:
    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class FetchParams:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int = 0
    #: large reads may be file slices the network layer sends with sendfile
    zero_copy: bool = False

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0


#: `unchanged(tp, high_watermark, log_start_offset)`: a caught-up partition need not be answered.
Unchanged = Callable[[TopicPartition, int, int], bool]


class FetchResult(NamedTuple):
    """One partition's answer to a fetch (a tuple: a large session builds one per partition)."""

    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | FileRecords = b""
    aborted_transactions: tuple[AbortedTxn, ...] | None = None
    leader_id: int = -1
    leader_epoch: int = -1


def error_code_of(e: Exception, what: str) -> tuple[int, str]:
    """Kafka's error code (and message) for an exception raised while serving `what`."""
    if isinstance(e, KafkaError):
        return e.code, str(e)
    if isinstance(e, CorruptRecordError):
        return CorruptMessageError.code, str(e)
    if isinstance(e, OSError):  # a full or failing disk: Kafka's KAFKA_STORAGE_ERROR, no traceback
        logger.error("storage error serving %s: %s", what, e)
        return KafkaStorageError.code, f"the broker's log dir failed: {e}"
    logger.exception("unexpected error serving %s", what)
    return UnknownServerError.code, f"{type(e).__name__}: {e}"


class ReplicaManager:
    """Hosted partitions of broker `node_id`, backed by `log_manager`."""

    def __init__(
        self,
        node_id: int,
        log_manager: LogManager,
        *,
        clock_ms: Callable[[], int],
        fetch_max_bytes: int = 57_671_680,
        delayed: DelayedOperations | None = None,
    ) -> None:
        self.node_id = node_id
        self.log_manager = log_manager
        self.dir_failures = log_manager.dir_failures
        self.fetch_max_bytes = fetch_max_bytes
        self.decompressed_max_bytes = log_manager.config.sparklog_batch_decompressed_max_bytes
        self._clock_ms = clock_ms
        self.delayed = delayed or DelayedOperations()
        #: the keys fetches of live followers have waited under (one per broker; any other
        #: replica id waits under its partitions, so a client cannot grow this set)
        self._follower_keys: set[FollowerFetches] = set()
        self._partitions: dict[TopicPartition, HostedPartition] = {}
        self._topics: dict[str, TopicMetadata] = {}
        self._live_brokers: frozenset[int] | None = None  # None: every replica may join an ISR
        self.fetchers: Any = None  # ReplicaFetcherManager: add_partition / remove_partition
        self.alter_partition: Any = None  # AlterPartitionManager: submit

    # -- metadata ---------------------------------------------------------------------------

    @property
    def partitions(self) -> dict[TopicPartition, HostedPartition]:
        return dict(self._partitions)

    def apply_metadata(
        self, topics: Mapping[str, TopicMetadata], live_brokers: Collection[int] | None = None
    ) -> None:
        """Make the hosted partitions match the image (see module doc). `live_brokers`: the
        unfenced brokers, the only ones a leader proposes for its ISR (None: all)."""
        for _step in self._apply_steps(topics, live_brokers):
            pass

    async def apply_metadata_cooperatively(
        self,
        topics: Mapping[str, TopicMetadata],
        live_brokers: Collection[int] | None = None,
        slice_s: float = 0.05,
    ) -> None:
        """`apply_metadata`, letting the event loop run every `slice_s`: creating a thousand
        logs takes seconds of file-system calls, and a loop blocked that long misses its
        heartbeats and gets the broker fenced (Kafka applies metadata on its own thread)."""
        loop = asyncio.get_running_loop()
        yield_at = loop.time() + slice_s
        for _step in self._apply_steps(topics, live_brokers):
            if loop.time() >= yield_at:
                await asyncio.sleep(0)
                yield_at = loop.time() + slice_s

    def _apply_steps(
        self, topics: Mapping[str, TopicMetadata], live_brokers: Collection[int] | None
    ) -> Iterator[None]:
        """The reconciliation, one step per partition removed, created or updated."""
        self._topics = dict(topics)
        self._live_brokers = None if live_brokers is None else frozenset(live_brokers)
        self._follower_keys = {
            k for k in self._follower_keys if live_brokers is None or k.replica_id in live_brokers
        }
        wanted: dict[TopicPartition, tuple[TopicMetadata, PartitionRegistration]] = {}
        for topic in topics.values():
            for index, registration in topic.partitions.items():
                if self.node_id in registration.replicas:
                    wanted[(topic.name, index)] = (topic, registration)
        for tp, hosted in list(self._partitions.items()):
            found = wanted.get(tp)
            if found is None or found[0].topic_id != hosted.topic_id:
                self._remove(tp)
                yield
        for tp, (topic, registration) in wanted.items():
            if tp not in self._partitions and self.dir_failures.offline:
                continue  # no new logs on a dead disk; a restart creates them
            hosted = self._partitions.get(tp) or self._host(tp, topic)
            self.log_manager.update_config(*tp, topic.config)
            hosted.partition.min_insync_replicas = hosted.log.config.min_insync_replicas
            events = hosted.partition.apply_registration(
                registration, self._clock_ms(), hosted.log.log_end_offset
            )
            self._apply_events(tp, hosted, events)
            yield

    def _host(self, tp: TopicPartition, topic: TopicMetadata) -> HostedPartition:
        opened = self.log_manager.get_or_create_log(*tp, topic.topic_id, topic.config)
        partition = Partition(tp[0], tp[1], self.node_id)
        partition.reset_high_watermark(opened.high_watermark)
        hosted = HostedPartition(partition, opened, topic.topic_id)
        self._partitions[tp] = hosted
        return hosted

    def _remove(self, tp: TopicPartition) -> None:
        if self.fetchers is not None:
            self.fetchers.remove_partition(tp)
        hosted = self._partitions.pop(tp)
        hosted.partition.mark_deleted()
        self.log_manager.delete_log(*tp)
        self._notify_all(tp)

    def _apply_events(
        self, tp: TopicPartition, hosted: HostedPartition, events: list[Event]
    ) -> None:
        for event in events:
            if isinstance(event, HighWatermarkAdvanced):
                kept = hosted.log.update_high_watermark(event.high_watermark)
                assert kept == event.high_watermark, (tp, kept, event)
            elif isinstance(event, BecameLeader):
                if self.fetchers is not None:  # first: nothing fetched lands after we lead
                    self.fetchers.remove_partition(tp)
                # Kafka's maybeAssignEpochStartOffset: the epoch starts at the current log end,
                # so OffsetForLeaderEpoch answers for it before the first append.
                latest = hosted.log.latest_epoch
                if latest is None or event.leader_epoch > latest:
                    hosted.log.epoch_cache.assign(event.leader_epoch, hosted.log.log_end_offset)
            elif isinstance(event, BecameFollower):
                if self.fetchers is not None and not self.dir_failures.offline:
                    self.fetchers.add_partition(
                        tp, hosted.topic_id, event.leader, event.leader_epoch
                    )
            elif isinstance(event, IsrChangeProposed):
                logger.info("%s-%d: proposing ISR %s", *tp, list(event.isr))
                if self.alter_partition is not None:
                    self.alter_partition.submit(tp, hosted.topic_id, event)
        if events:
            self._notify_all(tp)

    def _notify_all(self, tp: TopicPartition) -> None:
        """Wake every request waiting on `tp`: its own waiters and every follower's fetch (a
        change of leadership, ISR, high watermark or log start)."""
        delayed = self.delayed
        delayed.notify(tp)
        for key in self._follower_keys:
            delayed.notify(key, tp)

    def _notify_appended(self, tp: TopicPartition, hosted: HostedPartition) -> None:
        """Wake the requests an append interests: waiters on `tp` and its followers' fetches."""
        delayed = self.delayed
        delayed.notify(tp)
        node_id = self.node_id
        for replica_id in hosted.partition.replicas:
            if replica_id != node_id:
                delayed.notify(FollowerFetches(replica_id), tp)

    def now_ms(self) -> int:
        return self._clock_ms()

    def hosted(self, topic: str, partition: int) -> HostedPartition:
        """The hosted partition, or the error Kafka gives for it."""
        found = self._partitions.get((topic, partition))
        if found is not None:
            return found
        meta = self._topics.get(topic)
        if meta is None or partition not in meta.partitions:
            raise UnknownTopicOrPartitionError(
                f"this broker knows no partition {topic}-{partition}"
            )
        leader = meta.partitions[partition].leader
        raise NotLeaderOrFollowerError(
            f"broker {self.node_id} does not host {topic}-{partition} (leader is {leader})"
        )

    def leader_of(self, topic: str, partition: int) -> tuple[int, int]:
        """(leader id, leader epoch) per the image, (-1, -1) when unknown."""
        meta = self._topics.get(topic)
        registration = meta.partitions.get(partition) if meta else None
        if registration is None:
            return -1, -1
        return registration.leader, registration.leader_epoch

    # -- produce ----------------------------------------------------------------------------

    async def append_records(
        self,
        acks: int,
        timeout_ms: int,
        entries: Mapping[TopicPartition, bytes | None],
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> dict[TopicPartition, ProduceResult]:
        """Append each partition's batches as leader; acks=-1 waits for the high watermark.
        `origin=COORDINATOR` appends transaction markers (WriteTxnMarkers)."""
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
            results[tp], next_offset = self._append_one(tp, records, acks, now_ms, origin)
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
    ) -> tuple[ProduceResult, int | None]:
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
            )
        except Exception as e:  # noqa: BLE001 - becomes this partition's error code
            self._on_storage_error(e, f"produce to {tp[0]}-{tp[1]}")
            code, message = error_code_of(e, f"produce to {tp[0]}-{tp[1]}")
            record_errors = tuple(e.record_errors) if isinstance(e, RecordValidationError) else ()
            return ProduceResult(code, error_message=message, record_errors=record_errors), None
        if not info.duplicate:
            events = hosted.partition.on_leader_append(hosted.log.log_end_offset)
            self._apply_events(tp, hosted, events)  # wakes waiters when there are events
            if not events:
                self._notify_appended(tp, hosted)  # follower fetches wait for appends, not the HW
        result = ProduceResult(
            0, info.first_offset, info.log_append_time_ms, hosted.log.log_start_offset
        )
        return result, info.last_offset + 1

    async def _await_acks_all(
        self,
        required: dict[TopicPartition, int],
        results: dict[TopicPartition, ProduceResult],
        timeout_ms: int,
    ) -> None:
        """Kafka's `DelayedProduce`: done when every partition's HW passed its batch."""
        pending = dict(required)

        def check(woken: set | None) -> bool:
            for tp in list(pending) if woken is None else [t for t in woken if t in pending]:
                offset = pending[tp]
                try:
                    hosted = self.hosted(*tp)
                    min_isr = hosted.log.config.min_insync_replicas
                    if not hosted.partition.acks_all_satisfied(offset, min_isr):
                        continue
                except KafkaError as e:
                    results[tp] = ProduceResult(e.code, error_message=str(e))
                del pending[tp]
            return not pending

        await wait_until(self.delayed, list(pending), check, timeout_ms / 1000)
        for tp in pending:
            results[tp] = ProduceResult(
                RequestTimedOutError.code,
                error_message=f"{tp[0]}-{tp[1]}: the ISR did not reach the batch in {timeout_ms} ms",
            )

    # -- fetch ------------------------------------------------------------------------------

    async def fetch_messages(
        self,
        params: FetchParams,
        partitions: list[FetchPartition],
        unchanged: Unchanged | None = None,
    ) -> list[FetchResult | None]:
        """Read every partition, long-polling until `min_bytes` are there (Kafka's DelayedFetch).

        A follower's fetch state is updated once, as the fetch arrives (Kafka's
        updateFollowerFetchState). A caught-up partition for which `unchanged(tp, high
        watermark, log start)` holds (an incremental fetch session that has nothing new to say
        about it) gets None instead of a result. While the fetch waits, a wake re-reads only the
        partitions notified since the last look: a large session mostly waits with nothing to
        read, and re-reading all of it on every append cost more than the appends."""
        results = await cooperative.complete(
            self._read_all_steps(params, partitions, unchanged, arriving=True)
        )
        may_wait = params.max_wait_ms > 0 and params.min_bytes > 0 and partitions
        if not may_wait or self._fetch_satisfied(params, results):
            return results
        index = {(p.topic, p.partition): i for i, p in enumerate(partitions)}

        def check(woken: set | None) -> bool:
            nonlocal results
            if woken is None or _read_bytes(results):  # the deadline, or a partial read
                _close_all(results)
                results = self._read_all(params, partitions, unchanged)
            else:  # nothing read yet: only the notified partitions can have news
                changed = sorted(index[k] for k in woken if k in index)
                if not changed:
                    return False
                self._read_into(results, params, partitions, changed, unchanged)
            return self._fetch_satisfied(params, results)

        keys: Iterable[Hashable] = index
        live = self._live_brokers
        if params.is_from_follower and live is not None and params.replica_id in live:
            follower = FollowerFetches(params.replica_id)  # one key, not one per partition
            self._follower_keys.add(follower)
            keys = (follower,)
        await wait_until(self.delayed, keys, check, params.max_wait_ms / 1000, looked=True)
        return results

    @staticmethod
    def _fetch_satisfied(params: FetchParams, results: list[FetchResult | None]) -> bool:
        if params.max_wait_ms <= 0 or not results:
            return True
        if any(r is not None and r.error_code for r in results):
            return True
        return _read_bytes(results) >= params.min_bytes

    def _read_all(
        self,
        params: FetchParams,
        partitions: list[FetchPartition],
        unchanged: Unchanged | None = None,
    ) -> list[FetchResult | None]:
        return cooperative.finish(self._read_all_steps(params, partitions, unchanged))

    def _read_all_steps(
        self,
        params: FetchParams,
        partitions: list[FetchPartition],
        unchanged: Unchanged | None = None,
        *,
        arriving: bool = False,
    ) -> Generator[None, None, list[FetchResult | None]]:
        """Read each partition in turn, sharing `max_bytes`. An `arriving` follower fetch also
        takes the follower's fetch state, partition by partition just before its read."""
        follower = None
        if arriving and params.is_from_follower:
            eligible = self._live_brokers is None or params.replica_id in self._live_brokers
            follower = (self._clock_ms(), eligible)
        results: list[FetchResult | None] = [None] * len(partitions)
        yield from self._read_into_steps(
            results, params, partitions, range(len(partitions)), unchanged, follower
        )
        return results

    def _read_into(
        self,
        results: list[FetchResult | None],
        params: FetchParams,
        partitions: list[FetchPartition],
        indices: Iterable[int],
        unchanged: Unchanged | None,
    ) -> None:
        cooperative.finish(self._read_into_steps(results, params, partitions, indices, unchanged))

    def _read_into_steps(
        self,
        results: list[FetchResult | None],
        params: FetchParams,
        partitions: list[FetchPartition],
        indices: Iterable[int],
        unchanged: Unchanged | None,
        follower: tuple[int, bool] | None = None,
    ) -> Iterator[None]:
        """Read `partitions[i]` into `results[i]` for each of `indices` in turn, sharing
        `max_bytes` (the first batch read is returned whole, as Kafka's first one is); yields
        after each partition, so a fetch of many partitions can let others run."""
        budget = min(params.max_bytes, self.fetch_max_bytes)
        min_one_batch = True
        for i in indices:
            p = partitions[i]
            result = self._read_one(
                params,
                p,
                max(0, min(p.partition_max_bytes, budget)),
                min_one_batch,
                unchanged,
                follower,
            )
            if result is not None and result.records:
                budget -= len(result.records)
                min_one_batch = False
            results[i] = result
            yield

    def _follower_fetched(
        self,
        replica_id: int,
        p: FetchPartition,
        hosted: HostedPartition,
        follower: tuple[int, bool],
    ) -> None:
        log_ = hosted.log
        end = log_.log_end_offset
        if not log_.log_start_offset <= p.fetch_offset <= end:
            return  # OFFSET_OUT_OF_RANGE, from the read
        try:
            events = hosted.partition.on_follower_fetch(
                follower[0], replica_id, p.fetch_offset, end, replica_eligible=follower[1]
            )
        except KafkaError:
            return  # not one of its replicas: the read answers it as any fetcher
        if events:
            self._apply_events((p.topic, p.partition), hosted, events)

    def _read_one(
        self,
        params: FetchParams,
        p: FetchPartition,
        max_bytes: int,
        min_one_batch: bool,
        unchanged: Unchanged | None = None,
        follower: tuple[int, bool] | None = None,
    ) -> FetchResult | None:
        """One partition's result. `follower` = (now, whether the follower may join the ISR):
        the fetch just arrived from a follower, which holds everything below its fetch offset
        (Kafka's updateFollowerFetchState); errors are left to the read, which answers them."""
        try:
            self.dir_failures.check()
            hosted = self.hosted(p.topic, p.partition)
            hosted.partition.check_leader(p.current_leader_epoch)
            log_ = hosted.log
            if follower is not None:
                self._follower_fetched(params.replica_id, p, hosted, follower)
            upper = _readable_end(params, log_)
            end = log_.log_end_offset if upper is None else upper
            if p.fetch_offset == end and p.fetch_offset >= log_.log_start_offset:
                if unchanged is not None and unchanged(
                    (p.topic, p.partition), log_.high_watermark, log_.log_start_offset
                ):
                    return None  # caught up, and the session already knows all there is
                records: bytes | FileRecords = b""  # caught up: most partitions of a session
                aborted = () if params.isolation_level == IsolationLevel.READ_COMMITTED else None
            else:
                data = log_.read(
                    p.fetch_offset,
                    max_bytes,
                    upper_bound_offset=upper,
                    min_one_batch=min_one_batch and max_bytes > 0,
                    include_aborted=params.isolation_level == IsolationLevel.READ_COMMITTED,
                    zero_copy=params.zero_copy,
                )
                records, aborted = data.records, data.aborted_transactions
        except Exception as e:  # noqa: BLE001 - becomes this partition's error code
            self._on_storage_error(e, f"fetch from {p.topic}-{p.partition}")
            code, _message = error_code_of(e, f"fetch from {p.topic}-{p.partition}")
            leader_id, leader_epoch = self.leader_of(p.topic, p.partition)
            return FetchResult(code, leader_id=leader_id, leader_epoch=leader_epoch)
        return FetchResult(
            0,
            high_watermark=log_.high_watermark,
            last_stable_offset=log_.last_stable_offset,
            log_start_offset=log_.log_start_offset,
            records=records,
            aborted_transactions=aborted,
        )

    # -- offsets ----------------------------------------------------------------------------

    def list_offset(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        *,
        isolation_level: int = 0,
        current_leader_epoch: int = -1,
        replica_id: int = -1,
    ) -> tuple[int, int, int]:
        """ListOffsets for one partition: (offset, timestamp, leader epoch), -1s when no record
        is that late. A follower (`replica_id` >= 0) may read up to the log end, as in Kafka.
        Raises the partition's KafkaError."""
        self.dir_failures.check()
        hosted = self.hosted(topic, partition)
        hosted.partition.check_leader(current_leader_epoch)
        log_ = hosted.log
        if replica_id >= 0:
            last_fetchable = log_.log_end_offset
        elif isolation_level == IsolationLevel.READ_COMMITTED:
            last_fetchable = log_.last_stable_offset
        else:
            last_fetchable = log_.high_watermark
        # KIP-207 (Kafka's Partition.fetchOffsetForTimestamp): a new leader's HW can lag the
        # one its predecessor served until the followers fetch again; answering with it would
        # show a client the high watermark going back, so a client is told to retry instead.
        epoch_start = hosted.partition.leader_epoch_start_offset
        lagging = replica_id < 0 and epoch_start > log_.high_watermark
        if timestamp == LATEST_TIMESTAMP:
            if lagging:
                raise OffsetNotAvailableError(
                    f"{topic}-{partition}: the high watermark ({log_.high_watermark}) is behind "
                    f"the start offset of leader epoch {hosted.partition.leader_epoch} "
                    f"({epoch_start}); retry"
                )
            return last_fetchable, -1, hosted.partition.leader_epoch
        found = log_.fetch_offset_by_timestamp(timestamp)
        if timestamp != EARLIEST_TIMESTAMP and (found is None or found[0] >= last_fetchable):
            if lagging:
                raise OffsetNotAvailableError(
                    f"{topic}-{partition}: no offset for timestamp {timestamp} below the high "
                    f"watermark ({log_.high_watermark}), which is behind the start offset of "
                    f"leader epoch {hosted.partition.leader_epoch} ({epoch_start}); retry"
                )
            return -1, -1, -1  # Kafka answers only with offsets a consumer could fetch
        if found is None:
            return -1, -1, -1
        offset, found_timestamp = found
        epoch = log_.epoch_cache.epoch_for_offset(offset)
        return offset, found_timestamp, -1 if epoch is None else epoch

    def end_offset_for_epoch(
        self, topic: str, partition: int, leader_epoch: int, current_leader_epoch: int = -1
    ) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset) from the leader's epoch cache."""
        hosted = self.hosted(topic, partition)
        hosted.partition.check_leader(current_leader_epoch)
        return hosted.log.epoch_cache.end_offset_for(leader_epoch, hosted.log.log_end_offset)

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords: move the log start offset up; returns the new low watermark."""
        self.dir_failures.check()
        hosted = self.hosted(topic, partition)
        hosted.partition.check_leader()
        log_ = hosted.log
        if offset == DELETE_TO_HIGH_WATERMARK:
            offset = log_.high_watermark
        if offset < 0:
            raise OffsetOutOfRangeError(f"cannot delete records before negative offset {offset}")
        low_watermark = log_.delete_records_before(offset)
        hosted.partition.reset_high_watermark(log_.high_watermark)
        self._notify_all((topic, partition))
        return low_watermark

    # -- ISR (leader side) ---------------------------------------------------------------------

    def maybe_shrink_isr(self, now_ms: int, replica_lag_time_max_ms: int) -> int:
        """Propose removing lagging followers from every led ISR (Kafka's `maybeShrinkIsr`
        task); returns how many partitions proposed."""
        proposed = 0
        for tp, hosted in list(self._partitions.items()):
            if not hosted.partition.is_leader:
                continue
            events = hosted.partition.maybe_shrink_isr(
                now_ms, replica_lag_time_max_ms, hosted.log.log_end_offset
            )
            proposed += bool(events)
            self._apply_events(tp, hosted, events)
        return proposed

    def on_isr_outcome(self, tp: TopicPartition, proposal: IsrChangeProposed, outcome: Any) -> bool:
        """The controller answered an ISR proposal (an `IsrChangeOutcome`); True: send again."""
        hosted = self._partitions.get(tp)
        if hosted is None or hosted.topic_id != outcome.topic_id:
            return False
        events, retry = hosted.partition.apply_isr_outcome(
            proposal,
            outcome.error_code,
            leader_epoch=outcome.leader_epoch,
            isr=tuple(outcome.isr),
            partition_epoch=outcome.partition_epoch,
            leader_log_end_offset=hosted.log.log_end_offset,
        )
        if events:
            logger.info("%s-%d: ISR is now %s", *tp, list(hosted.partition.isr))
        self._apply_events(tp, hosted, events)
        return retry

    # -- follower side (the replica fetchers) ---------------------------------------------------

    def log_start_offset(self, tp: TopicPartition) -> int:
        """The hosted log's start offset, -1 when not hosted (what a follower's fetch says)."""
        hosted = self._partitions.get(tp)
        return -1 if hosted is None else hosted.log.log_start_offset

    def following(self, tp: TopicPartition, leader_epoch: int) -> HostedPartition:
        """The partition, if this broker still follows it at `leader_epoch`; else raises."""
        hosted = self._partitions.get(tp)
        if hosted is None or hosted.partition.role is not Role.FOLLOWER:
            raise NotLeaderOrFollowerError(f"broker {self.node_id} does not follow {tp[0]}-{tp[1]}")
        hosted.partition.check_leader_epoch(leader_epoch)
        return hosted

    def append_fetched(
        self,
        tp: TopicPartition,
        leader_epoch: int,
        records: bytes,
        *,
        leader_high_watermark: int,
        leader_log_start_offset: int,
    ) -> int:
        """Append what a follower fetched, then take the leader's HW (capped by our log end)
        and log start offset (capped by our HW); returns the new log end offset."""
        self.dir_failures.check()
        hosted = self.following(tp, leader_epoch)
        log_ = hosted.log
        if records:
            first_base = read_header(records).base_offset
            with self._storage_errors(f"follower append to {tp[0]}-{tp[1]}"):
                if first_base < log_.log_end_offset == log_.log_start_offset:
                    # Kafka's UnexpectedAppendOffsetException on an empty log: the leader's
                    # log start is inside a batch; start ours where that batch starts.
                    log_.truncate_fully_and_start_at(first_base)
                log_.append_as_follower(records, self._clock_ms())
        high_watermark = min(leader_high_watermark, log_.log_end_offset)
        if high_watermark > log_.high_watermark:
            log_.update_high_watermark(high_watermark)
        if log_.log_start_offset < leader_log_start_offset <= log_.high_watermark:
            log_.maybe_increment_log_start_offset(leader_log_start_offset)
        self._after_follower_change(tp, hosted)
        return log_.log_end_offset

    def truncate_follower(self, tp: TopicPartition, leader_epoch: int, offset: int) -> int:
        """Cut a followed log to `offset` (divergent suffix); returns the new log end offset."""
        self.dir_failures.check()
        hosted = self.following(tp, leader_epoch)
        before = hosted.log.log_end_offset
        with self._storage_errors(f"truncation of {tp[0]}-{tp[1]}"):
            cut = hosted.log.truncate_to(offset, self._clock_ms())
        if cut:
            logger.info("%s-%d: truncated from %d to %d", *tp, before, hosted.log.log_end_offset)
        self._after_follower_change(tp, hosted)
        return hosted.log.log_end_offset

    def truncate_fully_follower(self, tp: TopicPartition, leader_epoch: int, offset: int) -> int:
        """Empty a followed log and restart it at `offset` (the leader's log start passed ours)."""
        self.dir_failures.check()
        hosted = self.following(tp, leader_epoch)
        with self._storage_errors(f"truncation of {tp[0]}-{tp[1]}"):
            hosted.log.truncate_fully_and_start_at(offset)
        logger.info("%s-%d: log restarted empty at %d", *tp, offset)
        self._after_follower_change(tp, hosted)
        return offset

    def _on_storage_error(self, e: Exception, what: str) -> None:
        if isinstance(e, OSError):
            self.dir_failures.mark_offline(e, what)

    @contextlib.contextmanager
    def _storage_errors(self, what: str) -> Iterator[None]:
        """An OSError inside takes the log dir offline and leaves as KafkaStorageError."""
        try:
            yield
        except OSError as e:
            self.dir_failures.mark_offline(e, what)
            raise KafkaStorageError(f"{what} failed: {e}") from None

    def _after_follower_change(self, tp: TopicPartition, hosted: HostedPartition) -> None:
        hosted.partition.reset_high_watermark(hosted.log.high_watermark)
        self._notify_all(tp)

    # -- shutdown ---------------------------------------------------------------------------

    def close(self) -> None:
        """Answer every waiting request now and let no new one wait (shutdown)."""
        self.delayed.close()


def _read_bytes(results: list[FetchResult | None]) -> int:
    return sum(len(r.records) for r in results if r is not None and r.records)


def _close_all(results: list[FetchResult | None]) -> None:
    for r in results:
        if r is not None and isinstance(r.records, FileRecords):
            r.records.close()


def _readable_end(params: FetchParams, log_: Any) -> int | None:
    """Where a fetch's reads stop: the log end for followers (None), the LSO for
    read_committed consumers, else the high watermark."""
    if params.is_from_follower:
        return None
    if params.isolation_level == IsolationLevel.READ_COMMITTED:
        return log_.last_stable_offset
    return log_.high_watermark
