"""The transaction coordinator's add path (Kafka's `TransactionCoordinator`
handleAddPartitionsToTransaction and handleVerifyPartitionsInTransaction): AddPartitionsToTxn,
AddOffsetsToTxn, the brokers' produce-time verification (KIP-890 part 1) and their implicit adds
for a transactions v2 produce (part 2), and TxnOffsetCommit's check. A mixin of
`TransactionCoordinator`, which owns the state and the writes."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from sparklog.coordinator.shard import Write
from sparklog.coordinator.transaction.metadata import (
    TransactionMetadata,
    TxnState,
    check_transition,
)
from sparklog.coordinator.transaction.tv2 import TRANSACTION_VERSION_2
from sparklog.errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionAbortableError,
)
from sparklog.structs import TopicPartition

logger = logging.getLogger(__name__)

_S = TxnState
Respond = Callable[[int], None]


class TransactionAdds:
    """The add path; see the module doc."""

    transactions: dict[str, TransactionMetadata]
    _writes: list[Write]

    def _persist(
        self,
        meta: TransactionMetadata,
        new: TransactionMetadata,
        now_ms: int,
        on_durable: Callable[[int], None],
        on_error: Respond,
    ) -> None:
        raise NotImplementedError

    def _park(
        self, tid: str, now_ms: int, retry: Callable[[int], None], give_up: Callable[[], None]
    ) -> bool:
        raise NotImplementedError

    def check_producer(self, transactional_id: str, producer_id: int, producer_epoch: int) -> int:
        """Kafka's first checks of every transactional request: 0 when they pass."""
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return InvalidProducerIdMappingError.code
        if meta.producer_epoch != producer_epoch:
            return ProducerFencedError.code
        return 0

    def _check_may_add(self, transactional_id: str, producer_id: int, epoch: int) -> int:
        code = self.check_producer(transactional_id, producer_id, epoch)
        if code:
            return code
        meta = self.transactions[transactional_id]
        if meta.pending or meta.state.is_prepared or meta.state is _S.PREPARE_EPOCH_FENCE:
            return ConcurrentTransactionsError.code
        return 0

    def add_partitions(
        self,
        now_ms: int,
        *,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        respond: Respond,
        implicit: bool = False,
    ) -> None:
        """AddPartitionsToTxn: the partitions join the transaction (it becomes Ongoing).
        `implicit`: a broker adds them for a TV2 produce (see `_add_in_memory`)."""
        self._add(
            now_ms,
            transactional_id,
            producer_id,
            producer_epoch,
            set(partitions),
            set(),
            respond,
            implicit,
        )

    def add_offsets(
        self,
        now_ms: int,
        *,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        respond: Respond,
        implicit: bool = False,
    ) -> None:
        """AddOffsetsToTxn: the group's offsets (TxnOffsetCommit) join the transaction.
        `implicit`: TxnOffsetCommit v5 adds the group itself (TV2)."""
        if not group_id:
            return respond(InvalidRequestError.code)
        self._add(
            now_ms,
            transactional_id,
            producer_id,
            producer_epoch,
            set(),
            {group_id},
            respond,
            implicit,
        )

    def _add(
        self,
        now_ms: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: set[TopicPartition],
        groups: set[str],
        respond: Respond,
        implicit: bool = False,
    ) -> None:
        code = self._check_may_add(transactional_id, producer_id, producer_epoch)
        if code == ConcurrentTransactionsError.code and self._park(
            transactional_id,
            now_ms,
            lambda ms: self._add(
                ms,
                transactional_id,
                producer_id,
                producer_epoch,
                partitions,
                groups,
                respond,
                implicit,
            ),
            lambda: respond(ConcurrentTransactionsError.code),
        ):
            return None
        if code:
            return respond(code)
        meta = self.transactions[transactional_id]
        if implicit and meta.suspect:
            return respond(TransactionAbortableError.code)  # see `_add_in_memory`
        ongoing = meta.state is _S.ONGOING
        if ongoing and partitions <= meta.partitions and groups <= meta.groups:
            return respond(0)
        new = meta.copy(
            state=_S.ONGOING,
            partitions=meta.partitions | partitions,
            groups=meta.groups | groups,
            txn_start_ms=meta.txn_start_ms if ongoing else now_ms,
            last_update_ms=now_ms,
        )
        if implicit:
            new.transaction_version = TRANSACTION_VERSION_2
            return self._add_in_memory(meta, new, respond)
        self._persist(meta, new, now_ms, lambda _ms: respond(0), respond)

    def _add_in_memory(
        self, meta: TransactionMetadata, new: TransactionMetadata, respond: Respond
    ) -> None:
        """A TV2 add (KIP-890 part 2) takes effect in memory only: the produce that caused it
        waits for no Delta commit, and the transaction costs one commit, its decision's, whose
        row carries every partition.

        Recovery (what Kafka's synchronous add gives, kept otherwise): a restart forgets the
        adds of open TV2 transactions, so `load` marks every id that is not prepared
        `suspect`: a TV2 producer may not commit at the epoch it had (TRANSACTION_ABORTABLE to
        its next add or commit: it aborts, which bumps the epoch; InitProducerId bumps it too;
        TV1 requests, whose adds are written, are not concerned), and the brokers abort the
        data of the forgotten partitions (`broker.txn_recovery`): a partition's open
        transaction the coordinator does not know is an orphan, as the epoch bump of every
        TV2 end guarantees no marker of the ended transaction is still on its way to it."""
        check_transition(meta, new)
        self.transactions[new.transactional_id] = new
        respond(0)

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn v4+ with verifyOnly (KIP-890): is each partition part of the
        ongoing transaction of this producer? INVALID_TXN_STATE where it is not."""
        partitions = list(partitions)
        code = self.check_producer(transactional_id, producer_id, producer_epoch)
        meta = self.transactions.get(transactional_id)
        if not code and meta is not None and meta.state is _S.PREPARE_EPOCH_FENCE:
            code = ConcurrentTransactionsError.code
        if code:
            return dict.fromkeys(partitions, code)
        assert meta is not None
        ongoing = meta.state is _S.ONGOING
        return {
            tp: 0 if ongoing and tp in meta.partitions else InvalidTxnStateError.code
            for tp in partitions
        }

    def check_offset_commit(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> int:
        """TxnOffsetCommit may go ahead (0): the transaction is Ongoing with the group added."""
        code = self.check_producer(transactional_id, producer_id, producer_epoch)
        if code:
            return code
        meta = self.transactions[transactional_id]
        if meta.state is not _S.ONGOING or group_id not in meta.groups:
            return InvalidTxnStateError.code
        return 0
