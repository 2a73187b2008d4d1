"""The producer's background I/O thread and its decisions (Kafka's `Sender` and, for the
idempotent producer, the sequence bookkeeping of `TransactionManager`).

Each loop: apply finished Produce responses (complete, retry or fail each batch), get a
producer id if the idempotent producer needs one, expire batches past `delivery.timeout.ms`,
refresh metadata when due, then drain the accumulator for every leader with sendable data and
fewer than `max.in.flight.requests.per.connection` requests outstanding. It sleeps on the
producer's condition until `send()` wakes it, a response arrives, or a linger/backoff ends.

Decisions are sans-IO (`decide`): retriable errors retry while attempts < `retries` and the
batch is younger than `delivery.timeout.ms`; NOT_LEADER_OR_FOLLOWER-like errors also ask for
fresh metadata. Leader changes: a request that fails whole (the leader died, the connection
broke, `request.timeout.ms` passed) retries its batches and refreshes metadata; a leader that
refuses connections gets nothing until its reconnect backoff ends (no attempt is spent);
NOT_ENOUGH_REPLICAS(_AFTER_APPEND) and REQUEST_TIMED_OUT retry after the backoff; a Produce
response's leader hint (KIP-951) moves the partition at once.

Idempotence: batches get per-partition sequence numbers when first drained and keep them on
retries, to a new leader too, which has the producer state replicated and so dedupes a batch
the old leader had written; DUPLICATE_SEQUENCE_NUMBER means already written. When a batch is
lost for good (failed or expired after it was sent) the broker would see a sequence gap, so
the producer takes a new producer id once nothing is in flight and renumbers what is queued
(KIP-360's epoch bump, simplified to a fresh id as Kafka brokers give idempotent producers).
"""

from __future__ import annotations

import enum
import logging
import threading
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparklog.errors import (
    DuplicateSequenceNumberError,
    InvalidProducerEpochError,
    KafkaError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    RequestTimedOutError,
    UnknownProducerIdError,
    error_for_code,
)
from sparklog.protocol.api_versions import ApiKey
from sparklog.records.compression import CompressionType
from sparklog.structs import TopicPartition

from .accumulator import ProducerBatch, RecordAccumulator
from .broker_connection import now_ms
from .metadata import REFRESH_ERROR_CODES, BrokerNode, Metadata
from .network import NetworkClient
from .request_builder import timestamp_ms

if TYPE_CHECKING:
    from .transaction_manager import TransactionManager

logger = logging.getLogger(__name__)

_INT32_MASK = 0x7FFFFFFF


class Decision(enum.Enum):
    COMPLETE = "complete"
    RETRY = "retry"
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What to do with a batch after a response (or a failed request)."""

    decision: Decision
    error: BaseException | None = None
    refresh_metadata: bool = False
    reset_producer_id: bool = False


class IdempotenceState:
    """Producer id, epoch and per-partition sequences of the idempotent producer (sans-IO).

    Invariant: `next_sequence[tp]` is one past the last sequence handed to a batch of `tp`;
    `last_acked[tp]` is the last sequence the broker acknowledged (-1 before any).
    """

    def __init__(self) -> None:
        self.producer_id = -1
        self.producer_epoch = -1
        self.next_sequence: dict[TopicPartition, int] = {}
        self.last_acked: dict[TopicPartition, int] = {}
        self.reset_pending = False

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.next_sequence.clear()
        self.last_acked.clear()
        self.reset_pending = False

    def assign(self, batch: ProducerBatch) -> None:
        """Stamp the producer id and, on first send, the next sequence numbers."""
        assert self.has_producer_id and not self.reset_pending
        batch.producer_id = self.producer_id
        batch.producer_epoch = self.producer_epoch
        if batch.base_sequence is None:
            sequence = self.next_sequence.get(batch.tp, 0)
            batch.base_sequence = sequence
            self.next_sequence[batch.tp] = (sequence + batch.record_count) & _INT32_MASK

    def on_acked(self, batch: ProducerBatch) -> None:
        assert batch.base_sequence is not None
        last = (batch.base_sequence + batch.record_count - 1) & _INT32_MASK
        if last > self.last_acked.get(batch.tp, -1):
            self.last_acked[batch.tp] = last

    def earlier_batch_pending(self, batch: ProducerBatch) -> bool:
        """True when `batch` is not the next the broker expects: an earlier one is still
        being retried, so OUT_OF_ORDER_SEQUENCE_NUMBER for it is transient."""
        expected = (self.last_acked.get(batch.tp, -1) + 1) & _INT32_MASK
        return batch.base_sequence is not None and batch.base_sequence != expected


def decide(
    batch: ProducerBatch,
    error_code: int,
    now_ms: int,
    *,
    retries: int,
    delivery_timeout_ms: int,
    idempotence: IdempotenceState | None,
    error_message: str | None = None,
    closing: bool = False,
) -> BatchOutcome:
    """The outcome of a Produce response's partition error for `batch` (Kafka's
    `Sender.completeBatch` / `canRetry`)."""
    if error_code in (0, DuplicateSequenceNumberError.code):
        return BatchOutcome(Decision.COMPLETE)
    cls = error_for_code(error_code)
    tp = batch.tp
    detail = f": {error_message}" if error_message else ""
    error = cls(f"{cls.__name__} producing to {tp.topic}-{tp.partition}{detail}")
    retriable = cls.retriable
    reset = False
    if idempotence is not None:
        if error_code == OutOfOrderSequenceNumberError.code:
            retriable = idempotence.earlier_batch_pending(batch)
        elif error_code == UnknownProducerIdError.code:
            retriable = reset = True  # the broker lost our state; resend under a new id
        elif error_code in (InvalidProducerEpochError.code, ProducerFencedError.code):
            retriable = False
    outcome = _retry_or_fail(batch, error, retriable, now_ms, retries, delivery_timeout_ms, closing)
    reset = reset or (
        idempotence is not None
        and outcome.decision is Decision.FAIL
        and batch.base_sequence is not None
    )
    return BatchOutcome(outcome.decision, outcome.error, error_code in REFRESH_ERROR_CODES, reset)


def decide_request_failure(
    batch: ProducerBatch,
    error: BaseException,
    now_ms: int,
    *,
    retries: int,
    delivery_timeout_ms: int,
    idempotence: IdempotenceState | None,
    closing: bool = False,
) -> BatchOutcome:
    """The outcome when the whole request failed (disconnect, request timeout)."""
    retriable = isinstance(error, KafkaError) and error.retriable
    outcome = _retry_or_fail(batch, error, retriable, now_ms, retries, delivery_timeout_ms, closing)
    reset = (
        idempotence is not None
        and outcome.decision is Decision.FAIL
        and batch.base_sequence is not None
    )
    return BatchOutcome(outcome.decision, outcome.error, True, reset)


def _retry_or_fail(
    batch: ProducerBatch,
    error: BaseException,
    retriable: bool,
    now_ms: int,
    retries: int,
    delivery_timeout_ms: int,
    closing: bool,
) -> BatchOutcome:
    within_time = now_ms - batch.created_ms < delivery_timeout_ms
    if retriable and not closing and batch.attempts < retries and within_time:
        return BatchOutcome(Decision.RETRY, error)
    if retriable and not within_time:
        error = RequestTimedOutError(
            f"expiring {batch.record_count} record(s) for {batch.tp.topic}-{batch.tp.partition}: "
            f"delivery.timeout.ms ({delivery_timeout_ms}) passed since batch creation "
            f"(last error: {error})"
        )
    return BatchOutcome(Decision.FAIL, error)


class Sender:
    """The background thread that moves batches from the accumulator to the brokers."""

    def __init__(
        self,
        *,
        config: Mapping[str, Any],
        accumulator: RecordAccumulator,
        lock: threading.Condition,
        metadata: Metadata,
        network: NetworkClient,
    ) -> None:
        self.config = config
        self.accumulator = accumulator
        self.lock = lock
        self.metadata = metadata
        self.network = network
        self.acks = config["acks"]
        self.compression = CompressionType.from_name(config["compression.type"])
        self.idempotence = IdempotenceState() if config["enable.idempotence"] else None
        #: set by a transactional producer (its `TransactionManager`)
        self.transaction: TransactionManager | None = None
        self.fatal_error: BaseException | None = None
        self._completions: deque[tuple[int, list[ProducerBatch], Future]] = deque()
        self._woken = False
        self._running = True
        self._forced = False
        self._next_pid_attempt_ms = 0
        self._thread = threading.Thread(
            target=self._run, name="sparklog-producer-sender", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def wakeup(self) -> None:
        """Ask the loop to look again now (call with or without the lock)."""
        with self.lock:
            self._woken = True
            self.lock.notify_all()

    def initiate_close(self, *, force: bool = False) -> None:
        """Stop after everything queued is acknowledged, or at once when `force`."""
        with self.lock:
            self._running = False
            self._forced = self._forced or force
            # A graceful close sends everything at once; a forced one sends nothing more.
            self.accumulator.closed = not self._forced
            self._woken = True
            self.lock.notify_all()

    def is_current_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def join(self, timeout_s: float | None) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    # ----------------------------------------------------------------------- loop

    def _run(self) -> None:
        try:
            while True:
                with self.lock:
                    if self._forced or (not self._running and not self.accumulator.has_incomplete):
                        break
                self._run_once()
        except Exception:  # our bug: fail everything rather than hang the producer
            logger.exception("producer sender thread failed")
            self.fatal_error = self.fatal_error or KafkaError("the producer's sender thread failed")
        finally:
            self._abort_all(
                self.fatal_error
                or KafkaError("the producer was closed before these records were sent")
            )

    def _run_once(self) -> None:
        self._process_completions()
        now = now_ms()
        self._expire(now)
        if not self._producer_id_ready(now):
            self.metadata.maybe_refresh()
            self._wait(self.config["retry.backoff.ms"])
            return
        if self.transaction is not None and not self.transaction.add_pending_partitions():
            self._wait(self.config["retry.backoff.ms"])  # partitions not in the transaction yet
        with self.lock:
            ready = self.accumulator.ready(now, self.metadata.cluster)
        if ready.unknown_leader_topics:
            self.metadata.add_topics(ready.unknown_leader_topics)
            self.metadata.request_update()
        self.metadata.maybe_refresh()
        wait_ms = ready.next_ready_check_ms
        for node in sorted(ready.nodes):
            if self._forced:
                break
            throttled_ms = self.network.throttle_delay_ms(node)
            if throttled_ms:
                # KIP-219: the broker throttled us; its batches wait here (they keep growing
                # up to batch.size) until the throttle time passes (Kafka's `pollDelayMs`)
                wait_ms = min(wait_ms, throttled_ms)
                continue
            if not self.network.ready(node):
                # Kafka's Sender: an unreachable leader gets no batches (no attempt is spent)
                # and fresher metadata is asked for; the leader may have moved.
                self.metadata.request_update()
                delay_ms = self.network.connection_delay_ms(node)
                wait_ms = min(wait_ms, delay_ms or self.config["retry.backoff.ms"])
                continue
            self._send_to(node, now)
        metadata_wait_ms = self.metadata.state.time_to_next_update_ms(now_ms())
        self._wait(max(1, min(wait_ms, metadata_wait_ms)))

    def _expire(self, now: int) -> None:
        """Fail queued batches older than `delivery.timeout.ms`."""
        with self.lock:
            expired = self.accumulator.expire(now)
        # A batch that was sent before (it has a sequence) leaves a gap the broker would see.
        self._finish(
            [
                (
                    b,
                    BatchOutcome(
                        Decision.FAIL, self._expiry_error(b), False, b.base_sequence is not None
                    ),
                )
                for b in expired
            ]
        )

    def _wait(self, timeout_ms: int) -> None:
        with self.lock:
            closing_done = not self._running and not self.accumulator.has_incomplete
            if not self._woken and not self._completions and not self._forced and not closing_done:
                self.lock.wait(timeout_ms / 1000)
            self._woken = False

    def _send_to(self, node: int, now: int) -> None:
        if (
            self.network.in_flight_count(node)
            >= self.config["max.in.flight.requests.per.connection"]
        ):
            return
        with self.lock:
            batches = self.accumulator.drain(
                self.metadata.cluster,
                node,
                self.config["max.request.size"],
                now,
                None if self.transaction is None else self.transaction.sendable,
            )
            if self.idempotence is not None:
                for batch in batches:
                    self.idempotence.assign(batch)
                    batch.transactional = self.transaction is not None
        if not batches:
            return
        topics: dict[str, list[dict]] = {}
        for batch in batches:
            topics.setdefault(batch.tp.topic, []).append(
                {"index": batch.tp.partition, "records": batch.encode(self.compression)}
            )
        fields = {
            "transactional_id": None
            if self.transaction is None
            else self.transaction.transactional_id,
            "acks": self.acks,
            "timeout": self.config["request.timeout.ms"],
            "topic_data": [{"name": t, "partition_data": p} for t, p in topics.items()],
        }
        future = self.network.send(node, ApiKey.PRODUCE, fields, expects_response=self.acks != 0)
        future.add_done_callback(lambda f: self._on_done(node, batches, f))

    def _on_done(self, node: int, batches: list[ProducerBatch], future: Future) -> None:
        with self.lock:
            self._completions.append((node, batches, future))
            self.lock.notify_all()

    # ------------------------------------------------------------------ responses

    def _process_completions(self) -> None:
        with self.lock:
            completions, self._completions = list(self._completions), deque()
        now = now_ms()
        outcomes: list[tuple[ProducerBatch, BatchOutcome]] = []
        results: dict[ProducerBatch, tuple[int, int]] = {}
        for _node, batches, future in completions:
            error = future.exception()
            response = None if error is not None else future.result()
            by_tp = _partition_responses(response) if response is not None else {}
            if by_tp:
                self.metadata.update_leaders(*leader_hints(response, by_tp))
            for batch in batches:
                if error is not None:
                    outcome = decide_request_failure(
                        batch, error, now, idempotence=self.idempotence, **self._limits()
                    )
                elif response is None:  # acks=0: nothing comes back
                    outcome = BatchOutcome(Decision.COMPLETE)
                else:
                    outcome = self._on_partition_response(batch, by_tp.get(batch.tp), now, results)
                outcomes.append((batch, outcome))
        self._finish(outcomes, results, in_flight=True)

    def _on_partition_response(
        self,
        batch: ProducerBatch,
        p: Any,
        now: int,
        results: dict[ProducerBatch, tuple[int, int]],
    ) -> BatchOutcome:
        if p is None:  # the broker left our partition out: treat as an unknown server error
            return decide(
                batch,
                -1,
                now,
                idempotence=self.idempotence,
                error_message="no response",
                **self._limits(),
            )
        results[batch] = (int(p.base_offset), timestamp_ms(getattr(p, "log_append_time", None)))
        message = getattr(p, "error_message", None)
        return decide(
            batch,
            int(p.error_code),
            now,
            idempotence=self.idempotence,
            error_message=message,
            **self._limits(),
        )

    def _limits(self) -> dict[str, Any]:
        return {
            "retries": self.config["retries"],
            "delivery_timeout_ms": self.config["delivery.timeout.ms"],
            "closing": self._forced,
        }

    def _finish(
        self,
        outcomes: list[tuple[ProducerBatch, BatchOutcome]],
        results: dict[ProducerBatch, tuple[int, int]] | None = None,
        *,
        in_flight: bool = False,
    ) -> None:
        """Apply outcomes under the lock, then resolve futures and run callbacks outside it."""
        if not outcomes:
            return
        results = results or {}
        now = now_ms()
        done: list[tuple[ProducerBatch, BatchOutcome]] = []
        refresh = False
        with self.lock:
            for batch, outcome in outcomes:
                if in_flight:
                    self.accumulator.on_attempt_done(batch)
                refresh = refresh or outcome.refresh_metadata
                idempotence = self.idempotence
                resettable = idempotence is not None and self.transaction is None
                if idempotence is not None and resettable and outcome.reset_producer_id:
                    idempotence.reset_pending = True
                if (
                    self.transaction is not None
                    and outcome.decision is Decision.FAIL
                    and outcome.error is not None
                ):
                    self.transaction.on_batch_failed(outcome.error)
                if outcome.decision is Decision.RETRY:
                    logger.debug("retrying %r after %s", batch, outcome.error)
                    self.accumulator.reenqueue(batch, now)
                    continue
                acked = outcome.decision is Decision.COMPLETE
                if acked and self.idempotence is not None and batch.base_sequence is not None:
                    self.idempotence.on_acked(batch)
                self.accumulator.deallocate(batch)
                done.append((batch, outcome))
            self.lock.notify_all()  # memory was freed
        if refresh:
            self.metadata.request_update()
        for batch, outcome in done:
            if outcome.decision is Decision.COMPLETE:
                batch.complete(*results.get(batch, (-1, -1)))
            else:
                assert outcome.error is not None
                batch.fail(outcome.error)
        if done:
            with self.lock:
                self.lock.notify_all()  # flush() waits for batches to be done

    def _expiry_error(self, batch: ProducerBatch) -> BaseException:
        tp = batch.tp
        return RequestTimedOutError(
            f"expiring {batch.record_count} record(s) for {tp.topic}-{tp.partition}: "
            f"{now_ms() - batch.created_ms} ms has passed since batch creation "
            f"(delivery.timeout.ms={self.config['delivery.timeout.ms']})"
        )

    # ---------------------------------------------------------------- producer id

    def _producer_id_ready(self, now: int) -> bool:
        """Whether batches may be drained: the idempotent producer needs a (fresh) id first."""
        state = self.idempotence
        if state is None or (state.has_producer_id and not state.reset_pending):
            return True
        if self.transaction is not None:
            return False  # the user's init_transactions() sets the id
        with self.lock:
            if state.reset_pending and self.accumulator.statistics()["in_flight_batches"]:
                return False  # renumber only once nothing old is in flight
        if now < self._next_pid_attempt_ms:
            return False
        self._next_pid_attempt_ms = now + self.config["retry.backoff.ms"]
        node = self.network.least_loaded_node(self.metadata.candidates())
        if node is None:
            return False
        fields = {
            "transactional_id": None,
            "transaction_timeout": self.config["transaction.timeout.ms"],
            "producer_id": -1,
            "producer_epoch": -1,
        }
        try:
            response = self.network.send(node, ApiKey.INIT_PRODUCER_ID, fields).result()
        except KafkaError as e:
            logger.info("InitProducerId to node %s failed: %s", node, e)
            self.metadata.request_update()
            if not e.retriable:
                self.fatal_error = e
                self._abort_all(e)
            return False
        code = int(response.error_code)
        if code != 0:
            cls = error_for_code(code)
            if not cls.retriable:
                self.fatal_error = cls(f"InitProducerId failed: {cls.__name__} (error {code})")
                self._abort_all(self.fatal_error)
            return False
        with self.lock:
            state.set_producer_id(int(response.producer_id), int(response.producer_epoch))
            self.accumulator.reset_sequences()
        return True

    def abort_undrained(self, error: BaseException) -> None:
        """Fail every batch not yet sent (an aborted transaction's)."""
        with self.lock:
            batches = self.accumulator.abort_undrained()
        self._finish([(b, BatchOutcome(Decision.FAIL, error)) for b in batches])

    def _abort_all(self, error: BaseException) -> None:
        """Fail everything queued (used on a forced close or a fatal error)."""
        with self.lock:
            batches = self.accumulator.abort_undrained()
        self._finish([(b, BatchOutcome(Decision.FAIL, error)) for b in batches])
        if self._forced or not self._thread.is_alive():
            self.network.close()
            self._process_completions()


def leader_hints(
    response: Any, by_tp: Mapping[TopicPartition, Any]
) -> tuple[dict[TopicPartition, tuple[int, int]], list[BrokerNode]]:
    """KIP-951 hints of a Produce response: the new leader and epoch of each partition that
    answered NOT_LEADER_OR_FOLLOWER (or a fenced epoch), and the endpoints of those leaders."""
    hints = {}
    for tp, p in by_tp.items():
        current = getattr(p, "current_leader", None)
        if int(p.error_code) in REFRESH_ERROR_CODES and current is not None:
            hints[tp] = (int(current.leader_id), int(current.leader_epoch))  # -1s are dropped
    nodes = [
        BrokerNode(int(n.node_id), n.host, int(n.port), getattr(n, "rack", None))
        for n in getattr(response, "node_endpoints", None) or ()
    ]
    return hints, nodes


def _partition_responses(response: Any) -> dict[TopicPartition, Any]:
    out = {}
    for topic in response.responses:
        for p in topic.partition_responses:
            out[TopicPartition(topic.name, int(p.index))] = p
    return out
