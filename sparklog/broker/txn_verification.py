"""Produce-time transaction verification (KIP-890 part 1, Kafka's `AddPartitionsToTxnManager`).

Before a partition takes the first transactional batch of a producer's transaction, the broker
asks the transaction coordinator (AddPartitionsToTxn v4, verifyOnly) whether the partition was
added to that producer's ongoing transaction. A batch that was not - a late retry of an aborted
transaction, a buggy client - is refused instead of opening a transaction no marker will ever
close (a "hanging" transaction that would hold back the last stable offset for ever).
`transaction.partition.verification.enable=false` turns the check off, as in Kafka.

Transactions v2 (KIP-890 part 2): a Produce v12 on a cluster whose `transaction.version` is 2
comes from a client that never sends AddPartitionsToTxn; the same request (AddPartitionsToTxn
v5 without verifyOnly) then adds the partitions to the producer's transaction instead of only
checking them, and a batch of a producer whose epoch the coordinator has moved past (a late
produce of an ended transaction) is refused, so it cannot open a new transaction. Clients that
know TRANSACTION_ABORTABLE (Produce v11+, KIP-890/KIP-1050) get it for a partition outside the
transaction; older ones get INVALID_TXN_STATE, as Kafka's `AddPartitionsToTxnManager` answers.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from kio.schema.add_partitions_to_txn.v4 import request as add_v4
from kio.schema.add_partitions_to_txn.v5 import request as add_v5
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import i16, i32

from sparklog.broker.replica_manager import ReplicaManager
from sparklog.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    ProducerFencedError,
    RequestTimedOutError,
    TransactionAbortableError,
    TransactionalIdAuthorizationFailedError,
)
from sparklog.protocol.async_client import AsyncKafkaConnection, connect
from sparklog.protocol.outbound import PLAINTEXT, ClientSecurity, Endpoint
from sparklog.records.batch import HEADER_SIZE, read_header
from sparklog.records.batch_header import ATTRIBUTES_OFFSET, TRANSACTIONAL_MASK
from sparklog.structs import TopicPartition

logger = logging.getLogger(__name__)


#: Produce v12 is a transaction version 2 client's (KIP-890 part 2); v11+ know TRANSACTION_ABORTABLE.
PRODUCE_TV2_VERSION = 12
PRODUCE_ABORTABLE_VERSION = 11

#: Coordinator answers a producer should simply retry: Kafka hands them to Produce clients as
#: NOT_ENOUGH_REPLICAS, which every client retries.
_RETRIABLE = frozenset(
    {
        ConcurrentTransactionsError.code,
        CoordinatorLoadInProgressError.code,
        CoordinatorNotAvailableError.code,
        NotCoordinatorError.code,
        RequestTimedOutError.code,
    }
)


class TransactionVerifier:
    """Verifies transactional produce requests with the coordinator at `endpoint`."""

    def __init__(
        self,
        endpoint: str,
        replica_manager: ReplicaManager,
        *,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        host, _sep, port = endpoint.rpartition(":")
        self.security = security
        self.host, self.port = host, int(port)
        self.replica_manager = replica_manager
        self._conn: AsyncKafkaConnection | None = None
        self.verified = 0

    def _needs_verification(
        self, tp: TopicPartition, records: bytes | None
    ) -> tuple[int, int] | None:
        """(producer id, epoch) when `records` would start a transaction on `tp`."""
        if records is None or len(records) < HEADER_SIZE:
            return None  # refused by validation later
        if not records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_MASK:
            return None  # the common case, without decoding the header
        try:
            header = read_header(records, 0)
            hosted = self.replica_manager.hosted(*tp)
        except Exception:  # noqa: BLE001 - the append reports what is wrong
            return None
        if not header.is_transactional or header.is_control:
            return None
        entry = hosted.log.producer_state.last_entry(header.producer_id)
        if (
            entry is not None
            and entry.current_txn_first_offset is not None
            and entry.producer_epoch == header.producer_epoch
        ):
            return None  # this transaction is already open here
        return header.producer_id, header.producer_epoch

    async def verify(
        self,
        transactional_id: str | None,
        entries: Mapping[TopicPartition, bytes | None],
        *,
        add: bool = False,
        abortable: bool = False,
    ) -> dict[TopicPartition, int]:
        """Error codes for the partitions whose batches must not be appended. `add`: a TV2
        produce, whose partitions join the transaction (see the module doc); `abortable`: the
        client knows TRANSACTION_ABORTABLE (Produce v11+)."""
        needed = {
            tp: found
            for tp, records in entries.items()
            if (found := self._needs_verification(tp, records)) is not None
        }
        if not needed:
            return {}
        if not transactional_id:
            # Kafka: transactional records need a transactional id to authorize
            return dict.fromkeys(needed, TransactionalIdAuthorizationFailedError.code)
        producer_id, epoch = next(iter(needed.values()))
        raw = await self.ask(transactional_id, producer_id, epoch, list(needed), add=add)
        if raw is None:
            return dict.fromkeys(needed, NotEnoughReplicasError.code)
        self.verified += 1
        return {tp: _for_produce(c, abortable) for tp, c in raw.items() if c and tp in needed}

    async def ask(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[TopicPartition],
        *,
        add: bool = False,
    ) -> dict[TopicPartition, int] | None:
        """The coordinator's code for each partition (AddPartitionsToTxn v4 verifyOnly, or v5
        adding them); None when it could not be asked."""
        topics: dict[str, list[int]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append(partition)
        schema: Any = add_v5 if add else add_v4
        request = schema.AddPartitionsToTxnRequest(
            transactions=(
                schema.AddPartitionsToTxnTransaction(
                    transactional_id=TransactionalId(transactional_id),
                    producer_id=ProducerId(producer_id),
                    producer_epoch=i16(epoch),
                    verify_only=not add,
                    topics=tuple(
                        schema.AddPartitionsToTxnTopic(
                            name=TopicName(t), partitions=tuple(i32(p) for p in ps)
                        )
                        for t, ps in topics.items()
                    ),
                ),
            )
        )
        try:
            response = await (await self._connection()).request(request, timeout_s=10.0)
        except (ConnectionError, OSError, TimeoutError) as e:
            logger.info("transaction verification for %s failed (%s)", transactional_id, e)
            await self._drop_connection()
            return None
        top = int(response.error_code)
        codes = dict.fromkeys(partitions, top)
        for result in response.results_by_transaction:
            for topic in result.topic_results:
                for p in topic.results_by_partition:
                    tp = TopicPartition(topic.name, int(p.partition_index))
                    codes[tp] = top or int(p.partition_error_code)
        return codes

    async def transactional_ids(self, producer_ids: list[int]) -> dict[int, str] | None:
        """producer id -> transactional id, for the ids the coordinator knows
        (ListTransactions with a producer id filter); None when it could not be asked."""
        request = ListTransactionsRequest(
            state_filters=(), producer_id_filters=tuple(ProducerId(p) for p in producer_ids)
        )
        try:
            response = await (await self._connection()).request(request, timeout_s=10.0)
        except (ConnectionError, OSError, TimeoutError) as e:
            logger.info("ListTransactions for recovery failed (%s)", e)
            await self._drop_connection()
            return None
        if int(response.error_code):
            return None
        return {int(t.producer_id): str(t.transactional_id) for t in response.transaction_states}

    async def _connection(self) -> AsyncKafkaConnection:
        if self._conn is None or self._conn.closed:
            self._conn = await connect(
                Endpoint(self.host, self.port), self.security, client_id="sparklog-txn-verification"
            )
        return self._conn

    async def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def close(self) -> None:
        await self._drop_connection()


def _for_produce(code: int, abortable: bool) -> int:
    """A coordinator's answer as a Produce client of that version expects it (Kafka's
    `AddPartitionsToTxnManager`)."""
    if code in _RETRIABLE:
        return NotEnoughReplicasError.code
    if code == ProducerFencedError.code:
        return InvalidProducerEpochError.code
    if code in (InvalidTxnStateError.code, TransactionAbortableError.code):
        return TransactionAbortableError.code if abortable else InvalidTxnStateError.code
    return code
