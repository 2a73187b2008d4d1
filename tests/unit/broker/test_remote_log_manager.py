"""The remote log manager's rounds against an in-memory TopicTable (the Protocol; the Delta
table's own behaviour is tested with the real table in tests/integration)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

import pytest

from sparklog.broker.remote_log_manager import (
    RemoteLogManager,
    TieredPartition,
    TopicState,
)
from sparklog.broker.remote_tables import RemoteTables
from sparklog.records import SimpleRecord, build_batch, iter_batches
from sparklog.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from sparklog.storage.config import LogConfig
from sparklog.storage.log import Log
from sparklog.storage.producer_append_info import AppendOrigin
from sparklog.storage.remote.config import RemoteLogManagerConfig
from sparklog.storage.remote.tier import (
    FencedUploadError,
    RemoteRead,
    RemoteStorageError,
    SegmentUpload,
)

NOW = 1_700_000_000_000
TOPIC_ID = uuid.uuid4()


class MemoryTable:
    """TopicTable in memory: per partition a list of uploads."""

    def __init__(self, location: str, topic: str, topic_id: uuid.UUID) -> None:
        self.location, self.topic, self.topic_id = location, topic, topic_id
        self.uploads: dict[int, list[SegmentUpload]] = {}
        self.commits = 0
        self.dropped = False
        self.broken = False

    def refresh(self) -> None:
        if self.broken:
            raise RemoteStorageError("table unreachable")

    def copied_end_offset(self, partition: int) -> int | None:
        got = self.uploads.get(partition)
        return got[-1].end_offset if got else None

    def start_offset(self, partition: int) -> int | None:
        got = self.uploads.get(partition)
        return got[0].start_offset if got else None

    def append(self, uploads: Sequence[SegmentUpload]) -> int | None:
        if self.broken:
            raise RemoteStorageError("table unreachable")
        for u in uploads:
            end = self.copied_end_offset(u.partition)
            if end is not None and end != u.start_offset:
                raise FencedUploadError(f"partition {u.partition} ends at {end}")
        for u in uploads:
            self.uploads.setdefault(u.partition, []).append(u)
        self.commits += 1
        return self.commits

    def offsets(self, partition: int) -> list[int]:
        return [
            r.offset
            for u in self.uploads.get(partition, [])
            for b in iter_batches(u.records)
            for r in b.records()
        ]

    def read(self, partition, start_offset, max_bytes, **kw) -> RemoteRead:
        raise NotImplementedError

    def offset_for_timestamp(self, partition, timestamp, *, start_offset=0):
        raise NotImplementedError

    def delete_before(self, partition: int, offset: int) -> int:
        got = self.uploads.get(partition, [])
        while got and got[0].end_offset <= offset:
            got.pop(0)
        return got[0].start_offset if got else offset

    def expire(self, partition, *, retention_ms, retention_bytes, now_ms):
        got = self.uploads.get(partition, [])
        dropped = False
        while retention_bytes >= 0 and got and sum(len(u.records) for u in got) > retention_bytes:
            got.pop(0)
            dropped = True
        if not dropped:
            return None
        return got[0].start_offset if got else self.copied_end_offset(partition)

    def epochs(self, partition, end_offset):
        return []

    def producer_states(self, partition, end_offset):
        return []

    def drop(self) -> None:
        self.dropped = True
        self.uploads.clear()


class Opener:
    def __init__(self) -> None:
        self.tables: dict[str, MemoryTable] = {}

    def __call__(
        self,
        root: str,
        topic: str,
        topic_id: uuid.UUID,
        *,
        storage_options: Mapping,
        create: bool = True,
    ) -> MemoryTable:
        location = f"{root}/{topic}"
        table = self.tables.get(location)
        if table is None or table.topic_id != topic_id:
            table = self.tables[location] = MemoryTable(location, topic, topic_id)
        return table


def tiered_log(path, **props: object) -> Log:
    config = LogConfig.from_properties(
        {"segment.bytes": 300, "index.interval.bytes": 1, "remote.storage.enable": True, **props}
    )
    return Log.open(path, config, now_ms=NOW, remote_storage_system_enable=True)


def produce(log: Log, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        log.append_as_leader(build_batch([SimpleRecord(b"v%03d" % i, None, NOW)]), 0, NOW)
    log.update_high_watermark(log.log_end_offset)


@pytest.fixture
def opener() -> Opener:
    return Opener()


def manager(opener: Opener, **props: object) -> RemoteLogManager:
    config = RemoteLogManagerConfig(
        remote_log_storage_system_enable=True,
        remote_table_root="/tables",
        remote_log_manager_task_interval_ms=1000,
        **props,  # type: ignore[arg-type]
    )
    return RemoteLogManager(config, RemoteTables("/tables", opener=opener), now_ms=NOW)


def part(log: Log, p: int = 0, *, leader: bool = True, epoch: int = 0) -> TieredPartition:
    return TieredPartition("t", p, TOPIC_ID, log, leader, epoch)


def test_leader_copies_closed_segments_of_all_partitions_in_one_commit(tmp_path, opener):
    logs = [tiered_log(tmp_path / f"t-{p}") for p in range(3)]
    for log in logs:
        produce(log, 20)
    rlm = manager(opener)
    stats = rlm.run_round([part(log, p) for p, log in enumerate(logs)], NOW)
    table = opener.tables["/tables/t"]
    assert stats.commits == table.commits == 1
    for p, log in enumerate(logs):
        closed_end = log.active_segment.base_offset
        assert table.offsets(p) == list(range(closed_end))
        assert log.highest_offset_in_remote_storage == closed_end - 1


def test_follower_never_copies_but_learns_the_copied_end(tmp_path, opener):
    leader_log, follower_log = (
        tiered_log(tmp_path / "a" / "t-0"),
        tiered_log(tmp_path / "b" / "t-0"),
    )
    produce(leader_log, 20)
    produce(follower_log, 20)
    rlm_leader, rlm_follower = manager(opener), manager(opener)
    rlm_follower.run_round([part(follower_log, leader=False)], NOW)
    assert opener.tables["/tables/t"].commits == 0
    rlm_leader.run_round([part(leader_log)], NOW)
    rlm_follower.run_round([part(follower_log, leader=False)], NOW + 1000)
    assert (
        follower_log.highest_offset_in_remote_storage == leader_log.active_segment.base_offset - 1
    )


def test_freshness_copies_the_stable_prefix_of_the_active_segment(tmp_path, opener):
    log = tiered_log(tmp_path / "t-0", **{"remote.table.freshness.ms": 100})
    produce(log, 20)
    rlm = manager(opener)
    rlm.run_round([part(log)], NOW)
    assert opener.tables["/tables/t"].offsets(0) == list(range(20))
    produce(log, 3, start=20)
    log.update_high_watermark(21)  # offset 22 not replicated yet
    assert rlm.run_round([part(log)], NOW + 50).commits == 0  # not due yet
    rlm.run_round([part(log)], NOW + 100)
    assert opener.tables["/tables/t"].offsets(0) == list(range(21))


def test_rounds_continue_from_the_table_without_gaps_or_duplicates(tmp_path, opener):
    old, new = tiered_log(tmp_path / "a" / "t-0"), tiered_log(tmp_path / "b" / "t-0")
    produce(old, 20)
    produce(new, 30)  # the new leader has more
    manager(opener).run_round([part(old)], NOW)
    manager(opener).run_round([part(new, epoch=1)], NOW)
    assert opener.tables["/tables/t"].offsets(0) == list(range(new.active_segment.base_offset))


def test_fenced_upload_retries_from_what_the_table_says(tmp_path, opener):
    log = tiered_log(tmp_path / "t-0")
    produce(log, 20)
    rlm = manager(opener)
    table = opener("/tables", "t", TOPIC_ID, storage_options={})
    real_append = table.append
    calls = []

    def race(uploads):
        if not calls:  # another copier commits the first upload first
            calls.append(1)
            real_append([uploads[0]])
        return real_append(uploads)

    table.append = race  # type: ignore[method-assign]
    assert rlm.run_round([part(log)], NOW).fenced == 1
    rlm.run_round([part(log)], NOW + 1)
    assert table.offsets(0) == list(range(log.active_segment.base_offset))


def test_storage_error_backs_off_and_local_retention_keeps_uncopied(tmp_path, opener, caplog):
    log = tiered_log(tmp_path / "t-0", **{"local.retention.ms": 1})
    produce(log, 20)
    table = opener("/tables", "t", TOPIC_ID, storage_options={})
    table.broken = True
    rlm = manager(opener, remote_log_manager_task_retry_backoff_ms=100)
    assert rlm.run_round([part(log)], NOW).failed_topics == ["t"]
    assert rlm.run_round([part(log)], NOW + 50).failed_topics == []  # backing off
    assert rlm.run_round([part(log)], NOW + 100).failed_topics == ["t"]
    assert sum("remote tier of t failed" in r.message for r in caplog.records) == 1
    assert log.delete_old_segments(NOW + 10_000) == 0
    table.broken = False
    rlm.run_round([part(log)], NOW + 10_000)
    assert log.delete_old_segments(NOW + 10_000) > 0
    assert log.log_start_offset == 0 < log.local_log_start_offset


def test_aborted_transactions_travel_with_the_range(tmp_path, opener):
    log = tiered_log(tmp_path / "t-0", **{"remote.table.freshness.ms": 0})
    pid = 7
    txn = build_batch(
        [SimpleRecord(b"x", None, NOW)],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    log.append_as_leader(txn, 0, NOW)
    marker = build_end_txn_marker_batch(
        EndTransactionMarker(ControlRecordType.ABORT, 0),
        producer_id=pid,
        producer_epoch=0,
        timestamp_ms=NOW,
    )
    log.append_as_leader(marker, 0, NOW, origin=AppendOrigin.COORDINATOR)
    produce(log, 2)
    manager(opener).run_round([part(log)], NOW)
    (upload,) = opener.tables["/tables/t"].uploads[0]
    assert upload.end_offset == 4
    assert [(a.producer_id, a.first_offset) for a in upload.aborted] == [(pid, 0)]


def test_copy_disable_stops_copies(tmp_path, opener):
    log = tiered_log(tmp_path / "t-0", **{"remote.log.copy.disable": True})
    produce(log, 20)
    manager(opener).run_round([part(log)], NOW)
    assert opener("/tables", "t", TOPIC_ID, storage_options={}).commits == 0


def test_retention_bytes_expires_table_and_moves_log_start(tmp_path, opener):
    props = {"retention.bytes": 500, "local.retention.bytes": 100, "remote.table.freshness.ms": 0}
    log = tiered_log(tmp_path / "t-0", **props)
    rlm = manager(opener)
    for i in range(10):  # one upload per round
        produce(log, 3, start=3 * i)
        rlm.run_round([part(log)], NOW + 100 * i)
    log.delete_old_segments(NOW)
    rlm.run_round([part(log)], NOW + 10_000)
    table = opener.tables["/tables/t"]
    assert table.start_offset(0) is not None
    assert 0 < log.log_start_offset == table.start_offset(0) <= log.local_log_start_offset
    assert table.offsets(0) == list(range(log.log_start_offset, log.log_end_offset))


def test_delete_records_applies_to_the_table(tmp_path, opener):
    log = tiered_log(tmp_path / "t-0", **{"remote.table.freshness.ms": 0})
    rlm = manager(opener)
    for i in range(4):  # uploads [0, 3) [3, 6) [6, 9) [9, 12)
        produce(log, 3, start=3 * i)
        rlm.run_round([part(log)], NOW + 100 * i)
    log.delete_records_before(7)
    table = opener.tables["/tables/t"]
    calls = []
    real = table.delete_before
    table.delete_before = lambda p, o: calls.append(o) or real(p, o)  # type: ignore[method-assign]
    rlm.run_round([part(log)], NOW + 10_000)
    assert table.start_offset(0) == 6  # the upload holding 7 stays
    rlm.run_round([part(log)], NOW + 20_000)
    assert calls == [7]  # asked once per log start, not every round


def test_topic_deleted_or_disabled_drops_the_table(tmp_path, opener):
    log = tiered_log(tmp_path / "t-0")
    produce(log, 20)
    rlm = manager(opener)
    rlm.on_topics({"t": TopicState(TOPIC_ID, True, False, True)})
    rlm.run_round([part(log)], NOW)
    table = opener.tables["/tables/t"]
    rlm.on_topics({})
    assert rlm.run_round([], NOW + 1).dropped_tables == ["t"] and table.dropped

    other = manager(opener)
    other.on_topics({"u": TopicState(TOPIC_ID, True, False, True)})
    other.on_topics({"u": TopicState(TOPIC_ID, False, False, True)})  # kept
    assert other.run_round([], NOW).dropped_tables == []
    other.on_topics({"u": TopicState(TOPIC_ID, True, True, True)})
    other.on_topics({"u": TopicState(TOPIC_ID, False, True, True)})
    assert other.run_round([], NOW).dropped_tables == ["u"]


def test_copy_byte_rate_limits_a_round(tmp_path, opener):
    logs = [tiered_log(tmp_path / f"t-{p}") for p in range(3)]
    for log in logs:
        produce(log, 20)
    rlm = manager(opener, remote_log_manager_copy_max_bytes_per_second=200)
    stats = rlm.run_round([part(log, p) for p, log in enumerate(logs)], NOW)
    assert 0 < stats.copied_bytes < sum(log.active_segment.base_offset for log in logs) * 60


def test_maintenance_runs_now_and_then_by_the_leader_of_partition_zero(
    tmp_path, opener, monkeypatch
):
    from sparklog.broker import remote_log_manager

    monkeypatch.setattr(remote_log_manager, "MAINTAIN_EVERY_COMMITS", 2)
    log = tiered_log(tmp_path / "t-0", **{"remote.table.freshness.ms": 0})
    rlm = manager(opener)
    rlm.on_topics({"t": TopicState(TOPIC_ID, True, False, True)})
    table = opener("/tables", "t", TOPIC_ID, storage_options={})
    runs = []
    table.maintain = lambda: runs.append(1) or {}  # type: ignore[attr-defined]
    for i in range(4):
        produce(log, 1, start=i)
        rlm.run_round([part(log)], NOW + 100 * i)
    assert len(runs) == 2


def test_copies_stop_at_the_last_stable_offset(tmp_path, opener):
    log = tiered_log(tmp_path / "t-0", **{"remote.table.freshness.ms": 0})
    produce(log, 3)
    txn = build_batch(
        [SimpleRecord(b"open", None, NOW)],
        producer_id=9,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    log.append_as_leader(txn, 0, NOW)
    produce(log, 2, start=4)
    assert log.last_stable_offset == 3
    manager(opener).run_round([part(log)], NOW)
    assert opener.tables["/tables/t"].offsets(0) == [0, 1, 2]


def test_the_manager_sleeps_an_interval_when_nothing_is_tiered(tmp_path, opener):
    rlm = manager(opener)
    log = tiered_log(tmp_path / "t-0")
    rlm.run_round([part(log)], NOW)
    assert rlm.next_due_ms(NOW) == NOW + 1000
    rlm.run_round([], NOW + 2000)  # the partition left
    assert rlm.next_due_ms(NOW + 2000) == NOW + 3000


def test_delete_records_past_the_copied_end_skips_the_deleted_offsets(tmp_path, opener):
    log = tiered_log(tmp_path / "t-0", **{"remote.table.freshness.ms": 0})
    rlm = manager(opener)
    produce(log, 5)
    rlm.run_round([part(log)], NOW)
    produce(log, 10, start=5)
    log.delete_records_before(9)  # [5, 9) never reach the table
    rlm.run_round([part(log)], NOW + 100)
    table = opener.tables["/tables/t"]
    assert table.copied_end_offset(0) == 15
    assert table.offsets(0) == list(range(9, 15))  # copied, then trimmed to the log start
