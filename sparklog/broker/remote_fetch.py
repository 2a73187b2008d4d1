"""Serving tiered offsets (KIP-405): a consumer fetch of an offset below a log's local start
(and at or above its log start) is read from the topic's table (`storage.remote.tier`), as
Kafka's `RemoteLogReader` / `DelayedRemoteFetch` do.

`RemoteLogReader` owns a bounded worker pool (`remote.log.reader.threads`, at most
`MAX_PENDING_READS` reads queued: Kafka's `remote.log.reader.max.pending.tasks`), the fetch
byte-rate limit (`remote.log.manager.fetch.max.bytes.per.second`, over Kafka's 11 one-second
windows) and the table of each topic. Table I/O runs only on the pool's threads: the event loop
submits reads and awaits them, at most `remote.fetch.max.wait.ms`; a read still running then
leaves its partition empty in the answer (no error, as Kafka's expired DelayedRemoteFetch).

Errors from the table become Kafka's codes as Kafka's `Errors.forException` gives them:
offsets the tier no longer holds OFFSET_OUT_OF_RANGE, a `RemoteStorageError` (Kafka's
`RemoteStorageException`, which has no code of its own) and a full queue (Kafka's
`RejectedExecutionException`) UNKNOWN_SERVER_ERROR.

A consumer reading history reads a partition forward while each table read costs about a
whole data file: reads go through a read-ahead cache (`remote_read_cache`, sparklog's, like the
chunk caches of Kafka's remote storage plug-ins) that asks the table for 16 MiB at once and reads
the next chunk ahead in the background. The same pool answers the ListOffsets lookups that need
the table (by timestamp, -3).

The pool's metrics are Kafka's (`kafka.log.remote:type=RemoteStorageThreadPool`):
RemoteLogReaderTaskQueueSize, the reads waiting for a thread, and
RemoteLogReaderAvgIdlePercent, the threads' idle share over the last `IDLE_WINDOW_NS`
(`PoolIdleMeter`, times passed in).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from sparklog.broker.remote_read_cache import ReadAheadCache
from sparklog.errors import OffsetOutOfRangeError, UnknownServerError
from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Metrics
from sparklog.metrics.stats import MetricConfig, Rate
from sparklog.storage.remote.config import RemoteLogManagerConfig
from sparklog.storage.remote.tier import RemoteRead, TopicTable
from sparklog.structs import MAX_TIMESTAMP

logger = logging.getLogger(__name__)

#: Kafka's `remote.log.reader.max.pending.tasks` default: reads queued beyond the busy threads.
MAX_PENDING_READS = 100
#: Kafka's `remote.log.manager.fetch.quota.window.num` / `.window.size.seconds` defaults.
QUOTA_WINDOWS = 11
QUOTA_WINDOW_MS = 1000

#: `table_for(topic)`: the topic's table (opened on first use), None when it has no tier.
#: Called on the pool's threads only: opening a table does I/O.
TableFor = Callable[[str], "TopicTable | None"]

T = TypeVar("T")


class RemoteReadRejectedError(UnknownServerError):
    """Too many remote reads queued (Kafka's RejectedExecutionException, answered as
    UNKNOWN_SERVER_ERROR)."""


@dataclass(frozen=True, slots=True)
class RemoteFetchInfo:
    """One partition of a fetch to read from the tier (Kafka's `RemoteStorageFetchInfo`):
    `index` is its place in the fetch, `max_bytes` what the fetch's budget reserved for it."""

    index: int
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    min_one_batch: bool
    upper_bound_offset: int | None
    include_aborted: bool


class FetchByteRate:
    """`remote.log.manager.fetch.max.bytes.per.second` (Kafka's `RLMQuotaManager`): while the
    bytes read from the tier over the last windows exceed the rate, remote reads are skipped
    (the partition answers empty, the consumer asks again). Sans-IO: times are passed in."""

    def __init__(self, bytes_per_second: float) -> None:
        self.bytes_per_second = bytes_per_second
        self._config = MetricConfig(samples=QUOTA_WINDOWS, time_window_ms=QUOTA_WINDOW_MS)
        self._rate = Rate()

    def throttled(self, now_ms: int) -> bool:
        return self._rate.measure(self._config, now_ms) > self.bytes_per_second

    def record(self, nbytes: int, now_ms: int) -> None:
        self._rate.record(self._config, float(nbytes), now_ms)


#: The window RemoteLogReaderAvgIdlePercent averages over.
IDLE_WINDOW_NS = 30_000_000_000
_POOL_METRICS = ("kafka.log.remote", "RemoteStorageThreadPool")


class PoolIdleMeter:
    """The reader pool's queue and idle share: reads submitted, started and finished (called
    from any thread; times passed in, monotonic ns)."""

    def __init__(self, threads: int, window_ns: int = IDLE_WINDOW_NS, *, now_ns: int) -> None:
        self.threads = threads
        self.window_ns = window_ns
        self._created_ns = now_ns
        self._lock = threading.Lock()
        self._queued = 0
        self._running: collections.Counter[int] = collections.Counter()  # start time -> count
        self._finished: collections.deque[tuple[int, int]] = collections.deque()

    @property
    def queue_size(self) -> int:
        return self._queued

    def submitted(self) -> None:
        with self._lock:
            self._queued += 1

    def dropped(self) -> None:
        """A submitted read was cancelled before a thread took it."""
        with self._lock:
            self._queued -= 1

    def started(self, now_ns: int) -> None:
        with self._lock:
            self._queued = max(0, self._queued - 1)
            self._running[now_ns] += 1

    def finished(self, started_ns: int, now_ns: int) -> None:
        with self._lock:
            self._running[started_ns] -= 1
            if self._running[started_ns] <= 0:
                del self._running[started_ns]
            self._finished.append((started_ns, now_ns))

    def idle_ratio(self, now_ns: int) -> float:
        """1 - busy thread time / thread time over the window ending at `now_ns`."""
        with self._lock:
            since = max(self._created_ns, now_ns - self.window_ns)
            while self._finished and self._finished[0][1] <= since:
                self._finished.popleft()
            busy = sum(end - max(start, since) for start, end in self._finished)
            busy += sum((now_ns - max(start, since)) * n for start, n in self._running.items())
        span = (now_ns - since) * self.threads
        return 1.0 if span <= 0 else min(1.0, max(0.0, 1.0 - busy / span))


class RemoteLogReader:
    """A broker's reads of tiered data: the pool, its bound and the byte rate. Create and use
    on the broker's event loop; `close` once."""

    def __init__(
        self,
        config: RemoteLogManagerConfig,
        table_for: TableFor,
        *,
        clock_ms: Callable[[], int],
        max_pending: int = MAX_PENDING_READS,
        read_ahead: bool = True,
        metrics: Metrics | None = None,
    ) -> None:
        self.config = config
        self.table_for = table_for
        self.metrics = metrics
        self._clock_ms = clock_ms
        self._threads = config.remote_log_reader_threads
        self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="remote-log-reader")
        self.pool_meter = PoolIdleMeter(self._threads, now_ns=time.monotonic_ns())
        self._max_in_flight = self._threads + max_pending
        self.in_flight = 0
        self.quota = FetchByteRate(config.remote_log_manager_fetch_max_bytes_per_second)
        #: read-ahead of tiered data (None: every fetch reads the table)
        self.cache: ReadAheadCache | None = (
            ReadAheadCache(submit=self._submit) if read_ahead else None
        )
        if metrics is not None:
            meter = self.pool_meter
            metrics.gauge(
                MetricName.of(*_POOL_METRICS, "RemoteLogReaderTaskQueueSize"),
                lambda: float(meter.queue_size),
            )
            metrics.gauge(
                MetricName.of(*_POOL_METRICS, "RemoteLogReaderAvgIdlePercent"),
                lambda: meter.idle_ratio(time.monotonic_ns()),
            )
        # counters (Kafka's RemoteFetchRequestsPerSec, FailedRemoteFetchRequestsPerSec,
        # RemoteFetchBytesPerSec, DelayedRemoteFetchMetrics.ExpiresPerSec)
        self.reads = 0
        self.failed_reads = 0
        self.bytes_read = 0
        self.expired = 0
        self.throttled = 0

    @property
    def wait_ms(self) -> int:
        return self.config.remote_fetch_max_wait_ms

    def fetch_throttled(self) -> bool:
        """Whether remote fetches are over `remote.log.manager.fetch.max.bytes.per.second`."""
        if self.quota.throttled(self._clock_ms()):
            self.throttled += 1
            return True
        return False

    async def run(self, fn: Callable[[], T]) -> T:
        """Run `fn` (table I/O) on the pool; RemoteReadRejectedError when the queue is full."""
        if self.in_flight >= self._max_in_flight:
            raise RemoteReadRejectedError(
                f"{self.in_flight} remote reads in flight (remote.log.reader.threads="
                f"{self._threads}, {self._max_in_flight - self._threads} queued at most)"
            )
        self.in_flight += 1
        try:
            return await asyncio.wrap_future(self._submit(fn))
        finally:
            self.in_flight -= 1

    def _submit(self, fn: Callable[[], T]) -> Future[T]:
        """`fn` on the pool, counted by the pool's meter (queued until a thread takes it)."""
        meter = self.pool_meter

        def timed() -> T:
            start = time.monotonic_ns()
            meter.started(start)
            try:
                return fn()
            finally:
                meter.finished(start, time.monotonic_ns())

        meter.submitted()
        try:
            future = self._pool.submit(timed)
        except BaseException:
            meter.dropped()
            raise
        future.add_done_callback(lambda f: meter.dropped() if f.cancelled() else None)
        return future

    async def read_all(self, infos: list[RemoteFetchInfo]) -> list[RemoteRead | Exception | None]:
        """Read every partition of `infos` at once (KAFKA-14915), waiting at most
        `remote.fetch.max.wait.ms`; None for a read not done by then (it is cancelled when it
        has not started), the exception for a read that failed."""
        tasks = [asyncio.ensure_future(self._read(info)) for info in infos]
        done, pending = await asyncio.wait(tasks, timeout=self.wait_ms / 1000)
        for task in pending:
            task.cancel()
        if pending:
            self.expired += 1
            self._mark("ExpiresPerSec", 1, kind="DelayedRemoteFetchMetrics")
        self._mark("RemoteFetchRequestsPerSec", len(infos))
        now = self._clock_ms()
        out: list[RemoteRead | Exception | None] = []
        for info, task in zip(infos, tasks, strict=True):
            if task not in done:
                out.append(None)
                continue
            error = task.exception()
            if error is not None:
                if not isinstance(error, OffsetOutOfRangeError):
                    self.failed_reads += 1
                    self._mark("RemoteFetchErrorsPerSec", 1)
                logger.log(
                    logging.DEBUG if isinstance(error, OffsetOutOfRangeError) else logging.ERROR,
                    "remote read of %s-%d at %d failed: %s",
                    info.topic,
                    info.partition,
                    info.fetch_offset,
                    error,
                )
                out.append(
                    error if isinstance(error, Exception) else UnknownServerError(str(error))
                )
                continue
            read = task.result()
            self.bytes_read += len(read.records)
            self.quota.record(len(read.records), now)
            self._mark("RemoteFetchBytesPerSec", len(read.records))
            out.append(read)
        return out

    def _mark(self, name: str, n: int, kind: str = "BrokerTopicMetrics") -> None:
        if self.metrics is not None and n:
            self.metrics.meter(MetricName.of("kafka.server", kind, name)).mark(n)

    async def _read(self, info: RemoteFetchInfo) -> RemoteRead:
        self.reads += 1
        return await self.run(lambda: read_tier(self.table_for, info, self.cache))

    def close(self, *, wait: bool = False) -> None:
        """Stop the pool: queued reads are cancelled, running ones finish (awaited if `wait`)."""
        self._pool.shutdown(wait=wait, cancel_futures=True)
        if self.metrics is not None:
            self.metrics.remove_matching(lambda n: (n.domain, n.type) == _POOL_METRICS)


def read_tier(
    table_for: TableFor, info: RemoteFetchInfo, cache: ReadAheadCache | None = None
) -> RemoteRead:
    """One remote read, on a worker thread: whole batches from the one holding the offset,
    nothing when the first is larger than `max_bytes` and the read is not the fetch's first
    (Kafka's `minOneMessage`); through the read-ahead `cache` when given."""
    table = table_for(info.topic)
    if table is None:
        raise OffsetOutOfRangeError(f"{info.topic} has no remote tier on this broker")
    key = (table.topic_id, info.partition)
    max_bytes = max(info.max_bytes, 1)
    upper, with_aborted = info.upper_bound_offset, info.include_aborted
    if cache is not None:
        hit = cache.lookup(key, info.fetch_offset, max_bytes, upper, with_aborted)
        if hit is not None:
            return _min_one(info, hit)
    where = f"{info.topic}-{info.partition}"
    end = table.copied_end_offset(info.partition)
    if end is None or info.fetch_offset >= end:
        table.refresh()  # another leader copied it: catch up with its commits
        end = table.copied_end_offset(info.partition)
    start = table.start_offset(info.partition)
    if start is None or end is None or not start <= info.fetch_offset < end:
        raise OffsetOutOfRangeError(
            f"offset {info.fetch_offset} of {where} is not in its remote tier "
            f"[{start}, {end}) ({table.location})"
        )
    if cache is None:
        read = table.read(
            info.partition,
            info.fetch_offset,
            max_bytes,
            upper_bound_offset=upper,
            include_aborted=with_aborted,
        )
        return _min_one(info, read)

    def load(offset: int, read_bytes: int) -> RemoteRead:
        return table.read(info.partition, offset, read_bytes, include_aborted=True)

    return _min_one(info, cache.load(key, load, info.fetch_offset, max_bytes, upper, with_aborted))


def _min_one(info: RemoteFetchInfo, read: RemoteRead) -> RemoteRead:
    """Nothing when the first batch is larger than `max_bytes` and the read is not the
    fetch's first (Kafka's `minOneMessage`)."""
    if not info.min_one_batch and len(read.records) > info.max_bytes:
        return RemoteRead(info.fetch_offset, b"", () if info.include_aborted else None)
    return read


@dataclass(frozen=True, slots=True)
class TierOffsets:
    """What the tier answers a ListOffsets lookup by timestamp (or -3, the max timestamp)
    with, read on a worker thread: its (offset, timestamp), None when it holds no such record."""

    found: tuple[int, int] | None = None


def tier_offsets(
    table_for: TableFor, topic: str, partition: int, timestamp: int, log_start_offset: int = 0
) -> TierOffsets:
    """ListOffsets by timestamp (or -3) within the tier, on a worker thread; from the log
    start on (DeleteRecords moves it before the table drops the rows below it)."""
    table = table_for(topic)
    if table is None:
        return TierOffsets()
    table.refresh()
    return TierOffsets(
        table.offset_for_timestamp(partition, timestamp, start_offset=log_start_offset)
    )


def merge_offsets(
    timestamp: int, tier: tuple[int, int] | None, local: tuple[int, int] | None
) -> tuple[int, int] | None:
    """ListOffsets by timestamp across both tiers: the tier's answer first (its offsets precede
    the local ones), else the local log's; for -3 the larger timestamp (the earlier offset when
    both tiers hold it)."""
    if timestamp == MAX_TIMESTAMP:
        if tier is None or local is None:
            return tier if local is None else local
        return local if local[1] > tier[1] else tier
    return local if tier is None else tier
