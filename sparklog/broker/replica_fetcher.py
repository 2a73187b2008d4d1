"""Follower fetchers: copy the leader's log to this broker (Kafka's `AbstractFetcherThread`
and `ReplicaFetcherThread`, as asyncio tasks; `replica_fetcher_manager` holds them).

Theory of operation. When the metadata makes this broker a follower of a partition
(`BecameFollower`), the replica manager calls `add_partition` on the
`replica_fetcher_manager`; the partition goes to the fetcher for its leader
(`num.replica.fetchers` per leader, partitions hashed over them), which owns one connection to
that broker. Each partition moves through three phases:

- TRUNCATING: ask the leader (OffsetForLeaderEpoch, KIP-101/279) where our latest leader epoch
  ends in its log, cut everything past that (`truncation.truncation_for`), repeat until the
  answer is for an epoch we hold; with no epochs at all, cut to the high watermark.
- FETCHING: Fetch from our log end offset with `replica_id` = this broker, append what comes
  unchanged (offsets, epochs and producer state as the leader wrote them), take the leader's
  high watermark (capped by our log end) and log start offset. Fetches go through an
  incremental fetch session (KIP-227, `FetchSessionHandler`): a request lists only the
  partitions whose fetch offset or epoch moved, and the leader answers only partitions with
  news, so a round costs what changed rather than every partition followed.
- RESETTING: after OFFSET_OUT_OF_RANGE, ask the leader for its log start and end
  (ListOffsets) and either cut our log to its end or restart ours at its start (Kafka's
  `fetchOffsetAndTruncate`).
- TIERED: after OFFSET_MOVED_TO_TIERED_STORAGE (our fetch offset is only in the leader's remote
  tier, KIP-405), ask the leader for its local log start and log start (ListOffsets -4, -2)
  and restart our log at its local start with the leader epochs and producer state the topic
  table holds below it (`tier_state`, Kafka's `TierStateMachine`), then fetch from there.

A partition error that newer metadata resolves (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
NOT_LEADER_OR_FOLLOWER, ...) delays that partition by `replica.fetch.backoff.ms`; a broken
connection delays the whole fetcher, which reconnects to the leader's current endpoint.

Safety: `remove_partition` (became leader, deleted, new leader elsewhere) takes effect at once.
Every log change runs synchronously on the broker loop after checking that the partition is
still in this fetcher with the same state object and that the replica manager still has it as a
follower at that leader epoch, so nothing fetched from an old leader is appended after we lead.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

from sparklog.broker.partition_fetch_state import (
    FetchPhase,
    PartitionFetchState,
    reset_for_out_of_range,
)
from sparklog.broker.replica_fetcher_protocols import (
    FetcherOwner,
    FollowerFetch,
)
from sparklog.broker.truncation import truncation_for
from sparklog.errors import (
    KafkaError,
    KafkaStorageError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
)
from sparklog.protocol import codec, kio_build
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.async_client import AsyncKafkaConnection, connect
from sparklog.protocol.fetch_session_handler import (
    SESSION_ERRORS,
    FetchSessionHandler,
    forgotten_topics,
)
from sparklog.protocol.outbound import Endpoint
from sparklog.records.errors import CorruptRecordError
from sparklog.storage.remote.tier import RemoteStorageError
from sparklog.structs import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    TopicPartition,
)

logger = logging.getLogger(__name__)

_VERSIONS = {
    ApiKey.FETCH: (4, 12),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (3, 4),  # v3+: replica_id
    ApiKey.LIST_OFFSETS: (1, 9),  # v8+: -4, the leader's local log start (KIP-405)
}


class ReplicaFetcher:
    """One connection to leader `source_id` and the partitions followed through it."""

    def __init__(self, manager: FetcherOwner, source_id: int, fetcher_id: int) -> None:
        self.manager = manager
        self.source_id = source_id
        self.fetcher_id = fetcher_id
        self.partitions: dict[TopicPartition, PartitionFetchState] = {}
        self.failures = 0
        self._conn: AsyncKafkaConnection | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.session: FetchSessionHandler[TopicPartition, FollowerFetch] = FetchSessionHandler()
        #: partitions whose last fetch reached the leader's high watermark (Kafka's
        #: `PartitionFetchState.isReplicaInSync`): never held back by a replication throttle
        self._in_sync: set[TopicPartition] = set()

    def __repr__(self) -> str:
        return f"ReplicaFetcher(leader={self.source_id}, id={self.fetcher_id})"

    # -- membership (synchronous, on the loop) ----------------------------------------------

    def add(self, tp: TopicPartition, state: PartitionFetchState) -> None:
        self.partitions[tp] = state
        self._wake.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)
        self._in_sync.discard(tp)
        self._wake.set()

    def _current(self, tp: TopicPartition, state: PartitionFetchState) -> bool:
        """Whether `state` is still what this fetcher holds for `tp` (not removed or replaced)."""
        return self.partitions.get(tp) is state

    def _delay(self, state: PartitionFetchState, now_ms: int) -> None:
        state.delayed_until_ms = now_ms + self.manager.config.replica_fetch_backoff_ms

    # -- the task -----------------------------------------------------------------------------

    def start(self) -> None:
        name = f"replica-fetcher-{self.manager.node_id}-{self.source_id}-{self.fetcher_id}"
        self._task = asyncio.get_running_loop().create_task(self._run(), name=name)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def wait_stopped(self) -> None:
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        try:
            while True:
                try:
                    worked = await self._do_work(self.manager.clock_ms())
                except (ConnectionError, OSError, TimeoutError) as e:
                    await self._on_connection_failure(e)
                    continue
                except Exception:  # noqa: BLE001 - a bad answer must not end replication
                    logger.exception("broker %d: %r failed; retrying", self.manager.node_id, self)
                    await self._on_connection_failure(RuntimeError("unexpected error"))
                    continue
                if not worked:
                    await self._idle()
                else:
                    await asyncio.sleep(0)  # a round without I/O must not starve the loop
        finally:
            await self._close_connection()

    async def _idle(self) -> None:
        """Sleep until a partition is added or removed, or the first delay ends."""
        self._wake.clear()
        now = self.manager.clock_ms()
        delays = [s.delayed_until_ms - now for s in self.partitions.values()]
        timeout_s = max(0.001, min(delays) / 1000) if delays else None
        try:
            async with asyncio.timeout(timeout_s):
                await self._wake.wait()
        except TimeoutError:
            pass

    async def _on_connection_failure(self, e: BaseException) -> None:
        self.failures += 1
        if self.failures in (1, 10) or self.failures % 100 == 0:
            logger.warning(
                "broker %d: fetching from broker %d failed (%d times): %s",
                self.manager.node_id,
                self.source_id,
                self.failures,
                e,
            )
        await self._close_connection()
        await asyncio.sleep(self.manager.config.replica_fetch_backoff_ms / 1000)

    async def _connection(self) -> AsyncKafkaConnection:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        endpoint = self.manager.endpoint_of(self.source_id)
        if endpoint is None:
            raise ConnectionError(f"broker {self.source_id} has no endpoint in the metadata")
        conn = await connect(
            Endpoint(*endpoint),
            self.manager.security,  # security.inter.broker.protocol
            client_id=f"replica-fetcher-{self.manager.node_id}-{self.fetcher_id}",
            timeout_s=self.manager.config.replica_socket_timeout_ms / 1000,
        )
        self._conn = conn
        self.failures = 0
        return conn

    async def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def _call(self, api_key: ApiKey, data: dict[str, Any], extra_wait_ms: int = 0) -> Any:
        conn = await self._connection()
        version = conn.version_for(api_key, _VERSIONS[api_key])
        body = kio_build.build(codec.request_schema(api_key, version), data)
        timeout_s = (self.manager.config.replica_socket_timeout_ms + extra_wait_ms) / 1000
        return await conn.request(body, timeout_s=timeout_s)

    async def _do_work(self, now_ms: int) -> bool:
        """One round: truncation, else offset resets, else a fetch; False when nothing is due."""
        due: dict[FetchPhase, dict[TopicPartition, PartitionFetchState]] = {
            phase: {} for phase in FetchPhase
        }
        for tp, s in self.partitions.items():  # one pass: a fetcher may follow thousands
            if now_ms >= s.delayed_until_ms:
                due[s.phase][tp] = s
        for phase, step in (
            (FetchPhase.TRUNCATING, self._truncate),
            (FetchPhase.RESETTING, self._reset),
            (FetchPhase.TIERED, self._build_from_tier),
            (FetchPhase.FETCHING, self._fetch),
        ):
            if due[phase]:
                await step(due[phase])
                return True
        return False

    # -- truncation (KIP-101) -----------------------------------------------------------------

    async def _truncate(self, due: dict[TopicPartition, PartitionFetchState]) -> None:
        rm = self.manager.replica_manager
        asks: dict[TopicPartition, tuple[PartitionFetchState, int]] = {}
        for tp, state in due.items():
            hosted = self._following(tp, state)
            if hosted is None:  # the metadata is moving it; it will be removed or replaced
                self._delay(state, self.manager.clock_ms())
                continue
            latest = hosted.log.latest_epoch
            if latest is None:  # no epochs to compare: keep only what was committed
                if self._cut(tp, state, rm.truncate_follower, hosted.log.high_watermark):
                    self._start_fetching(tp, state)
            else:
                asks[tp] = (state, latest)
        if not asks:
            return
        response = await self._call(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            {
                "replica_id": self.manager.node_id,
                "topics": _by_topic(
                    asks,
                    lambda tp, v: {
                        "partition": tp[1],
                        "current_leader_epoch": v[0].leader_epoch,
                        "leader_epoch": v[1],
                    },
                ),
            },
        )
        now = self.manager.clock_ms()
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, int(p.partition))
                asked = asks.get(tp, (None, 0))[0]
                if asked is None or not self._current(tp, asked):
                    continue
                if p.error_code:
                    self._on_partition_error(tp, asked, int(p.error_code), now)
                    continue
                self._apply_truncation(tp, asked, int(p.leader_epoch), int(p.end_offset))

    def _apply_truncation(
        self, tp: TopicPartition, state: PartitionFetchState, epoch: int, end_offset: int
    ) -> None:
        hosted = self._following(tp, state)
        if hosted is None:
            return
        log_ = hosted.log
        cut = truncation_for(
            epoch,
            end_offset,
            local_end_offset_for=lambda e: log_.epoch_cache.end_offset_for(e, log_.log_end_offset),
            log_end_offset=log_.log_end_offset,
            high_watermark=log_.high_watermark,
        )
        cut_ok = self._cut(tp, state, self.manager.replica_manager.truncate_follower, cut.offset)
        if cut_ok and cut.done:
            self._start_fetching(tp, state)

    def _cut(
        self,
        tp: TopicPartition,
        state: PartitionFetchState,
        truncate: Callable[[TopicPartition, int, int], int],
        offset: int,
    ) -> bool:
        """Run one truncation of `tp`; on failure mark the partition failed (False)."""
        try:
            truncate(tp, state.leader_epoch, offset)
        except Exception as e:  # noqa: BLE001 - Kafka's doTruncate catches every Throwable
            self.manager.mark_partition_failed(tp, e, f"truncation to {offset}")
            return False
        return True

    def _start_fetching(self, tp: TopicPartition, state: PartitionFetchState) -> None:
        hosted = self._following(tp, state)
        if hosted is not None:
            state.phase = FetchPhase.FETCHING
            state.fetch_offset = hosted.log.log_end_offset

    # -- offset reset after OFFSET_OUT_OF_RANGE -------------------------------------------------

    async def _reset(self, due: dict[TopicPartition, PartitionFetchState]) -> None:
        offsets = await self._list_offsets(due, (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP))
        for tp, state in due.items():
            start = offsets[EARLIEST_TIMESTAMP].get(tp)
            end = offsets[LATEST_TIMESTAMP].get(tp)
            if start is not None and end is not None and self._current(tp, state):
                self._apply_reset(tp, state, start, end)

    async def _list_offsets(
        self, due: dict[TopicPartition, PartitionFetchState], timestamps: tuple[int, ...]
    ) -> dict[int, dict[TopicPartition, int]]:
        """The leader's offsets for each of `timestamps` (one ListOffsets each); a partition
        that errs is handled as a fetch error and left out."""
        offsets: dict[int, dict[TopicPartition, int]] = {}
        for timestamp in timestamps:
            response = await self._call(
                ApiKey.LIST_OFFSETS,
                {
                    "replica_id": self.manager.node_id,
                    "isolation_level": 0,
                    "topics": _by_topic(
                        due,
                        functools.partial(_list_offsets_partition, timestamp=timestamp),
                        key="name",
                    ),
                },
            )
            now = self.manager.clock_ms()
            found = offsets.setdefault(timestamp, {})
            for topic in response.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, int(p.partition_index))
                    pending = due.get(tp)
                    if pending is None or not self._current(tp, pending):
                        continue
                    if p.error_code:
                        self._on_partition_error(tp, pending, int(p.error_code), now)
                    else:
                        found[tp] = int(p.offset)
        return offsets

    # -- rebuild from the remote tier after OFFSET_MOVED_TO_TIERED_STORAGE ----------------------

    async def _build_from_tier(self, due: dict[TopicPartition, PartitionFetchState]) -> None:
        """Kafka's `TierStateMachine.start`: restart each log at the leader's local log start
        with what the table holds below it, then fetch from there."""
        offsets = await self._list_offsets(due, (EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP))
        rm = self.manager.replica_manager
        for tp, state in due.items():
            local_start = offsets[EARLIEST_LOCAL_TIMESTAMP].get(tp)
            log_start = offsets[EARLIEST_TIMESTAMP].get(tp)
            if local_start is None or log_start is None or not self._current(tp, state):
                continue
            try:
                await rm.rebuild_from_tier(tp, state.leader_epoch, local_start, log_start)
            except (KafkaError, RemoteStorageError, OSError) as e:
                logger.warning(
                    "broker %d: rebuilding %s-%d from the remote tier failed: %s",
                    self.manager.node_id,
                    *tp,
                    e,
                )
                self._delay(state, self.manager.clock_ms())
                continue
            if self._current(tp, state):
                self._start_fetching(tp, state)

    def _apply_reset(
        self, tp: TopicPartition, state: PartitionFetchState, leader_start: int, leader_end: int
    ) -> None:
        hosted = self._following(tp, state)
        if hosted is None:
            return
        rm = self.manager.replica_manager
        reset = reset_for_out_of_range(hosted.log.log_end_offset, leader_start, leader_end)
        cuts = (
            (rm.truncate_follower, reset.truncate_to),
            (rm.truncate_fully_follower, reset.start_at),
        )
        for truncate, offset in cuts:
            if offset is not None and not self._cut(tp, state, truncate, offset):
                return
        logger.info(
            "broker %d: %s-%d out of range at %d; leader log is [%d, %d): fetching from %d",
            self.manager.node_id,
            *tp,
            state.fetch_offset,
            leader_start,
            leader_end,
            hosted.log.log_end_offset,
        )
        self._start_fetching(tp, state)

    # -- fetch ----------------------------------------------------------------------------------

    def _throttled(
        self, due: dict[TopicPartition, PartitionFetchState], now_ms: int
    ) -> dict[TopicPartition, PartitionFetchState]:
        """`due` without the partitions KIP-73 holds back: out of sync, throttled, and the
        follower's replication rate over its quota (Kafka's `shouldFollowerThrottle`); those
        wait a backoff, as Kafka's fetcher does when nothing is left to fetch."""
        quota = getattr(self.manager, "quota", None)
        if quota is None or not quota.any_throttled or not quota.is_quota_exceeded(now_ms):
            return due
        kept = {}
        for tp, state in due.items():
            if tp not in self._in_sync and quota.is_throttled(tp.topic, tp.partition):
                self._delay(state, now_ms)
            else:
                kept[tp] = state
        return kept

    async def _fetch(self, due: dict[TopicPartition, PartitionFetchState]) -> None:
        due = self._throttled(due, self.manager.clock_ms())
        if not due:
            return
        config = self.manager.config
        log_start_offset = self.manager.replica_manager.log_start_offset
        wanted = {
            tp: (state.leader_epoch, state.fetch_offset, log_start_offset(tp))
            for tp, state in due.items()
        }
        request = self.session.build(wanted)
        try:
            response = await self._call(
                ApiKey.FETCH,
                {
                    "replica_id": self.manager.node_id,
                    "max_wait": config.replica_fetch_wait_max_ms,
                    "min_bytes": config.replica_fetch_min_bytes,
                    "max_bytes": config.replica_fetch_response_max_bytes,
                    "isolation_level": 0,
                    "session_id": request.session_id,
                    "session_epoch": request.epoch,
                    "topics": _by_topic(
                        request.to_send,
                        lambda tp, f: {
                            "partition": tp[1],
                            "current_leader_epoch": f[0],
                            "fetch_offset": f[1],
                            "last_fetched_epoch": -1,
                            "log_start_offset": f[2],
                            "partition_max_bytes": config.replica_fetch_max_bytes,
                        },
                    ),
                    "forgotten_topics_data": forgotten_topics(request.to_forget),
                    "rack_id": "",
                },
                extra_wait_ms=config.replica_fetch_wait_max_ms,
            )
        except BaseException:
            self.session.handle_error()
            raise
        now = self.manager.clock_ms()
        answered = [
            (TopicPartition(topic.topic, int(p.partition_index)), p)
            for topic in response.responses
            for p in topic.partitions
        ]
        error_code = int(response.error_code)
        session_id = int(getattr(response, "session_id", 0))
        if not self.session.handle_response(
            request, error_code, session_id, (tp for tp, _p in answered)
        ):
            if error_code in SESSION_ERRORS:
                return  # the next round is a full fetch that starts a new session
            if not error_code:
                logger.warning(
                    "broker %d: %r answered partitions this fetch did not ask for; retrying",
                    self.manager.node_id,
                    self,
                )
            for tp, state in due.items():
                self._on_partition_error(tp, state, error_code, now)
            return
        for tp, p in answered:
            pending = due.get(tp)
            if pending is not None and self._current(tp, pending):
                self._process_partition(tp, pending, p, now)

    def _process_partition(
        self, tp: TopicPartition, state: PartitionFetchState, data: Any, now_ms: int
    ) -> None:
        """Kafka's `processPartitionData`: append, then take the leader's HW and log start."""
        code = int(data.error_code)
        if code:
            self._on_partition_error(tp, state, code, now_ms)
            return
        records = bytes(data.records or b"")
        try:
            state.fetch_offset = self.manager.replica_manager.append_fetched(
                tp,
                state.leader_epoch,
                records,
                leader_high_watermark=int(data.high_watermark),
                leader_log_start_offset=int(data.log_start_offset),
            )
            state.lag = max(0, int(data.high_watermark) - state.fetch_offset)
            if state.fetch_offset >= int(data.high_watermark):
                self._in_sync.add(tp)
            else:
                self._in_sync.discard(tp)
            quota = getattr(self.manager, "quota", None)
            if quota is not None and records and quota.is_throttled(tp.topic, tp.partition):
                quota.record(len(records), now_ms)
        except (KafkaError, CorruptRecordError) as e:
            # an offline log dir was reported once by its failure channel
            report = logger.debug if isinstance(e, KafkaStorageError) else logger.error
            report(
                "broker %d: appending what %r fetched for %s-%d failed: %s",
                self.manager.node_id,
                self,
                *tp,
                e,
            )
            self._delay(state, now_ms)

    def _on_partition_error(
        self, tp: TopicPartition, state: PartitionFetchState, code: int, now_ms: int
    ) -> None:
        if code == OffsetOutOfRangeError.code:
            state.phase = FetchPhase.RESETTING
            return
        if code == OffsetMovedToTieredStorageError.code:
            state.phase = FetchPhase.TIERED
            return
        # Stale or newer epochs, leadership moved, unknown partition, leader busy: the metadata
        # will move the partition (or make us leader); until then retry after a backoff.
        logger.debug("broker %d: %s-%d from %r: error %d", self.manager.node_id, *tp, self, code)
        self._delay(state, now_ms)

    def _following(self, tp: TopicPartition, state: PartitionFetchState) -> Any:
        """The hosted partition if we still follow it at `state`'s epoch, else None."""
        if not self._current(tp, state):
            return None
        try:
            return self.manager.replica_manager.following(tp, state.leader_epoch)
        except KafkaError:
            return None


def _list_offsets_partition(
    tp: TopicPartition, state: PartitionFetchState, timestamp: int
) -> dict[str, Any]:
    return {
        "partition_index": tp[1],
        "current_leader_epoch": state.leader_epoch,
        "timestamp": timestamp,
    }


def _by_topic(
    items: dict[TopicPartition, Any],
    partition: Callable[[TopicPartition, Any], dict],
    key: str = "topic",
) -> list[dict[str, Any]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for tp, value in items.items():
        grouped.setdefault(tp[0], []).append(partition(tp, value))
    return [{key: topic, "partitions": parts} for topic, parts in grouped.items()]
