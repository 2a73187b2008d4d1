"""Log compaction: what a clean keeps, transactions, scheduling, crashes, concurrency."""

from __future__ import annotations

import random
import shutil
import threading
import time

import pytest

from sparklog.errors import IllegalStateTransition
from sparklog.records import (
    ControlRecordType,
    EndTransactionMarker,
    RecordBatch,
    SimpleRecord,
    TimestampType,
    build_batch,
    build_end_txn_marker_batch,
    iter_batches,
)
from sparklog.records.compression import CompressionType
from sparklog.storage.checkpoint import OffsetCheckpointFile
from sparklog.storage.cleaner import Cleaner, CleanerConfig, group_segments_by_size
from sparklog.storage.cleaner_manager import (
    CLEANER_CHECKPOINT_FILE,
    CleanerManager,
    LogCleaningAbortedError,
    LogToClean,
    cleanable_offsets,
)
from sparklog.storage.config import LogConfig
from sparklog.storage.log import Log
from sparklog.storage.log_cleaner import LogCleaner
from sparklog.storage.offset_map import OffsetMap

NOW = 1_700_000_000_000
HOUR_MS = 3_600_000
TP = ("t", 0)


# -- helpers ----------------------------------------------------------------------------------


def compact_config(**props) -> LogConfig:
    base = {
        "segment.bytes": 400,
        "index.interval.bytes": 1,
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": 0.0,
    }
    return LogConfig.from_properties({**base, **props})


def open_log(tmp_path, **props) -> Log:
    return Log.open(tmp_path / "t-0", compact_config(**props), now_ms=NOW)


def put(log: Log, key: bytes | None, value: bytes | None, ts: int = NOW, **batch_kw) -> int:
    """Append one record; returns its offset."""
    data = build_batch([SimpleRecord(value, key, ts)], **batch_kw)
    return log.append_as_leader(data, 0, NOW).first_offset


def put_many(log: Log, pairs, ts: int = NOW) -> None:
    for key, value in pairs:
        put(log, key, value, ts)


def marker(log: Log, producer_id: int, commit: bool, epoch: int = 0) -> int:
    """Write a transaction marker the way the coordinator's WriteTxnMarkers does (replicated)."""
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    data = build_end_txn_marker_batch(
        EndTransactionMarker(kind, 0),
        producer_id=producer_id,
        producer_epoch=epoch,
        timestamp_ms=NOW,
        base_offset=log.log_end_offset,
        partition_leader_epoch=0,
    )
    return log.append_as_follower(data, NOW).first_offset


def txn_put(log: Log, producer_id: int, seq: int, pairs, epoch: int = 0) -> int:
    data = build_batch(
        [SimpleRecord(v, k, NOW) for k, v in pairs],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )
    return log.append_as_leader(data, 0, NOW).first_offset


def batches(log: Log) -> list[RecordBatch]:
    data = log.read(log.log_start_offset, 1 << 24).records
    return [RecordBatch(bytes(b.data)) for b in iter_batches(data)]


def records(log: Log):
    """(offset, key, value) of every data record, control batches skipped."""
    return [
        (r.offset, r.key, r.value)
        for b in batches(log)
        if not b.header.is_control
        for r in b.records()
    ]


def latest(recs) -> dict:
    out = {}
    for _, key, value in recs:
        out[key] = value
    return out


def make_cleaner(**kw) -> LogCleaner:
    return LogCleaner(CleanerConfig(**kw), persist_checkpoints=False)


def clean(log: Log, now_ms: int = NOW, cleaner: LogCleaner | None = None):
    cleaner = cleaner or make_cleaner()
    cleaner.add_log(log, TP)
    return cleaner.clean_once(now_ms)


def ready(log: Log) -> None:
    """Make everything written so far cleanable: roll the active segment, advance the HW."""
    log.roll(NOW)
    log.update_high_watermark(log.log_end_offset)


def segment_files(log: Log) -> list[str]:
    return sorted(p.name for p in log.directory.iterdir() if ".log" in p.name)


# -- what a clean keeps ---------------------------------------------------------------------------


def test_keeps_latest_value_per_key_at_original_offsets(tmp_path):
    log = open_log(tmp_path)
    rng = random.Random(7)
    put_many(log, [(b"k%d" % rng.randrange(6), b"v%d" % i) for i in range(80)])
    ready(log)
    before = records(log)
    segments_before = len(log.segments)
    result = clean(log)
    after = records(log)
    assert result.end_offset == log.log_end_offset
    assert latest(after) == latest(before)
    # Exactly one record per key survives, the last one, with its original offset.
    last_offset = {key: offset for offset, key, _ in before}
    assert sorted(after) == sorted((o, k, v) for o, k, v in before if last_offset[k] == o)
    offsets = [o for o, _, _ in after]
    assert offsets == sorted(set(offsets))
    # Groups are formed from the segments' sizes before cleaning: the next round merges the
    # now small segments.
    put(log, b"k0", b"again")
    ready(log)
    clean(log)
    assert len(log.segments) < segments_before // 2
    assert latest(records(log)) == {**latest(before), b"k0": b"again"}
    assert not [n for n in segment_files(log) if n.endswith((".cleaned", ".swap"))]


def test_dirty_section_above_end_offset_is_untouched(tmp_path):
    log = open_log(tmp_path)
    put_many(log, [(b"k%d" % (i % 3), b"v%d" % i) for i in range(40)])
    log.update_high_watermark(log.log_end_offset)
    active = log.active_segment
    active_bytes = active.read_bytes(0, active.size_bytes)
    result = clean(log)
    assert result.end_offset == active.base_offset
    assert log.active_segment is active
    assert active.read_bytes(0, active.size_bytes) == active_bytes
    # Keys written again in the active segment still have their older copy below it.
    assert latest(records(log)) == {b"k0": b"v39", b"k1": b"v37", b"k2": b"v38"}


def test_batches_keep_producer_fields_compression_and_last_offset(tmp_path):
    log = open_log(tmp_path)
    data = build_batch(
        [SimpleRecord(b"old", b"a", NOW), SimpleRecord(b"b1", b"b", NOW)],
        compression=CompressionType.GZIP,
        producer_id=42,
        producer_epoch=3,
        base_sequence=0,
    )
    log.append_as_leader(data, 5, NOW)
    put(log, b"a", b"new")
    put(log, b"c", b"tail")  # the last batch of the round stays whole either way
    ready(log)
    clean(log)
    kept = batches(log)[0]
    h = kept.header
    assert (h.base_offset, h.last_offset_delta, h.records_count) == (0, 1, 1)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (42, 3, 0, 1)
    assert h.compression == CompressionType.GZIP and h.partition_leader_epoch == 5
    assert kept.is_valid()
    assert [(r.offset, r.key, r.value) for r in kept.records()] == [(1, b"b", b"b1")]


def test_log_append_time_batches_keep_their_timestamp(tmp_path):
    log = open_log(tmp_path, **{"message.timestamp.type": "LogAppendTime"})
    log.append_as_leader(
        build_batch([SimpleRecord(b"x", b"a", 5), SimpleRecord(b"y", b"b", 6)]), 0, NOW + 9
    )
    put(log, b"a", b"z")
    put(log, b"c", b"tail")
    ready(log)
    clean(log)
    first = batches(log)[0]
    assert first.header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [(r.key, r.timestamp) for r in first.records()] == [(b"b", NOW + 9)]


def test_active_producer_last_batch_is_kept_empty(tmp_path):
    """Kafka keeps the batch with an active producer's last sequence, even with no record left,
    so a retry after compaction is still recognised (KAFKA-5793)."""
    log = open_log(tmp_path)
    log.append_as_leader(
        build_batch(
            [SimpleRecord(b"v", b"a", NOW)], producer_id=7, producer_epoch=1, base_sequence=0
        ),
        0,
        NOW,
    )
    put_many(log, [(b"a", b"w"), (b"b", b"x")])
    ready(log)
    clean(log)
    first = batches(log)[0].header
    assert (first.base_offset, first.records_count, first.producer_id, first.base_sequence) == (
        0,
        0,
        7,
        0,
    )
    assert first.compression == CompressionType.NONE
    assert records(log) == [(1, b"a", b"w"), (2, b"b", b"x")]


def test_keyless_records_are_removed(tmp_path):
    # A leader refuses keyless records on a compacted topic, so they come from before the topic
    # became compacted (cleanup.policy altered from delete).
    log = open_log(tmp_path, **{"cleanup.policy": "delete"})
    put_many(log, [(None, b"no key"), (b"a", b"1"), (b"b", b"2")])
    log.config = compact_config()
    ready(log)
    result = clean(log)
    assert result.stats.invalid_messages == 1
    assert records(log) == [(1, b"a", b"1"), (2, b"b", b"2")]


# -- tombstones (KIP-534 delete horizon) ----------------------------------------------------------


def test_tombstone_kept_until_delete_horizon_then_removed(tmp_path):
    retention_ms = 1000
    log = open_log(tmp_path, **{"delete.retention.ms": retention_ms})
    put_many(log, [(b"a", b"1"), (b"b", b"2"), (b"a", None), (b"c", b"3")])
    ready(log)
    clean(log, NOW)
    assert records(log) == [(1, b"b", b"2"), (2, b"a", None), (3, b"c", b"3")]
    tombstone_batch = next(b for b in batches(log) if b.header.base_offset == 2)
    assert tombstone_batch.header.delete_horizon_ms == NOW + retention_ms
    assert tombstone_batch.is_valid()
    # New dirty data makes the log cleanable again; before the horizon the tombstone stays.
    put(log, b"d", b"4")
    ready(log)
    clean(log, NOW + retention_ms - 1)
    assert (2, b"a", None) in records(log)
    put(log, b"e", b"5")
    ready(log)
    clean(log, NOW + retention_ms)
    assert b"a" not in latest(records(log))
    assert latest(records(log)) == {b"b": b"2", b"c": b"3", b"d": b"4", b"e": b"5"}


def test_tombstone_in_dirty_section_supersedes_older_value(tmp_path):
    log = open_log(tmp_path)
    put_many(log, [(b"a", b"1"), (b"b", b"2")])
    ready(log)
    clean(log)
    put_many(log, [(b"a", None), (b"c", b"3")])
    ready(log)
    clean(log)
    assert latest(records(log)) == {b"a": None, b"b": b"2", b"c": b"3"}
    assert [o for o, k, _ in records(log) if k == b"a"] == [2]


# -- transactions ---------------------------------------------------------------------------------


def build_txn_log(tmp_path) -> Log:
    """Producer 1 aborts a write to `a`, producer 2 commits `b`, producer 1 then commits `c`
    and producer 2 commits `d`; a filler key rolls segments."""
    log = open_log(tmp_path, **{"delete.retention.ms": 1000})
    txn_put(log, 1, 0, [(b"a", b"aborted")])  # 0
    txn_put(log, 2, 0, [(b"b", b"committed")])  # 1
    marker(log, 1, commit=False)  # 2
    marker(log, 2, commit=True)  # 3
    txn_put(log, 1, 1, [(b"c", b"c1")])  # 4
    marker(log, 1, commit=True)  # 5
    txn_put(log, 2, 1, [(b"d", b"d1")])  # 6
    marker(log, 2, commit=True)  # 7
    put_many(log, [(b"f", b"%d" % i) for i in range(6)])
    ready(log)
    return log


def control_headers(log: Log) -> dict:
    return {b.header.base_offset: b.header for b in batches(log) if b.header.is_control}


def aborted_entries(log: Log):
    return [
        (a.producer_id, a.first_offset, a.last_offset)
        for s in log.segments
        for a in s.txn_index.all_aborted()
    ]


def test_aborted_data_removed_committed_kept_markers_retained_first(tmp_path):
    log = build_txn_log(tmp_path)
    assert aborted_entries(log) == [(1, 0, 2)]
    clean(log)
    assert latest(records(log)) == {b"b": b"committed", b"c": b"c1", b"d": b"d1", b"f": b"5"}
    assert all(o != 0 for o, _, _ in records(log))
    # The round saw each transaction's data, so every marker stays, and the abort stays indexed.
    assert sorted(control_headers(log)) == [2, 3, 5, 7]
    assert all(h.delete_horizon_ms == -1 for h in control_headers(log).values())
    assert aborted_entries(log) == [(1, 0, 2)]


def test_markers_get_a_delete_horizon_once_their_data_is_gone_then_go(tmp_path):
    log = build_txn_log(tmp_path)
    clean(log, NOW)
    put(log, b"b", b"overwritten")  # producer 2's first transaction becomes obsolete
    ready(log)
    clean(log, NOW)  # abort marker: its data is gone; commit marker 3: its data was still read
    markers = control_headers(log)
    assert markers[2].delete_horizon_ms == NOW + 1000
    assert markers[3].delete_horizon_ms == -1
    assert aborted_entries(log) == []  # no aborted data is left to skip
    put(log, b"g", b"1")
    ready(log)
    clean(log, NOW + 999)  # now commit marker 3 has no data left either
    markers = control_headers(log)
    assert (markers[2].delete_horizon_ms, markers[3].delete_horizon_ms) == (NOW + 1000, NOW + 1999)
    put(log, b"h", b"1")
    ready(log)
    clean(log, NOW + 1999)
    assert sorted(control_headers(log)) == [5, 7]
    assert latest(records(log)) == {
        b"b": b"overwritten",
        b"c": b"c1",
        b"d": b"d1",
        b"f": b"5",
        b"g": b"1",
        b"h": b"1",
    }


def test_last_batch_of_an_active_producer_keeps_its_marker_alive(tmp_path):
    """Producer 2's only data batch holds its last sequence: it stays (emptied), so the round
    still sees the transaction's data and keeps the COMMIT marker too (Kafka does the same)."""
    log = open_log(tmp_path, **{"delete.retention.ms": 1000})
    txn_put(log, 2, 0, [(b"b", b"committed")])
    marker(log, 2, commit=True)
    put_many(log, [(b"b", b"overwritten"), (b"f", b"1")])
    ready(log)
    for now in (NOW, NOW + 5000):
        put(log, b"x", b"%d" % now)
        ready(log)
        clean(log, now)
    first = batches(log)[0].header
    assert (first.base_offset, first.records_count, first.producer_id) == (0, 0, 2)
    assert sorted(control_headers(log)) == [1]


def test_open_transaction_bounds_the_cleanable_range(tmp_path):
    log = open_log(tmp_path)
    put_many(log, [(b"a", b"%d" % i) for i in range(12)])
    first_open = txn_put(log, 9, 0, [(b"a", b"pending")])
    put_many(log, [(b"a", b"late%d" % i) for i in range(12)])
    ready(log)
    assert log.last_stable_offset == first_open
    result = clean(log)
    assert 0 < result.end_offset <= first_open
    recs = records(log)
    assert [r for r in recs if r[0] >= result.end_offset] == [
        (o, b"a", v)
        for o, v in enumerate([b"%d" % i for i in range(12)] + [b"pending"])
        if o >= result.end_offset
    ] + [(first_open + 1 + i, b"a", b"late%d" % i) for i in range(12)]
    # Below the end offset only the last copy the map saw is left.
    assert [r for r in recs if r[0] < result.end_offset] == [
        (result.end_offset - 1, b"a", b"%d" % (result.end_offset - 1))
    ]


def test_high_watermark_bounds_the_cleanable_range(tmp_path):
    log = open_log(tmp_path)
    put_many(log, [(b"a", b"%d" % i) for i in range(20)])
    log.roll(NOW)
    third = log.segments[2].base_offset
    log.update_high_watermark(third + 1)  # inside the third segment
    result = clean(log)
    assert result.end_offset == third  # rounded down to a segment base
    above = [o for o, _, _ in records(log) if o >= result.end_offset]
    assert above == list(range(result.end_offset, 20))
    assert len(records(log)) == len(above) + 1


# -- choosing what to clean -------------------------------------------------------------------------


def test_dirty_ratio_threshold(tmp_path):
    log = open_log(tmp_path, **{"min.cleanable.dirty.ratio": 0.5})
    put_many(log, [(b"k%d" % (i % 4), b"v%d" % i) for i in range(40)])
    ready(log)
    manager = CleanerManager(persist_checkpoints=False)
    manager.add_log(log, TP)
    segments = log.segments
    manager.update_checkpoint(TP, segments[-2].base_offset)  # only one segment is dirty
    offsets = cleanable_offsets(log, segments, segments[-2].base_offset, NOW)
    candidate = LogToClean.of(TP, log, segments, offsets)
    assert candidate.cleanable_bytes == segments[-2].size_bytes
    assert candidate.cleanable_ratio <= 0.5
    assert manager.grab_filthiest_compacted_log(NOW) is None
    assert manager.dirtiest_log_cleanable_ratio == pytest.approx(candidate.cleanable_ratio)
    manager.update_checkpoint(TP, segments[1].base_offset)  # now most of the log is dirty
    grabbed = manager.grab_filthiest_compacted_log(NOW)
    assert grabbed is not None and grabbed.cleanable_ratio > 0.5
    assert grabbed.first_dirty_offset == segments[1].base_offset
    assert grabbed.first_uncleanable_offset == log.active_segment.base_offset


def test_non_compacted_logs_are_not_cleaned(tmp_path):
    log = Log.open(tmp_path / "t-0", compact_config(**{"cleanup.policy": "delete"}), now_ms=NOW)
    put_many(log, [(b"a", b"1"), (b"a", b"2")])
    ready(log)
    assert clean(log) is None
    assert len(records(log)) == 2


def test_min_compaction_lag_leaves_young_segments_alone(tmp_path):
    log = open_log(tmp_path, **{"min.compaction.lag.ms": HOUR_MS})
    old = NOW - 2 * HOUR_MS
    put_many(log, [(b"a", b"old%d" % i) for i in range(8)], ts=old)
    log.roll(NOW)
    young_base = log.log_end_offset
    put_many(log, [(b"a", b"young%d" % i) for i in range(8)], ts=NOW)
    ready(log)
    result = clean(log, NOW)
    assert result.end_offset == young_base
    recs = records(log)
    assert [v for o, _, v in recs if o >= young_base] == [b"young%d" % i for i in range(8)]
    assert [v for o, _, v in recs if o < young_base] == [b"old7"]
    # An hour later the young segments are old enough.
    put(log, b"z", b"1")
    ready(log)
    clean(log, NOW + 2 * HOUR_MS)
    assert latest(records(log)) == {b"a": b"young7", b"z": b"1"}
    assert len([k for _, k, _ in records(log) if k == b"a"]) == 1


def test_max_compaction_lag_forces_a_clean_below_the_ratio(tmp_path):
    log = open_log(
        tmp_path, **{"min.cleanable.dirty.ratio": 0.99, "max.compaction.lag.ms": HOUR_MS}
    )
    put_many(log, [(b"a", b"%d" % i) for i in range(10)], ts=NOW - 2 * HOUR_MS)
    ready(log)
    manager = CleanerManager(persist_checkpoints=False)
    manager.add_log(log, TP)
    manager.update_checkpoint(TP, log.segments[-2].base_offset)
    grabbed = manager.grab_filthiest_compacted_log(NOW)
    assert grabbed is not None and grabbed.cleanable_ratio < 0.99 and grabbed.need_compaction_now


def test_offset_map_budget_limits_each_round(tmp_path):
    log = open_log(tmp_path)
    put_many(log, [(b"key-%03d" % i, b"v") for i in range(30)])
    put_many(log, [(b"key-%03d" % i, b"w") for i in range(30)])
    ready(log)
    cleaner = make_cleaner(dedupe_buffer_size=12 * 120, io_buffer_load_factor=1.0)
    cleaner.add_log(log, TP)
    ends = []
    while (result := cleaner.clean_once(NOW)) is not None:
        ends.append(result.end_offset)
        assert len(ends) < 20
    assert ends == sorted(ends) and len(ends) > 1 and ends[-1] == log.log_end_offset
    assert cleaner.manager.checkpoint(TP) == log.log_end_offset
    assert latest(records(log)) == {b"key-%03d" % i: b"w" for i in range(30)}
    assert len(records(log)) == 30


def test_offset_map_too_small_for_one_batch_marks_partition_uncleanable(tmp_path):
    log = open_log(tmp_path)
    put_many(log, [(b"a", b"1"), (b"a", b"2")])
    ready(log)
    before = records(log)
    cleaner = make_cleaner(dedupe_buffer_size=10)
    assert clean(log, cleaner=cleaner) is None
    stats = cleaner.statistics()
    assert stats["uncleanable_partitions"] == [TP] and len(stats["errors"]) == 1
    assert records(log) == before
    assert cleaner.clean_once(NOW) is None  # skipped from now on


def test_group_segments_by_size(tmp_path):
    log = open_log(tmp_path, **{"segment.bytes": 200})
    put_many(log, [(b"k%d" % i, b"v" * 40) for i in range(12)])
    ready(log)
    segments = log.segments[:-1]
    sizes = [s.size_bytes for s in segments]
    max_bytes = 3 * max(sizes)
    groups = group_segments_by_size(segments, max_bytes, 10 * 1024 * 1024, log.log_end_offset)
    assert [s for g in groups for s in g] == segments
    assert all(sum(s.size_bytes for s in g) <= max_bytes for g in groups)
    for group, following in zip(groups, groups[1:], strict=False):  # groups are as big as fit
        assert sum(s.size_bytes for s in group) + following[0].size_bytes > max_bytes
    assert len(groups) < len(segments)
    one_entry = group_segments_by_size(segments, 10**9, segments[0].offset_index.size_bytes, 10**9)
    assert all(len(g) == 1 for g in one_entry)


def test_offset_map_counts_its_budget():
    m = OffsetMap(1000, load_factor=0.5)
    assert m.put(b"a" * 100, 1) and m.put(b"a" * 100, 5)
    assert not m.put(b"b" * 400, 2)
    assert (m.get(b"a" * 100), m.get(b"b" * 400), m.size) == (5, -1, 1)
    m.update_latest_offset(9)
    m.update_latest_offset(3)
    assert m.latest_offset == 9 and 0 < m.utilization <= 0.5
    m.clear()
    assert (m.size, m.latest_offset, m.used_bytes) == (0, -1, 0)


# -- checkpoints, pause and abort -----------------------------------------------------------------


def test_checkpoint_is_persisted_and_reused(tmp_path):
    log = open_log(tmp_path)
    put_many(log, [(b"a", b"%d" % i) for i in range(10)])
    ready(log)
    cleaner = LogCleaner(persist_checkpoints=True)
    cleaner.add_log(log)
    result = cleaner.clean_once(NOW)
    stored = OffsetCheckpointFile(tmp_path / CLEANER_CHECKPOINT_FILE).read()
    assert stored == {TP: result.end_offset}
    again = LogCleaner(persist_checkpoints=True)
    again.add_log(log)
    assert again.manager.checkpoint(TP) == result.end_offset
    assert again.clean_once(NOW) is None  # nothing new is dirty
    again.remove_log(TP)
    assert OffsetCheckpointFile(tmp_path / CLEANER_CHECKPOINT_FILE).read() == {}


def test_checkpoint_below_log_start_is_reset(tmp_path):
    log = open_log(tmp_path, **{"cleanup.policy": "compact,delete"})
    put_many(log, [(b"a", b"%d" % i) for i in range(20)])
    ready(log)
    log.delete_records_before(log.segments[2].base_offset)
    manager = CleanerManager(persist_checkpoints=False)
    manager.add_log(log, TP)
    manager.update_checkpoint(TP, 1)
    grabbed = manager.grab_filthiest_compacted_log(NOW)
    assert grabbed.first_dirty_offset == log.log_start_offset
    assert manager.checkpoint(TP) == log.log_start_offset


def test_pause_resume_state_machine(tmp_path):
    log = open_log(tmp_path)
    put_many(log, [(b"a", b"1"), (b"a", b"2")])
    ready(log)
    cleaner = make_cleaner()
    cleaner.add_log(log, TP)
    cleaner.abort_and_pause_cleaning(TP)
    cleaner.abort_and_pause_cleaning(TP)
    assert cleaner.clean_once(NOW) is None
    cleaner.resume_cleaning(TP)
    assert cleaner.clean_once(NOW) is None  # still paused once
    cleaner.resume_cleaning(TP)
    assert cleaner.clean_once(NOW) is not None
    with pytest.raises(IllegalStateTransition):
        cleaner.resume_cleaning(TP)


def test_abort_during_a_round_leaves_the_log_whole_and_pauses(tmp_path):
    log = open_log(tmp_path)
    put_many(log, [(b"k%d" % (i % 3), b"v%d" % i) for i in range(30)])
    ready(log)
    before = batches(log)
    files_before = segment_files(log)
    manager = CleanerManager(persist_checkpoints=False)
    manager.add_log(log, TP)
    cleanable = manager.grab_filthiest_compacted_log(NOW)
    aborter = threading.Thread(target=manager.abort_and_pause_cleaning, args=(TP,))

    def check_done(tp):
        if not aborter.is_alive():  # first chunk: another thread asks to abort the round
            aborter.start()
        while True:  # the aborter blocks until the round gives up; wait for its request
            manager.check_cleaning_aborted(tp)
            time.sleep(0)

    cleaner = Cleaner(CleanerConfig(io_buffer_size=64), check_done=check_done)
    with pytest.raises(LogCleaningAbortedError):
        cleaner.clean(cleanable, NOW)
    manager.done_cleaning(TP, cleanable.first_dirty_offset)
    aborter.join()
    assert manager.is_paused(TP)
    assert manager.grab_filthiest_compacted_log(NOW) is None
    assert [b.data for b in batches(log)] == [b.data for b in before]
    assert segment_files(log) == files_before
    manager.resume_cleaning([TP])
    assert manager.grab_filthiest_compacted_log(NOW) is not None


def test_retention_during_a_round_makes_it_give_up(tmp_path):
    log = open_log(tmp_path, **{"cleanup.policy": "compact,delete"})
    put_many(log, [(b"k%d" % (i % 3), b"v%d" % i) for i in range(30)])
    ready(log)
    cut = log.segments[3].base_offset
    calls = []

    def check_done(tp):
        calls.append(tp)
        if len(calls) == 3:  # while copying: DeleteRecords removes the first segments
            log.delete_records_before(cut)

    manager = CleanerManager(persist_checkpoints=False)
    manager.add_log(log, TP)
    cleanable = manager.grab_filthiest_compacted_log(NOW)
    with pytest.raises(LogCleaningAbortedError):
        Cleaner(CleanerConfig(io_buffer_size=64), check_done=check_done).clean(cleanable, NOW)
    assert not [n for n in segment_files(log) if n.endswith(".cleaned")]
    assert records(log)[0][0] == cut
    assert latest(records(log)) == {b"k0": b"v27", b"k1": b"v28", b"k2": b"v29"}


def test_compact_delete_applies_retention_in_the_cleaner_round(tmp_path):
    log = open_log(tmp_path, **{"cleanup.policy": "compact,delete", "retention.ms": HOUR_MS})
    put_many(log, [(b"old%d" % i, b"x") for i in range(10)], ts=NOW - 3 * HOUR_MS)
    log.roll(NOW)
    put_many(log, [(b"new%d" % i, b"y") for i in range(3)], ts=NOW)
    ready(log)
    clean(log, NOW)
    assert set(latest(records(log))) == {b"new0", b"new1", b"new2"}


# -- crashes and reopening ---------------------------------------------------------------------------


def crash_image_at_swap(log: Log, tmp_path, commit: bool, drop_first_old: bool = False):
    """Clean `log`, photographing its dir inside `replace_segments` of the first group: before
    the swap (`.cleaned` files) or just after the commit point (`.swap`, old segments still
    there, the first one optionally already deleted). Returns the image dir."""
    image = tmp_path / "image" / "t-0"
    original = log.replace_segments

    def replace(cleaned, old_segments):
        if not image.exists():
            cleaned.flush()
            shutil.copytree(log.directory, image)
            if commit:
                for path in image.iterdir():
                    if path.name.endswith(".cleaned"):
                        path.rename(image / path.name.replace(".cleaned", ".swap"))
                if drop_first_old:
                    for path in image.iterdir():
                        if (
                            path.name.startswith(f"{old_segments[0].base_offset:020d}.")
                            and "." not in path.name[21:]
                        ):
                            path.unlink()
        return original(cleaned, old_segments)

    log.replace_segments = replace
    clean(log)
    return image


def test_crash_before_swap_reopens_with_the_old_data(tmp_path):
    log = open_log(tmp_path)
    put_many(log, [(b"k%d" % (i % 4), b"v%d" % i) for i in range(40)])
    ready(log)
    before = records(log)
    image = crash_image_at_swap(log, tmp_path, commit=False)
    assert any(p.name.endswith(".log.cleaned") for p in image.iterdir())
    reopened = Log.open(image, compact_config(), now_ms=NOW)
    assert records(reopened) == before
    assert not [p for p in image.iterdir() if p.name.endswith(".cleaned")]


@pytest.mark.parametrize("drop_first_old", [False, True])
def test_crash_after_swap_commit_reopens_with_the_cleaned_group(tmp_path, drop_first_old):
    log = open_log(tmp_path)
    put_many(log, [(b"k%d" % (i % 4), b"v%d" % i) for i in range(40)])
    ready(log)
    before = records(log)
    image = crash_image_at_swap(log, tmp_path, commit=True, drop_first_old=drop_first_old)
    reopened = Log.open(image, compact_config(), now_ms=NOW)
    recs = records(reopened)
    assert latest(recs) == latest(before)
    first_group_end = reopened.segments[1].base_offset
    cleaned_part = [r for r in recs if r[0] < first_group_end]
    assert len({k for _, k, _ in cleaned_part}) == len(cleaned_part)  # deduplicated
    assert [r for r in recs if r[0] >= first_group_end] == [
        r for r in before if r[0] >= first_group_end
    ]
    assert not [p for p in image.iterdir() if p.name.endswith((".swap", ".cleaned"))]


def test_reopen_after_cleaning_reads_the_same(tmp_path):
    log = open_log(tmp_path)
    rng = random.Random(3)
    for i in range(60):
        value = None if rng.random() < 0.2 else b"v%d" % i
        put(log, b"k%d" % rng.randrange(8), value)
    txn_put(log, 5, 0, [(b"t", b"aborted")])
    marker(log, 5, commit=False)
    put(log, b"z", b"end")
    ready(log)
    clean(log)
    expected = log.read(0, 1 << 24).records
    aborted = log.collect_aborted_transactions(0, log.log_end_offset)
    end = log.log_end_offset
    log.close()
    reopened = Log.open(tmp_path / "t-0", compact_config(), now_ms=NOW)
    assert reopened.log_end_offset == end
    assert reopened.read(0, 1 << 24).records == expected
    assert reopened.collect_aborted_transactions(0, end) == aborted
    assert all(b.is_valid() for b in batches(reopened))


# -- the background thread -------------------------------------------------------------------------


def test_background_cleaner_runs_beside_appends(tmp_path):
    log = open_log(tmp_path, **{"segment.bytes": 600})
    cleaner = LogCleaner(CleanerConfig(backoff_ms=1), persist_checkpoints=False)
    cleaner.add_log(log, TP)
    rng = random.Random(11)
    model: dict[bytes, tuple[int, bytes]] = {}
    cleaner.start()
    try:
        for i in range(20_000):
            key = b"k%d" % rng.randrange(20)
            value = b"v%d" % i
            model[key] = (put(log, key, value), value)
            log.update_high_watermark(log.log_end_offset)
            if i > 300 and cleaner.statistics()["rounds"] >= 3:
                break
        else:
            pytest.fail("the cleaner finished fewer than 3 rounds during 20000 appends")
    finally:
        cleaner.stop()
    stats = cleaner.statistics()
    assert stats["errors"] == [] and stats["rounds"] >= 3
    recs = records(log)
    offsets = [o for o, _, _ in recs]
    assert offsets == sorted(set(offsets))
    assert recs[-1][0] == log.log_end_offset - 1
    assert {k: (o, v) for o, k, v in recs} == model


def test_corrupt_segment_is_reported_and_left_alone(tmp_path):
    log = open_log(tmp_path)
    put_many(log, [(b"a", b"%d" % i) for i in range(12)])
    ready(log)
    first = log.segments[0]
    record_byte = 63  # inside the first batch's records, which its CRC covers
    with open(first.log_path, "r+b") as f:
        f.seek(record_byte)
        byte = f.read(1)
        f.seek(record_byte)
        f.write(bytes([byte[0] ^ 0xFF]))
    files_before = segment_files(log)
    cleaner = make_cleaner()
    assert clean(log, cleaner=cleaner) is None
    stats = cleaner.statistics()
    assert stats["uncleanable_partitions"] == [TP]
    assert "CRC" in stats["errors"][0]
    assert segment_files(log) == files_before


def test_truncation_lowers_the_checkpoint(tmp_path):
    log = open_log(tmp_path)
    put_many(log, [(b"a", b"%d" % i) for i in range(12)])
    ready(log)
    cleaner = make_cleaner()
    result = clean(log, cleaner=cleaner)
    cleaner.abort_and_pause_cleaning(TP)  # what the replica manager does around a truncation
    log.truncate_to(result.end_offset - 1, NOW)
    cleaner.manager.maybe_truncate_checkpoint(TP, result.end_offset - 1)
    cleaner.resume_cleaning(TP)
    assert cleaner.manager.checkpoint(TP) == result.end_offset - 1


def test_cleaner_config_from_kafka_names():
    config = CleanerConfig.from_properties(
        {"log.cleaner.dedupe.buffer.size": "1024", "log.cleaner.io.buffer.load.factor": "0.5"}
    )
    assert (config.dedupe_buffer_size, config.io_buffer_load_factor) == (1024, 0.5)
    assert config.backoff_ms == 15_000
    with pytest.raises(ValueError, match="log.cleaner.threads"):
        CleanerConfig.from_properties({"log.cleaner.threads": "2"})
    with pytest.raises(ValueError, match="load.factor"):
        CleanerConfig(io_buffer_load_factor=0)
