"""The Kafka consumer with manual assignment (Kafka's `KafkaConsumer` without groups).

`assign()` partitions, then `poll()`: positions without an offset are reset with ListOffsets
(`auto.offset.reset`), one Fetch per leader is kept in flight between polls (so the next
poll's data is usually already there), and records come out of the `Fetcher` buffer at most
`max.poll.records` at a time. `poll_arrow()` returns the same records as one Arrow batch,
decoded vectorized.

With `group.id`, `subscribe(topics | pattern)` joins the consumer group (`group_member`: the
classic protocol with range/roundrobin/sticky, or `group.protocol=consumer`); `poll()` keeps
the membership alive, partitions come and go through `on_assign` / `on_revoke` / `on_lost`,
positions start at the group's committed offsets, `enable.auto.commit` commits every
`auto.commit.interval.ms`, and `commit()` / `committed()` work as in Kafka's consumer.

A leader change costs no record and repeats none: a failed fetch (the leader died, or answers
NOT_LEADER_OR_FOLLOWER / a fenced epoch) leaves the position where it was and asks for fresh
metadata; an unreachable leader is skipped for its reconnect backoff; when metadata names a
newer leader epoch, positions are validated with OffsetForLeaderEpoch (KIP-320, see
`fetcher`) before fetching from the new leader at the same position.

A corrupt batch stops a partition's records there, as in Kafka's consumer: every record before
it is returned, then every `poll()` / `poll_arrow()` raises `CorruptBatchError` naming topic,
partition and offset. When the consumer's own CRC check (`check.crcs`) found it in fetched data,
only a seek ends that (past the batch to skip it). When the broker answered CORRUPT_MESSAGE (its
copy is damaged), the partition is fetched again after a backoff (see `fetcher`) and the consumer
goes on without a seek once it is served (leadership moved to a good copy, or the segment was
repaired); `poll(timeout)` waits up to its timeout for that refetch before raising, `poll(0)`
raises at once.

Not thread-safe, like Kafka's consumer: use it from one thread.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

import pyarrow as pa

from sparklog.errors import CorruptBatchError, KafkaError
from sparklog.protocol.api_versions import ApiKey
from sparklog.structs import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, IsolationLevel, TopicPartition

from .admin import OffsetAndTimestamp, list_offsets
from .broker_connection import now_ms
from .config import consumer_config
from .fetcher import (
    ConsumerRecord,
    Fetcher,
    FetchResult,
    SubscriptionState,
)
from .group_member import GroupMember
from .metadata import Metadata
from .network import NetworkClient
from .position_reset import reset_positions
from .producer import ClientClosedError
from .throttle import client_metrics, metric_values, throttle_recorder

logger = logging.getLogger(__name__)

_NEEDS_GROUP = (
    "{what} needs a consumer group: set group.id in the consumer's settings "
    "(or use assign([(topic, partition), ...]) with seek() and no group)"
)


class NoGroupError(ValueError):
    """A group feature (subscribe, commit) was called on a consumer without `group.id`."""


def _tp(tp: TopicPartition | tuple[str, int]) -> TopicPartition:
    return tp if isinstance(tp, TopicPartition) else TopicPartition(tp[0], int(tp[1]))


class KafkaConsumer:
    """A consumer of assigned partitions. Use as a context manager, or call `close()`."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = consumer_config(config)
        c = self.config
        #: Kafka's consumer metrics this client records (`fetch-throttle-time-avg|max`)
        self.client_metrics = client_metrics(c)
        record_throttle = throttle_recorder(
            self.client_metrics, "consumer", c["client.id"] or "sparklog"
        )
        self._network = NetworkClient(c, on_throttle_time=record_throttle)
        self._metadata = Metadata(self._network, c, allow_auto_create=c["allow.auto.create.topics"])
        self._subscriptions = SubscriptionState(c["auto.offset.reset"])
        self._isolation_level = (
            IsolationLevel.READ_COMMITTED
            if c["isolation.level"] == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        self._fetcher = Fetcher(
            self._subscriptions,
            fetch_min_bytes=c["fetch.min.bytes"],
            fetch_max_bytes=c["fetch.max.bytes"],
            fetch_max_wait_ms=c["fetch.max.wait.ms"],
            max_partition_fetch_bytes=c["max.partition.fetch.bytes"],
            isolation_level=self._isolation_level,
            check_crcs=c["check.crcs"],
            client_rack=c["client.rack"],
            retry_backoff_ms=c["retry.backoff.ms"],
            retry_backoff_max_ms=c["retry.backoff.max.ms"],
        )
        self._in_flight: dict[int, tuple[Future, dict[TopicPartition, int]]] = {}
        self._validations: dict[int, tuple[Future, dict[TopicPartition, int]]] = {}
        # Nodes that just failed us or named another leader: (retry after ms, metadata version).
        self._node_backoff: dict[int, tuple[int, int]] = {}
        self._errors: list[BaseException] = []
        self._closed = False
        self._group: GroupMember | None = None
        self._pattern: re.Pattern[str] | None = None
        self._listeners: dict[str, Callable[..., None] | None] = {}
        self._next_auto_commit_ms = now_ms() + c["auto.commit.interval.ms"]

    def __enter__(self) -> KafkaConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------- assignment

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Consume exactly these partitions (replacing any previous assignment)."""
        self._check_open()
        tps = [_tp(tp) for tp in partitions]
        self._subscriptions.assign(tps)
        self._fetcher.clear_buffer(set(self._fetcher.buffered_partitions()) - set(tps))
        self._metadata.add_topics(tp.topic for tp in tps)

    def assignment(self) -> set[TopicPartition]:
        return set(self._subscriptions.assignment())

    def subscribe(
        self,
        topics: Iterable[str] | None = None,
        pattern: str | None = None,
        *,
        on_assign: Callable[[list[TopicPartition]], None] | None = None,
        on_revoke: Callable[[list[TopicPartition]], None] | None = None,
        on_lost: Callable[[list[TopicPartition]], None] | None = None,
    ) -> None:
        """Join the consumer group for `topics` (or every topic matching the regex `pattern`);
        partitions arrive with the next polls. `on_lost` is called instead of `on_revoke` when
        the partitions were already taken away (fenced, session expired)."""
        self._check_open()
        if not self.config["group.id"]:
            raise NoGroupError(_NEEDS_GROUP.format(what="subscribe()"))
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe() takes topics or a pattern, not both or neither")
        if self._group is None:
            self._group = GroupMember(
                self._network, self._metadata, self.config, self._on_assigned, self._on_revoked
            )
        self._listeners = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        self._pattern = re.compile(pattern) if pattern is not None else None
        self._group.subscribe(list(topics) if topics is not None else self._matching())

    def subscription(self) -> list[str]:
        return [] if self._group is None else list(self._group.topics)

    def _matching(self) -> list[str]:
        assert self._pattern is not None
        response = self._metadata.request_metadata(None)
        return sorted(t.name for t in response.topics if t.name and self._pattern.fullmatch(t.name))

    def unsubscribe(self) -> None:
        """Leave the group, if any, and drop the assignment."""
        if self._group is not None:
            self._group.close()
            self._group = None
        self.assign([])

    def commit(
        self,
        offsets: Mapping[TopicPartition | tuple[str, int], int] | None = None,
        asynchronous: bool = False,
    ) -> None:
        """Commit `offsets` (default: the position of every assigned partition) for the group.
        Always synchronous here; raises CommitFailedError when the group moved on."""
        self._check_open()
        if self._group is None:
            if not self.config["group.id"]:
                raise NoGroupError(_NEEDS_GROUP.format(what="commit()"))
            self._group = GroupMember(
                self._network, self._metadata, self.config, self._on_assigned, self._on_revoked
            )
        given = offsets if offsets is not None else self._positions()
        self._group.commit({_tp(tp): int(o) for tp, o in given.items()})

    def group_metadata(self) -> dict[str, Any]:
        """This member's identity for `KafkaProducer.send_offsets_to_transaction` (Kafka's
        `ConsumerGroupMetadata`): the coordinator refuses offsets from a fenced generation."""
        group_id = self.config["group.id"]
        if group_id is None:
            raise ValueError("group_metadata() needs a group.id")
        member = self._group
        return {
            "group_id": group_id,
            "generation_id": -1 if member is None else member.generation,
            "member_id": "" if member is None else member.member_id,
            "group_instance_id": None if member is None else member.instance_id,
        }

    def committed(
        self, partitions: Iterable[TopicPartition | tuple[str, int]]
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offsets of `partitions` (None where it has none)."""
        self._check_open()
        if not self.config["group.id"]:
            raise NoGroupError(_NEEDS_GROUP.format(what="committed()"))
        group = self._group or GroupMember(
            self._network, self._metadata, self.config, self._on_assigned, self._on_revoked
        )
        return group.committed([_tp(tp) for tp in partitions])

    def _positions(self) -> dict[TopicPartition, int]:
        return {
            tp: state.position
            for tp in self._subscriptions.assignment()
            if (state := self._subscriptions.state(tp)).position is not None
        }

    def _on_assigned(self, partitions: list[TopicPartition]) -> None:
        assert self._group is not None
        kept = [tp for tp in self._subscriptions.assignment() if tp in partitions]
        self._subscriptions.assign([*kept, *[tp for tp in partitions if tp not in kept]])
        new = [tp for tp in partitions if tp not in kept]
        if new:
            for tp, offset in self._group.committed(new).items():
                if offset is not None:
                    self._subscriptions.seek(tp, offset)
        listener = self._listeners.get("assign")
        if listener is not None:
            listener(list(partitions))

    def _on_revoked(self, partitions: list[TopicPartition], lost: bool) -> None:
        if not lost and self.config["enable.auto.commit"] and self._group is not None:
            mine = {tp: o for tp, o in self._positions().items() if tp in partitions}
            try:
                self._group.commit(mine)
            except KafkaError as e:
                logger.info("commit before revoking %s failed: %s", partitions, e)
        listener = self._listeners.get("lost" if lost else "revoke") or (
            self._listeners.get("revoke") if lost else None
        )
        if listener is not None:
            listener(list(partitions))
        remaining = [tp for tp in self._subscriptions.assignment() if tp not in partitions]
        self._subscriptions.assign(remaining)
        self._fetcher.clear_buffer(partitions)

    # -------------------------------------------------------------- positions

    def seek(self, partition: TopicPartition | tuple[str, int], offset: int) -> None:
        """Fetch from `offset` on the next poll."""
        tp = _tp(partition)
        self._subscriptions.seek(tp, offset)
        self._fetcher.clear_buffer([tp])

    def seek_to_beginning(
        self, partitions: Iterable[TopicPartition | tuple[str, int]] | None = None
    ) -> None:
        """Move to the log start offset (looked up lazily, on the next poll or position)."""
        self._request_reset(partitions, "earliest")

    def seek_to_end(
        self, partitions: Iterable[TopicPartition | tuple[str, int]] | None = None
    ) -> None:
        """Move to the end: the high watermark, or the last stable offset with read_committed."""
        self._request_reset(partitions, "latest")

    def _request_reset(self, partitions: Iterable[Any] | None, strategy: str) -> None:
        tps = (
            self._subscriptions.assignment()
            if partitions is None
            else [_tp(tp) for tp in partitions]
        )
        for tp in tps:
            self._subscriptions.request_reset(tp, strategy)
        self._fetcher.clear_buffer(tps)

    def position(
        self, partition: TopicPartition | tuple[str, int], timeout_ms: int | None = None
    ) -> int:
        """The offset of the next record `poll()` returns for `partition` (looked up if unset)."""
        tp = _tp(partition)
        state = self._subscriptions.state(tp)
        if state.position is None:
            self._update_positions(self._deadline(timeout_ms), only=[tp])
        assert state.position is not None
        return state.position

    def pause(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Stop returning and fetching records of `partitions` until `resume()`."""
        for tp in partitions:
            self._subscriptions.state(_tp(tp)).paused = True

    def resume(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        for tp in partitions:
            self._subscriptions.state(_tp(tp)).paused = False

    def paused(self) -> set[TopicPartition]:
        return {
            tp for tp in self._subscriptions.assignment() if self._subscriptions.state(tp).paused
        }

    # ------------------------------------------------------------- lookups

    def offsets_for_times(
        self,
        timestamps: Mapping[TopicPartition | tuple[str, int], int],
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset whose timestamp is >= the given one, per partition (None when no
        record is that recent)."""
        for ts in timestamps.values():
            if ts < 0:
                raise ValueError(f"timestamps must be >= 0, got {ts}")
        found = self._list_offsets(timestamps, timeout_ms)
        return {tp: (None if r.offset < 0 else r) for tp, r in found.items()}

    def beginning_offsets(
        self, partitions: Iterable[Any], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        found = self._list_offsets({_tp(tp): EARLIEST_TIMESTAMP for tp in partitions}, timeout_ms)
        return {tp: r.offset for tp, r in found.items()}

    def end_offsets(
        self, partitions: Iterable[Any], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        found = self._list_offsets({_tp(tp): LATEST_TIMESTAMP for tp in partitions}, timeout_ms)
        return {tp: r.offset for tp, r in found.items()}

    def _list_offsets(
        self, specs: Mapping[Any, int], timeout_ms: int | None
    ) -> dict[TopicPartition, OffsetAndTimestamp]:
        self._check_open()
        return list_offsets(
            self._network,
            self._metadata,
            {_tp(tp): ts for tp, ts in specs.items()},
            isolation_level=self._isolation_level,
            deadline_ms=self._deadline(timeout_ms),
        )

    def _deadline(self, timeout_ms: int | None) -> int:
        return now_ms() + (
            self.config["default.api.timeout.ms"] if timeout_ms is None else timeout_ms
        )

    # ------------------------------------------------------------------ poll

    def poll(self, timeout_ms: int = 0) -> list[ConsumerRecord]:
        """Records of the assigned partitions, waiting up to `timeout_ms` for some."""
        pairs = self._poll(timeout_ms, lambda n: self._fetcher.drain(n), lambda got: bool(got))
        kd, vd = self.config["key.deserializer"], self.config["value.deserializer"]
        return [
            ConsumerRecord(
                tp.topic,
                tp.partition,
                r.offset,
                r.timestamp,
                int(r.timestamp_type),
                r.key if kd is None else _deserialize(kd, tp.topic, r.key),
                r.value if vd is None else _deserialize(vd, tp.topic, r.value),
                r.headers,
            )
            for tp, r in pairs
        ]

    def poll_arrow(self, timeout_ms: int = 0, *, include_headers: bool = False) -> pa.RecordBatch:
        """Like `poll()`, as one Arrow batch with Spark's Kafka source columns: key, value,
        topic, partition, offset, timestamp (epoch ms), timestampType[, headers]."""
        batch = self._poll(
            timeout_ms,
            lambda n: self._fetcher.drain_arrow(n, include_headers),
            lambda got: len(got) > 0,
        )
        return batch

    def _poll(self, timeout_ms: int, drain: Any, has_data: Any) -> Any:
        self._check_open()
        if self._group is None and not self._subscriptions.assignment():
            raise ValueError(
                "the consumer has no partitions assigned: call assign([(topic, partition), ...])"
                " or subscribe([...]) with a group.id"
            )
        deadline = now_ms() + max(0, timeout_ms)
        if self._group is not None:
            self._group.ensure_active(max(deadline, now_ms() + 1))
            self._maybe_auto_commit()
            if not self._subscriptions.assignment():
                remaining = deadline - now_ms()
                if remaining > 0:
                    time.sleep(min(remaining, self.config["retry.backoff.ms"]) / 1000)
                return drain(0)
        while True:
            self._collect_fetches(0)
            self._raise_errors()
            self._metadata.maybe_refresh()
            self._subscriptions.maybe_validate_positions(self._metadata.cluster)
            self._update_positions(deadline, best_effort=True)
            self._send_fetches()  # before decoding: the next response travels meanwhile
            try:
                got = drain(self.config["max.poll.records"])
            except CorruptBatchError:
                if not self._wait_for_refetch(deadline):
                    raise
                continue
            self._send_validations()
            self._send_fetches()
            remaining = deadline - now_ms()
            if has_data(got) or remaining <= 0:
                return got
            if self._in_flight or self._validations:
                self._collect_fetches(remaining)
            else:  # nothing to fetch yet (no leader or position, leader unreachable): back off
                time.sleep(min(remaining, self.config["retry.backoff.ms"]) / 1000)

    def _wait_for_refetch(self, deadline_ms: int) -> bool:
        """A partition is at a batch its broker refused: wait, up to the poll's deadline, for
        its refetch (which may be served now) rather than raise at once. False: raise now (the
        deadline passed, or a partition is stopped where only a seek helps)."""
        due, now = self._subscriptions.corrupt_refetch_due_ms(), now_ms()
        if due < 0 or now >= deadline_ms:
            return False
        self._send_validations()
        self._send_fetches()
        if self._in_flight or self._validations:
            self._collect_fetches(deadline_ms - now)
        else:  # backing off, or the leader is unknown or unreachable
            wait_ms = min(deadline_ms - now, max(due - now, 1), self.config["retry.backoff.ms"])
            time.sleep(wait_ms / 1000)
        return True

    def _unreachable_nodes(self) -> set[int]:
        """Brokers to leave alone for now: their connect failed (reconnect backoff), they
        throttle us (KIP-219), or they answered with a leader error and metadata has not changed within `retry.backoff.ms`."""
        now, version = now_ms(), self._metadata.state.version
        self._node_backoff = {
            n: (until, seen)
            for n, (until, seen) in self._node_backoff.items()
            if now < until and seen == version
        }
        unreachable = {
            n
            for n in self._metadata.cluster.brokers
            # KIP-219: a broker that throttled us gets no fetch until the throttle passes
            if self._network.is_unavailable(n) or self._network.throttle_delay_ms(n)
        }
        return unreachable | set(self._node_backoff)

    def _back_off(self, node: int) -> None:
        """A request to `node` failed or named a leader change: fresh metadata, then retry."""
        self._metadata.request_update()
        self._node_backoff[node] = (
            now_ms() + self.config["retry.backoff.ms"],
            self._metadata.state.version,
        )

    def _send_fetches(self) -> None:
        requests, no_leader = self._fetcher.fetch_requests(
            self._metadata.cluster,
            set(self._in_flight) | self._unreachable_nodes(),
            now_ms=now_ms(),
        )
        if no_leader:
            self._metadata.add_topics(no_leader)
            self._metadata.request_update()
        timeout = self.config["request.timeout.ms"] + self.config["fetch.max.wait.ms"]
        for node, (fields, offsets) in requests.items():
            future = self._network.send(node, ApiKey.FETCH, fields, timeout_ms=timeout)
            self._in_flight[node] = (future, offsets)

    def _send_validations(self) -> None:
        """OffsetForLeaderEpoch for positions whose leader changed (KIP-320)."""
        requests, no_leader = self._fetcher.validation_requests(
            self._metadata.cluster, set(self._validations) | self._unreachable_nodes()
        )
        if no_leader:
            self._metadata.request_update()
        for node, (fields, asked) in requests.items():
            future = self._network.send(node, ApiKey.OFFSET_FOR_LEADER_EPOCH, fields)
            self._validations[node] = (future, asked)

    def _collect_fetches(self, timeout_ms: int) -> None:
        """Apply finished fetches and validations, waiting up to `timeout_ms` for the first."""
        pending = [*self._in_flight.values(), *self._validations.values()]
        if not pending:
            return
        if timeout_ms > 0:
            wait([f for f, _ in pending], timeout=timeout_ms / 1000, return_when=FIRST_COMPLETED)
        for node, (future, asked) in list(self._validations.items()):
            if future.done():
                del self._validations[node]
                try:
                    response = future.result()
                except KafkaError as e:
                    self._fetcher.on_validation_failure(asked, e)
                    self._back_off(node)
                    continue
                self._apply(node, self._fetcher.on_validation_response(asked, response))
        for node, (future, offsets) in list(self._in_flight.items()):
            if future.done():
                del self._in_flight[node]
                try:
                    response = future.result()
                except KafkaError:  # the leader died or timed out: same position, new metadata
                    self._fetcher.on_fetch_failure(node)
                    self._back_off(node)
                    continue
                result = self._fetcher.on_fetch_response(offsets, response, node, now_ms=now_ms())
                self._apply(node, result)

    def _apply(self, node: int, result: FetchResult) -> None:
        if result.refresh_metadata:
            self._back_off(node)
        if result.out_of_range:
            self._errors.append(self._fetcher.out_of_range_error(result.out_of_range))
        self._errors.extend(result.errors)

    def _raise_errors(self) -> None:
        if self._errors:
            error, self._errors = self._errors[0], []
            raise error

    def _update_positions(
        self,
        deadline_ms: int,
        *,
        only: list[TopicPartition] | None = None,
        best_effort: bool = False,
    ) -> None:
        reset_positions(
            self._network,
            self._metadata,
            self._subscriptions,
            isolation_level=self._isolation_level,
            deadline_ms=deadline_ms,
            only=only,
            best_effort=best_effort,
        )

    # -------------------------------------------------------------- lifecycle

    def _maybe_auto_commit(self) -> None:
        if not self.config["enable.auto.commit"] or self._group is None:
            return
        if now_ms() < self._next_auto_commit_ms:
            return
        self._next_auto_commit_ms = now_ms() + self.config["auto.commit.interval.ms"]
        try:
            self._group.commit(self._positions())
        except KafkaError as e:
            logger.info("auto commit failed: %s", e)

    def metrics(self) -> dict[str, dict[str, float]]:
        """This consumer's metrics, {group: {name: value}} (`consumer-fetch-manager-metrics`:
        `fetch-throttle-time-avg`, `fetch-throttle-time-max`: the brokers' throttle times in
        ms over `metrics.sample.window.ms` × `metrics.num.samples`)."""
        return metric_values(self.client_metrics)

    def close(self) -> None:
        """Commit (with enable.auto.commit), leave the group, and close the connections."""
        if self._closed:
            return
        if self._group is not None:
            if self.config["enable.auto.commit"]:
                try:
                    self._group.commit(self._positions())
                except KafkaError as e:
                    logger.info("the final auto commit failed: %s", e)
            self._group.close()
        self._closed = True
        self._close_fetch_sessions()
        self._network.close()

    def _close_fetch_sessions(self) -> None:
        """Best effort, as Kafka's consumer: tell each broker without a fetch of ours in flight
        to drop our fetch session now rather than keep it until it is evicted."""
        closing = self._fetcher.close_session_requests()
        futures = [
            self._network.send(node, ApiKey.FETCH, fields, timeout_ms=_CLOSE_SESSION_TIMEOUT_MS)
            for node, fields in closing.items()
            if node not in self._in_flight
        ]
        if futures:
            wait(futures, timeout=_CLOSE_SESSION_TIMEOUT_MS / 1000)

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the consumer is closed")


#: How long `close()` waits for the brokers to drop its fetch sessions.
_CLOSE_SESSION_TIMEOUT_MS = 1_000


def _deserialize(deserializer: Any, topic: str, data: bytes | None) -> Any:
    if hasattr(deserializer, "deserialize"):
        return deserializer.deserialize(topic, data)
    return deserializer(data)
