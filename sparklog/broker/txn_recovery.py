"""Aborting the open transactions the coordinator forgot (sparklog's, for transactions v2).

The transaction coordinator keeps a TV2 transaction's implicit adds in memory (one Delta commit
per transaction, its decision's; `coordinator.transaction.adds`), so a coordinator restart
forgets which partitions an open TV2 transaction wrote to. Kafka's synchronous add never loses
them; sparklog finds them again from the partitions: every `ORPHAN_CHECK_INTERVAL_MS`, a leader
asks the coordinator (AddPartitionsToTxn v4, verifyOnly - the produce-time verification's
request) about each transaction open on its partitions since the previous round. A partition
the coordinator does not place in that producer's ongoing transaction is an orphan: the
coordinator can no longer send it a marker (an ended TV2 transaction's markers all landed
before it completed, and the epoch bump refuses the ones that did not), so the leader appends
the ABORT marker itself, as `kafka-transactions.sh abort` asks a leader to (Kafka's
`WriteTxnMarkers` from an admin client), once it checked the transaction is still the one it
asked about. The producer of such a transaction was told to abort (TRANSACTION_ABORTABLE, the
coordinator's `suspect` ids), so no commit of it can be lost. Transactions whose coordinator
is busy with them (CONCURRENT_TRANSACTIONS, a prepared state) or that cannot be asked wait for
the next round.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from sparklog.broker.replica_manager import ReplicaManager
from sparklog.broker.txn_verification import TransactionVerifier
from sparklog.errors import (
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionAbortableError,
)
from sparklog.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from sparklog.storage.producer_append_info import AppendOrigin
from sparklog.structs import TopicPartition

logger = logging.getLogger(__name__)

#: How often a leader checks its open transactions with the coordinator; a transaction is
#: checked once it was open at two rounds in a row.
ORPHAN_CHECK_INTERVAL_MS = 10_000
#: The coordinator's answers that say a partition is not in the producer's open transaction.
ORPHAN_CODES = frozenset(
    {
        InvalidTxnStateError.code,
        TransactionAbortableError.code,
        ProducerFencedError.code,
        InvalidProducerIdMappingError.code,
    }
)
_MARKER_TIMEOUT_MS = 30_000

#: (partition, producer id, first offset of its open transaction)
OpenTxn = tuple[TopicPartition, int, int]


class OrphanTransactionAborter:
    """One leader's check of its open transactions; `run()` is the broker's task."""

    def __init__(
        self,
        verifier: TransactionVerifier,
        replica_manager: ReplicaManager,
        clock_ms: Callable[[], int],
        interval_ms: int = ORPHAN_CHECK_INTERVAL_MS,
    ) -> None:
        self.verifier = verifier
        self.replica_manager = replica_manager
        self.clock_ms = clock_ms
        self.interval_ms = interval_ms
        self._seen: set[OpenTxn] = set()
        self.aborted = 0  # markers written, for tests and logs

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_ms / 1000)
            try:
                await self.check_once()
            except Exception:  # noqa: BLE001 - a failed round is retried at the next
                logger.exception("checking open transactions failed")

    def open_transactions(self) -> set[OpenTxn]:
        """Every transaction open on a partition this broker leads."""
        found: set[OpenTxn] = set()
        for tp, hosted in list(self.replica_manager.partitions.items()):
            if not hosted.partition.is_leader:
                continue
            for first_offset, txn in hosted.log.producer_state.ongoing_txns.items():
                found.add((tp, txn.producer_id, first_offset))
        return found

    async def check_once(self) -> int:
        """One round: ask about the transactions open since the last one, abort the orphans.
        Returns how many markers it wrote."""
        current = self.open_transactions()
        due, self._seen = current & self._seen, current
        if not due:
            return 0
        by_producer: dict[int, list[OpenTxn]] = {}
        for txn in due:
            by_producer.setdefault(txn[1], []).append(txn)
        ids = await self.verifier.transactional_ids(sorted(by_producer))
        if ids is None:
            return 0
        written = 0
        for producer_id, txns in by_producer.items():
            for txn in await self._orphans(ids.get(producer_id), producer_id, txns):
                written += await self._abort(txn)
        return written

    async def _orphans(
        self, transactional_id: str | None, producer_id: int, txns: list[OpenTxn]
    ) -> list[OpenTxn]:
        if transactional_id is None:
            return txns  # the coordinator knows no id of this producer any more
        by_epoch: dict[int, list[OpenTxn]] = {}
        for txn in txns:
            epoch = self._epoch_of(txn)
            if epoch is not None:
                by_epoch.setdefault(epoch, []).append(txn)
        orphans = []
        for epoch, group in by_epoch.items():
            codes = await self.verifier.ask(
                transactional_id, producer_id, epoch, sorted({t[0] for t in group})
            )
            if codes is not None:
                orphans += [t for t in group if codes.get(t[0]) in ORPHAN_CODES]
        return orphans

    def _epoch_of(self, txn: OpenTxn) -> int | None:
        tp, producer_id, _first = txn
        try:
            entry = self.replica_manager.hosted(*tp).log.producer_state.last_entry(producer_id)
        except Exception:  # noqa: BLE001 - the partition moved or went away
            return None
        return None if entry is None else entry.producer_epoch

    async def _abort(self, txn: OpenTxn) -> int:
        """Append an ABORT marker for `txn` if it is still open as it was when asked."""
        tp, producer_id, first_offset = txn
        try:
            hosted = self.replica_manager.hosted(*tp)
        except Exception:  # noqa: BLE001 - the partition moved or went away
            return 0
        state = hosted.log.producer_state
        open_now = state.ongoing_txns.get(first_offset)
        entry = state.last_entry(producer_id)
        if open_now is None or open_now.producer_id != producer_id or entry is None:
            return 0  # its marker came meanwhile
        marker = build_end_txn_marker_batch(
            EndTransactionMarker(ControlRecordType.ABORT, max(entry.coordinator_epoch, 0)),
            producer_id=producer_id,
            producer_epoch=entry.producer_epoch,
            timestamp_ms=self.clock_ms(),
        )
        results = await self.replica_manager.append_records(
            -1, _MARKER_TIMEOUT_MS, {tp: marker}, origin=AppendOrigin.COORDINATOR
        )
        code = results[tp].error_code
        if code:
            logger.warning("aborting the orphan transaction %s failed: error %d", txn, code)
            return 0
        logger.warning(
            "aborted the transaction of producer %d open on %s-%d from offset %d: the "
            "coordinator does not know it (restarted while it was open)",
            producer_id,
            tp[0],
            tp[1],
            first_offset,
        )
        self.aborted += 1
        return 1
