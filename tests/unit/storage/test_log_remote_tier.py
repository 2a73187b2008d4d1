"""A log with a remote tier (KIP-405): log start vs local log start, local retention that only
deletes what the tier holds, whole-log retention moving the log start, restart."""

from __future__ import annotations

import pytest

from sparklog.errors import OffsetMovedToTieredStorageError, OffsetOutOfRangeError
from sparklog.records import SimpleRecord, build_batch
from sparklog.storage.config import LogConfig
from sparklog.storage.log import Log

NOW = 1_700_000_000_000


def tiered(**kw: object) -> LogConfig:
    props = {"segment.bytes": 300, "index.interval.bytes": 1, "remote.storage.enable": True}
    return LogConfig.from_properties({**props, **kw})


def filled(path, config: LogConfig, n: int = 20, *, system: bool = True) -> Log:
    log = Log.open(path, config, now_ms=NOW, remote_storage_system_enable=system)
    for i in range(n):
        log.append_as_leader(build_batch([SimpleRecord(b"v%02d" % i, None, NOW)]), 0, NOW)
    log.update_high_watermark(log.log_end_offset)
    return log


def segment_ends(log: Log) -> list[int]:
    bases = [s.base_offset for s in log.segments]
    return bases[1:] + [log.log_end_offset]


def test_local_retention_deletes_only_copied_segments(tmp_path):
    log = filled(tmp_path / "t-0", tiered(**{"local.retention.ms": 1000}))
    assert log.remote_log_enabled and len(log.segments) > 3
    later = NOW + 10_000
    assert log.delete_old_segments(later) == 0  # nothing copied: nothing deleted
    second_end = segment_ends(log)[1]
    log.update_highest_offset_in_remote_storage(second_end - 1)
    assert log.delete_old_segments(later) == 2
    assert log.local_log_start_offset == second_end == log.segments[0].base_offset
    assert log.log_start_offset == 0  # the tier still holds [0, local start)
    with pytest.raises(OffsetMovedToTieredStorageError):
        log.read(0, 1 << 20)
    assert log.read(second_end, 1 << 20).records


def test_copied_but_within_local_retention_stays(tmp_path):
    log = filled(tmp_path / "t-0", tiered(**{"local.retention.ms": 60_000}))
    log.update_highest_offset_in_remote_storage(log.log_end_offset - 1)
    assert log.delete_old_segments(NOW + 1000) == 0
    count = len(log.segments)
    # the active segment is wholly in the tier too (freshness): rolled and deleted with them
    assert log.delete_old_segments(NOW + 120_000) == count
    assert log.local_log_start_offset == log.log_end_offset == 20


def test_an_active_segment_past_local_retention_is_rolled_for_the_copy(tmp_path):
    """Kafka's deleteOldSegments: once every closed segment is gone and the active one is past
    local retention, the log rolls it, so the copy task takes it and retention deletes it."""
    log = filled(tmp_path / "t-0", tiered(**{"local.retention.ms": 1000}), n=2)
    assert len(log.segments) == 1
    assert log.delete_old_segments(NOW + 500) == 0  # within local retention: not rolled
    assert len(log.segments) == 1
    assert log.delete_old_segments(NOW + 10_000) == 0  # rolled; not in the tier yet
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert log.delete_old_segments(NOW + 10_000) == 0  # the new active segment is empty
    assert len(log.segments) == 2
    log.update_highest_offset_in_remote_storage(1)
    assert log.delete_old_segments(NOW + 10_000) == 1
    assert log.local_log_start_offset == 2 == log.log_end_offset
    assert log.log_start_offset == 0


def test_the_active_segment_is_not_rolled_above_the_high_watermark_or_while_closed_stay(tmp_path):
    log = filled(tmp_path / "t-0", tiered(**{"local.retention.ms": 1000}))
    count = len(log.segments)
    assert log.delete_old_segments(NOW + 10_000) == 0  # closed segments not copied: no roll
    assert len(log.segments) == count
    log.append_as_leader(build_batch([SimpleRecord(b"x", None, NOW)]), 0, NOW)  # above the HW
    active = log.active_segment.base_offset
    log.update_highest_offset_in_remote_storage(active - 1)
    closed = len(log.segments) - 1
    assert log.delete_old_segments(NOW + 10_000) == closed
    assert [s.base_offset for s in log.segments] == [active]


def test_local_retention_bytes_follows_retention_bytes(tmp_path):
    log = filled(tmp_path / "t-0", tiered(**{"retention.bytes": 400}))
    assert log.config.local_retention_bytes_effective == 400
    log.update_highest_offset_in_remote_storage(log.log_end_offset - 1)
    assert log.delete_old_segments(NOW) > 0
    assert log.log_start_offset == 0 < log.local_log_start_offset


def test_without_system_enable_the_log_is_local_only(tmp_path):
    log = filled(tmp_path / "t-0", tiered(**{"retention.ms": 1000}), system=False)
    assert not log.remote_log_enabled
    assert log.delete_old_segments(NOW + 10_000) > 0
    assert log.log_start_offset == log.local_log_start_offset > 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 1 << 20)


def test_copy_disabled_uses_whole_retention_without_copy_check(tmp_path):
    config = tiered(**{"retention.ms": 1000, "remote.log.copy.disable": True})
    log = filled(tmp_path / "t-0", config)
    assert log.delete_old_segments(NOW + 10_000) > 0


def test_whole_log_retention_moves_log_start_and_local_start(tmp_path):
    log = filled(tmp_path / "t-0", tiered(**{"local.retention.ms": 1000}))
    log.update_highest_offset_in_remote_storage(log.log_end_offset - 1)
    log.delete_old_segments(NOW + 10_000)
    local = log.local_log_start_offset
    log.maybe_increment_log_start_offset(3)  # the tier expired [0, 3)
    assert (log.log_start_offset, log.local_log_start_offset) == (3, local)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100)
    with pytest.raises(OffsetMovedToTieredStorageError):
        log.read(3, 100)
    log.maybe_increment_log_start_offset(local + 1)  # DeleteRecords past the local start
    assert log.log_start_offset == log.local_log_start_offset == local + 1


def test_delete_records_below_local_start_keeps_local_segments(tmp_path):
    log = filled(tmp_path / "t-0", tiered(**{"local.retention.ms": 1000}))
    log.update_highest_offset_in_remote_storage(segment_ends(log)[0] - 1)
    log.delete_old_segments(NOW + 10_000)
    local, count = log.local_log_start_offset, len(log.segments)
    assert log.delete_records_before(1) == 1
    assert (log.local_log_start_offset, len(log.segments)) == (local, count)


def test_log_start_survives_restart(tmp_path):
    config = tiered(**{"local.retention.ms": 1000})
    log = filled(tmp_path / "t-0", config)
    log.update_highest_offset_in_remote_storage(log.log_end_offset - 1)
    log.delete_old_segments(NOW + 10_000)
    log.maybe_increment_log_start_offset(2)
    local, end = log.local_log_start_offset, log.log_end_offset
    log.close()
    reopened = Log.open(
        tmp_path / "t-0",
        config,
        now_ms=NOW,
        log_start_offset=2,  # what the log-start-offset checkpoint holds
        recovery_point=end,
        remote_storage_system_enable=True,
    )
    assert (reopened.log_start_offset, reopened.local_log_start_offset) == (2, local)
    assert reopened.log_end_offset == end
    with pytest.raises(OffsetMovedToTieredStorageError):
        reopened.read(2, 100)


def test_truncate_fully_keeping_log_start_below(tmp_path):
    log = Log.open(tmp_path / "t-0", tiered(), now_ms=NOW, remote_storage_system_enable=True)
    log.truncate_fully_and_start_at(50, log_start_offset=10)
    assert (log.log_start_offset, log.local_log_start_offset, log.log_end_offset) == (10, 50, 50)
    with pytest.raises(OffsetMovedToTieredStorageError):
        log.read(10, 100)


def test_only_local_bytes_counts_what_the_tier_lacks(tmp_path):
    log = filled(tmp_path / "t-0", tiered())
    assert log.only_local_bytes() == log.size_in_bytes
    first_end = segment_ends(log)[0]
    log.update_highest_offset_in_remote_storage(first_end - 1)
    assert log.only_local_bytes() == log.size_in_bytes - log.segments[0].size_bytes


def test_truncation_below_the_local_start_keeps_the_tiered_log_start(tmp_path):
    log = filled(tmp_path / "t-0", tiered(**{"local.retention.ms": 1000}))
    log.update_highest_offset_in_remote_storage(log.log_end_offset - 1)
    log.delete_old_segments(NOW + 10_000)
    local = log.local_log_start_offset
    assert log.truncate_to(local - 1, NOW)
    assert (log.log_start_offset, log.local_log_start_offset) == (0, local - 1)
