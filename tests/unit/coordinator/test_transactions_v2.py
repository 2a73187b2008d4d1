"""Transactions v2 (KIP-890 part 2) in the coordinator's core: implicit adds that take effect
in memory (the decision's row carries the partitions), an epoch bump at every EndTxn v5 (answered, the
markers carrying it with transaction version 2), retries recognised by the pre-bump epoch, an
overflow to a fresh producer id, a late add of an ended transaction fenced, and restarts (an
open transaction whose adds were forgotten may only abort)."""

from __future__ import annotations

from sparklog.coordinator.transaction.metadata import MAX_PRODUCER_EPOCH, TxnState
from sparklog.coordinator.transaction.tv2 import answered_producer
from sparklog.errors import TransactionAbortableError

from .test_transactions import CONCURRENT, FENCED, INVALID_STATE, TIMEOUT_MS, Harness

ABORTABLE = TransactionAbortableError.code


def implicit_add(h: Harness, tid: str, pid: int, epoch: int, *tps) -> list[int]:
    """What a broker's AddPartitionsToTxn v5 (no verifyOnly) does for a Produce v12."""
    out: list[int] = []
    h.txn.add_partitions(
        h.now_ms,
        transactional_id=tid,
        producer_id=pid,
        producer_epoch=epoch,
        partitions=tps or [("t", 0)],
        respond=out.append,
        implicit=True,
    )
    return out


def end_v2(h: Harness, tid: str, pid: int, epoch: int, commit: bool) -> int | None:
    out: list[int] = []
    h.txn.end_txn(
        h.now_ms,
        transactional_id=tid,
        producer_id=pid,
        producer_epoch=epoch,
        committed=commit,
        respond=out.append,
        transaction_version=2,
    )
    h.flush()
    return out[0] if out else None


def test_an_implicit_add_takes_effect_in_memory_and_writes_nothing() -> None:
    h = Harness()
    _code, pid, epoch = h.init("tx")
    commits = len(h.commits)
    assert implicit_add(h, "tx", pid, epoch, ("t", 0)) == [0], "answered before any write"
    assert h.state("tx") is TxnState.ONGOING
    assert implicit_add(h, "tx", pid, epoch, ("t", 0), ("t", 1)) == [0]
    assert h.txn.transactions["tx"].partitions == {("t", 0), ("t", 1)}
    h.flush()
    assert len(h.commits) == commits, "the decision's row will carry the partitions"


def test_end_txn_v5_bumps_the_epoch_and_the_markers_carry_it() -> None:
    h = Harness()
    _code, pid, epoch = h.init("tx")
    implicit_add(h, "tx", pid, epoch, ("t", 0), ("t", 1))
    h.flush()
    commits = len(h.commits)
    assert end_v2(h, "tx", pid, epoch, True) == 0
    assert len(h.commits) == commits + 1, "one commit: the decision"
    decision = h.commits[-1][0]
    assert decision["txn_state"] == "PrepareCommit" and decision["producer_epoch"] == epoch + 1
    (job,) = h.markers
    assert (job.producer_id, job.producer_epoch, job.transaction_version) == (pid, epoch + 1, 2)
    assert job.partitions == {("t", 0), ("t", 1)}
    h.deliver_markers()
    meta = h.txn.transactions["tx"]
    assert meta.state is TxnState.COMPLETE_COMMIT
    assert answered_producer(meta) == (pid, epoch + 1)


def test_retries_are_known_by_the_epoch_before_the_bump() -> None:
    h = Harness()
    _code, pid, epoch = h.init("tx")
    implicit_add(h, "tx", pid, epoch)
    assert end_v2(h, "tx", pid, epoch, True) == 0
    assert end_v2(h, "tx", pid, epoch, True) == CONCURRENT, "markers still being written"
    h.deliver_markers()
    assert end_v2(h, "tx", pid, epoch, True) == 0, "a retry of the commit"
    assert end_v2(h, "tx", pid, epoch, False) == INVALID_STATE
    assert end_v2(h, "tx", pid, epoch + 1, True) == INVALID_STATE, "nothing to commit"
    assert end_v2(h, "tx", pid, epoch - 1, True) == FENCED
    # an abort of a transaction that may be empty bumps the epoch, without markers
    assert end_v2(h, "tx", pid, epoch + 1, False) == 0
    assert not h.markers
    meta = h.txn.transactions["tx"]
    assert (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 2)


def test_a_late_add_of_an_ended_transaction_is_fenced_and_opens_nothing() -> None:
    h = Harness()
    _code, pid, epoch = h.init("tx")
    implicit_add(h, "tx", pid, epoch, ("t", 0))
    assert end_v2(h, "tx", pid, epoch, False) == 0
    h.deliver_markers()
    assert implicit_add(h, "tx", pid, epoch, ("t", 2)) == [FENCED]
    meta = h.txn.transactions["tx"]
    assert (meta.state, meta.partitions) == (TxnState.COMPLETE_ABORT, set())


def test_an_exhausted_epoch_moves_to_a_fresh_producer_id_at_the_end() -> None:
    h = Harness()
    _code, pid, _epoch = h.init("tx")
    h.txn.transactions["tx"].producer_epoch = MAX_PRODUCER_EPOCH - 1
    implicit_add(h, "tx", pid, MAX_PRODUCER_EPOCH - 1)
    assert end_v2(h, "tx", pid, MAX_PRODUCER_EPOCH - 1, True) == 0
    (job,) = h.markers
    assert (job.producer_id, job.producer_epoch) == (pid, MAX_PRODUCER_EPOCH)
    h.deliver_markers()
    meta = h.txn.transactions["tx"]
    assert meta.producer_id != pid and meta.producer_epoch == 0
    assert answered_producer(meta) == (meta.producer_id, 0)
    assert end_v2(h, "tx", pid, MAX_PRODUCER_EPOCH - 1, True) == 0, "a retry after overflow"
    assert implicit_add(h, "tx", meta.producer_id, 0) == [0]


def test_txn_offset_commit_v5_adds_the_group_itself() -> None:
    h = Harness()
    _code, pid, epoch = h.init("tx")
    out: list[int] = []
    h.txn.add_offsets(
        h.now_ms,
        transactional_id="tx",
        producer_id=pid,
        producer_epoch=epoch,
        group_id="g",
        respond=out.append,
        implicit=True,
    )
    assert out == [0]
    assert h.txn_commit("tx", pid, epoch, "g", 7) == {("src", 0): 0}
    assert h.committed("g") is None
    assert end_v2(h, "tx", pid, epoch, True) == 0
    assert h.committed("g") == 7, "the decision made the offsets committed"


def test_after_a_restart_an_open_transaction_may_only_abort() -> None:
    """The adds were in memory: the restarted coordinator cannot tell which partitions the
    open transaction wrote, so its producer must abort (the brokers abort the data left)."""
    h = Harness()
    _code, pid, epoch = h.init("tx")
    implicit_add(h, "tx", pid, epoch, ("t", 0))
    h.flush()
    h.restart()
    meta = h.txn.transactions["tx"]
    assert (meta.state, meta.partitions, meta.suspect) == (TxnState.EMPTY, set(), True)
    assert implicit_add(h, "tx", pid, epoch, ("t", 1)) == [ABORTABLE]
    assert end_v2(h, "tx", pid, epoch, True) == ABORTABLE
    assert end_v2(h, "tx", pid, epoch, False) == 0
    meta = h.txn.transactions["tx"]
    assert (meta.producer_epoch, meta.suspect) == (epoch + 1, False)
    assert implicit_add(h, "tx", pid, epoch + 1, ("t", 1)) == [0], "the next one is fine"
    assert end_v2(h, "tx", pid, epoch + 1, True) == 0


def test_a_restart_resends_a_v2_decisions_markers_and_answers_its_retry() -> None:
    h = Harness()
    _code, pid, epoch = h.init("tx")
    implicit_add(h, "tx", pid, epoch, ("t", 0))
    assert end_v2(h, "tx", pid, epoch, True) == 0
    h.restart()  # the markers were never delivered
    (job,) = h.markers
    assert (job.producer_epoch, job.transaction_version, job.committed) == (epoch + 1, 2, True)
    assert job.partitions == {("t", 0)}, "the decision's row carried the partitions"
    h.deliver_markers()
    assert end_v2(h, "tx", pid, epoch, True) == 0, "the retry after the restart"


def test_a_restart_does_not_refuse_v1_clients() -> None:
    h = Harness()
    _code, pid, epoch = h.init("tx")
    assert h.add("tx", pid, epoch, ("t", 0)) == 0  # AddPartitionsToTxn v3: written
    h.restart()
    assert h.end("tx", pid, epoch, True) == 0, "EndTxn v4 commits what was written"


def test_a_timed_out_implicit_transaction_is_aborted_with_its_partitions() -> None:
    h = Harness()
    _code, pid, epoch = h.init("tx")
    implicit_add(h, "tx", pid, epoch, ("t", 3))
    h.advance(TIMEOUT_MS + h.config.transaction_abort_timed_out_transaction_cleanup_interval_ms)
    (job,) = h.markers
    assert (job.committed, job.partitions, job.producer_epoch) == (False, {("t", 3)}, epoch + 1)
    assert end_v2(h, "tx", pid, epoch, True) == FENCED
