"""The transactional producer's side of Kafka's transactions (Kafka's `TransactionManager`).

States: UNINITIALIZED -> (init_transactions) READY -> (begin_transaction) IN_TRANSACTION ->
(commit/abort) READY ...; a failed send or a refused AddPartitionsToTxn moves an open
transaction to ABORTABLE_ERROR (only `abort_transaction()` leaves it); being fenced by a newer
producer with the same `transactional.id` is FATAL (close the producer).

The coordinator is found with FindCoordinator (key type TRANSACTION). The sender thread calls
`add_pending_partitions()` before it drains, and drains only partitions already added
(`sendable`), so no batch reaches a partition the coordinator does not know to mark. Calls the
coordinator answers with a retriable error (CONCURRENT_TRANSACTIONS, NOT_COORDINATOR, ...) are
retried until the caller's timeout.

Transactions v2 (KIP-890 part 2), used when the coordinator negotiated EndTxn v5 and the cluster
finalized `transaction.version` 2, as Kafka's Java producer decides: no AddPartitionsToTxn (the
first Produce v12 to a partition adds it, broker-side) and no AddOffsetsToTxn (TxnOffsetCommit
v5 adds the group); EndTxn v5 bumps the epoch and answers the producer id and epoch the next
transaction uses.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any, Protocol

from sparklog.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    KafkaError,
    NetworkExceptionError,
    NotCoordinatorError,
    ProducerFencedError,
    RequestTimedOutError,
    TransactionAbortableError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
    error_for_code,
)
from sparklog.protocol.api_versions import TRANSACTION_VERSION_FEATURE, ApiKey
from sparklog.structs import TopicPartition

logger = logging.getLogger(__name__)

RETRIABLE_COORDINATOR_ERRORS = frozenset(
    {
        ConcurrentTransactionsError.code,
        CoordinatorLoadInProgressError.code,
        CoordinatorNotAvailableError.code,
        NotCoordinatorError.code,
        RequestTimedOutError.code,
    }
)
_REFIND = frozenset({NotCoordinatorError.code, CoordinatorNotAvailableError.code})
_FATAL = frozenset(
    {
        ProducerFencedError.code,
        InvalidProducerEpochError.code,
        TransactionCoordinatorFencedError.code,
        InvalidProducerIdMappingError.code,
        UnknownProducerIdError.code,
    }
)


class TransactionStateError(RuntimeError):
    """A transactional call out of order (Kafka's IllegalStateException): raised at once,
    whatever the call returns otherwise."""


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionHandle:
    """An open transaction whose records are all acknowledged, to be ended by someone else
    (Spark's driver ends every task's transaction in one `end_transactions` call)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


class CoordinatorChannel(Protocol):
    """How the transaction manager reaches its coordinator: the producer's `NetworkClient`."""

    def least_loaded_node(self, candidates: list[int] | None = None) -> int | None: ...

    def set_address(self, node_id: int, host: str, port: int) -> None: ...

    def send(
        self,
        node_id: int,
        api_key: int,
        fields: Mapping[str, Any],
        *,
        expects_response: bool = True,
        timeout_ms: int | None = None,
    ) -> Future:
        """A future of the response (failed with the KafkaError of a connection failure)."""
        ...

    def speaks(self, node_id: int, api_key: int, version: int, feature: str, level: int) -> bool:
        """`node_id` negotiated `api_key` at `version`+ and finalized `feature` at `level`+."""
        ...


class TransactionManager:
    """One producer's transactional state; see the module doc."""

    def __init__(
        self,
        transactional_id: str,
        timeout_ms: int,
        network: CoordinatorChannel,
        candidates: Callable[[], list[int]],
        set_producer_id: Callable[[int, int], None],
        retry_backoff_ms: int = 100,
    ) -> None:
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.network = network
        self.candidates = candidates
        self.set_producer_id = set_producer_id
        self.retry_backoff_ms = retry_backoff_ms
        self.state = TxnState.UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        self.error: BaseException | None = None
        self._coordinator: int | None = None
        self._pending: set[TopicPartition] = set()
        self._added: set[TopicPartition] = set()
        self._lock = threading.Lock()
        #: transactions v2 with this coordinator (decided at `init_transactions`)
        self.v2 = False

    # -- the coordinator --------------------------------------------------------------------

    def _find_coordinator(self, deadline: float) -> int:
        while True:
            node = self.network.least_loaded_node(self.candidates())
            if node is not None:
                try:
                    response = self.network.send(
                        node,
                        ApiKey.FIND_COORDINATOR,
                        {"key_type": 1, "coordinator_keys": [self.transactional_id]},
                    ).result()
                    found = response.coordinators[0]
                    if int(found.error_code) == 0:
                        self.network.set_address(int(found.node_id), found.host, int(found.port))
                        return int(found.node_id)
                except KafkaError as e:
                    logger.debug("FindCoordinator failed: %s", e)
            self._sleep(deadline, "finding the transaction coordinator")

    def _sleep(self, deadline: float, doing: str) -> None:
        if time.monotonic() + self.retry_backoff_ms / 1000 > deadline:
            raise RequestTimedOutError(f"timed out {doing} for {self.transactional_id!r}")
        time.sleep(self.retry_backoff_ms / 1000)

    def _call(
        self, api: ApiKey, fields: Mapping[str, Any], deadline: float, errors: Callable[[Any], int]
    ) -> Any:
        """Send to the coordinator until it answers without a retriable error."""
        while True:
            if self._coordinator is None:
                self._coordinator = self._find_coordinator(deadline)
            try:
                response = self.network.send(self._coordinator, api, fields).result()
            except (NetworkExceptionError, RequestTimedOutError, ConnectionError) as e:
                logger.debug("%s to the transaction coordinator failed: %s", api.name, e)
                self._coordinator = None
                self._sleep(deadline, api.name)
                continue
            code = errors(response)
            if code in _REFIND:
                self._coordinator = None
            if code in RETRIABLE_COORDINATOR_ERRORS:
                self._sleep(deadline, api.name)
                continue
            if code:
                raise self._fail(code, api.name)
            return response

    def _fail(self, code: int, what: str) -> KafkaError:
        error = error_for_code(code)(f"{what} for transactional id {self.transactional_id!r}")
        if code in _FATAL:
            self.state, self.error = TxnState.FATAL_ERROR, error
        elif self.state is TxnState.IN_TRANSACTION:
            self.state, self.error = TxnState.ABORTABLE_ERROR, error
        return error

    # -- the user's calls ---------------------------------------------------------------------

    def init_transactions(self, timeout_ms: int) -> None:
        self._check_not_fatal()
        if self.state not in (TxnState.UNINITIALIZED, TxnState.READY):
            raise TransactionStateError(f"init_transactions() in state {self.state.value}")
        deadline = time.monotonic() + timeout_ms / 1000
        response = self._call(
            ApiKey.INIT_PRODUCER_ID,
            {
                "transactional_id": self.transactional_id,
                "transaction_timeout": self.timeout_ms,
                "producer_id": -1,
                "producer_epoch": -1,
            },
            deadline,
            lambda r: int(r.error_code),
        )
        self.producer_id, self.producer_epoch = (
            int(response.producer_id),
            int(response.producer_epoch),
        )
        self.set_producer_id(self.producer_id, self.producer_epoch)
        coordinator = self._coordinator
        self.v2 = coordinator is not None and self.network.speaks(
            coordinator, ApiKey.END_TXN, 5, TRANSACTION_VERSION_FEATURE, 2
        )
        self.state = TxnState.READY

    def begin_transaction(self) -> None:
        self._check_not_fatal()
        if self.state is not TxnState.READY:
            raise TransactionStateError(
                f"begin_transaction() needs a ready producer, not one in state {self.state.value}"
                + (
                    " (call init_transactions() first)"
                    if self.state is TxnState.UNINITIALIZED
                    else ""
                )
            )
        with self._lock:
            self._pending.clear()
            self._added.clear()
        self.state = TxnState.IN_TRANSACTION

    def on_send(self, tp: TopicPartition) -> None:
        """A record for `tp` joins the open transaction (raises outside one)."""
        if self.state is TxnState.ABORTABLE_ERROR:
            raise TransactionAbortableError(f"the transaction must be aborted first: {self.error}")
        self._check_not_fatal()
        if self.state is not TxnState.IN_TRANSACTION:
            raise TransactionStateError(
                "a transactional producer sends only inside a transaction: call "
                "begin_transaction() first"
            )
        with self._lock:
            if self.v2:
                self._added.add(tp)  # the broker adds it with the first batch (Produce v12)
            elif tp not in self._added:
                self._pending.add(tp)

    def sendable(self, tp: TopicPartition) -> bool:
        return tp in self._added

    def add_pending_partitions(self) -> bool:
        """Sender thread: add new partitions to the transaction; True when none is left."""
        with self._lock:
            pending = sorted(self._pending)
        if not pending or self.state is not TxnState.IN_TRANSACTION:
            return not pending
        topics: dict[str, list[int]] = {}
        for tp in pending:
            topics.setdefault(tp.topic, []).append(tp.partition)

        def codes(response: Any) -> int:
            found = [
                int(p.partition_error_code)
                for t in response.results_by_topic_v3_and_below
                for p in t.results_by_partition
            ]
            return next((c for c in found if c), 0)

        try:
            self._call(
                ApiKey.ADD_PARTITIONS_TO_TXN,
                {
                    "v3_and_below_transactional_id": self.transactional_id,
                    "v3_and_below_producer_id": self.producer_id,
                    "v3_and_below_producer_epoch": self.producer_epoch,
                    "v3_and_below_topics": [
                        {"name": t, "partitions": ps} for t, ps in topics.items()
                    ],
                },
                time.monotonic() + self.timeout_ms / 1000,
                codes,
            )
        except KafkaError as e:
            logger.warning(
                "adding partitions to transaction %s failed: %s", self.transactional_id, e
            )
            if self.state is TxnState.IN_TRANSACTION:
                self.state, self.error = TxnState.ABORTABLE_ERROR, e
            return False
        with self._lock:
            self._added.update(pending)
            self._pending.difference_update(pending)
            return not self._pending

    def on_batch_failed(self, error: BaseException) -> None:
        if self.state is TxnState.IN_TRANSACTION:
            self.state, self.error = TxnState.ABORTABLE_ERROR, error
        if isinstance(error, KafkaError) and error.code in _FATAL:
            self.state, self.error = TxnState.FATAL_ERROR, error

    def send_offsets(
        self, offsets: Iterable[tuple[str, int, int]], group_id: str, member: Mapping[str, Any]
    ) -> None:
        """AddOffsetsToTxn (not with TV2), then TxnOffsetCommit to the group's coordinator."""
        self._check_in_transaction("send_offsets_to_transaction()")
        deadline = time.monotonic() + self.timeout_ms / 1000
        identity = {
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
        }
        if not self.v2:  # TV2: TxnOffsetCommit v5 adds the group itself
            self._call(
                ApiKey.ADD_OFFSETS_TO_TXN,
                {**identity, "group_id": group_id},
                deadline,
                lambda r: int(r.error_code),
            )
        topics: dict[str, list[dict[str, Any]]] = {}
        for topic, partition, offset in offsets:
            topics.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "committed_offset": offset,
                    "committed_leader_epoch": -1,
                    "committed_metadata": "",
                }
            )

        def first_error(response: Any) -> int:
            found = [int(p.error_code) for t in response.topics for p in t.partitions]
            return next((c for c in found if c), 0)

        # the group coordinator is the same driver-side node as the transaction coordinator
        self._call(
            ApiKey.TXN_OFFSET_COMMIT,
            {
                **identity,
                "group_id": group_id,
                "generation_id": int(member.get("generation_id", -1)),
                "member_id": member.get("member_id", ""),
                "group_instance_id": member.get("group_instance_id"),
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            },
            deadline,
            first_error,
        )

    def end(self, commit: bool, timeout_ms: int) -> None:
        """EndTxn (the caller flushed or dropped the transaction's records first)."""
        self._check_not_fatal()
        if commit:
            if self.state is TxnState.ABORTABLE_ERROR:
                raise TransactionAbortableError(
                    f"cannot commit: the transaction must be aborted ({self.error})"
                )
            self._check_in_transaction("commit_transaction()")
        elif self.state not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
            raise TransactionStateError(f"abort_transaction() in state {self.state.value}")
        with self._lock:
            nothing_sent = not self._added
        if not nothing_sent or commit:
            response = self._call(
                ApiKey.END_TXN,
                {
                    "transactional_id": self.transactional_id,
                    "producer_id": self.producer_id,
                    "producer_epoch": self.producer_epoch,
                    "committed": commit,
                },
                time.monotonic() + timeout_ms / 1000,
                # an abort the coordinator already made (a timeout) is no error
                lambda r: (
                    0
                    if not commit and int(r.error_code) == InvalidTxnStateError.code
                    else int(r.error_code)
                ),
            )
            self._adopt_bumped_epoch(response)
        self.state, self.error = TxnState.READY, None

    def _adopt_bumped_epoch(self, response: Any) -> None:
        """EndTxn v5 (TV2) answers the producer id and epoch of the next transaction: the
        coordinator bumped the epoch at this end, which fences any late batch of this one."""
        producer_id = int(getattr(response, "producer_id", -1))
        epoch = int(getattr(response, "producer_epoch", -1))
        if (
            producer_id >= 0
            and epoch >= 0
            and (producer_id, epoch)
            != (
                self.producer_id,
                self.producer_epoch,
            )
        ):
            self.producer_id, self.producer_epoch = producer_id, epoch
            self.set_producer_id(producer_id, epoch)

    def detach(self) -> TransactionHandle:
        """Hand the open transaction to someone else to end (the producer is done with it)."""
        self._check_in_transaction("prepare_transaction()")
        self.state = TxnState.READY
        return TransactionHandle(self.transactional_id, self.producer_id, self.producer_epoch)

    def _check_not_fatal(self) -> None:
        if self.state is TxnState.FATAL_ERROR:
            raise self.error or ProducerFencedError("the producer was fenced")

    def _check_in_transaction(self, what: str) -> None:
        self._check_not_fatal()
        if self.state is TxnState.ABORTABLE_ERROR:
            raise TransactionAbortableError(f"{what}: abort the transaction ({self.error})")
        if self.state is not TxnState.IN_TRANSACTION:
            raise TransactionStateError(
                f"{what} needs an open transaction (begin_transaction() first)"
            )
