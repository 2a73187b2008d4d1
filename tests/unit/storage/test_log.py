"""The partition log: appends, offsets, reads, rolls, truncation, retention, recovery."""

from __future__ import annotations

import os

import pytest

from sparklog.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
)
from sparklog.records import (
    CorruptRecordError,
    RecordBatch,
    SimpleRecord,
    build_batch,
    iter_batches,
)
from sparklog.records.batch import TimestampType
from sparklog.storage.config import LogConfig
from sparklog.storage.log import Log

NOW = 1_700_000_000_000


def batch(values, *, ts=NOW, key=None, **kw):
    return build_batch([SimpleRecord(v, key, ts) for v in values], **kw)


def offsets_of(data: bytes) -> list[int]:
    return [r.offset for b in iter_batches(data) for r in b.records()]


def values_of(data: bytes) -> list[bytes]:
    return [r.value for b in iter_batches(data) for r in b.records()]


def small(**kw) -> LogConfig:
    return LogConfig.from_properties({"segment.bytes": 300, "index.interval.bytes": 1, **kw})


def test_append_assigns_offsets_and_stamps_epoch(tmp_path):
    log = Log.open(tmp_path / "t-0", now_ms=NOW)
    a = log.append_as_leader(batch([b"a", b"b"], base_offset=999), leader_epoch=3, now_ms=NOW)
    b = log.append_as_leader(batch([b"c"]), leader_epoch=3, now_ms=NOW)
    assert (a.first_offset, a.last_offset, b.first_offset, b.last_offset) == (0, 1, 2, 2)
    assert log.log_end_offset == 3
    data = log.read(0, 1 << 20).records
    batches = list(iter_batches(data))
    assert [x.header.base_offset for x in batches] == [0, 2]
    assert all(x.header.partition_leader_epoch == 3 and x.is_valid() for x in batches)
    assert values_of(data) == [b"a", b"b", b"c"]
    assert log.epoch_cache.latest_epoch == 3


def test_corrupt_batch_rejected_and_log_untouched(tmp_path):
    log = Log.open(tmp_path / "t-0", now_ms=NOW)
    log.append_as_leader(batch([b"ok"]), 0, NOW)
    bad = bytearray(batch([b"x" * 50]))
    bad[-5] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.append_as_leader(bytes(bad), 0, NOW)
    with pytest.raises(CorruptRecordError, match="truncated"):
        log.append_as_leader(batch([b"y"])[:-3], 0, NOW)
    assert log.log_end_offset == 1
    assert log.active_segment.size_bytes == len(batch([b"ok"]))


def test_message_too_large_and_timestamps(tmp_path):
    log = Log.open(
        tmp_path / "t-0", LogConfig.from_properties({"max.message.bytes": 200}), now_ms=NOW
    )
    with pytest.raises(MessageTooLargeError, match="max.message.bytes"):
        log.append_as_leader(batch([b"x" * 300]), 0, NOW)
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(batch([b"x"], ts=NOW + 2 * 3600 * 1000), 0, NOW)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(b"", 0, NOW)
    assert log.log_end_offset == 0


def test_log_append_time_rewrites_max_timestamp_and_crc(tmp_path):
    config = LogConfig.from_properties({"message.timestamp.type": "LogAppendTime"})
    log = Log.open(tmp_path / "t-0", config, now_ms=NOW)
    info = log.append_as_leader(batch([b"a", b"b"], ts=5), 0, NOW + 7)
    assert info.log_append_time_ms == NOW + 7
    (stored,) = list(iter_batches(log.read(0, 1 << 20).records))
    stored.ensure_valid()
    assert stored.header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in stored.records()] == [NOW + 7, NOW + 7]


def test_roll_on_segment_bytes_and_read_across_segments(tmp_path):
    log = Log.open(tmp_path / "t-0", small(), now_ms=NOW)
    for i in range(20):
        log.append_as_leader(batch([b"v%02d" % i]), 0, NOW)
    assert len(log.segments) > 3
    names = sorted(p.name for p in (tmp_path / "t-0").iterdir() if p.suffix == ".log")
    assert names[0] == "00000000000000000000.log"
    assert all(len(n) == len("00000000000000000000.log") for n in names)
    assert offsets_of(log.read(0, 1 << 20).records) == list(range(20))
    assert offsets_of(log.read(7, 1 << 20).records)[0] == 7
    # max bytes cuts at batch boundaries; the first batch always comes whole
    one = log.read(3, 1).records
    assert offsets_of(one) == [3]


def test_read_honours_upper_bound_and_range(tmp_path):
    log = Log.open(tmp_path / "t-0", small(), now_ms=NOW)
    for i in range(10):
        log.append_as_leader(batch([b"%d" % i]), 0, NOW)
    assert offsets_of(log.read(0, 1 << 20, upper_bound_offset=4).records) == [0, 1, 2, 3]
    assert log.read(4, 1 << 20, upper_bound_offset=4).records == b""
    assert log.read(10, 1 << 20).records == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(11, 100)


def test_roll_on_segment_ms_uses_batch_timestamps(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig.from_properties({"segment.ms": 1000}), now_ms=NOW)
    log.append_as_leader(batch([b"a"], ts=NOW), 0, NOW)
    log.append_as_leader(batch([b"b"], ts=NOW + 500), 0, NOW)
    assert len(log.segments) == 1
    log.append_as_leader(batch([b"c"], ts=NOW + 1001), 0, NOW + 1001)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_truncate_to_and_fully(tmp_path):
    log = Log.open(tmp_path / "t-0", small(), now_ms=NOW)
    for i in range(12):
        log.append_as_leader(batch([b"%d" % i]), i // 4, NOW)
    assert log.truncate_to(5, NOW)
    assert log.log_end_offset == 5
    assert offsets_of(log.read(0, 1 << 20).records) == [0, 1, 2, 3, 4]
    assert log.epoch_cache.latest_epoch == 1
    info = log.append_as_leader(batch([b"new"]), 7, NOW)
    assert info.first_offset == 5
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (100, 100, 1)
    assert log.append_as_leader(batch([b"z"]), 8, NOW).first_offset == 100


def test_follower_append_keeps_offsets_and_epochs(tmp_path):
    leader = Log.open(tmp_path / "l-0", now_ms=NOW)
    for epoch in (1, 1, 2):
        leader.append_as_leader(batch([b"x", b"y"]), epoch, NOW)
    follower = Log.open(tmp_path / "f-0", now_ms=NOW)
    data = leader.read(0, 1 << 20).records
    follower.append_as_follower(data, NOW)
    assert follower.read(0, 1 << 20).records == data
    assert [(e.epoch, e.start_offset) for e in follower.epoch_cache.entries()] == [(1, 0), (2, 4)]
    with pytest.raises(InvalidRecordError):
        follower.append_as_follower(data, NOW)


def test_follower_takes_batches_larger_than_its_max_message_bytes(tmp_path):
    # the leader accepted them under an older, larger limit; refusing would stall replication
    leader = Log.open(tmp_path / "l-0", now_ms=NOW)
    leader.append_as_leader(batch([b"x" * 300]), 0, NOW)
    small_limit = LogConfig.from_properties({"max.message.bytes": 200})
    follower = Log.open(tmp_path / "f-0", small_limit, now_ms=NOW)
    follower.append_as_follower(leader.read(0, 1 << 20).records, NOW)
    assert follower.log_end_offset == 1
    with pytest.raises(MessageTooLargeError):
        follower.append_as_leader(batch([b"x" * 300]), 1, NOW)


def test_delete_records_and_retention(tmp_path):
    log = Log.open(tmp_path / "t-0", small(**{"retention.bytes": 400}), now_ms=NOW)
    for i in range(20):
        log.append_as_leader(batch([b"v%02d" % i], ts=NOW + i), 0, NOW)
    log.update_high_watermark(log.log_end_offset)
    before = len(log.segments)
    deleted = log.delete_old_segments(NOW)
    assert deleted > 0 and len(log.segments) == before - deleted
    assert log.size_in_bytes - log.active_segment.size_bytes < 400 + 300
    assert log.log_start_offset == log.segments[0].base_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(log.high_watermark + 1)
    start = log.delete_records_before(18)
    assert start == 18 and offsets_of(log.read(18, 1 << 20).records)[-1] == 19


def test_retention_by_time_never_deletes_active_segment(tmp_path):
    log = Log.open(tmp_path / "t-0", small(**{"retention.ms": 1000}), now_ms=NOW)
    for i in range(10):
        log.append_as_leader(batch([b"v%02d" % i], ts=NOW), 0, NOW)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments(NOW + 500) == 0
    log.delete_old_segments(NOW + 5000)
    assert len(log.segments) == 1 and log.log_start_offset == log.active_segment.base_offset


def test_retention_stops_at_high_watermark(tmp_path):
    log = Log.open(tmp_path / "t-0", small(**{"retention.ms": 1000}), now_ms=NOW)
    for i in range(10):
        log.append_as_leader(batch([b"v%02d" % i], ts=NOW), 0, NOW)
    log.update_high_watermark(0)
    assert log.delete_old_segments(NOW + 5000) == 0


def test_offset_by_timestamp(tmp_path):
    log = Log.open(tmp_path / "t-0", small(), now_ms=NOW)
    for i in range(10):
        log.append_as_leader(
            build_batch([SimpleRecord(b"v", None, NOW + 10 * i + j) for j in range(2)]), 0, NOW
        )
    assert log.fetch_offset_by_timestamp(-2) == (0, -1)
    assert log.fetch_offset_by_timestamp(-1) == (20, -1)
    assert log.fetch_offset_by_timestamp(NOW + 31) == (7, NOW + 31)
    assert log.fetch_offset_by_timestamp(NOW + 32) == (8, NOW + 40)
    assert log.fetch_offset_by_timestamp(NOW + 1000) is None
    assert log.fetch_offset_by_timestamp(-3) == (19, NOW + 91)


def test_reopen_after_close_keeps_everything(tmp_path):
    log = Log.open(tmp_path / "t-0", small(), now_ms=NOW)
    for i in range(15):
        log.append_as_leader(batch([b"v%02d" % i]), i // 5, NOW)
    data = log.read(0, 1 << 20).records
    log.close()
    again = Log.open(tmp_path / "t-0", small(), now_ms=NOW, recovery_point=15)
    assert again.log_end_offset == 15
    assert again.read(0, 1 << 20).records == data
    assert [e.epoch for e in again.epoch_cache.entries()] == [0, 1, 2]


def test_recovery_truncates_torn_tail_and_rebuilds_indexes(tmp_path):
    directory = tmp_path / "t-0"
    log = Log.open(directory, small(), now_ms=NOW)
    for i in range(15):
        log.append_as_leader(batch([b"v%02d" % i]), 0, NOW)
    good = log.read(0, 1 << 20).records
    active = log.active_segment
    log.close()
    with open(active.log_path, "ab") as f:
        f.write(batch([b"torn" * 10])[:-7])
    for p in directory.glob("*.index"):
        p.unlink()
    again = Log.open(directory, small(), now_ms=NOW)
    assert again.log_end_offset == 15
    assert again.read(0, 1 << 20).records == good
    assert all(s.offset_index.path.exists() for s in again.segments)
    assert again.append_as_leader(batch([b"next"]), 0, NOW).first_offset == 15


def test_recovery_drops_segments_after_a_corrupt_batch(tmp_path):
    directory = tmp_path / "t-0"
    log = Log.open(directory, small(), now_ms=NOW)
    for i in range(15):
        log.append_as_leader(batch([b"v%02d" % i]), 0, NOW)
    second = log.segments[1]
    log.close()
    with open(second.log_path, "r+b") as f:
        f.seek(70)
        b = f.read(1)
        f.seek(70)
        f.write(bytes([b[0] ^ 0xFF]))
    again = Log.open(directory, small(), now_ms=NOW)
    assert again.log_end_offset == second.base_offset
    assert len(again.segments) == 2
    for b in iter_batches(again.read(0, 1 << 20).records):
        b.ensure_valid()


def test_flush_messages_policy_moves_recovery_point(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig.from_properties({"flush.messages": 3}), now_ms=NOW)
    log.append_as_leader(batch([b"a", b"b"]), 0, NOW)
    assert log.recovery_point == 0
    log.append_as_leader(batch([b"c"]), 0, NOW)
    assert log.recovery_point == 3
    config = LogConfig.from_properties({"flush.ms": 100})
    timed = Log.open(tmp_path / "u-0", config, now_ms=NOW)
    timed.append_as_leader(batch([b"a"]), 0, NOW)
    assert not timed.maybe_flush(NOW + 50)
    assert timed.maybe_flush(NOW + 100) and timed.recovery_point == 1


def test_config_rejects_unknown_and_bad_values():
    with pytest.raises(ValueError, match="unknown topic config 'segment.byte'"):
        LogConfig.from_properties({"segment.byte": 1})
    with pytest.raises(ValueError, match="cleanup.policy"):
        LogConfig.from_properties({"cleanup.policy": "remove"})
    with pytest.raises(ValueError, match="retention.ms"):
        LogConfig.from_properties({"retention.ms": "soon"})


def test_defaults_file_matches_code():
    path = os.path.join(
        os.path.dirname(__file__), "..", "..", "..", "conf", "sparklog-defaults.conf"
    )
    entries = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                k, v = line.split("=", 1)
                entries[k] = v
    expected = LogConfig().to_properties()
    assert {k: entries[k] for k in expected} == expected


def test_record_batch_reads_back_whole(tmp_path):
    log = Log.open(tmp_path / "t-0", now_ms=NOW)
    raw = build_batch([SimpleRecord(b"v", b"k", NOW, (("h", b"1"),))])
    log.append_as_leader(raw, 0, NOW)
    (stored,) = list(iter_batches(log.read(0, 100).records))
    (rec,) = RecordBatch(bytes(stored.data)).records()
    assert (rec.key, rec.value, rec.headers) == (b"k", b"v", (("h", b"1"),))


def test_idempotent_retry_returns_original_offsets(tmp_path):
    from sparklog.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError

    log = Log.open(tmp_path / "t-0", now_ms=NOW)
    first = batch([b"a", b"b"], producer_id=7, producer_epoch=0, base_sequence=0)
    log.append_as_leader(batch([b"other"]), 0, NOW)
    info = log.append_as_leader(first, 0, NOW)
    again = log.append_as_leader(first, 0, NOW)
    assert again.duplicate and (again.first_offset, again.last_offset) == (
        info.first_offset,
        info.last_offset,
    )
    assert log.log_end_offset == 3
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append_as_leader(
            batch([b"c"], producer_id=7, producer_epoch=0, base_sequence=5), 0, NOW
        )
    log.append_as_leader(batch([b"c"], producer_id=7, producer_epoch=1, base_sequence=0), 0, NOW)
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(
            batch([b"d"], producer_id=7, producer_epoch=0, base_sequence=3), 0, NOW
        )
    assert log.log_end_offset == 4
    log.close()
    reopened = Log.open(tmp_path / "t-0", now_ms=NOW)
    assert reopened.append_as_leader(
        batch([b"c"], producer_id=7, producer_epoch=1, base_sequence=0), 0, NOW
    ).duplicate


def test_transactions_lso_and_aborted_index(tmp_path):
    from sparklog.records.control import (
        ControlRecordType,
        EndTransactionMarker,
        build_end_txn_marker_batch,
    )
    from sparklog.storage.producer_append_info import AppendOrigin

    def txn(pid, values, seq):
        return batch(
            values, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True
        )

    def marker(pid, kind):
        return build_end_txn_marker_batch(
            EndTransactionMarker(kind, 0), producer_id=pid, producer_epoch=0, timestamp_ms=NOW
        )

    log = Log.open(tmp_path / "t-0", small(), now_ms=NOW)
    log.append_as_leader(txn(1, [b"a1", b"a2"], 0), 0, NOW)  # 0-1
    log.append_as_leader(txn(2, [b"b1"], 0), 0, NOW)  # 2
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 0
    with pytest.raises(InvalidRecordError, match="control"):
        log.append_as_leader(marker(1, ControlRecordType.ABORT), 0, NOW)
    log.append_as_leader(
        marker(1, ControlRecordType.ABORT), 0, NOW, origin=AppendOrigin.COORDINATOR
    )  # 3
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 2
    log.append_as_leader(
        marker(2, ControlRecordType.COMMIT), 0, NOW, origin=AppendOrigin.COORDINATOR
    )  # 4
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 5
    aborted = log.collect_aborted_transactions(0, 5)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in aborted] == [(1, 0, 3)]
    fetched = log.read(0, 1 << 20, upper_bound_offset=log.last_stable_offset, include_aborted=True)
    assert [a.producer_id for a in fetched.aborted_transactions] == [1]
    log.close()
    reopened = Log.open(tmp_path / "t-0", small(), now_ms=NOW)
    reopened.update_high_watermark(reopened.log_end_offset)
    assert [
        (a.producer_id, a.last_offset) for a in reopened.collect_aborted_transactions(0, 5)
    ] == [(1, 3)]
    assert reopened.last_stable_offset == 5


def test_defaults_file_matches_controller_defaults():
    from sparklog.metadata.configs import ControllerConfig

    path = os.path.join(
        os.path.dirname(__file__), "..", "..", "..", "conf", "sparklog-defaults.conf"
    )
    with open(path) as f:
        entries = dict(
            line.strip().split("=", 1) for line in f if line.strip() and not line.startswith("#")
        )
    defaults = ControllerConfig()
    for name in (
        "num.partitions",
        "default.replication.factor",
        "broker.session.timeout.ms",
        "broker.heartbeat.interval.ms",
        "metadata.log.snapshot.records",
    ):
        assert int(entries[name]) == getattr(defaults, name.replace(".", "_")), name
    assert entries["auto.create.topics.enable"] == str(defaults.auto_create_topics_enable).lower()


def test_one_append_of_more_batches_than_pwritev_takes(tmp_path):
    log = Log.open(tmp_path / "t-0", now_ms=NOW)
    many = b"".join(batch([b"%d" % i]) for i in range(1500))  # 3000 pieces > IOV_MAX
    info = log.append_as_leader(many, 2, NOW)
    assert (info.first_offset, info.last_offset) == (0, 1499)
    data = log.read(0, 1 << 30).records
    assert len(data) == len(many)
    assert values_of(data) == [b"%d" % i for i in range(1500)]
    assert all(b.header.partition_leader_epoch == 2 and b.is_valid() for b in iter_batches(data))


def test_a_read_never_skips_batches_a_budget_left_unread(tmp_path):
    """A budget that ends inside a segment ends the read there: it must not go on to a later
    segment whose first batch happens to be small (a consumer would skip offsets; found by the
    full-disk test, where 500-record batches sat in 1 MB segments)."""
    config = LogConfig.from_properties({"segment.bytes": 2100})
    log = Log.open(tmp_path / "t-0", config, now_ms=NOW)
    big = [bytes([i]) * 1000 for i in range(2)]
    for _ in range(4):  # one 2-record batch of ~2 KB per segment
        log.append_as_leader(batch(big), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(batch([b"tiny"]), leader_epoch=0, now_ms=NOW)  # opens a segment
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6, 8]
    whole_first = log.segments[0].size_bytes
    data = log.read(0, whole_first + 100).records  # the next segment's first batch is bigger
    got = offsets_of(data)
    assert got == list(range(got[-1] + 1)), f"offsets must be contiguous from 0, got {got}"
    everything = offsets_of(log.read(0, 1 << 20).records)
    assert everything == list(range(log.log_end_offset))
