"""The fetch path of the replica manager (Kafka's `ReplicaManager.fetchMessages` and
`readFromLog`): read each partition up to the high watermark (read_uncommitted), the last stable
offset (read_committed) or the log end (followers, whose fetch position moves the high watermark
and the ISR), sharing the fetch's byte budget; park the fetch as a `DelayedFetch` until
`min_bytes` are there or `max_wait_ms` passed. Thread-safety: use from the broker's event loop
only.

Tiered offsets (KIP-405): a consumer's fetch offset in [log start, local log start) is read from
the topic's table by the `remote_reader` (`remote_fetch`), every such partition of the fetch at
once; the fetch's byte budget reserves each one's partition max bytes (KAFKA-19462, so local
and remote data together stay within `fetch.max.bytes`, KAFKA-20019), and the fetch is answered
when the reads are done or `remote.fetch.max.wait.ms` passed (Kafka's DelayedRemoteFetch, which
replaces the DelayedFetch). A follower fetching there gets OFFSET_MOVED_TO_TIERED_STORAGE.
"""

from __future__ import annotations

from collections.abc import Generator, Hashable, Iterable
from typing import Any

from sparklog.broker.delayed import FollowerFetches
from sparklog.broker.delayed_fetch import DelayedFetch, fetch_satisfied
from sparklog.broker.fetch_params import (
    FetchParams,
    FetchPartition,
    FetchResult,
    Unchanged,
)
from sparklog.broker.remote_fetch import RemoteFetchInfo
from sparklog.broker.replica_base import (
    EXPECTED_FETCH_ERRORS,
    HostedPartition,
    ReplicaManagerBase,
    error_code_of,
)
from sparklog.errors import KafkaError, OffsetMovedToTieredStorageError, OffsetOutOfRangeError
from sparklog.protocol import cooperative
from sparklog.protocol.request_metrics import remote_wait
from sparklog.records.file_records import FileRecords
from sparklog.storage.txn_index import AbortedTxn
from sparklog.structs import IsolationLevel, TopicPartition


class ReadPath(ReplicaManagerBase):
    """Reads: `fetch_messages` (consumers and followers)."""

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
        remote: list[RemoteFetchInfo] = []
        results = await cooperative.complete(
            self._read_all_steps(params, partitions, unchanged, arriving=True, remote=remote)
        )
        if remote:
            with remote_wait():  # Kafka's DelayedRemoteFetch instead of a DelayedFetch
                await self._read_remote(params, results, remote)
            return results
        may_wait = params.max_wait_ms > 0 and params.min_bytes > 0 and partitions
        if not may_wait or fetch_satisfied(params, results):
            self._record_throttled(params, partitions, results)
            return results
        delayed_fetch = DelayedFetch(
            params,
            partitions,
            unchanged,
            results,
            read_all=self._read_all,
            read_into=self._read_into,
        )
        keys: Iterable[Hashable] = delayed_fetch.index
        live = self._live_brokers
        if params.is_from_follower and live is not None and params.replica_id in live:
            follower = FollowerFetches(params.replica_id)  # one key, not one per partition
            self._follower_keys.add(follower)
            keys = (follower,)
        self.delayed_fetches += 1
        try:
            with remote_wait():  # the request's RemoteTimeMs
                results = await delayed_fetch.wait(self.delayed, keys)
        finally:
            self.delayed_fetches -= 1
        self._record_throttled(params, partitions, results)
        return results

    async def _read_remote(
        self,
        params: FetchParams,
        results: list[FetchResult | None],
        remote: list[RemoteFetchInfo],
    ) -> None:
        """Fill the placeholders of `remote` with what the tier holds (Kafka's
        DelayedRemoteFetch.onComplete): the records and aborted list read, the error code of a
        failed read, the placeholder (empty) for a read not done in time."""
        reader = self.remote_reader
        assert reader is not None
        reads = await reader.read_all(remote)
        for info, read in zip(remote, reads, strict=True):
            placeholder = results[info.index]
            if read is None or placeholder is None:
                continue
            if isinstance(read, Exception):
                what = f"remote fetch from {info.topic}-{info.partition}"
                code, _message = error_code_of(read, what)
                leader_id, leader_epoch = self.leader_of(info.topic, info.partition)
                results[info.index] = FetchResult(
                    code, leader_id=leader_id, leader_epoch=leader_epoch
                )
                continue
            aborted = read.aborted
            if params.isolation_level == IsolationLevel.READ_COMMITTED and aborted is None:
                aborted = ()
            results[info.index] = placeholder._replace(
                records=read.records, aborted_transactions=aborted
            )

    def _tiered(
        self,
        params: FetchParams,
        info: RemoteFetchInfo,
        log_: Any,
        remote: list[RemoteFetchInfo] | None,
    ) -> FetchResult:
        """A fetch offset below the local log start (Kafka's handleOffsetOutOfRangeError with a
        remote log): a follower gets OFFSET_MOVED_TO_TIERED_STORAGE with the leader's offsets;
        a consumer an empty placeholder, listed in `remote` to be read from the tier unless the
        remote fetch byte rate is exceeded (then it stays empty, as Kafka's throttled one)."""
        where = f"{info.topic}-{info.partition}"
        reader = self.remote_reader
        if reader is None:
            raise OffsetOutOfRangeError(
                f"offset {info.fetch_offset} of {where} is below its local log start "
                f"({local_log_start(log_)}) and this broker reads no remote tier"
            )
        code = OffsetMovedToTieredStorageError.code if params.is_from_follower else 0
        result = FetchResult(
            code,
            high_watermark=log_.high_watermark,
            last_stable_offset=log_.last_stable_offset,
            log_start_offset=log_.log_start_offset,
            records=b"",
            aborted_transactions=() if info.include_aborted else None,
        )
        if not code and remote is not None and not reader.fetch_throttled():
            remote.append(info)
        return result

    def _record_throttled(
        self,
        params: FetchParams,
        partitions: list[FetchPartition],
        results: list[FetchResult | None],
    ) -> None:
        """What a follower fetch answered for throttled partitions counts toward
        `leader.replication.throttled.rate` (Kafka's `sizeOfThrottledPartitions`, recorded as
        the response goes, after the fact)."""
        quota = self.leader_quota
        if quota is None or not params.is_from_follower or not quota.any_throttled:
            return
        size = sum(
            len(r.records)
            for p, r in zip(partitions, results, strict=True)
            if r is not None and r.records and quota.is_throttled(p.topic, p.partition)
        )
        if size:
            quota.record(size, self._clock_ms())

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
        remote: list[RemoteFetchInfo] | None = None,
    ) -> Generator[None, None, list[FetchResult | None]]:
        """Read each partition in turn, sharing `max_bytes`. An `arriving` follower fetch also
        takes the follower's fetch state, partition by partition just before its read; tiered
        partitions of an arriving consumer fetch are listed in `remote`, to read after."""
        follower = None
        if arriving and params.is_from_follower:
            eligible = self._live_brokers is None or params.replica_id in self._live_brokers
            follower = (self._clock_ms(), eligible)
        results: list[FetchResult | None] = [None] * len(partitions)
        yield from self._read_into_steps(
            results,
            params,
            partitions,
            range(len(partitions)),
            unchanged,
            follower,
            arriving,
            remote,
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
        arriving: bool = False,
        remote: list[RemoteFetchInfo] | None = None,
    ) -> Generator[None, None, None]:
        """Read `partitions[i]` into `results[i]` for each of `indices` in turn, sharing
        `max_bytes` (the first batch read is returned whole, as Kafka's first one is); yields
        after each partition, so a fetch of many partitions can let others run. A partition
        to read from the tier (listed in `remote`) takes its whole share of the budget."""
        budget = min(params.max_bytes, self.fetch_max_bytes)
        min_one_batch = True
        for i in indices:
            p = partitions[i]
            max_bytes = max(0, min(p.partition_max_bytes, budget))
            listed = 0 if remote is None else len(remote)
            result = self._read_one(
                params, p, max_bytes, min_one_batch, unchanged, follower, arriving, remote, i
            )
            if remote is not None and len(remote) > listed:
                budget -= max_bytes  # KAFKA-19462: assume the tier fills the partition's share
                min_one_batch = False
            elif result is not None and result.records:
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
            self._apply_events(TopicPartition(p.topic, p.partition), hosted, events)

    def _leader_throttles(
        self, replica_id: int, p: FetchPartition, hosted: HostedPartition
    ) -> bool:
        quota = self.leader_quota
        if quota is None or not quota.any_throttled:
            return False
        in_sync = replica_id in hosted.partition.isr
        return quota.should_throttle(p.topic, p.partition, in_sync, self._clock_ms())

    def _read_one(
        self,
        params: FetchParams,
        p: FetchPartition,
        max_bytes: int,
        min_one_batch: bool,
        unchanged: Unchanged | None = None,
        follower: tuple[int, bool] | None = None,
        arriving: bool = False,
        remote: list[RemoteFetchInfo] | None = None,
        index: int = 0,
    ) -> FetchResult | None:
        """One partition's result. `follower` = (now, whether the follower may join the ISR):
        the fetch just arrived from a follower, which holds everything below its fetch offset
        (Kafka's updateFollowerFetchState); errors are left to the read, which answers them.
        An `arriving` read (not a delayed fetch's re-read) counts in TotalFetchRequestsPerSec."""
        hosted = None
        try:
            self.dir_failures.check()
            hosted = self.hosted(p.topic, p.partition)
            if arriving:
                hosted.stats.on_fetch()
            hosted.partition.check_leader(p.current_leader_epoch)
            log_ = hosted.log
            if follower is not None:
                self._follower_fetched(params.replica_id, p, hosted, follower)
            if params.is_from_follower and self._leader_throttles(params.replica_id, p, hosted):
                # KIP-73: an out-of-sync follower of a throttled partition gets nothing while
                # the leader's replication rate is over its quota (Kafka's shouldLeaderThrottle)
                return FetchResult(
                    0,
                    high_watermark=log_.high_watermark,
                    last_stable_offset=log_.last_stable_offset,
                    log_start_offset=log_.log_start_offset,
                    records=b"",
                )
            upper = _readable_end(params, log_)
            end = log_.log_end_offset if upper is None else upper
            if log_.log_start_offset <= p.fetch_offset < local_log_start(log_):
                info = RemoteFetchInfo(
                    index,
                    p.topic,
                    p.partition,
                    p.fetch_offset,
                    max_bytes,
                    min_one_batch,
                    upper,
                    params.isolation_level == IsolationLevel.READ_COMMITTED,
                )
                return self._tiered(params, info, log_, remote)
            if p.fetch_offset == end and p.fetch_offset >= log_.log_start_offset:
                if unchanged is not None and unchanged(
                    TopicPartition(p.topic, p.partition), log_.high_watermark, log_.log_start_offset
                ):
                    return None  # caught up, and the session already knows all there is
                records: bytes | FileRecords = b""  # caught up: most partitions of a session
                aborted: tuple[AbortedTxn, ...] | None = (
                    () if params.isolation_level == IsolationLevel.READ_COMMITTED else None
                )
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
            if arriving:  # Kafka's readFromLog: unexpected errors count as failed fetches
                stats = self.topic_stats.unhosted() if hosted is None else hosted.stats
                if hosted is None:
                    stats.on_fetch()  # a hosted partition counted itself already
                if not isinstance(e, EXPECTED_FETCH_ERRORS):
                    stats.on_fetch_failed()
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


def local_log_start(log_: Any) -> int:
    """The first offset the log holds locally (Kafka's `localLogStartOffset`): the log start
    unless the remote tier holds the offsets below it."""
    return int(log_.local_log_start_offset)


def _readable_end(params: FetchParams, log_: Any) -> int | None:
    """Where a fetch's reads stop: the log end for followers (None), the LSO for
    read_committed consumers, else the high watermark."""
    if params.is_from_follower:
        return None
    if params.isolation_level == IsolationLevel.READ_COMMITTED:
        return log_.last_stable_offset
    return log_.high_watermark
