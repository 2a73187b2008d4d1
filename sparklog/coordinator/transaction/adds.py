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
from sparklog.coordinator.transaction.persisted import transaction_row
from sparklog.coordinator.transaction.tv2 import TRANSACTION_VERSION_2
from sparklog.errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTxnStateError,
    ProducerFencedError,
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
            return self._add_in_memory(meta, new, now_ms, respond)
        self._persist(meta, new, now_ms, lambda _ms: respond(0), respond)

    def _add_in_memory(
        self, meta: TransactionMetadata, new: TransactionMetadata, now_ms: int, respond: Respond
    ) -> None:
        """A TV2 add (KIP-890 part 2) takes effect at once, and its row is written in the
        background: the produce that caused it does not wait for a Delta commit, and a
        transaction waits for one commit, its decision's, which carries every partition.

        Recovery: the row goes with the next commit (rows are committed in order, so before the
        decision's). Only a restart between the produce's append and that commit (one
        commit's time) loses the add: the data then waits for a marker nobody sends until an
        operator aborts it (`kafka-transactions.sh abort`), which Kafka's synchronous add
        avoids. The epoch bump of every TV2 end keeps the rest: a marker of an older
        transaction is refused by the partition (WriteTxnMarkers v2), so it never closes this
        one, and a produce of an ended transaction is fenced instead of starting a new one."""
        check_transition(meta, new)
        tid = new.transactional_id
        self.transactions[tid] = new

        def done(_ms: int, error: int) -> None:
            if error:
                logger.warning(
                    "transactional id %s: add row not written (error %d); the "
                    "decision carries its partitions",
                    tid,
                    error,
                )

        self._writes.append(Write([transaction_row(new, now_ms)], done, replay=False))
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
