"""The transaction coordinator's core (Kafka's `TransactionCoordinator` +
`TransactionStateManager`, without I/O).

Theory of operation. Every request is a call with `now_ms` and a responder. A state change is
validated against the id's `TransactionMetadata` and the `TxnState` transition table, becomes
a `Write` (one row per change, in the same Delta table as the group coordinator's offsets) and
reaches memory only by `replay(row)` once the runtime reports it durable — the same replay that
rebuilds every id from the table at start. The decision of a transaction - the row that moves it
to PrepareCommit or PrepareAbort - is written together with the consumer offsets the
transaction carries (`TxnOffsets.txn_offset_rows`), so one Delta commit makes both visible
(DESIGN D9). Then a `MarkerJob` asks the edge to write COMMIT/ABORT markers to every partition
of the transaction; when all are acknowledged (`markers_done`) the CompleteCommit /
CompleteAbort row is written (applied at once through `replay`, see `_complete`). `load(rows)`
replays every row after a restart and re-queues the markers of every prepared transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from sparklog.coordinator.shard import Row, Write
from sparklog.coordinator.transaction.adds import TransactionAdds
from sparklog.coordinator.transaction.config import TransactionConfig
from sparklog.coordinator.transaction.metadata import (
    MAX_PRODUCER_EPOCH,
    TransactionMetadata,
    TxnState,
    check_transition,
)
from sparklog.coordinator.transaction.parking import ParkedRequests
from sparklog.coordinator.transaction.persisted import (
    MarkerJob,
    TxnOffsets,
    read_sink_batch_row,
    read_transaction_row,
    transaction_row,
)
from sparklog.coordinator.transaction.tv2 import (
    TRANSACTION_VERSION_2,
    bump_for_end,
    check_end_txn_v2,
    retry_on_epoch_bump,
    retry_on_overflow,
)
from sparklog.errors import (
    ConcurrentTransactionsError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionAbortableError,
)
from sparklog.structs import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

logger = logging.getLogger(__name__)

_S = TxnState
#: the rows `replay` reads (every other kind is the group coordinator's)
_REPLAYED_KINDS = frozenset({"transaction", "sink_batch"})
Respond = Callable[[int], None]


def _nothing(_value: int) -> None:
    """A completion nobody waits for."""


class TransactionCoordinator(TransactionAdds):
    """Every transactional id of the cluster; see the module doc for the flow."""

    def __init__(
        self,
        config: TransactionConfig,
        coordinator_epoch: int,
        new_producer_id: Callable[[], int],
        offsets: TxnOffsets | None = None,
    ) -> None:
        self.config = config
        self.coordinator_epoch = coordinator_epoch
        self.new_producer_id = new_producer_id
        self.offsets = offsets
        self.transactions: dict[str, TransactionMetadata] = {}
        self._writes: list[Write] = []
        self._markers: list[MarkerJob] = []
        #: CompleteCommit/CompleteAbort rows whose write failed (written again by the tick)
        self._unwritten_complete: dict[str, TransactionMetadata] = {}
        #: markers acknowledged while a write for the id was in flight (completed by the tick)
        self._acked_markers: dict[str, MarkerJob] = {}
        #: EndTxnBatch keys decided so far -> "committed" / "aborted"
        self.decided_batches: dict[str, str] = {}
        self._next_abort_check_ms = 0
        #: told of each completed transaction, True if committed (the server's metrics)
        self.on_completed: Callable[[bool], None] = _nothing
        self._next_expiry_check_ms = 0
        #: requests waiting for an id to settle: tid -> [(deadline, retry(now), give up())]
        self._parked = ParkedRequests()

    # -- outputs ----------------------------------------------------------------------------

    def take_writes(self) -> list[Write]:
        writes, self._writes = self._writes, []
        return writes

    def take_markers(self) -> list[MarkerJob]:
        markers, self._markers = self._markers, []
        return markers

    def _persist(
        self,
        meta: TransactionMetadata,
        new: TransactionMetadata,
        now_ms: int,
        on_durable: Callable[[int], None],
        on_error: Respond,
        extra_rows: Iterable[Row] = (),
    ) -> None:
        """Write `new` (with `extra_rows` in the same commit); apply it once durable."""
        check_transition(meta, new)
        meta.pending = True
        tid = meta.transactional_id

        def done(done_ms: int, error: int) -> None:
            meta.pending = False
            if error:
                return on_error(error)
            on_durable(done_ms)  # `replay` applied the row
            self._parked.release(tid, done_ms)

        rows = [transaction_row(new, now_ms), *extra_rows]
        self._writes.append(Write(rows, done))

    def _persist_many(
        self,
        changes: list[tuple[TransactionMetadata, TransactionMetadata]],
        now_ms: int,
        on_durable: Callable[[int], None],
        on_error: Respond,
        extra_rows: Iterable[Row] = (),
    ) -> None:
        """Write every (old, new) change in ONE write (one Delta commit); apply all once
        durable, none if the write fails."""
        for meta, new in changes:
            check_transition(meta, new)
            meta.pending = True

        def done(done_ms: int, error: int) -> None:
            for meta, _new in changes:
                meta.pending = False
            if error:
                return on_error(error)
            on_durable(done_ms)  # `replay` applied the rows
            for meta, _new in changes:
                self._parked.release(meta.transactional_id, done_ms)

        rows = [*extra_rows, *(transaction_row(new, now_ms) for _m, new in changes)]
        self._writes.append(Write(rows, done))

    def _park(
        self, tid: str, now_ms: int, retry: Callable[[int], None], give_up: Callable[[], None]
    ) -> bool:
        """Hold a request for an id that is settling (a write in flight, markers being
        written) until it settled (`parking`). False: not parked."""
        meta = self.transactions.get(tid)
        if meta is None or not (meta.pending or meta.state.is_prepared):
            return False
        return self._parked.park(tid, now_ms, retry, give_up)

    # -- InitProducerId ---------------------------------------------------------------------

    def init_producer_id(
        self,
        now_ms: int,
        *,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int,
        producer_epoch: int,
        respond: Callable[[int, int, int], None],
    ) -> None:
        """InitProducerId for a transactional id: `respond(error, producer id, epoch)`.

        A new id gets a producer id; a known one gets its epoch bumped, which fences every older
        incarnation; an Ongoing transaction of the old epoch is aborted first (the caller gets
        CONCURRENT_TRANSACTIONS and retries, as Kafka's clients do).
        """

        def fail(code: int) -> None:
            respond(code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)

        if not transactional_id:
            return fail(InvalidRequestError.code)
        if not 0 < timeout_ms <= self.config.transaction_max_timeout_ms:
            return fail(InvalidTransactionTimeoutError.code)
        meta = self.transactions.get(transactional_id)
        if meta is None:
            meta = TransactionMetadata(
                transactional_id,
                self.new_producer_id(),
                NO_PRODUCER_EPOCH,
                timeout_ms,
                last_update_ms=now_ms,
            )
            self.transactions[transactional_id] = meta
        if meta.pending:
            return fail(ConcurrentTransactionsError.code)
        expected = (producer_id, producer_epoch) if producer_id != NO_PRODUCER_ID else None
        current = (meta.producer_id, meta.producer_epoch)
        last = (meta.last_producer_id, meta.last_producer_epoch)
        if expected is not None and expected not in (current, last):
            return fail(ProducerFencedError.code)
        if meta.state.is_prepared or meta.state is _S.PREPARE_EPOCH_FENCE:
            return fail(ConcurrentTransactionsError.code)
        if meta.state is _S.ONGOING:
            self._fence_and_abort(meta, now_ms)
            return fail(ConcurrentTransactionsError.code)
        if expected is not None and expected == last and expected != current:
            # a retry of an InitProducerId that already bumped: answer what it got
            return respond(0, meta.producer_id, meta.producer_epoch)
        if meta.epoch_exhausted():
            new = meta.copy(producer_id=self.new_producer_id(), producer_epoch=0)
        else:
            new = meta.copy(producer_epoch=meta.producer_epoch + 1)
        new.last_producer_id, new.last_producer_epoch = current
        new.timeout_ms = timeout_ms
        new.state = _S.EMPTY
        new.partitions, new.groups, new.txn_start_ms = set(), set(), -1
        new.last_update_ms = now_ms
        self._persist(
            meta,
            new,
            now_ms,
            lambda _ms: respond(0, new.producer_id, new.producer_epoch),
            fail,
        )

    # -- EndTxn -----------------------------------------------------------------------------

    def end_txn(
        self,
        now_ms: int,
        *,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        respond: Respond,
        transaction_version: int = 1,
    ) -> None:
        """EndTxn: write the decision (with the transaction's offsets), answer, then markers.
        `transaction_version` 2 (EndTxn v5) bumps the epoch at this end (`tv2`)."""
        meta = self.transactions.get(transactional_id)
        if meta is not None and meta.transaction_version >= TRANSACTION_VERSION_2:
            code = check_end_txn_v2(meta, producer_id, producer_epoch)
        else:
            code = self.check_producer(transactional_id, producer_id, producer_epoch)
        if code:
            return respond(code)
        assert meta is not None
        if meta.pending:
            return respond(ConcurrentTransactionsError.code)
        state = meta.state
        v2 = transaction_version >= TRANSACTION_VERSION_2
        if v2 and meta.suspect and committed and meta.producer_epoch == producer_epoch:
            # a restart may have lost some of this transaction's adds (`adds._add_in_memory`)
            return respond(TransactionAbortableError.code)
        if state is _S.ONGOING:
            return self._prepare(meta, committed, now_ms, respond, bump=v2)
        is_retry = retry_on_epoch_bump(meta, producer_id, producer_epoch) or retry_on_overflow(
            meta, producer_id, producer_epoch
        )
        same = _S.COMPLETE_COMMIT if committed else _S.COMPLETE_ABORT
        if state is same and (is_retry or meta.transaction_version < TRANSACTION_VERSION_2):
            return respond(0)  # a retry of an EndTxn that succeeded
        prepared_same = _S.PREPARE_COMMIT if committed else _S.PREPARE_ABORT
        if state is prepared_same or state is _S.PREPARE_EPOCH_FENCE:
            return respond(ConcurrentTransactionsError.code)
        if v2 and not committed and state.is_complete and not is_retry:
            # TV2: the client cannot know whether a produce it sent added a partition, so it
            # aborts a transaction that may be empty; the epoch bump fences anything in flight
            return self._prepare(meta, False, now_ms, respond, bump=True)
        return respond(InvalidTxnStateError.code)

    def _prepare(
        self,
        meta: TransactionMetadata,
        committed: bool,
        now_ms: int,
        respond: Respond,
        *,
        fence: bool = False,
        bump: bool = False,
    ) -> None:
        new = meta.copy(
            state=_S.PREPARE_COMMIT if committed else _S.PREPARE_ABORT, last_update_ms=now_ms
        )
        if bump:  # TV2: every end bumps the epoch (`tv2.bump_for_end`)
            next_pid = self.new_producer_id() if meta.epoch_exhausted() else NO_PRODUCER_ID
            bump_for_end(meta, new, next_pid)
        else:
            new.transaction_version = 1  # markers at the data's epoch (transaction version 1)
        if fence:
            if meta.producer_epoch < MAX_PRODUCER_EPOCH:
                new.producer_epoch = meta.producer_epoch + 1
                new.last_producer_id, new.last_producer_epoch = (
                    meta.producer_id,
                    meta.producer_epoch,
                )
            meta.transition_to(_S.PREPARE_EPOCH_FENCE)
        offset_rows: list[Row] = []
        if committed and self.offsets is not None and meta.groups:
            offset_rows = self.offsets.txn_offset_rows(meta.producer_id, meta.groups)

        def durable(_ms: int) -> None:
            respond(0)
            self._send_markers(new)

        def failed(code: int) -> None:
            if fence:
                meta.transition_to(_S.ONGOING)  # the tick retries the abort
            respond(code)

        self._persist(meta, new, now_ms, durable, failed, offset_rows)

    def _fence_and_abort(self, meta: TransactionMetadata, now_ms: int) -> None:
        """Bump the epoch of an Ongoing transaction (fencing its producer) and abort it."""
        logger.info(
            "transactional id %s: aborting the ongoing transaction of producer %d epoch %d",
            meta.transactional_id,
            meta.producer_id,
            meta.producer_epoch,
        )
        self._prepare(meta, False, now_ms, lambda _code: None, fence=True)

    def _send_markers(self, meta: TransactionMetadata) -> None:
        if not meta.partitions:
            self._complete(meta, meta.last_update_ms)
            return
        self._markers.append(
            MarkerJob(
                meta.transactional_id,
                meta.producer_id,
                meta.producer_epoch,
                meta.state is _S.PREPARE_COMMIT,
                self.coordinator_epoch,
                frozenset(meta.partitions),
                # a TV2 end's markers carry the bumped epoch (strictly above the data's)
                meta.transaction_version,
            )
        )

    def markers_done(self, now_ms: int, job: MarkerJob) -> None:
        """Every marker of `job` is acknowledged: write CompleteCommit / CompleteAbort."""
        meta = self.transactions.get(job.transactional_id)
        if meta is None or not self._is_job_of(meta, job):
            return
        if meta.pending:
            self._acked_markers[job.transactional_id] = job
            return
        self._complete(meta, now_ms)

    @staticmethod
    def _is_job_of(meta: TransactionMetadata, job: MarkerJob) -> bool:
        """Whether `job` carries the markers of `meta`'s prepared transaction."""
        return (
            meta.state.is_prepared
            and (meta.producer_id, meta.producer_epoch) == (job.producer_id, job.producer_epoch)
            and (meta.state is _S.PREPARE_COMMIT) == job.committed
        )

    def _complete(self, meta: TransactionMetadata, now_ms: int) -> None:
        """Every marker is written: the transaction is complete at once (the next one may
        start), and its CompleteCommit/CompleteAbort row follows, often in the same Delta
        commit as the next transaction's first row. Until that row is durable a restart finds
        the transaction prepared and writes its markers again, which changes nothing: no
        record of a next transaction exists before that transaction's own row is durable."""
        tid = meta.transactional_id
        new = meta.copy(
            state=_S.COMPLETE_COMMIT if meta.state is _S.PREPARE_COMMIT else _S.COMPLETE_ABORT,
            partitions=set(),
            groups=set(),
            txn_start_ms=-1,
            last_update_ms=now_ms,
        )
        if meta.next_producer_id != NO_PRODUCER_ID:  # TV2: the epoch overflowed at this end
            new.producer_id, new.producer_epoch = meta.next_producer_id, 0
            new.last_producer_id, new.last_producer_epoch = meta.producer_id, meta.producer_epoch
            new.next_producer_id = NO_PRODUCER_ID
        check_transition(meta, new)
        self.on_completed(new.state is _S.COMPLETE_COMMIT)
        row = transaction_row(new, now_ms)
        self.replay(row, now_ms)  # applied now, not once durable: see above
        self._write_complete(self.transactions[tid], row)
        self._parked.release(tid, now_ms)

    def _write_complete(self, new: TransactionMetadata, row: Row) -> None:
        tid = new.transactional_id

        def done(_ms: int, error: int) -> None:
            if error and self.transactions.get(tid) is new:
                self._unwritten_complete[tid] = new  # the tick writes it again

        self._writes.append(Write([row], done, replay=False))

    # -- timers -----------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Abort transactions open longer than their timeout; expire idle ids; retry
        completions whose write failed; answer requests parked too long."""
        self._parked.expire(now_ms)
        for tid, new in list(self._unwritten_complete.items()):
            del self._unwritten_complete[tid]
            if self.transactions.get(tid) is new and not new.pending:
                self._write_complete(new, transaction_row(new, now_ms))
        for tid, job in list(self._acked_markers.items()):
            meta = self.transactions.get(tid)
            if meta is None or not self._is_job_of(meta, job):
                del self._acked_markers[tid]
            elif not meta.pending:
                del self._acked_markers[tid]
                self._complete(meta, now_ms)
        if now_ms >= self._next_abort_check_ms:
            self._next_abort_check_ms = (
                now_ms + self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms
            )
            self.abort_timed_out(now_ms)
        if now_ms >= self._next_expiry_check_ms:
            self._next_expiry_check_ms = (
                now_ms + self.config.transaction_remove_expired_transaction_cleanup_interval_ms
            )
            self.expire_transactional_ids(now_ms)

    def abort_timed_out(self, now_ms: int) -> list[str]:
        """Abort (and fence) every Ongoing transaction older than its `transaction.timeout.ms`."""
        aborted = []
        for tid, meta in list(self.transactions.items()):
            if (
                meta.state is _S.ONGOING
                and not meta.pending
                and meta.txn_start_ms + meta.timeout_ms <= now_ms
            ):
                logger.info("transactional id %s timed out after %d ms", tid, meta.timeout_ms)
                self._fence_and_abort(meta, now_ms)
                aborted.append(tid)
        return aborted

    def expire_transactional_ids(self, now_ms: int) -> list[str]:
        """Forget ids idle for `transactional.id.expiration.ms` with no transaction open."""
        expired = []
        for tid, meta in list(self.transactions.items()):
            if (
                meta.state.is_complete
                and not meta.pending
                and meta.last_update_ms + self.config.transactional_id_expiration_ms <= now_ms
            ):
                self._persist(meta, meta.copy(state=_S.DEAD), now_ms, _nothing, _nothing)
                expired.append(tid)
        return expired

    # -- restart ----------------------------------------------------------------------------

    def replay(self, row: Row, now_ms: int) -> None:
        """Apply one durable row: a transactional id's new state, or a decided sink batch (read
        back by `persisted`, which restarts an open transaction's timeout from `now_ms`)."""
        kind = row["record_type"]
        if kind == "sink_batch":
            batch_key, outcome = read_sink_batch_row(row)
            self.decided_batches[batch_key] = outcome
        elif kind == "transaction":
            tid = row["transactional_id"]
            meta = read_transaction_row(row, now_ms)
            if meta is None:
                self.transactions.pop(tid, None)
            else:
                self.transactions[tid] = meta

    def replay_rows(self, rows: Iterable[Row], now_ms: int) -> None:
        """`replay` each row this core concerns, in order (offset rows are most rows)."""
        for row in rows:
            if row["record_type"] in _REPLAYED_KINDS:
                self.replay(row, now_ms)

    def load(self, rows: Iterable[Row], now_ms: int) -> None:
        """Rebuild every id after a restart (a replay of every row, in order) and re-send the
        markers of every prepared transaction."""
        assert not self.transactions, "load into an empty coordinator"
        self.replay_rows(rows, now_ms)
        for meta in self.transactions.values():
            # TV2 adds live in memory (`adds._add_in_memory`): any id whose transaction was
            # not decided may have had an open transaction whose adds are lost
            meta.suspect = not meta.state.is_prepared
        prepared = [m for m in self.transactions.values() if m.state.is_prepared]
        for meta in prepared:
            self._send_markers(meta)
        logger.info(
            "transaction coordinator loaded %d transactional ids, %d prepared",
            len(self.transactions),
            len(prepared),
        )

    # -- admin ------------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        return self.transactions.get(transactional_id)

    def list_transactions(
        self,
        states: set[str] | None = None,
        producer_ids: set[int] | None = None,
        duration_filter_ms: int = -1,
        now_ms: int = 0,
    ) -> list[TransactionMetadata]:
        """ListTransactions: empty filters match everything."""
        return [
            meta
            for meta in sorted(self.transactions.values(), key=lambda m: m.transactional_id)
            if meta.matches(states, producer_ids, duration_filter_ms, now_ms)
        ]
