"""The transaction coordinator's Kafka-protocol handlers: kio request in, core call, kio
response out (Kafka's `KafkaApis.handle*Txn*` on the coordinator's side).

Handlers that change state wait for the core's responder, which fires once the change is
durable; `after_call` lets the edge flush the writes a call produced. TxnOffsetCommit is
served by the group coordinator's core (`GroupCoordinator.txn_commit_offsets`), which asks this
core whether the transaction may carry the group's offsets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from sparklog.coordinator.group.apis import offset_commit_partitions
from sparklog.coordinator.group.coordinator import GroupCoordinator
from sparklog.coordinator.transaction.coordinator import TransactionCoordinator
from sparklog.coordinator.transaction.metadata import TxnState
from sparklog.coordinator.transaction.sink_batches import end_txn_batch
from sparklog.coordinator.transaction.tv2 import (
    END_TXN_TV2_VERSION,
    TXN_OFFSET_COMMIT_TV2_VERSION,
    answered_producer,
)
from sparklog.errors import (
    InvalidProducerEpochError,
    OperationNotAttemptedError,
    ProducerFencedError,
    RequestTimedOutError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
)
from sparklog.protocol import kio_build
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.connection import Request
from sparklog.protocol.responses import TRANSACTION_STATE_NAMES, group_by_topic
from sparklog.structs import TopicPartition

_NO_START = -1  # DescribeTransactions' start time of a transaction that has not started
#: How long a request waits for its rows to be durable before answering REQUEST_TIMED_OUT.
_WRITE_TIMEOUT_S = 10.0


def _fenced_for(version: int, code: int, fenced_since: int) -> int:
    """Clients older than `fenced_since` know PRODUCER_FENCED as INVALID_PRODUCER_EPOCH."""
    if code == ProducerFencedError.code and version < fenced_since:
        return InvalidProducerEpochError.code
    return code


class _Refused(Exception):
    """The transaction refused a TV2 TxnOffsetCommit's implicit add (its error code)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class TransactionApis:
    """Handlers for the transaction APIs; `clock()` gives now in ms, `after_call()` flushes."""

    def __init__(
        self,
        core: TransactionCoordinator,
        groups: GroupCoordinator,
        clock: Callable[[], int],
        after_call: Callable[[], None],
        partition_count: Callable[[str], int],
        reserve_producer_ids: Callable[[int], Awaitable[None]],
    ) -> None:
        self.core = core
        self.groups = groups
        self.clock = clock
        self.after_call = after_call
        self.partition_count = partition_count
        self.reserve_producer_ids = reserve_producer_ids
        self.handlers: dict[int, Callable[[Request], Any]] = {
            ApiKey.ADD_PARTITIONS_TO_TXN: self.handle_add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self.handle_add_offsets_to_txn,
            ApiKey.END_TXN: self.handle_end_txn,
            ApiKey.TXN_OFFSET_COMMIT: self.handle_txn_offset_commit,
            ApiKey.DESCRIBE_TRANSACTIONS: self.handle_describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self.handle_list_transactions,
            ApiKey.SPARKLOG_END_TXN_BATCH: self.handle_end_txn_batch,
        }

    async def _wait(self, start: Callable[[Callable[..., None]], None]) -> Any:
        """Start a core call that answers through a callback, and await the answer."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def resolve(*value: Any) -> None:
            if not future.done():
                future.set_result(value[0] if len(value) == 1 else value)

        start(resolve)
        self.after_call()
        return await asyncio.wait_for(future, _WRITE_TIMEOUT_S)

    # -- InitProducerId ---------------------------------------------------------------------

    async def init_producer_id(self, request: Request) -> Any:
        body = request.body
        await self.reserve_producer_ids(2)
        try:
            code, producer_id, epoch = await self._wait(
                lambda respond: self.core.init_producer_id(
                    self.clock(),
                    transactional_id=body.transactional_id,
                    timeout_ms=kio_build.millis(body.transaction_timeout),
                    producer_id=int(getattr(body, "producer_id", -1)),
                    producer_epoch=int(getattr(body, "producer_epoch", -1)),
                    respond=respond,
                )
            )
        except TimeoutError:
            code, producer_id, epoch = RequestTimedOutError.code, -1, -1
        return kio_build.response(
            request,
            {
                "error_code": _fenced_for(request.api_version, code, 4),
                "producer_id": producer_id,
                "producer_epoch": epoch,
            },
        )

    # -- AddPartitionsToTxn -----------------------------------------------------------------

    async def handle_add_partitions_to_txn(self, request: Request) -> Any:
        body, version = request.body, request.api_version
        if version >= 4:
            results = [await self._add_partitions_v4(t, version) for t in body.transactions]
            return kio_build.response(request, {"error_code": 0, "results_by_transaction": results})
        partitions = [
            TopicPartition(t.name, int(p)) for t in body.v3_and_below_topics for p in t.partitions
        ]
        codes = await self._add_partitions(
            body.v3_and_below_transactional_id,
            int(body.v3_and_below_producer_id),
            int(body.v3_and_below_producer_epoch),
            partitions,
            verify_only=False,
        )
        codes = {tp: _fenced_for(version, c, 2) for tp, c in codes.items()}
        return kio_build.response(request, {"results_by_topic_v3_and_below": _topic_results(codes)})

    async def _add_partitions_v4(self, txn: Any, version: int) -> dict[str, Any]:
        partitions = [TopicPartition(t.name, int(p)) for t in txn.topics for p in t.partitions]
        codes = await self._add_partitions(
            txn.transactional_id,
            int(txn.producer_id),
            int(txn.producer_epoch),
            partitions,
            verify_only=bool(txn.verify_only),
            # v5 from a broker without verifyOnly: a TV2 produce adds the partitions itself
            implicit=version >= 5,
        )
        return {"transactional_id": txn.transactional_id, "topic_results": _topic_results(codes)}

    async def _add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        *,
        verify_only: bool,
        implicit: bool = False,
    ) -> dict[TopicPartition, int]:
        unknown = [tp for tp in partitions if not 0 <= tp[1] < self.partition_count(tp[0])]
        if unknown:  # Kafka: the unknown ones say so, the others were not attempted
            return {
                tp: UnknownTopicOrPartitionError.code
                if tp in unknown
                else OperationNotAttemptedError.code
                for tp in partitions
            }
        if verify_only:
            return self.core.verify_partitions(
                transactional_id, producer_id, producer_epoch, partitions
            )
        try:
            code = await self._wait(
                lambda respond: self.core.add_partitions(
                    self.clock(),
                    transactional_id=transactional_id,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    partitions=partitions,
                    respond=respond,
                    implicit=implicit,
                )
            )
        except TimeoutError:
            code = RequestTimedOutError.code
        return dict.fromkeys(partitions, code)

    # -- AddOffsetsToTxn, TxnOffsetCommit ---------------------------------------------------

    async def _add_offsets(self, body: Any, *, implicit: bool) -> int:
        """Add the request's group to its transaction (AddOffsetsToTxn, or TV2's implicit add
        in TxnOffsetCommit v5); the error code, REQUEST_TIMED_OUT when the core did not answer."""
        try:
            code: int = await self._wait(
                lambda respond: self.core.add_offsets(
                    self.clock(),
                    transactional_id=body.transactional_id,
                    producer_id=int(body.producer_id),
                    producer_epoch=int(body.producer_epoch),
                    group_id=body.group_id,
                    respond=respond,
                    implicit=implicit,
                )
            )
        except TimeoutError:
            return RequestTimedOutError.code
        return code

    async def handle_add_offsets_to_txn(self, request: Request) -> Any:
        code = await self._add_offsets(request.body, implicit=False)
        code = _fenced_for(request.api_version, code, 2)
        return kio_build.response(request, {"error_code": code})

    async def handle_txn_offset_commit(self, request: Request) -> Any:
        body = request.body
        partitions = offset_commit_partitions(body)
        code = 0
        if request.api_version >= TXN_OFFSET_COMMIT_TV2_VERSION:
            # TV2: no AddOffsetsToTxn; the group joins the transaction here (KIP-890 part 2)
            code = await self._add_offsets(body, implicit=True)
        try:
            if code:
                raise _Refused(code)
            codes = await self._wait(
                lambda respond: self.groups.txn_commit_offsets(
                    self.clock(),
                    transactional_id=body.transactional_id,
                    producer_id=int(body.producer_id),
                    producer_epoch=int(body.producer_epoch),
                    group_id=body.group_id,
                    generation_id=int(getattr(body, "generation_id", -1)),
                    member_id=getattr(body, "member_id", ""),
                    group_instance_id=getattr(body, "group_instance_id", None),
                    partitions=partitions,
                    respond=respond,
                )
            )
        except (TimeoutError, _Refused) as e:
            code = e.code if isinstance(e, _Refused) else RequestTimedOutError.code
            codes = dict.fromkeys(((p.topic, p.partition) for p in partitions), code)
        items = [
            (
                p.topic,
                {
                    "partition_index": p.partition,
                    "error_code": _txn_offset_error(codes[(p.topic, p.partition)]),
                },
            )
            for p in partitions
        ]
        return kio_build.response(request, {"topics": group_by_topic(items, "name")})

    # -- EndTxn -----------------------------------------------------------------------------

    async def handle_end_txn(self, request: Request) -> Any:
        """EndTxn; v5 (TV2) bumps the epoch and answers the producer id and epoch to use next."""
        body, version = request.body, request.api_version
        try:
            code = await self._wait(
                lambda respond: self.core.end_txn(
                    self.clock(),
                    transactional_id=body.transactional_id,
                    producer_id=int(body.producer_id),
                    producer_epoch=int(body.producer_epoch),
                    committed=bool(body.committed),
                    respond=respond,
                    transaction_version=2 if version >= END_TXN_TV2_VERSION else 1,
                )
            )
        except TimeoutError:
            code = RequestTimedOutError.code
        code = _fenced_for(version, code, 2)
        meta = self.core.describe(body.transactional_id)
        producer_id, epoch = answered_producer(meta) if not code and meta else (-1, -1)
        return kio_build.response(
            request, {"error_code": code, "producer_id": producer_id, "producer_epoch": epoch}
        )

    async def handle_end_txn_batch(self, request: Request) -> Any:
        """sparklog's EndTxnBatch (`sparklog_apis`): many transactions, one decision."""
        body = request.body
        txns = [
            (t.transactional_id, int(t.producer_id), int(t.producer_epoch))
            for t in body.transactions
        ]
        try:
            code, outcome, codes = await self._wait(
                lambda respond: end_txn_batch(
                    self.core,
                    self.clock(),
                    body.batch_key,
                    bool(body.committed),
                    txns,
                    respond,
                )
            )
        except TimeoutError:
            code, outcome, codes = RequestTimedOutError.code, "", {}
        return kio_build.response(
            request,
            {
                "error_code": code,
                "error_message": None,
                "outcome": outcome,
                "results": [{"transactional_id": tid, "error_code": c} for tid, c in codes.items()],
            },
        )

    # -- admin ------------------------------------------------------------------------------

    async def handle_describe_transactions(self, request: Request) -> Any:
        states = []
        for tid in request.body.transactional_ids:
            meta = self.core.describe(tid)
            if meta is None or meta.state is TxnState.DEAD:
                states.append(
                    {
                        "error_code": TransactionalIdNotFoundError.code,
                        "transactional_id": tid,
                        "transaction_state": "",
                        "transaction_timeout": 0,
                        "transaction_start_time": _NO_START,
                        "producer_id": -1,
                        "producer_epoch": -1,
                        "topics": [],
                    }
                )
                continue
            topics: dict[str, list[int]] = {}
            for topic, partition in sorted(meta.partitions):
                topics.setdefault(topic, []).append(partition)
            states.append(
                {
                    "error_code": 0,
                    "transactional_id": tid,
                    "transaction_state": meta.state.value,
                    "transaction_timeout": meta.timeout_ms,
                    "transaction_start_time": _NO_START
                    if meta.txn_start_ms < 0
                    else meta.txn_start_ms,
                    "producer_id": meta.producer_id,
                    "producer_epoch": meta.producer_epoch,
                    "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                }
            )
        return kio_build.response(request, {"transaction_states": states})

    async def handle_list_transactions(self, request: Request) -> Any:
        body = request.body
        known = TRANSACTION_STATE_NAMES
        wanted = set(body.state_filters or ())
        found = self.core.list_transactions(
            wanted & known,
            {int(p) for p in body.producer_id_filters or ()},
            int(getattr(body, "duration_filter", -1)),
            self.clock(),
        )
        if wanted and not wanted & known:
            found = []
        return kio_build.response(
            request,
            {
                "error_code": 0,
                "unknown_state_filters": sorted(wanted - known),
                "transaction_states": [
                    {
                        "transactional_id": m.transactional_id,
                        "producer_id": m.producer_id,
                        "transaction_state": m.state.value,
                    }
                    for m in found
                ],
            },
        )


def _topic_results(codes: dict[TopicPartition, int]) -> list[dict[str, Any]]:
    items = [
        (topic, {"partition_index": partition, "partition_error_code": code})
        for (topic, partition), code in codes.items()
    ]
    return [
        {"name": g["name"], "results_by_partition": g["partitions"]}
        for g in group_by_topic(items, "name")
    ]


def _txn_offset_error(code: int) -> int:
    """TxnOffsetCommit speaks INVALID_PRODUCER_EPOCH for a fenced producer (Kafka's group
    coordinator answers so)."""
    return InvalidProducerEpochError.code if code == ProducerFencedError.code else code
