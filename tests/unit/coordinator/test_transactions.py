"""The transaction coordinator's state machine without I/O: epochs and fencing, the states and
their CONCURRENT_TRANSACTIONS / INVALID_TXN_STATE answers, decisions that carry their consumer
offsets in one write, markers, timeouts, expiry, and a restart from the persisted rows in every
state."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from sparklog.coordinator.group.config import GroupConfig
from sparklog.coordinator.group.coordinator import GroupCoordinator, OffsetCommitPartition
from sparklog.coordinator.shard import complete_write
from sparklog.coordinator.transaction.config import TransactionConfig
from sparklog.coordinator.transaction.coordinator import MarkerJob, TransactionCoordinator
from sparklog.coordinator.transaction.metadata import MAX_PRODUCER_EPOCH, TxnState
from sparklog.coordinator.transaction.sink_batches import end_txn_batch
from sparklog.errors import (
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
)

TOPICS = {"t": 4, "src": 2}
TIMEOUT_MS = 60_000
CONCURRENT = ConcurrentTransactionsError.code
FENCED = ProducerFencedError.code
INVALID_STATE = InvalidTxnStateError.code


class Harness:
    """Both cores, an in-memory "table" of rows, a hand-moved clock; `flush()` plays the edge."""

    def __init__(self, **config: Any) -> None:
        self.config = TransactionConfig(**config)
        self.now_ms = 1_700_000_000_000  # wall-clock ms, as the coordinator persists
        self.rows: list[dict[str, Any]] = []
        self.commits: list[list[dict[str, Any]]] = []
        self.fail_next_flush = 0
        self.pids = itertools.count(1000)
        self.markers: list[MarkerJob] = []
        self._build()

    def _build(self) -> None:
        self.groups = GroupCoordinator(GroupConfig(), lambda t: TOPICS.get(t, 0))
        self.txn = TransactionCoordinator(
            self.config, len(self.commits), lambda: next(self.pids), self.groups
        )
        self.groups.txn_check = self.txn.check_offset_commit

    def flush(self) -> None:
        while writes := self.groups.take_writes() + self.txn.take_writes():
            for w in writes:
                code = self.fail_next_flush
                if not code:
                    self.rows.extend(w.rows)
                    self.commits.append(list(w.rows))
                complete_write(w, [self.groups, self.txn], self.now_ms, code)
            self.fail_next_flush = 0
        self.markers.extend(self.txn.take_markers())

    def restart(self) -> None:
        self._build()
        self.groups.load(list(self.rows), self.now_ms)
        self.txn.load(list(self.rows), self.now_ms)
        self.markers = []
        self.flush()

    def advance(self, ms: int) -> None:
        self.now_ms += ms
        self.txn.tick(self.now_ms)
        self.flush()

    # -- requests (flushed unless told otherwise) -------------------------------------------

    def init(self, tid: str, pid: int = -1, epoch: int = -1, flush: bool = True) -> tuple:
        out: list[tuple] = []
        self.txn.init_producer_id(
            self.now_ms,
            transactional_id=tid,
            timeout_ms=TIMEOUT_MS,
            producer_id=pid,
            producer_epoch=epoch,
            respond=lambda *a: out.append(a),
        )
        if flush:
            self.flush()
        return out[0] if out else None

    def add(self, tid: str, pid: int, epoch: int, *tps, flush: bool = True) -> int | None:
        out: list[int] = []
        self.txn.add_partitions(
            self.now_ms,
            transactional_id=tid,
            producer_id=pid,
            producer_epoch=epoch,
            partitions=tps or [("t", 0)],
            respond=out.append,
        )
        if flush:
            self.flush()
        return out[0] if out else None

    def add_offsets(self, tid: str, pid: int, epoch: int, group: str) -> int:
        out: list[int] = []
        self.txn.add_offsets(
            self.now_ms,
            transactional_id=tid,
            producer_id=pid,
            producer_epoch=epoch,
            group_id=group,
            respond=out.append,
        )
        self.flush()
        return out[0]

    def txn_commit(self, tid: str, pid: int, epoch: int, group: str, offset: int) -> dict:
        out: list[dict] = []
        self.groups.txn_commit_offsets(
            self.now_ms,
            transactional_id=tid,
            producer_id=pid,
            producer_epoch=epoch,
            group_id=group,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            partitions=[OffsetCommitPartition("src", 0, offset, -1, "")],
            respond=out.append,
        )
        self.flush()
        return out[0]

    def end(self, tid: str, pid: int, epoch: int, commit: bool, flush: bool = True) -> int | None:
        out: list[int] = []
        self.txn.end_txn(
            self.now_ms,
            transactional_id=tid,
            producer_id=pid,
            producer_epoch=epoch,
            committed=commit,
            respond=out.append,
        )
        if flush:
            self.flush()
        return out[0] if out else None

    def deliver_markers(self) -> list[MarkerJob]:
        jobs, self.markers = self.markers, []
        for job in jobs:
            self.txn.markers_done(self.now_ms, job)
        self.flush()
        return jobs

    def state(self, tid: str) -> TxnState:
        return self.txn.transactions[tid].state

    def committed(self, group: str) -> int | None:
        found = self.groups.fetch_offsets(group, [("src", 0)])[("src", 0)]
        return None if found is None else found.committed_offset


@pytest.fixture
def h() -> Harness:
    return Harness()


def started(h: Harness, tid: str = "tx") -> tuple[int, int]:
    code, pid, epoch = h.init(tid)
    assert code == 0
    assert h.add(tid, pid, epoch, ("t", 0), ("t", 1)) == 0
    return pid, epoch


# -- InitProducerId ---------------------------------------------------------------------------


def test_a_new_id_gets_a_producer_id_and_each_init_bumps_the_epoch(h: Harness) -> None:
    code, pid, epoch = h.init("tx")
    assert (code, epoch) == (0, 0) and pid >= 1000
    assert h.init("tx")[1:] == (pid, 1), "same producer id, next epoch"
    assert h.state("tx") is TxnState.EMPTY
    assert h.add("tx", pid, 0) == FENCED, "the first incarnation is fenced"
    assert h.add("tx", pid, 1) == 0


def test_init_refuses_bad_timeouts_and_empty_ids(h: Harness) -> None:
    out: list[tuple] = []
    for tid, timeout in (("tx", 0), ("tx", 900_001), ("", 1000)):
        h.txn.init_producer_id(
            h.now_ms,
            transactional_id=tid,
            timeout_ms=timeout,
            producer_id=-1,
            producer_epoch=-1,
            respond=lambda *a: out.append(a),
        )
    assert [o[0] for o in out] == [InvalidTransactionTimeoutError.code] * 2 + [42]


def test_init_with_the_current_epoch_bumps_and_a_retry_gets_the_same_answer(h: Harness) -> None:
    _, pid, epoch = h.init("tx")
    assert h.init("tx", pid, epoch)[1:] == (pid, epoch + 1)
    assert h.init("tx", pid, epoch)[1:] == (pid, epoch + 1), "a retried KIP-360 init"
    assert h.init("tx", pid, 77)[0] == FENCED


def test_an_exhausted_epoch_moves_to_a_new_producer_id(h: Harness) -> None:
    _, pid, _ = h.init("tx")
    h.txn.transactions["tx"].producer_epoch = MAX_PRODUCER_EPOCH - 1
    code, new_pid, epoch = h.init("tx")
    assert (code, epoch) == (0, 0) and new_pid != pid


def test_init_during_an_ongoing_transaction_fences_and_aborts_it(h: Harness) -> None:
    pid, epoch = started(h)
    assert h.init("tx")[0] == CONCURRENT, "the client retries while the abort runs"
    assert h.state("tx") is TxnState.PREPARE_ABORT
    [job] = h.markers
    assert (job.committed, job.producer_epoch) == (False, epoch + 1)
    assert job.partitions == {("t", 0), ("t", 1)}
    assert h.init("tx")[0] == CONCURRENT, "markers still outstanding"
    h.deliver_markers()
    assert h.state("tx") is TxnState.COMPLETE_ABORT
    assert h.init("tx")[1:] == (pid, epoch + 2)
    assert h.end("tx", pid, epoch, True) == FENCED, "the zombie cannot commit"


# -- the transaction's life --------------------------------------------------------------------


def test_commit_answers_once_the_decision_is_durable_then_markers_complete_it(h: Harness) -> None:
    pid, epoch = started(h)
    assert h.state("tx") is TxnState.ONGOING
    assert h.end("tx", pid, epoch, True, flush=False) is None, "not before it is durable"
    parked: list[int] = []
    h.txn.add_partitions(
        h.now_ms,
        transactional_id="tx",
        producer_id=pid,
        producer_epoch=epoch,
        partitions=[("t", 2)],
        respond=parked.append,
    )
    h.flush()
    assert h.state("tx") is TxnState.PREPARE_COMMIT
    assert h.commits[-1][0]["txn_state"] == "PrepareCommit"
    assert h.end("tx", pid, epoch, True) == CONCURRENT, "a retry while markers are written"
    assert h.end("tx", pid, epoch, False) == INVALID_STATE
    assert parked == [], "the next transaction's AddPartitions waits for the commit to settle"
    [job] = h.deliver_markers()
    assert job.committed and job.partitions == {("t", 0), ("t", 1)}
    assert parked == [0], "then it goes ahead: the next transaction is open"
    assert h.state("tx") is TxnState.ONGOING
    assert h.txn.transactions["tx"].partitions == {("t", 2)}
    assert h.end("tx", pid, epoch, True) == 0
    h.deliver_markers()
    assert h.end("tx", pid, epoch, True) == 0, "a retry after success"
    assert h.end("tx", pid, epoch, False) == INVALID_STATE


def test_end_txn_without_a_transaction_is_refused(h: Harness) -> None:
    _, pid, epoch = h.init("tx")
    assert h.end("tx", pid, epoch, True) == INVALID_STATE
    assert h.end("nobody", pid, epoch, True) == InvalidProducerIdMappingError.code
    assert h.end("tx", pid + 1, epoch, True) == InvalidProducerIdMappingError.code
    assert h.add("tx", pid, epoch + 1) == FENCED


def test_a_transaction_with_no_partitions_completes_without_markers(h: Harness) -> None:
    _, pid, epoch = h.init("tx")
    assert h.add_offsets("tx", pid, epoch, "g") == 0
    assert h.end("tx", pid, epoch, False) == 0
    assert h.markers == [] and h.state("tx") is TxnState.COMPLETE_ABORT


def test_adding_known_partitions_writes_nothing(h: Harness) -> None:
    pid, epoch = started(h)
    before = len(h.commits)
    assert h.add("tx", pid, epoch, ("t", 1)) == 0
    assert len(h.commits) == before


def test_verify_only_checks_membership_of_the_ongoing_transaction(h: Harness) -> None:
    pid, epoch = started(h)
    found = h.txn.verify_partitions("tx", pid, epoch, [("t", 0), ("t", 3)])
    assert found == {("t", 0): 0, ("t", 3): INVALID_STATE}
    assert h.txn.verify_partitions("tx", pid, epoch - 1, [("t", 0)]) == {("t", 0): FENCED}


def test_a_failed_decision_write_leaves_the_transaction_ongoing(h: Harness) -> None:
    pid, epoch = started(h)
    h.fail_next_flush = CoordinatorNotAvailableError.code
    assert h.end("tx", pid, epoch, True) == CoordinatorNotAvailableError.code
    assert h.state("tx") is TxnState.ONGOING and h.markers == []
    assert h.end("tx", pid, epoch, True) == 0


def test_a_failed_completion_write_is_retried_by_the_tick(h: Harness) -> None:
    pid, epoch = started(h)
    h.end("tx", pid, epoch, True)
    h.fail_next_flush = CoordinatorNotAvailableError.code
    h.deliver_markers()
    assert h.state("tx") is TxnState.COMPLETE_COMMIT, "complete once every marker is written"
    assert h.rows[-1]["txn_state"] == "PrepareCommit", "its row was not written"
    h.advance(10)
    assert h.rows[-1]["txn_state"] == "CompleteCommit"


def test_a_parked_request_is_answered_concurrent_transactions_when_markers_stall(
    h: Harness,
) -> None:
    pid, epoch = started(h)
    h.end("tx", pid, epoch, True)
    assert h.add("tx", pid, epoch, ("t", 2)) is None, "parked while markers are written"
    out: list[int] = []
    h.txn.add_partitions(
        h.now_ms,
        transactional_id="tx",
        producer_id=pid,
        producer_epoch=epoch,
        partitions=[("t", 3)],
        respond=out.append,
    )
    h.advance(5_001)
    assert out == [CONCURRENT], "the client retries, as Kafka's clients do"


def test_markers_of_a_stale_job_complete_nothing(h: Harness) -> None:
    pid, epoch = started(h)
    h.end("tx", pid, epoch, True)
    stale = MarkerJob("tx", pid, epoch - 1, True, 0, frozenset({("t", 0)}))
    h.txn.markers_done(h.now_ms, stale)
    h.flush()
    assert h.state("tx") is TxnState.PREPARE_COMMIT


# -- consumer offsets in transactions ---------------------------------------------------------


def test_offsets_become_visible_with_the_commit_decision_in_the_same_write(h: Harness) -> None:
    pid, epoch = started(h)
    assert h.txn_commit("tx", pid, epoch, "g", 5) == {("src", 0): INVALID_STATE}, (
        "AddOffsetsToTxn comes first"
    )
    assert h.add_offsets("tx", pid, epoch, "g") == 0
    assert h.txn_commit("tx", pid, epoch, "g", 42) == {("src", 0): 0}
    assert h.committed("g") is None, "pending until the transaction commits"
    assert h.groups.has_pending_txn_offset("g", ("src", 0))
    assert h.end("tx", pid, epoch, True) == 0
    decision = h.commits[-1]
    assert [r["record_type"] for r in decision] == ["transaction", "offset"]
    assert decision[0]["txn_state"] == "PrepareCommit" and decision[1]["committed_offset"] == 42
    assert h.committed("g") == 42, "visible with the decision, before the markers"
    assert not h.groups.has_pending_txn_offset("g", ("src", 0))


def test_offsets_of_an_aborted_transaction_vanish(h: Harness) -> None:
    pid, epoch = started(h)
    h.add_offsets("tx", pid, epoch, "g")
    h.txn_commit("tx", pid, epoch, "g", 42)
    assert h.end("tx", pid, epoch, False) == 0
    assert [r["record_type"] for r in h.commits[-1]] == ["transaction"]
    assert h.committed("g") is None and not h.groups.txn_offsets


def test_a_fenced_producer_cannot_commit_offsets(h: Harness) -> None:
    pid, epoch = started(h)
    h.add_offsets("tx", pid, epoch, "g")
    h.init("tx")  # fences: aborts
    assert h.txn_commit("tx", pid, epoch, "g", 42) == {("src", 0): FENCED}


# -- timers -----------------------------------------------------------------------------------


def test_a_transaction_open_past_its_timeout_is_aborted_and_its_producer_fenced(
    h: Harness,
) -> None:
    pid, epoch = started(h)
    h.advance(TIMEOUT_MS - 1)
    assert h.state("tx") is TxnState.ONGOING
    h.advance(h.config.transaction_abort_timed_out_transaction_cleanup_interval_ms)
    assert h.state("tx") is TxnState.PREPARE_ABORT
    assert [(j.committed, j.producer_epoch) for j in h.markers] == [(False, epoch + 1)]
    h.deliver_markers()
    assert h.end("tx", pid, epoch, True) == FENCED


def test_idle_ids_expire_and_stay_gone_after_a_restart() -> None:
    h = Harness(transactional_id_expiration_ms=1000)
    h.init("idle")
    pid, epoch = started(h, "busy")
    h.advance(3_600_000)
    assert "idle" not in h.txn.transactions
    assert "busy" in h.txn.transactions, "an ongoing transaction does not expire (it aborts)"
    assert any(r.get("txn_state") == "Dead" for r in h.rows)
    h.restart()
    assert "idle" not in h.txn.transactions


# -- restart ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reach, expected",
    [
        ("empty", TxnState.EMPTY),
        ("ongoing", TxnState.ONGOING),
        ("prepare_commit", TxnState.PREPARE_COMMIT),
        ("prepare_abort", TxnState.PREPARE_ABORT),
        ("complete_commit", TxnState.COMPLETE_COMMIT),
        ("complete_abort", TxnState.COMPLETE_ABORT),
        ("fenced", TxnState.PREPARE_ABORT),
    ],
)
def test_a_restart_in_every_state_rebuilds_it_and_finishes_prepared_ones(
    h: Harness, reach: str, expected: TxnState
) -> None:
    _, pid, epoch = h.init("tx")
    if reach != "empty":
        h.add("tx", pid, epoch, ("t", 0), ("t", 3))
        h.add_offsets("tx", pid, epoch, "g")
        h.txn_commit("tx", pid, epoch, "g", 7)
    if reach in ("prepare_commit", "complete_commit"):
        h.end("tx", pid, epoch, True)
    if reach in ("prepare_abort", "complete_abort"):
        h.end("tx", pid, epoch, False)
    if reach.startswith("complete"):
        h.deliver_markers()
    if reach == "fenced":
        h.init("tx")
    before = h.txn.transactions["tx"].to_record()
    h.restart()
    assert h.state("tx") is expected
    assert h.txn.transactions["tx"].to_record() == before
    committed = reach in ("prepare_commit", "complete_commit")
    assert h.committed("g") == (7 if committed else None)
    if expected.is_prepared:
        [job] = h.markers
        assert job.committed is (expected is TxnState.PREPARE_COMMIT)
        assert job.partitions == {("t", 0), ("t", 3)}
        h.deliver_markers()
        assert h.state("tx").is_complete
    else:
        assert h.markers == []
    if reach == "ongoing":
        assert h.groups.has_pending_txn_offset("g", ("src", 0)), "pending offsets survive"
        assert h.end("tx", pid, epoch, True) == 0
        assert h.committed("g") == 7


# -- EndTxnBatch (Spark's exactly-once sink) -------------------------------------------------


def end_batch(h: Harness, key: str, commit: bool, txns: list[tuple[str, int, int]]) -> tuple:
    out: list[tuple] = []
    end_txn_batch(h.txn, h.now_ms, key, commit, txns, lambda *a: out.append(a))
    h.flush()
    return out[0]


def test_a_batch_of_transactions_is_decided_in_one_write_and_a_replay_is_recognised(
    h: Harness,
) -> None:
    tasks = [(f"task-{i}", *started(h, f"task-{i}")) for i in range(3)]
    before = len(h.commits)
    code, outcome, codes = end_batch(h, "q:7", True, tasks)
    assert (code, outcome) == (0, "committed") and set(codes.values()) == {0}
    assert len(h.commits) == before + 1, "one decision, one write"
    decision = h.commits[-1]
    assert [r["record_type"] for r in decision] == ["sink_batch"] + ["transaction"] * 3
    assert {r["txn_state"] for r in decision[1:]} == {"PrepareCommit"}
    assert len(h.markers) == 3 and all(j.committed for j in h.markers)
    h.deliver_markers()
    replayed = [(f"task-{i}", *started(h, f"task-{i}")) for i in range(3)]
    code, outcome, _ = end_batch(h, "q:7", True, replayed)
    assert (code, outcome) == (0, "already-committed")
    assert len(h.markers) == 3 and not any(j.committed for j in h.markers), (
        "the duplicates of a replayed batch are aborted"
    )
    h.restart()
    assert h.txn.decided_batches == {"q:7": "committed"}, "decisions survive a restart"


def test_a_batch_with_a_fenced_task_commits_nothing(h: Harness) -> None:
    tasks = [(f"task-{i}", *started(h, f"task-{i}")) for i in range(2)]
    h.init("task-1")  # a newer attempt fences task 1 (and aborts its transaction)
    h.deliver_markers()
    code, _outcome, codes = end_batch(h, "q:8", True, tasks)
    assert code == FENCED and codes["task-1"] == FENCED and codes["task-0"] == 0
    assert h.state("task-0") is TxnState.ONGOING, "all or nothing"
    assert "q:8" not in h.txn.decided_batches


def test_an_aborted_batch_key_may_be_committed_by_its_retry(h: Harness) -> None:
    tasks = [("task-0", *started(h, "task-0"))]
    assert end_batch(h, "q:9", False, tasks)[:2] == (0, "aborted")
    h.deliver_markers()
    retry = [("task-0", *started(h, "task-0"))]
    assert end_batch(h, "q:9", True, retry)[:2] == (0, "committed")


def test_transaction_settings_have_kafkas_names_and_defaults_in_the_conf_file() -> None:
    import dataclasses
    from pathlib import Path

    conf = Path(__file__).parents[3] / "conf" / "sparklog-defaults.conf"
    entries = dict(line.split("=", 1) for line in conf.read_text().splitlines() if "=" in line)
    defaults = TransactionConfig()
    for f in dataclasses.fields(TransactionConfig):
        name = f.name.replace("_", ".")
        if name != "transaction.marker.request.timeout.ms":  # sparklog's own
            assert int(entries[name]) == getattr(defaults, f.name), name
    assert TransactionConfig.from_properties(dict(entries)) == defaults
    with pytest.raises(ValueError, match="transaction.max.timeout.ms"):
        TransactionConfig.from_properties({"transaction.max.timeout.ms": "soon"})


# -- regressions the transaction simulation found ---------------------------------------------


def test_pending_offsets_survive_a_restart_after_more_partitions_were_added(h: Harness) -> None:
    pid, epoch = started(h)
    h.add_offsets("tx", pid, epoch, "g")
    h.txn_commit("tx", pid, epoch, "g", 9)
    h.add("tx", pid, epoch, ("t", 3))  # an Ongoing row after the pending offset's row
    h.restart()
    assert h.groups.has_pending_txn_offset("g", ("src", 0))
    assert h.end("tx", pid, epoch, True) == 0
    assert h.committed("g") == 9


def test_a_failed_completion_write_never_completes_a_later_transaction(h: Harness) -> None:
    pid, epoch = started(h)
    h.end("tx", pid, epoch, True)
    h.fail_next_flush = CoordinatorNotAvailableError.code
    h.deliver_markers()  # complete in memory; its row's write fails
    assert h.add("tx", pid, epoch, ("t", 2)) == 0
    assert h.end("tx", pid, epoch, True) == 0
    h.advance(10)  # the tick rewrites nothing stale and completes nothing early
    assert h.state("tx") is TxnState.PREPARE_COMMIT and len(h.markers) == 1
    h.deliver_markers()
    assert h.state("tx") is TxnState.COMPLETE_COMMIT


def test_the_wire_names_of_transaction_states_are_the_coordinators_states():
    # brokers check ListTransactions filters against the floor's list (they do not import the
    # coordinator); it must name exactly the states the coordinator has
    from sparklog.coordinator.transaction.metadata import TxnState
    from sparklog.protocol.responses import TRANSACTION_STATE_NAMES

    assert {s.value for s in TxnState} == TRANSACTION_STATE_NAMES
