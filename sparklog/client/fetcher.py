"""Fetch positions and fetched data of a consumer, sans-IO (Kafka's `AbstractFetch`,
`FetchCollector` and `CompletedFetch`; positions live in `subscription_state`).

Theory of operation. Every assigned partition has a position: the offset of the next record
to return (None until it is set by `seek` or reset by `auto.offset.reset`). `fetch_requests()`
builds one Fetch per leader for the partitions that are assigned, not paused and have a
position, and whose leader has no fetch in flight. Each leader's fetches run in an incremental
fetch session (KIP-227, `FetchSessionHandler`): after the first full Fetch a request lists only
partitions whose fetch offset or leader epoch moved (and those to forget), and a partition left
out of a response has no news; a session error is no user error, the next Fetch is full. Fetches are pipelined: a partition
with one buffered response is fetched again at the offset after that response's last batch
(read from batch headers, before any record is decoded) when that offset is below the high
watermark the response reported, so the next response travels while the buffered one is
decoded and handed out; at most two responses per partition are held.
`on_fetch_response()` buffers each partition's record bytes as a `CompletedFetch`, provided the
partition is still assigned and its position still equals the fetch offset or the response
continues the buffered data (a `seek` in the meantime drops the buffer and makes it stale). `drain()` / `drain_arrow()` hand out records from the buffer
at the position, at most `max.poll.records`, advancing positions; control batches and, with
read_committed, aborted transactions are skipped. Paused partitions keep their buffered data.

Corrupt batches (Kafka's `CompletedFetch` and `FetchCollector`). Every record before a corrupt
batch is handed out first; then the partition's position stays at the batch and every drain
raises its `CorruptBatchError` (topic, partition, offset). A batch in fetched data that fails
its CRC check or does not decode (`completed_fetch`) stops the partition: it is not fetched
(the same bytes would come back; Kafka's consumer keeps them and raises) until `seek` or a reset
moves it. A broker that answers CORRUPT_MESSAGE at the position refuses its own damaged copy:
as Kafka's consumer, the partition is fetched again, so it goes on by itself once it is served
(leadership moved to a good copy, or the segment was repaired), and the error ends with the
first answer without one. Kafka fetches once per poll that raised; here every drain raises
meanwhile (`poll(0)` too), so the refetch waits `retry.backoff.ms`, doubling per answer up to
`retry.backoff.max.ms` (KIP-580's exponential backoff), not to hammer the broken replica.

Leader changes. A Fetch carries the partition's leader epoch from metadata
(`current_leader_epoch`); NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH and
the like only ask for fresh metadata: the position stays, and the next fetch goes to whichever
leader metadata names. Each position remembers the leader epoch of the record before it
(`position_epoch`). When metadata shows a newer leader epoch, a position with a known epoch
waits for validation (KIP-320, Kafka's `OffsetsForLeaderEpochUtils` and
`SubscriptionState.maybeCompleteValidation`): one OffsetForLeaderEpoch to the new leader asks
where that epoch ends there. If it ends before the position, the new leader's log diverged
(an unclean election truncated it): the position moves back to the end offset when
`auto.offset.reset` is set, else `LogTruncationError` is raised until the user seeks. A
position set by `seek()` has no epoch and is not validated, as in Kafka.

Not thread-safe: the consumer calls it from the thread that calls `poll()`.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sparklog.errors import (
    CorruptBatchError,
    CorruptMessageError,
    OffsetOutOfRangeError,
    UnsupportedVersionError,
    error_for_code,
)
from sparklog.protocol.fetch_session_handler import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    SESSION_ERRORS,
    FetchRequestData,
    FetchSessionHandler,
    forgotten_topics,
)
from sparklog.structs import CONSUMER_REPLICA_ID, IsolationLevel, TopicPartition

from .arrow_batches import empty_batch, with_topic_partition
from .completed_fetch import CompletedFetch
from .metadata import REFRESH_ERROR_CODES, Cluster
from .subscription_state import PartitionState, SubscriptionState

logger = logging.getLogger(__name__)


ARROW_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """One record as `poll()` returns it (Kafka's `ConsumerRecord`)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes | None], ...] = ()


class LogTruncationError(OffsetOutOfRangeError):
    """The new leader's log ends before the consumer's position in the position's epoch (an
    unclean election lost records) and `auto.offset.reset` is none (Kafka's
    `LogTruncationException`). `divergent_offsets` has where each log ends; seek to go on."""

    def __init__(self, message: str, divergent_offsets: dict[TopicPartition, int]) -> None:
        super().__init__(message)
        self.divergent_offsets = divergent_offsets


@dataclass(frozen=True, slots=True)
class FetchResult:
    """What a Fetch response asks of the consumer."""

    refresh_metadata: bool = False
    out_of_range: dict[TopicPartition, int] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)


class Fetcher:
    """Builds Fetch requests and turns responses into records (see the module docstring)."""

    def __init__(
        self,
        subscriptions: SubscriptionState,
        *,
        fetch_min_bytes: int,
        fetch_max_bytes: int,
        fetch_max_wait_ms: int,
        max_partition_fetch_bytes: int,
        isolation_level: int,
        check_crcs: bool = True,
        client_rack: str = "",
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
    ) -> None:
        self.subscriptions = subscriptions
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.isolation_level = isolation_level
        self.check_crcs = check_crcs
        self.client_rack = client_rack
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = max(retry_backoff_max_ms, retry_backoff_ms)
        self._buffer: deque[CompletedFetch] = deque()
        #: KIP-227 sessions per broker, and the request each one has in flight
        self._sessions: dict[int, FetchSessionHandler[TopicPartition, tuple[int, int]]] = {}
        self._session_requests: dict[int, FetchRequestData] = {}

    def buffered_partitions(self) -> set[TopicPartition]:
        return {cf.tp for cf in self._buffer}

    def clear_buffer(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Drop buffered data (all, or of `partitions`), e.g. after a seek."""
        if partitions is None:
            self._buffer.clear()
            return
        drop = set(partitions)
        self._buffer = deque(cf for cf in self._buffer if cf.tp not in drop)

    def fetch_requests(
        self, cluster: Cluster, busy_nodes: set[int], *, now_ms: int = 0
    ) -> tuple[dict[int, tuple[dict, dict[TopicPartition, int]]], set[str]]:
        """({leader: (Fetch fields, {partition: fetch offset})}, topics lacking a leader);
        leaders in `busy_nodes` (a fetch in flight, unreachable) are left out. `now_ms` (the
        clock of `on_fetch_response`) only times refetches after CORRUPT_MESSAGE."""
        buffered: dict[TopicPartition, list[CompletedFetch]] = {}
        for cf in self._buffer:
            buffered.setdefault(cf.tp, []).append(cf)
        by_node: dict[int, dict[TopicPartition, int]] = {}
        no_leader: set[str] = set()
        for tp in self.subscriptions.assignment():
            if not self.subscriptions.is_fetchable(tp):
                continue
            state = self.subscriptions.state(tp)
            if state.corrupt is not None and now_ms < state.corrupt_refetch_ms:
                continue  # the broker refused the batch: ask again after the backoff
            position = state.position
            assert position is not None
            pending = buffered.get(tp)
            prefetch = None
            if pending:  # pipelining: fetch what follows the buffered data, once
                prefetch = pending[0]
                offset = prefetch.next_fetch_offset()
                if (
                    len(pending) > 1
                    or prefetch.prefetched
                    or offset <= max(position, 0)
                    or offset >= self._fetchable_end(tp)
                ):
                    continue
            else:
                offset = position
            leader = cluster.leader_for(tp)
            if leader is None:
                no_leader.add(tp.topic)
                continue
            if leader in busy_nodes:
                continue
            if prefetch is not None:
                prefetch.prefetched = True
            by_node.setdefault(leader, {})[tp] = offset
        requests = {}
        for node, offsets in by_node.items():
            # The leader epoch we believe in: a broker with another one answers
            # FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH instead of serving a stale log.
            wanted = {tp: (cluster.leader_epoch_for(tp), o) for tp, o in offsets.items()}
            session = self._sessions.setdefault(node, FetchSessionHandler())
            request = self._session_requests[node] = session.build(wanted)
            requests[node] = (self._fields(request), offsets)
        return requests, no_leader

    def close_session_requests(self) -> dict[int, dict]:
        """{broker: Fetch fields} that close this consumer's fetch sessions (Kafka's consumer
        sends them as it closes), so the brokers need not keep them until eviction."""
        closing: dict[int, dict[str, Any]] = {}
        for node, session in self._sessions.items():
            if session.session_id != INVALID_SESSION_ID:
                request: FetchRequestData[TopicPartition, tuple[int, int]] = FetchRequestData(
                    session.session_id, FINAL_EPOCH, {}, []
                )
                closing[node] = {**self._fields(request), "max_wait": 0, "min_bytes": 0}
        self._sessions.clear()
        return closing

    def on_fetch_failure(self, node: int) -> None:
        """The fetch to `node` got no answer: its session is closed by the next request."""
        self._session_requests.pop(node, None)
        session = self._sessions.get(node)
        if session is not None:
            session.handle_error()

    def _fields(self, request: FetchRequestData) -> dict:
        topics: dict[str, list[dict]] = {}
        for tp, (leader_epoch, offset) in request.to_send.items():
            topics.setdefault(tp.topic, []).append(
                {
                    "partition": tp.partition,
                    "current_leader_epoch": leader_epoch,
                    "fetch_offset": offset,
                    "last_fetched_epoch": -1,
                    "log_start_offset": -1,
                    "partition_max_bytes": self.max_partition_fetch_bytes,
                }
            )
        return {
            "replica_id": -1,
            "max_wait": self.fetch_max_wait_ms,
            "min_bytes": self.fetch_min_bytes,
            "max_bytes": self.fetch_max_bytes,
            "isolation_level": self.isolation_level,
            "session_id": request.session_id,
            "session_epoch": request.epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": forgotten_topics(request.to_forget),
            "rack_id": self.client_rack,
        }

    def on_fetch_response(
        self,
        offsets: dict[TopicPartition, int],
        response: Any,
        node: int | None = None,
        *,
        now_ms: int = 0,
    ) -> FetchResult:
        """Buffer the data of partitions whose position did not move since the request. In an
        incremental session (KIP-227) a partition left out of the response has no news.
        `now_ms` only times the refetch of a partition answered CORRUPT_MESSAGE."""
        refresh = False
        out_of_range: dict[TopicPartition, int] = {}
        errors: list[BaseException] = []
        code = int(getattr(response, "error_code", 0))
        request = self._session_requests.pop(node, None) if node is not None else None
        if node is not None and request is not None:
            answered = [
                TopicPartition(t.topic, int(p.partition_index))
                for t in response.responses
                for p in t.partitions
            ]
            session_id = int(getattr(response, "session_id", INVALID_SESSION_ID))
            usable = self._sessions[node].handle_response(request, code, session_id, answered)
            if not usable and (code == 0 or code in SESSION_ERRORS):
                return FetchResult()  # the next fetch is a full one, on a new session
        if code != 0:
            return FetchResult(True, {}, [error_for_code(code)(f"Fetch failed with error {code}")])
        for topic in response.responses:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, int(p.partition_index))
                fetch_offset = offsets.get(tp)
                if fetch_offset is None or not self.subscriptions.is_assigned(tp):
                    continue
                state = self.subscriptions.state(tp)
                if state.position != fetch_offset and not self._continues(tp, fetch_offset):
                    continue  # a seek happened while the fetch was in flight
                code = int(p.error_code)
                if state.corrupt is not None:
                    if state.corrupt_refetch_ms < 0:
                        continue  # stopped at a corrupt batch in fetched data until a seek
                    if code == 0:
                        self._on_served_again(tp, state)
                if code == 0:
                    self._on_partition_data(tp, fetch_offset, state, p)
                elif code == CorruptMessageError.code:
                    # A prefetch answered so is dropped: the fetch at the position, once the
                    # data before it is drained, gets the same answer.
                    if fetch_offset == state.position:
                        self._on_corrupt_message(tp, state, now_ms)
                elif code == OffsetOutOfRangeError.code:
                    if self.subscriptions.default_reset == "none" and state.reset_strategy is None:
                        out_of_range[tp] = fetch_offset
                    else:
                        self.subscriptions.request_reset(
                            tp, state.reset_strategy or self.subscriptions.default_reset
                        )
                elif code in REFRESH_ERROR_CODES or error_for_code(code).retriable:
                    refresh = True
                else:
                    cls = error_for_code(code)
                    errors.append(cls(f"{cls.__name__} fetching {tp.topic}-{tp.partition}"))
        return FetchResult(refresh, out_of_range, errors)

    def _on_partition_data(
        self, tp: TopicPartition, fetch_offset: int, state: PartitionState, p: Any
    ) -> None:
        state.high_watermark = int(p.high_watermark)
        state.last_stable_offset = int(getattr(p, "last_stable_offset", -1))
        state.log_start_offset = int(getattr(p, "log_start_offset", -1))
        records = p.records
        if not records:
            return
        aborted = None
        if self.isolation_level == IsolationLevel.READ_COMMITTED:
            aborted = [
                (int(a.producer_id), int(a.first_offset)) for a in (p.aborted_transactions or ())
            ]
        self._buffer.append(
            CompletedFetch(tp, fetch_offset, memoryview(records), aborted, self.check_crcs)
        )

    def _fetchable_end(self, tp: TopicPartition) -> int:
        """Where the last response said readable data ends (the high watermark, or the LSO for
        read_committed); a prefetch from there would only wait at the broker, holding up the
        next fetch to that leader (a reused consumer's, after a seek)."""
        state = self.subscriptions.state(tp)
        if self.isolation_level == IsolationLevel.READ_COMMITTED and state.last_stable_offset >= 0:
            return state.last_stable_offset
        return state.high_watermark

    def _continues(self, tp: TopicPartition, fetch_offset: int) -> bool:
        """Whether a prefetch at `fetch_offset` continues data still buffered for `tp` (a seek
        drops the buffer, so a prefetch sent before it no longer continues anything)."""
        return any(
            cf.tp == tp and cf.prefetched and cf.next_fetch_offset() == fetch_offset
            for cf in self._buffer
        )

    def out_of_range_error(self, out_of_range: dict[TopicPartition, int]) -> OffsetOutOfRangeError:
        where = ", ".join(f"{tp.topic}-{tp.partition} at {o}" for tp, o in out_of_range.items())
        return OffsetOutOfRangeError(
            f"fetch positions out of range with no reset policy (auto.offset.reset=none): {where}"
        )

    # -------------------------------------------------------------- validation

    def validation_requests(
        self, cluster: Cluster, busy_nodes: set[int]
    ) -> tuple[dict[int, tuple[dict, dict[TopicPartition, int]]], set[str]]:
        """OffsetForLeaderEpoch per leader for the positions awaiting validation:
        ({leader: (fields, {partition: position})}, topics lacking a leader)."""
        by_node: dict[int, dict[TopicPartition, int]] = {}
        no_leader: set[str] = set()
        for tp in self.subscriptions.awaiting_validation():
            leader = cluster.leader_for(tp)
            if leader is None:
                no_leader.add(tp.topic)
            elif leader not in busy_nodes:
                position = self.subscriptions.state(tp).position
                assert position is not None, "only positioned partitions await validation"
                by_node.setdefault(leader, {})[tp] = position
        requests = {}
        for node, asked in by_node.items():
            topics: dict[str, list[dict]] = {}
            for tp in asked:
                topics.setdefault(tp.topic, []).append(
                    {
                        "partition": tp.partition,
                        "current_leader_epoch": cluster.leader_epoch_for(tp),
                        "leader_epoch": self.subscriptions.state(tp).position_epoch,
                    }
                )
            fields = {
                "replica_id": CONSUMER_REPLICA_ID,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            }
            requests[node] = (fields, asked)
        return requests, no_leader

    def on_validation_response(
        self, asked: dict[TopicPartition, int], response: Any
    ) -> FetchResult:
        """Complete validation, move a diverged position back, or report the truncation."""
        refresh = False
        errors: list[BaseException] = []
        truncated: dict[TopicPartition, int] = {}
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, int(p.partition))
                state = self._still_awaiting(tp, asked)
                if state is None:
                    continue
                code = int(p.error_code)
                if code != 0:
                    cls = error_for_code(code)
                    if cls.retriable:
                        refresh = True  # a leader change under way: ask again after metadata
                    else:
                        errors.append(cls(f"{cls.__name__} validating {tp.topic}-{tp.partition}"))
                    continue
                end_offset, end_epoch = int(p.end_offset), int(p.leader_epoch)
                if end_offset < 0 or end_epoch < 0:  # the leader knows nothing of our epoch
                    self.subscriptions.request_reset(tp, self.subscriptions.default_reset)
                elif end_offset >= asked[tp]:
                    state.awaiting_validation = False
                elif self.subscriptions.default_reset != "none":
                    logger.warning(
                        "truncation detected for %s at offset %d: the new leader's log ends "
                        "at %d in epoch %d; resuming there",
                        f"{tp.topic}-{tp.partition}",
                        asked[tp],
                        end_offset,
                        end_epoch,
                    )
                    self.subscriptions.seek(tp, end_offset, end_epoch)
                else:
                    truncated[tp] = end_offset
        if truncated:
            where = ", ".join(f"{tp.topic}-{tp.partition} at {o}" for tp, o in truncated.items())
            errors.append(
                LogTruncationError(
                    f"the logs of new leaders diverged below the consumer's positions ({where}) "
                    "and auto.offset.reset=none: seek() to go on",
                    truncated,
                )
            )
        return FetchResult(refresh, {}, errors)

    def on_validation_failure(self, asked: dict[TopicPartition, int], error: BaseException) -> None:
        """A broker that speaks no OffsetForLeaderEpoch cannot validate: trust the position,
        as Kafka does; other failures leave the partitions waiting for the next attempt."""
        if isinstance(error, UnsupportedVersionError):
            for tp in asked:
                state = self._still_awaiting(tp, asked)
                if state is not None:
                    state.awaiting_validation = False

    def _still_awaiting(self, tp: TopicPartition, asked: dict[TopicPartition, int]) -> Any:
        """The partition's state when it still awaits the validation `asked` was sent for."""
        if tp not in asked or not self.subscriptions.is_assigned(tp):
            return None
        state = self.subscriptions.state(tp)
        if not state.awaiting_validation or state.position != asked[tp]:
            return None  # a seek or reset happened meanwhile
        return state

    # ---------------------------------------------------------------- draining

    def _drainable(self) -> Iterator[CompletedFetch]:
        """Buffered fetches of assigned, unpaused partitions whose position matches."""
        for cf in list(self._buffer):
            if not self.subscriptions.is_assigned(cf.tp):
                self._buffer.remove(cf)
                continue
            state = self.subscriptions.state(cf.tp)
            if state.position is None:
                self._buffer.remove(cf)
                continue
            if not state.paused and state.corrupt is None:
                yield cf

    def drain(self, max_records: int) -> list[tuple[TopicPartition, Any]]:
        """Up to `max_records` (partition, Record) pairs in buffer order, advancing positions.
        Raises the `CorruptBatchError` of a partition stopped at a corrupt batch (see
        `_raise_corrupt`)."""
        self._raise_corrupt()
        out: list[tuple[TopicPartition, Any]] = []
        for cf in self._drainable():
            if len(out) >= max_records:
                break
            state = self.subscriptions.state(cf.tp)
            assert state.position is not None
            if state.position < cf.fetch_offset:
                continue  # a prefetched response waits for the data before it
            records, state.position = cf.next_records(state.position, max_records - len(out))
            state.position_epoch = cf.epoch_before(state.position, state.position_epoch)
            out.extend((cf.tp, r) for r in records)
            if cf.exhausted:
                self._on_exhausted(cf, state)
        if not out:
            self._raise_corrupt()
        return out

    def drain_arrow(self, max_records: int, include_headers: bool) -> pa.RecordBatch:
        """Up to `max_records` records as one Arrow batch with Spark's Kafka source columns;
        raises as `drain` does."""
        self._raise_corrupt()
        parts: list[pa.RecordBatch] = []
        count = 0
        for cf in self._drainable():
            if count >= max_records:
                break
            state = self.subscriptions.state(cf.tp)
            assert state.position is not None
            if state.position < cf.fetch_offset:
                continue  # a prefetched response waits for the data before it
            rows, state.position = cf.next_arrow(
                state.position, max_records - count, include_headers
            )
            state.position_epoch = cf.epoch_before(state.position, state.position_epoch)
            if cf.exhausted:
                self._on_exhausted(cf, state)
            if len(rows):
                parts.append(with_topic_partition(rows, cf.tp, include_headers))
                count += len(rows)
        if not parts:
            self._raise_corrupt()
            return empty_batch(include_headers)
        if len(parts) == 1:
            return parts[0]
        return pa.Table.from_batches(parts).combine_chunks().to_batches()[0]

    # ----------------------------------------------------------- corrupt batches

    def _on_exhausted(self, cf: CompletedFetch, state: PartitionState) -> None:
        self._buffer.remove(cf)
        if cf.corrupt is not None:
            self._stop_at_corrupt_batch(cf.tp, state, cf.corrupt)

    def _stop_at_corrupt_batch(
        self, tp: TopicPartition, state: PartitionState, why: str, *, refetching: bool = False
    ) -> None:
        """Every record before the corrupt batch at the position is out: stop the partition
        there (data buffered past it dropped); every drain raises until a seek, or until a
        refetch is served when `refetching`."""
        assert state.position is not None
        error = CorruptBatchError(
            tp.topic, tp.partition, state.position, why, refetching=refetching
        )
        logger.warning("%s", error)  # once; every poll raises it meanwhile
        state.corrupt = error
        self.clear_buffer([tp])

    def _on_corrupt_message(self, tp: TopicPartition, state: PartitionState, now_ms: int) -> None:
        """The broker refuses to serve the batch at the position: its copy is damaged. Kafka's
        `FetchCollector.handleInitializeErrors` raises it with the next poll, and the partition,
        no longer buffered, is fetched again by the poll after: leadership may have moved to a
        good copy, or the segment been repaired. Here every drain raises until then, and the
        refetch backs off (module docstring)."""
        if state.corrupt is None:
            why = "the broker answered CORRUPT_MESSAGE: its copy is damaged"
            self._stop_at_corrupt_batch(tp, state, why, refetching=True)
        else:
            logger.debug("%s-%d: CORRUPT_MESSAGE again", tp.topic, tp.partition)
        state.corrupt_answers += 1
        doublings = min(state.corrupt_answers - 1, 20)
        backoff_ms = min(self.retry_backoff_max_ms, self.retry_backoff_ms << doublings)
        state.corrupt_refetch_ms = now_ms + backoff_ms

    def _on_served_again(self, tp: TopicPartition, state: PartitionState) -> None:
        """A refetch of a batch the broker refused came back without error: no more raising."""
        logger.warning(
            "%s-%d at offset %s is served again after %d CORRUPT_MESSAGE answers (leadership "
            "moved to a good copy, or the segment was repaired): consuming on",
            tp.topic,
            tp.partition,
            state.position,
            state.corrupt_answers,
        )
        state.clear_corrupt()

    def _raise_corrupt(self) -> None:
        """Raise the error of the first unpaused partition stopped at a corrupt batch (Kafka's
        `FetchCollector.collectFetch`: records drained from other partitions in the same poll
        come out first, the error on the next poll)."""
        for tp in self.subscriptions.assignment():
            state = self.subscriptions.state(tp)
            if state.corrupt is not None and not state.paused:
                raise state.corrupt.with_traceback(None)  # not one frame more per poll
