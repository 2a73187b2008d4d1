"""DeltaTopicTable on a local path: exactly-once appends (one commit for many partitions, app
transactions, retries skipped, conflicts fenced, concurrent leaders of other partitions both
committing), record-identical reads with file pruning, timestamps, retention that never splits
a batch, epochs and producer states for followers, drop, maintenance."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import threading
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from sparklog.records.batch import iter_batches
from sparklog.records.builder import SimpleRecord, build_batch
from sparklog.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from sparklog.storage import delta_sync
from sparklog.storage.remote import schema as schema_module
from sparklog.storage.remote.schema import app_id
from sparklog.storage.remote.table import DeltaTopicTable
from sparklog.storage.remote.tier import (
    FencedUploadError,
    RemoteStorageError,
    SegmentUpload,
)
from sparklog.storage.txn_index import AbortedTxn

from .test_codec import random_batches

TOPIC_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")
DAY_MS = 86_400_000
T0 = 1_700_000_000_000


def batch(
    base: int, count: int, *, ts: int = T0, epoch: int = 0, pid: int = -1, seq: int = -1, **kw
) -> bytes:
    records = [
        SimpleRecord(f"v{base + i}".encode(), f"k{i}".encode(), ts + i) for i in range(count)
    ]
    return build_batch(
        records,
        base_offset=base,
        partition_leader_epoch=epoch,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq,
        **kw,
    )


def upload(partition: int, batches: list[bytes], **kw) -> SegmentUpload:
    first = next(iter_batches(batches[0])).header.base_offset
    last = list(iter_batches(batches[-1]))[-1].header.last_offset
    return SegmentUpload(partition, first, last + 1, b"".join(batches), **kw)


@pytest.fixture
def table(tmp_path, monkeypatch) -> DeltaTopicTable:
    monkeypatch.setattr(schema_module, "ROW_GROUP_BYTES", 1)  # the smallest row groups
    return DeltaTopicTable(str(tmp_path / "tier"), "orders", TOPIC_ID)


def test_one_commit_for_many_partitions_with_an_app_transaction_each(table, tmp_path):
    version = table.append([upload(0, [batch(0, 5), batch(5, 5)]), upload(3, [batch(100, 2)])])
    assert version == 1
    assert table.copied_end_offset(0) == 10 and table.copied_end_offset(3) == 102
    assert table.copied_end_offset(1) is None
    assert table.start_offset(0) == 0 and table.start_offset(3) == 100
    commit = (tmp_path / "tier/orders/_delta_log/00000000000000000001.json").read_text()
    actions = [json.loads(line) for line in commit.splitlines()]
    txns = {a["txn"]["appId"]: a["txn"]["version"] for a in actions if "txn" in a}
    assert txns == {app_id(TOPIC_ID, 0): 10, app_id(TOPIC_ID, 3): 102}
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert json.loads(info["userMetadata"])["sparklog.ranges"] == {"0": [0, 10], "3": [100, 102]}
    # another process sees it; the table stays at protocol (1, 2)
    other = DeltaTopicTable(str(tmp_path / "tier"), "orders", TOPIC_ID)
    assert other.copied_end_offset(3) == 102
    assert (other._dt.protocol().min_reader_version, other._dt.protocol().min_writer_version) == (
        1,
        2,
    )


def test_a_retry_is_skipped_and_a_conflicting_copy_is_fenced(table):
    first = upload(0, [batch(0, 5)])
    table.append([first])
    assert table.append([first]) is None  # a retry: nothing written
    version = table._dt.version()
    with pytest.raises(FencedUploadError, match="holds offsets up to 5"):
        table.append([upload(0, [batch(3, 4)])])  # a zombie leader's overlapping copy
    assert table._dt.version() == version
    # a retry riding with a new partition: only the new one is written
    assert table.append([first, upload(1, [batch(0, 1)])]) == version + 1
    assert table.read(0, 0, 1 << 20).records == batch(0, 5)


def test_a_table_of_another_topic_id_is_refused(table, tmp_path):
    table.append([upload(0, [batch(0, 1)])])
    with pytest.raises(RemoteStorageError, match="belongs to topic id 11111111.*delete.on.disable"):
        DeltaTopicTable(str(tmp_path / "tier"), "orders", uuid.uuid4())
    with pytest.raises(RemoteStorageError, match="No topic table"):
        DeltaTopicTable(str(tmp_path / "tier"), "other", create=False)


def copy_side_by_side(tables: list[DeltaTopicTable], rounds: int, size: int) -> None:
    """Table handle `p` copies partition `p`, `rounds` batches of `size` records, all handles
    committing at the same moments; raises the first error any of them met."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(tables))

    def copier(p: int) -> None:
        try:
            for k in range(rounds):
                barrier.wait(timeout=120)
                tables[p].append([upload(p, [batch(k * size, size)])])
        except BaseException as e:  # noqa: BLE001 - raised below
            errors.append(e)
            barrier.abort()  # the others stop waiting for a copier that is gone

    threads = [threading.Thread(target=copier, args=(p,)) for p in range(len(tables))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def test_concurrent_leaders_of_different_partitions_both_commit(tmp_path):
    root = str(tmp_path / "tier")
    DeltaTopicTable(root, "orders", TOPIC_ID)
    copy_side_by_side([DeltaTopicTable(root, "orders", TOPIC_ID) for _ in range(2)], 8, 3)
    check = DeltaTopicTable(root, "orders", TOPIC_ID)
    for p in range(2):
        assert check.copied_end_offset(p) == 24
        got = check.read(p, 0, 1 << 20).records
        assert got == b"".join(batch(k * 3, 3) for k in range(8))


def test_the_same_partition_from_two_copiers_commits_once(tmp_path):
    root = str(tmp_path / "tier")
    DeltaTopicTable(root, "orders", TOPIC_ID)
    a, b = (DeltaTopicTable(root, "orders", TOPIC_ID) for _ in range(2))
    outcomes: list[object] = []
    barrier = threading.Barrier(2)

    def copier(t: DeltaTopicTable, data: bytes) -> None:
        barrier.wait()
        try:
            outcomes.append(t.append([SegmentUpload(0, 0, 4, data)]))
        except FencedUploadError as e:
            outcomes.append(e)

    threads = [
        threading.Thread(target=copier, args=(a, batch(0, 4))),
        threading.Thread(target=copier, args=(b, batch(0, 4, ts=T0 + 1))),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # one wrote; the other was fenced or found the range there already
    assert sum(isinstance(o, int) for o in outcomes) == 1
    check = DeltaTopicTable(root, "orders", TOPIC_ID)
    assert check.copied_end_offset(0) == 4
    assert len(list(iter_batches(check.read(0, 0, 1 << 20).records))) == 1


def test_reads_return_whole_batches_from_the_one_holding_the_offset(table):
    batches = [batch(0, 5), batch(5, 5), batch(10, 5), batch(15, 5)]
    table.append([upload(0, batches[:2])])
    table.append([upload(0, batches[2:])])
    assert table.read(0, 7, 1 << 20).records == b"".join(batches[1:])
    assert table.read(0, 7, 1).records == batches[1]  # at least one batch past max_bytes
    two = len(batches[1]) + len(batches[2])
    assert table.read(0, 5, two).records == b"".join(batches[1:3])
    assert table.read(0, 0, 1 << 20, upper_bound_offset=10).records == b"".join(batches[:2])
    assert table.read(0, 20, 1 << 20).records == b""
    assert table.read(0, 12, 1 << 20, upper_bound_offset=10).records == b""
    assert table.read(1, 0, 1 << 20).records == b""


def test_a_batch_across_midnight_and_gaps_inside_batches_read_back_whole(table):
    across = build_batch(
        [SimpleRecord(b"a", None, T0 - 10), SimpleRecord(b"b", None, T0 + DAY_MS)],
        base_offset=0,
        offset_deltas=[0, 4],
    )
    after = batch(5, 2)
    table.append([upload(0, [across, after])])
    assert table.read(0, 3, 1).records == across  # 3 is in the batch's gap
    assert table.read(0, 4, 1 << 20).records == across + after


def test_many_random_uploads_read_back_record_identical(table):
    rng = random.Random(5)
    batches = random_batches(rng, 60)
    bounds = sorted(rng.sample(range(1, 60), 5))
    chunks = [batches[a:b] for a, b in zip([0, *bounds], [*bounds, 60], strict=True)]
    for chunk in chunks:
        up = upload(2, chunk)
        end = table.copied_end_offset(2)
        if end is not None:
            up = SegmentUpload(2, end, up.end_offset, up.records)
        table.append([up])
    everything = table.read(2, 0, 1 << 30).records
    assert everything == b"".join(batches) or [
        (b.header.base_offset, b.records()) for b in iter_batches(everything)
    ] == [(b.header.base_offset, b.records()) for b in iter_batches(b"".join(batches))]
    # every start offset gets the batch holding it first
    for b in iter_batches(b"".join(batches)):
        got = next(iter_batches(table.read(2, b.header.last_offset, 1).records))
        assert got.header.base_offset == b.header.base_offset


def test_offset_for_timestamp(table):
    table.append([upload(0, [batch(0, 3, ts=1000), batch(3, 3, ts=5000), batch(6, 2, ts=2000)])])
    assert table.offset_for_timestamp(0, 1001) == (1, 1001)
    assert table.offset_for_timestamp(0, 2000) == (3, 5000)  # the first offset, as Kafka
    assert table.offset_for_timestamp(0, 5003) is None
    assert table.offset_for_timestamp(0, -3) == (5, 5002)


def test_offset_for_timestamp_searches_from_the_log_start(table):
    """DeleteRecords moves the log start before the table drops the rows: the lookup starts
    there (Kafka's findOffsetByTimestamp from the log start offset)."""
    table.append([upload(0, [batch(0, 3, ts=1000), batch(3, 3, ts=5000), batch(6, 2, ts=2000)])])
    assert table.offset_for_timestamp(0, 1001, start_offset=2) == (2, 1002)
    assert table.offset_for_timestamp(0, 1001, start_offset=4) == (4, 5001)
    assert table.offset_for_timestamp(0, 5002, start_offset=6) is None
    assert table.offset_for_timestamp(0, -3, start_offset=6) == (7, 2001)
    assert table.offset_for_timestamp(0, -3, start_offset=8) is None
    assert table.offset_for_timestamp(0, 1001, start_offset=0) == (1, 1001)


def test_retention_removes_whole_batches_only(table):
    table.append([upload(0, [batch(0, 5, ts=1000), batch(5, 5, ts=2000)])])
    table.append([upload(0, [batch(10, 5, ts=3000)])])
    assert table.delete_before(0, 7) == 5  # the batch holding 7 stays whole
    assert table.read(0, 0, 1 << 20).records == batch(5, 5, ts=2000) + batch(10, 5, ts=3000)
    assert table.copied_end_offset(0) == 15  # retention does not move the copied end
    assert table.expire(0, retention_ms=2500, retention_bytes=-1, now_ms=4000) is None
    assert table.expire(0, retention_ms=500, retention_bytes=-1, now_ms=3000) == 10
    assert table.start_offset(0) == 10
    assert table.expire(0, retention_ms=-1, retention_bytes=0, now_ms=0) == 15
    assert table.start_offset(0) is None and table.read(0, 0, 100).records == b""
    assert (table._dt.protocol().min_reader_version, table._dt.protocol().min_writer_version) == (
        1,
        2,
    )


def test_epochs_and_producer_states_for_a_follower(table):
    table.append(
        [
            upload(
                0,
                [
                    batch(0, 2, epoch=1, pid=7, seq=0),
                    batch(2, 3, epoch=1, pid=8, seq=10),
                    batch(5, 2, epoch=3, pid=7, seq=2),
                    batch(7, 1, epoch=4),
                ],
            )
        ]
    )
    assert [(e.epoch, e.start_offset) for e in table.epochs(0, 8)] == [(1, 0), (3, 5), (4, 7)]
    assert [(e.epoch, e.start_offset) for e in table.epochs(0, 5)] == [(1, 0)]
    states = {s.producer_id: s for s in table.producer_states(0, 8)}
    assert (states[7].first_sequence, states[7].last_sequence, states[7].last_offset) == (2, 3, 6)
    assert (states[8].last_sequence, states[8].last_offset) == (12, 4)
    assert {s.producer_id: s.last_offset for s in table.producer_states(0, 5)} == {7: 1, 8: 4}


def test_read_committed_gets_the_aborted_transactions(table):
    data = batch(0, 3, pid=9, seq=0, is_transactional=True)
    marker = build_end_txn_marker_batch(
        EndTransactionMarker(ControlRecordType.ABORT, 0),
        producer_id=9,
        producer_epoch=0,
        timestamp_ms=T0,
        base_offset=3,
    )
    table.append([upload(0, [data, marker, batch(4, 1)], aborted=(AbortedTxn(9, 0, 3, 0),))])
    got = table.read(0, 1, 1 << 20, include_aborted=True)
    assert got.records == data + marker + batch(4, 1)
    assert [(t.producer_id, t.first_offset) for t in got.aborted or ()] == [(9, 0)]
    assert table.read(0, 4, 1 << 20, include_aborted=True).aborted == ()
    assert table.read(0, 0, 1 << 20).aborted is None


def test_each_aborted_transaction_of_a_producer_is_listed_on_its_own(table):
    """Two aborted transactions of one producer around a committed one: a read_committed
    consumer drops a producer's batches from an entry's first offset to the next ABORT marker,
    so the second needs an entry of its own (as a local transaction index lists it)."""

    def marker(kind, base):
        return build_end_txn_marker_batch(
            EndTransactionMarker(kind, 0),
            producer_id=9,
            producer_epoch=0,
            timestamp_ms=T0,
            base_offset=base,
        )

    txn = dict(pid=9, is_transactional=True)
    batches = [
        batch(0, 3, seq=0, **txn), marker(ControlRecordType.ABORT, 3),
        batch(4, 2, seq=3, **txn), marker(ControlRecordType.COMMIT, 6),
        batch(7, 2, seq=5, **txn), marker(ControlRecordType.ABORT, 9),
        batch(10, 2, seq=7, **txn),  # an open transaction's first batch
    ]  # fmt: skip
    aborted = (AbortedTxn(9, 0, 3, 0), AbortedTxn(9, 7, 9, 7))
    table.append([upload(0, batches, aborted=aborted)])
    got = table.read(0, 0, 1 << 20, include_aborted=True)
    assert [(t.first_offset, t.last_offset) for t in got.aborted or ()] == [(0, 3), (7, 9)]
    later = table.read(0, 7, 1 << 20, include_aborted=True)
    assert [(t.first_offset, t.last_offset) for t in later.aborted or ()] == [(7, 9)]


def test_drop_and_maintenance(table, tmp_path):
    for k in range(6):
        table.append([upload(0, [batch(k * 2, 2)])])
    table.maintain(vacuum_retention_hours=0)
    table.refresh()
    assert table.read(0, 0, 1 << 20).records == b"".join(batch(k * 2, 2) for k in range(6))
    table.drop()
    assert not (tmp_path / "tier/orders").exists()


def test_a_deleted_table_stops_copies_until_it_is_back(table, tmp_path):
    table.append([upload(0, [batch(0, 3)])])
    location = tmp_path / "tier/orders"
    shutil.move(location, tmp_path / "away")
    with pytest.raises(RemoteStorageError, match="is gone.*Local data is kept"):
        table.append([upload(0, [batch(3, 3)])])
    assert not location.exists()  # no headless log started
    shutil.move(tmp_path / "away", location)
    assert table.append([upload(0, [batch(3, 3)])]) == 2
    assert table.read(0, 0, 1 << 20).records == batch(0, 3) + batch(3, 3)


def test_a_cut_newest_commit_is_named_with_its_repair(table, tmp_path):
    table.append([upload(0, [batch(0, 3)])])
    table.append([upload(0, [batch(3, 3)])])
    commit = tmp_path / "tier/orders/_delta_log/00000000000000000002.json"
    os.truncate(commit, commit.stat().st_size // 2)
    with pytest.raises(RemoteStorageError, match=f"{commit}.* is cut.*To repair: move"):
        DeltaTopicTable(str(tmp_path / "tier"), "orders", TOPIC_ID)
    shutil.move(commit, tmp_path / "cut.json")
    reopened = DeltaTopicTable(str(tmp_path / "tier"), "orders", TOPIC_ID)
    assert reopened.copied_end_offset(0) == 3  # the copy resumes from there
    assert reopened.append([upload(0, [batch(3, 3)])]) == 2
    assert reopened.read(0, 0, 1 << 20).records == batch(0, 3) + batch(3, 3)


def _copy_in_another_process(root: str, partition: int, rounds: int) -> int:
    table = DeltaTopicTable(root, "orders", TOPIC_ID)
    for k in range(rounds):
        table.append([upload(partition, [batch(k * 2, 2)])])
    return table.copied_end_offset(partition) or 0


@pytest.mark.slow
def test_leaders_in_two_processes_commit_to_different_partitions(tmp_path):
    root = str(tmp_path / "tier")
    DeltaTopicTable(root, "orders", TOPIC_ID)
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=spawn) as pool:
        ends = list(pool.map(_copy_in_another_process, [root, root], [0, 1], [10, 10]))
    assert ends == [20, 20]
    check = DeltaTopicTable(root, "orders", TOPIC_ID)
    for p in (0, 1):
        assert check.read(p, 0, 1 << 20).records == b"".join(batch(k * 2, 2) for k in range(10))


def test_reads_stop_early_inside_files_of_many_row_groups(table):
    # 1024-row row groups: batches of 7 records straddle row-group boundaries
    batches = [batch(k * 7, 7) for k in range(600)]
    table.append([upload(0, batches[:300])])
    table.append([upload(0, batches[300:])])
    rng = random.Random(3)
    for _ in range(25):
        start = rng.randrange(600 * 7)
        max_bytes = rng.choice([1, 500, 5000, 40000])
        got = table.read(0, start, max_bytes).records
        first = start // 7
        want, size = [], 0
        for b in batches[first:]:
            if want and size + len(b) > max_bytes:
                break
            want.append(b)
            size += len(b)
        assert got == b"".join(want), (start, max_bytes)


def test_reads_after_compaction_match_the_batches(table):
    batches = [batch(k * 7, 7, ts=T0 + k * 3_600_000) for k in range(200)]  # across dates
    for a in range(0, 200, 40):
        table.append([upload(0, batches[a : a + 40])])
    files_before = len(table._partition(0))
    table.maintain(vacuum_retention_hours=0)
    table.refresh()
    assert len(table._partition(0)) < files_before
    rng = random.Random(4)
    for _ in range(20):
        start = rng.randrange(200 * 7)
        max_bytes = rng.choice([1, 3000, 20000])
        got = list(iter_batches(table.read(0, start, max_bytes).records))
        assert got[0].header.base_offset == start // 7 * 7
        assert b"".join(bytes(b.data) for b in got) == b"".join(
            batches[start // 7 : start // 7 + len(got)]
        )
        assert sum(len(b.data) for b in got) <= max_bytes or len(got) == 1


def test_reads_from_many_threads_while_the_leader_appends(table):
    batches = [batch(k * 5, 5) for k in range(60)]
    table.append([upload(0, batches[:10])])
    stop = threading.Event()
    problems: list[object] = []

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(30):  # bounded: the appends go on meanwhile
            if stop.is_set():
                return
            start = rng.randrange(50)
            try:
                got = table.read(0, start, rng.choice([1, 2000])).records
            except BaseException as e:  # noqa: BLE001 - asserted below
                problems.append(e)
                return
            first = start // 5
            if not got or not b"".join(batches[first:]).startswith(got):
                problems.append((start, len(got)))

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for a in range(10, 60, 10):
        table.append([upload(0, batches[a : a + 10])])
    stop.set()
    for t in threads:
        t.join()
    assert problems == []
    assert table.read(0, 0, 1 << 20).records == b"".join(batches)


def test_retention_on_one_partition_beside_copies_to_another(tmp_path):
    root = str(tmp_path / "tier")
    first = DeltaTopicTable(root, "orders", TOPIC_ID)
    first.append([upload(0, [batch(k * 2, 2) for k in range(20)])])
    other = DeltaTopicTable(root, "orders", TOPIC_ID)  # another broker, leading partition 1
    errors: list[BaseException] = []

    def copier() -> None:
        try:
            for k in range(8):
                other.append([upload(1, [batch(k * 2, 2)])])
        except BaseException as e:  # noqa: BLE001 - asserted below
            errors.append(e)

    thread = threading.Thread(target=copier)
    thread.start()
    for cut in range(4, 40, 5):
        first.delete_before(0, cut)
    thread.join()
    assert errors == []
    first.refresh()
    assert first.start_offset(0) == 38 and first.copied_end_offset(1) == 16
    assert first.read(1, 0, 1 << 20).records == b"".join(batch(k * 2, 2) for k in range(8))


def test_a_commit_and_its_data_files_are_on_disk_before_append_returns(
    table, tmp_path, monkeypatch
):
    synced: list[Path] = []
    real = delta_sync._fsync

    def recording(path: Path, directory: bool = False) -> None:
        synced.append(Path(path))
        real(path, directory)

    monkeypatch.setattr(delta_sync, "_fsync", recording)
    table.append([upload(0, [batch(0, 3)]), upload(1, [batch(0, 2)])])
    location = tmp_path / "tier/orders"
    commit = location / "_delta_log/00000000000000000001.json"
    data = [p for p in synced if p.suffix == ".parquet"]
    assert len(data) == 2  # one file per partition
    assert max(synced.index(p) for p in data) < synced.index(commit)
    assert synced.index(commit) < synced.index(location / "_delta_log")


def test_a_stale_handle_catches_up_to_read_what_another_broker_copied(table, tmp_path):
    table.append([upload(0, [batch(0, 3)])])
    reader = DeltaTopicTable(str(tmp_path / "tier"), "orders", TOPIC_ID)  # another broker
    assert reader.read(0, 0, 1 << 20).records == batch(0, 3)
    table.append([upload(0, [batch(3, 3)])])
    assert reader.read(0, 3, 1 << 20).records == batch(3, 3)
    table.maintain(vacuum_retention_hours=0)  # the files the reader knows are gone
    assert reader.read(0, 0, 1 << 20).records == batch(0, 3) + batch(3, 3)


def test_maintenance_runs_by_itself_every_n_commits(tmp_path):
    table = DeltaTopicTable(str(tmp_path / "tier"), "orders", TOPIC_ID, maintenance_commits=3)
    for k in range(3):
        table.append([upload(0, [batch(k * 2, 2)])])
    table.wait_for_maintenance()
    log = tmp_path / "tier/orders/_delta_log"
    assert (log / "_last_checkpoint").exists()
    table.refresh()
    assert len(table._partition(0)) == 1  # compacted
    assert table.copied_end_offset(0) == 6  # the app transactions stay
    assert table.read(0, 0, 1 << 20).records == b"".join(batch(k * 2, 2) for k in range(3))


def test_deltas_app_transaction_check_fences_a_copier_with_a_stale_view(tmp_path, monkeypatch):
    root = str(tmp_path / "tier")
    zombie = DeltaTopicTable(root, "orders", TOPIC_ID)
    leader = DeltaTopicTable(root, "orders", TOPIC_ID)
    leader.append([upload(0, [batch(0, 4)]), upload(1, [batch(0, 1)])])
    # the zombie's look at the table happens before the new leader's commit
    monkeypatch.setattr(zombie, "refresh", lambda: None)
    with pytest.raises(FencedUploadError, match="first for orders-0"):
        zombie.append([upload(0, [batch(0, 4, ts=T0 + 9)])])
    # a stale view of other partitions is no conflict: the commit retries and lands
    assert zombie.append([upload(2, [batch(0, 1)])]) is not None
    leader.refresh()
    assert leader.read(0, 0, 1 << 20).records == batch(0, 4)
    assert leader.copied_end_offset(2) == 1
