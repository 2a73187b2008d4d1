"""The soak's transaction checkers (`jobs/soak_txn.py`) on data made here, without a cluster:
the replica comparison finds a `.txnindex` missing an entry, a producer snapshot that differs
and a checkpointed HW above the log end; the read_committed verdict counts what it must."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest

from sparklog.records.batch import iter_batches
from sparklog.storage.checkpoint import OffsetCheckpointFile
from sparklog.storage.log import Log
from sparklog.storage.producer_snapshot import read_snapshot, write_snapshot
from sparklog.storage.txn_index import TransactionIndex
from tests.unit.storage.test_log_transactions import ABORT, COMMIT, NOW, data, marker

JOBS = Path(__file__).resolve().parents[3] / "jobs"


@pytest.fixture(scope="module")
def soak_txn():
    sys.path.insert(0, str(JOBS))
    try:
        spec = importlib.util.spec_from_file_location("soak_txn", JOBS / "soak_txn.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(JOBS))


def three_replicas(root: Path, topic: str = "soak-txn") -> list[Path]:
    """Broker dirs b0..b2 holding `topic`-0: a leader and two followers that fetched it in one
    chunk each, closed cleanly, with their HW checkpointed."""
    leader_dir = root / "b0" / f"{topic}-0"
    leader = Log.open(leader_dir, now_ms=NOW)
    for append, origin in [
        (data(1, 2, 0), "client"),
        (data(2, 1, 0), "client"),
        (marker(2, ABORT), "coordinator"),
        (marker(1, ABORT), "coordinator"),
        (data(1, 1, 2), "client"),
        (marker(1, COMMIT), "coordinator"),
    ]:
        leader.append_as_leader(append, 0, NOW, origin=origin)
    chunk = bytes(leader.read(0, 1 << 20).records)
    assert len(list(iter_batches(chunk))) == 6
    dirs = [leader_dir]
    for broker in ("b1", "b2"):
        follower = Log.open(root / broker / f"{topic}-0", now_ms=NOW)
        follower.append_as_follower(chunk, NOW)
        follower.close()
        dirs.append(follower.directory)
    leader.close()
    for directory in dirs:
        checkpoint = OffsetCheckpointFile(directory.parent / "replication-offset-checkpoint")
        checkpoint.write({(topic, 0): 7})  # the log end
    return dirs


def test_replicas_that_agree(soak_txn, tmp_path):
    three_replicas(tmp_path)
    found = soak_txn.compare_replicas(tmp_path, "soak-txn", 1)
    assert found["ok"], found
    assert found["replicas_compared"] == 3 and found["txn_index_entries"] == 2


def test_a_replica_missing_an_abort_is_found(soak_txn, tmp_path):
    dirs = three_replicas(tmp_path)
    path = dirs[1] / "00000000000000000000.txnindex"
    index = TransactionIndex(path, 0)
    entries = index.all_aborted()
    index.close()
    path.write_bytes(entries[1].to_bytes())  # what 3f5aee2 wrote for this chunk
    found = soak_txn.compare_replicas(tmp_path, "soak-txn", 1)
    assert not found["ok"] and found["replicas_whose_txn_index_differs"] == 1, found
    assert "b1/soak-txn-0" in found["examples"]["txn_index"][0]


def test_a_differing_producer_snapshot_and_an_hw_above_the_log_end_are_found(soak_txn, tmp_path):
    dirs = three_replicas(tmp_path)
    snapshot = sorted(dirs[2].glob("*.snapshot"))[-1]
    entries = read_snapshot(snapshot)
    entries[0].coordinator_epoch += 1
    write_snapshot(snapshot, entries)
    OffsetCheckpointFile(tmp_path / "b1" / "replication-offset-checkpoint").write(
        {("soak-txn", 0): 9}
    )
    found = soak_txn.compare_replicas(tmp_path, "soak-txn", 1)
    assert found["replicas_whose_producer_snapshot_differs"] == 1, found
    assert found["replicas_with_hw_above_log_end"] == 1, found
    assert found["replicas_whose_txn_index_differs"] == 0 and not found["ok"], found


class FakeProducer:
    def __init__(self, tid: str, outcomes: dict[int, str]) -> None:
        self.tid = tid
        self.outcomes = outcomes
        self.values = {n: [b"%s:%d:%d" % (tid.encode(), n, i) for i in range(3)] for n in outcomes}
        self.errors: Counter[str] = Counter()


def test_the_read_committed_verdict(soak_txn):
    producer = FakeProducer("t", {0: "committed", 1: "aborted", 2: "committed", 3: "unknown"})
    values = producer.values
    seen = Counter(values[0] + values[2])
    clean = soak_txn.check_transactions([producer], seen, Counter())
    assert clean["ok"] and clean["transactions_committed"] == 2, clean
    assert clean["transactions_aborted"] == 1 and clean["records_committed"] == 6

    seen = Counter(values[0] + values[2][:2] + [values[0][0]] + values[3][:1])
    during_run = Counter(values[1][:1])
    bad = soak_txn.check_transactions([producer], seen, during_run)
    assert not bad["ok"]
    assert bad["aborted_records_visible"] == 1 and bad["aborted_transactions_visible"] == 1
    assert bad["committed_records_lost"] == 1 and bad["committed_transactions_partial"] == 1
    assert bad["records_duplicated"] == 1 and bad["unknown_transactions_partly_visible"] == 1
