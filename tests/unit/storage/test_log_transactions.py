"""Transactions in the partition log across replicas (issue 27): a follower's fetched chunk
holding several producers' markers indexes every abort, in offset order, with the LSO the
leader stored; replay mends an index that lost an entry; truncation rebuilds producer state
and keeps HW <= log end."""

from __future__ import annotations

import pytest

from sparklog.records import SimpleRecord, build_batch
from sparklog.records.batch import iter_batches
from sparklog.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from sparklog.storage.config import LogConfig
from sparklog.storage.log import Log
from sparklog.storage.producer_append_info import AppendOrigin
from sparklog.storage.txn_index import AbortedTxn
from tests.log_checks import aborted_view, check_log_consistent, producer_view

NOW = 1_700_000_000_000
ABORT, COMMIT = ControlRecordType.ABORT, ControlRecordType.COMMIT


def data(pid: int, count: int, seq: int, *, txn: bool = True, offset: int = 0) -> bytes:
    records = [SimpleRecord(b"p%d-%d" % (pid, seq + i), None, NOW) for i in range(count)]
    return build_batch(
        records,
        base_offset=offset,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        is_transactional=txn,
        partition_leader_epoch=0,
    )


def marker(pid: int, kind: ControlRecordType, offset: int = 0) -> bytes:
    return build_end_txn_marker_batch(
        EndTransactionMarker(kind, 0),
        producer_id=pid,
        producer_epoch=0,
        timestamp_ms=NOW,
        base_offset=offset,
        partition_leader_epoch=0,
    )


def plain(offset: int = 0) -> bytes:
    return build_batch(
        [SimpleRecord(b"plain", None, NOW)], base_offset=offset, partition_leader_epoch=0
    )


def leader_log(tmp_path, name: str, appends, config: LogConfig | None = None) -> Log:
    """A leader that appended `appends` ((batch, origin) pairs) one request at a time."""
    log = Log.open(tmp_path / name, config, now_ms=NOW)
    for batch, origin in appends:
        log.append_as_leader(batch, 0, NOW, origin=origin)
    log.update_high_watermark(log.log_end_offset)
    return log


def follower_copy(tmp_path, name: str, leader: Log, chunk_batches: int) -> Log:
    """A follower that fetched the leader's log in chunks of `chunk_batches` batches."""
    follower = Log.open(tmp_path / name, leader.config, now_ms=NOW)
    batches = [bytes(b.data) for b in iter_batches(bytes(leader.read(0, 1 << 30).records))]
    for start in range(0, len(batches), chunk_batches):
        follower.append_as_follower(b"".join(batches[start : start + chunk_batches]), NOW)
    follower.update_high_watermark(follower.log_end_offset)
    return follower


C, D = AppendOrigin.CLIENT, AppendOrigin.COORDINATOR


def test_one_follower_append_indexes_every_abort_of_several_producers(tmp_path):
    """The issue's reproduction: producer 1 at 0-2, producer 2 at 3-5, ABORT of 2 at 6,
    ABORT of 1 at 7, in one follower append. Before the fix the index kept only one."""
    chunk = (
        data(1, 3, 0, offset=0)
        + data(2, 3, 0, offset=3)
        + marker(2, ABORT, offset=6)
        + marker(1, ABORT, offset=7)
    )
    one = Log.open(tmp_path / "one-append", now_ms=NOW)
    one.append_as_follower(chunk, NOW)
    four = Log.open(tmp_path / "four-appends", now_ms=NOW)
    for batch in iter_batches(chunk):
        four.append_as_follower(bytes(batch.data), NOW)
    for log in (one, four):
        log.update_high_watermark(log.log_end_offset)
    expected = [AbortedTxn(2, 3, 6, 0), AbortedTxn(1, 0, 7, 8)]
    assert aborted_view(four) == expected
    assert aborted_view(one) == expected
    assert one.collect_aborted_transactions(0, 8) == expected
    for log in (one, four):
        check_log_consistent(log)
        log.close()


def test_followers_index_what_the_leader_indexed_whatever_their_chunks(tmp_path):
    """Every replica holds the same entries, LSO included: a transaction begun after a marker
    in the same chunk does not lower that marker's LSO (the leader never saw it yet)."""
    appends = [
        (data(1, 2, 0), C),  # 0-1
        (data(2, 1, 0), C),  # 2
        (marker(1, ABORT), D),  # 3: producer 2's txn from 2 still open -> LSO 2
        (plain(), C),  # 4
        (data(3, 1, 0), C),  # 5
        (marker(2, ABORT), D),  # 6: producer 3's txn from 5 open -> LSO 5
        (data(1, 1, 2), C),  # 7
        (marker(3, ABORT), D),  # 8: producer 1's txn from 7 open -> LSO 7
        (plain(), C),  # 9
        (data(2, 2, 1), C),  # 10-11
        (marker(1, ABORT), D),  # 12: LSO 10 (producer 2, begun before the marker)
        (marker(2, COMMIT), D),  # 13
        (data(3, 1, 1), C),  # 14
        (marker(3, ABORT), D),  # 15: nothing open -> LSO 16
    ]
    leader = leader_log(tmp_path, "leader", appends)
    expected = aborted_view(leader)
    assert [(a.producer_id, a.last_offset, a.last_stable_offset) for a in expected] == [
        (1, 3, 2),
        (2, 6, 5),
        (3, 8, 7),
        (1, 12, 10),
        (3, 15, 16),
    ]
    check_log_consistent(leader)
    for chunk in (1, 2, 3, 5, len(appends)):
        follower = follower_copy(tmp_path, f"follower-{chunk}", leader, chunk)
        assert aborted_view(follower) == expected, f"chunks of {chunk} batches"
        assert producer_view(follower.producer_state) == producer_view(leader.producer_state)
        check_log_consistent(follower, f"chunks of {chunk}")
        follower.close()
    leader.close()


def test_follower_chunks_across_segment_rolls(tmp_path):
    config = LogConfig.from_properties({"segment.bytes": 400, "index.interval.bytes": 1})
    appends = []
    for round_ in range(12):
        for pid in (1, 2, 3):
            appends.append((data(pid, 2, 2 * round_), C))
        for pid in (3, 1, 2):
            appends.append((marker(pid, ABORT if (pid + round_) % 2 else COMMIT), D))
    leader = leader_log(tmp_path, "leader", appends, config)
    assert len(leader.segments) > 3 and len(aborted_view(leader)) == 18
    for chunk in (4, 7, len(appends)):
        follower = follower_copy(tmp_path, f"follower-{chunk}", leader, chunk)
        assert aborted_view(follower) == aborted_view(leader), f"chunks of {chunk}"
        check_log_consistent(follower)
        follower.close()
    leader.close()


def test_the_txn_index_refuses_an_entry_out_of_order(tmp_path):
    """Kafka's TransactionIndex.append throws rather than drop an entry silently."""
    log = leader_log(tmp_path, "t-0", [(data(1, 1, 0), C), (marker(1, ABORT), D)])
    index = log.active_segment.txn_index
    with pytest.raises(ValueError, match="must increase"):
        index.append(AbortedTxn(9, 0, 0, 0))
    log.close()


def test_replay_puts_back_an_index_entry_lost_in_the_middle(tmp_path):
    """A txn index written before the fix may miss an entry below its last one; a replay of
    the batches (load without a usable snapshot, truncation) puts it back in its place."""
    appends = [
        (data(1, 1, 0), C),
        (marker(1, ABORT), D),  # 1
        (data(2, 1, 0), C),
        (marker(2, ABORT), D),  # 3
        (data(3, 1, 0), C),
        (marker(3, ABORT), D),  # 5
    ]
    log = leader_log(tmp_path, "t-0", appends)
    complete = aborted_view(log)
    log.close()
    index = log.active_segment.txn_index
    (tmp_path / "t-0" / index.path.name).write_bytes(complete[2].to_bytes())
    for snapshot in (tmp_path / "t-0").glob("*.snapshot"):
        snapshot.unlink()  # the repair: no snapshot, so the load replays every batch
    reopened = Log.open(tmp_path / "t-0", now_ms=NOW)
    reopened.update_high_watermark(reopened.log_end_offset)
    assert aborted_view(reopened) == complete
    check_log_consistent(reopened)
    reopened.close()


def transactional_leader(tmp_path, name: str = "t-0") -> Log:
    """Transactional and idempotent producers over several segments (snapshots at rolls)."""
    config = LogConfig.from_properties({"segment.bytes": 500, "index.interval.bytes": 1})
    log = Log.open(tmp_path / name, config, now_ms=NOW)
    for round_ in range(8):
        log.append_as_leader(data(1, 2, 2 * round_), 0, NOW)
        log.append_as_leader(data(7, 1, round_, txn=False), 0, NOW)  # idempotent only
        log.append_as_leader(data(2, 1, round_), 0, NOW)
        kind = ABORT if round_ % 3 else COMMIT
        log.append_as_leader(marker(1, kind), 0, NOW, origin=D)
        if round_ % 2:
            log.append_as_leader(marker(2, ABORT), 0, NOW, origin=D)
    log.update_high_watermark(log.log_end_offset)
    assert len(log.producer_state.snapshot_offsets) >= 2
    return log


@pytest.mark.parametrize("cut_back", [1, 3, 7, 12, 20])
def test_truncation_keeps_hw_below_log_end_and_rebuilds_producer_state(tmp_path, cut_back):
    """A returning leader cuts records nobody else got. Before the fix `truncate_to` passed the
    log where the time goes: TypeError, producer state cleared, HW left above the log end."""
    log = transactional_leader(tmp_path)
    target = log.log_end_offset - cut_back
    assert log.truncate_to(target, NOW)
    assert log.log_end_offset <= target
    assert log.high_watermark <= log.log_end_offset
    check_log_consistent(log)
    # and the log goes on: the producers continue from the state the truncation rebuilt
    follower_end = log.log_end_offset
    log.close()
    reopened = Log.open(tmp_path / "t-0", log.config, now_ms=NOW)
    reopened.update_high_watermark(reopened.log_end_offset)
    assert reopened.log_end_offset == follower_end
    check_log_consistent(reopened)
    reopened.close()


def test_truncation_then_catch_up_equals_the_new_leader(tmp_path):
    """The old leader truncates to the new leader's end and fetches the rest: same txn index
    and producer state as the new leader."""
    new_leader = transactional_leader(tmp_path, "new-leader")
    new_end = new_leader.log_end_offset
    old_leader = follower_copy(tmp_path, "old-leader", new_leader, 3)
    # the old leader had appended more that no follower got
    old_leader.append_as_leader(data(2, 3, 8), 1, NOW)
    old_leader.append_as_leader(marker(2, ABORT), 1, NOW, origin=D)
    old_leader.append_as_leader(data(1, 1, 16), 1, NOW)
    new_leader.epoch_cache.assign(2, new_end)
    new_leader.append_as_leader(data(3, 2, 0), 2, NOW)
    new_leader.append_as_leader(marker(3, ABORT), 2, NOW, origin=D)
    new_leader.update_high_watermark(new_leader.log_end_offset)
    assert old_leader.truncate_to(new_end, NOW)
    rest = bytes(new_leader.read(new_end, 1 << 30).records)
    old_leader.append_as_follower(rest, NOW)
    old_leader.update_high_watermark(old_leader.log_end_offset)
    assert aborted_view(old_leader) == aborted_view(new_leader)
    assert producer_view(old_leader.producer_state) == producer_view(new_leader.producer_state)
    check_log_consistent(old_leader)
    old_leader.close()
    new_leader.close()


def test_truncation_keeps_a_transaction_decided_above_the_high_watermark_unstable(tmp_path):
    """A transaction whose marker is above the HW is still unstable (its records must not
    reach read_committed consumers). A snapshot taken above the HW cannot hold it, so the
    truncation reloads from one at or below the HW and replays the rest."""
    config = LogConfig.from_properties({"segment.bytes": 200, "index.interval.bytes": 1})
    log = Log.open(tmp_path / "t-0", config, now_ms=NOW)
    log.append_as_leader(data(1, 1, 0), 0, NOW)  # 0
    log.append_as_leader(marker(1, COMMIT), 0, NOW, origin=D)  # 1
    for i in range(8):
        log.append_as_leader(data(7, 1, i, txn=False), 0, NOW)
    assert [o for o in log.producer_state.snapshot_offsets if o > 1], "snapshots above the HW"
    assert log.high_watermark == 0 and log.last_stable_offset == 0
    assert log.producer_state.first_unstable_offset() == 0
    assert log.truncate_to(log.log_end_offset - 1, NOW)
    assert log.producer_state.first_unstable_offset() == 0
    check_log_consistent(log)
    log.update_high_watermark(log.log_end_offset)
    assert log.producer_state.first_unstable_offset() is None
    log.close()
