"""The log manager: loading and recovery, strays, checkpoints, retention, deletion."""

from __future__ import annotations

import json
import time
import uuid

from sparklog.broker.config import BrokerConfig
from sparklog.broker.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
    parse_log_dir_name,
    read_partition_metadata,
)
from sparklog.records import SimpleRecord, build_batch
from sparklog.storage.checkpoint import OffsetCheckpointFile
from sparklog.storage.config import LogConfig

NOW = 1_700_000_000_000


def manager(tmp_path, **settings) -> LogManager:
    return LogManager(tmp_path, BrokerConfig.from_properties(settings), clock_ms=lambda: NOW)


def append(log, n, timestamp=NOW):
    for i in range(n):
        record = SimpleRecord(b"v%d" % i, b"k%d" % i, timestamp=timestamp)
        log.append_as_leader(build_batch([record]), 0, NOW)


def test_dir_names():
    assert parse_log_dir_name("my-topic-3") == ("my-topic", 3)
    assert parse_log_dir_name("t-0.abc-delete") is None
    assert parse_log_dir_name("t-0.abc-stray") is None
    assert parse_log_dir_name("meta.properties") is None
    assert parse_log_dir_name("nopartition") is None


def test_logs_survive_a_clean_restart_with_checkpoints(tmp_path):
    topic_id = uuid.uuid4()
    lm = manager(tmp_path)
    log = lm.get_or_create_log("t", 0, topic_id, LogConfig())
    append(log, 3)
    log.update_high_watermark(3)
    log.delete_records_before(1)
    assert read_partition_metadata(tmp_path / "t-0") == topic_id
    lm.shutdown()
    assert OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): 3}
    assert OffsetCheckpointFile(tmp_path / LOG_START_OFFSET_CHECKPOINT).read() == {("t", 0): 1}

    again = manager(tmp_path)
    loaded = again.load_logs(lambda t, p: (topic_id, LogConfig()))
    reopened = loaded[("t", 0)]
    assert (reopened.log_start_offset, reopened.log_end_offset, reopened.high_watermark) == (
        1,
        3,
        3,
    )
    again.shutdown()


def test_logs_recover_after_an_unclean_shutdown(tmp_path):
    topic_id = uuid.uuid4()
    lm = manager(tmp_path)
    append(lm.get_or_create_log("t", 0, topic_id, LogConfig()), 4)
    lm.shutdown(clean=False)
    assert not (tmp_path / RECOVERY_POINT_CHECKPOINT).exists()
    with (tmp_path / "t-0" / "00000000000000000000.log").open("ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00")  # a torn batch at the tail
    again = manager(tmp_path)
    reopened = again.load_logs(lambda t, p: (topic_id, LogConfig()))[("t", 0)]
    assert reopened.log_end_offset == 4
    again.shutdown()


def test_unhosted_or_recreated_topics_are_moved_aside(tmp_path):
    lm = manager(tmp_path)
    old_id = uuid.uuid4()
    lm.get_or_create_log("gone", 0, uuid.uuid4(), LogConfig())
    lm.get_or_create_log("recreated", 0, old_id, LogConfig())
    lm.shutdown()
    again = manager(tmp_path)
    new_id = uuid.uuid4()
    loaded = again.load_logs(lambda t, p: (new_id, LogConfig()) if t == "recreated" else None)
    assert loaded == {}
    strays = sorted(p.name.split(".")[0] for p in tmp_path.glob("*-stray"))
    assert strays == ["gone-0", "recreated-0"]
    fresh = again.get_or_create_log("recreated", 0, new_id, LogConfig())
    assert fresh.log_end_offset == 0 and read_partition_metadata(fresh.directory) == new_id
    again.shutdown()


def test_delete_log_removes_the_directory(tmp_path):
    lm = manager(tmp_path)
    append(lm.get_or_create_log("t", 0, uuid.uuid4(), LogConfig()), 1)
    lm.delete_log("t", 0)
    assert lm.get_log("t", 0) is None
    assert not any(p.name.startswith("t-0") for p in tmp_path.iterdir())
    lm.shutdown()


def test_retention_pass_deletes_expired_segments_of_delete_policy_logs(tmp_path):
    lm = manager(tmp_path)
    config = LogConfig.from_properties({"segment.bytes": "100", "retention.ms": "1000"})
    log = lm.get_or_create_log("t", 0, uuid.uuid4(), config)
    append(log, 4, timestamp=NOW - 10_000)
    log.update_high_watermark(log.log_end_offset)
    compacted = lm.get_or_create_log(
        "c",
        0,
        uuid.uuid4(),
        LogConfig.from_properties(
            {"segment.bytes": "100", "retention.ms": "1000", "cleanup.policy": "compact,delete"}
        ),
    )
    append(compacted, 4, timestamp=NOW - 10_000)
    compacted.update_high_watermark(compacted.log_end_offset)
    assert lm.cleanup_logs(NOW) == 3  # every segment but the active one
    assert log.log_start_offset == 3
    assert compacted.log_start_offset == 0, "compacted logs are the cleaner's"
    lm.shutdown()


def test_background_thread_runs_retention_and_stops(tmp_path):
    lm = LogManager(
        tmp_path, BrokerConfig.from_properties({"log.retention.check.interval.ms": "10"})
    )
    lm.start_background()
    deadline = time.monotonic() + 10
    while lm.retention_runs < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    lm.shutdown()
    assert lm.retention_runs >= 2
    assert lm._scheduler is None


def test_a_clean_shutdown_leaves_its_broker_epoch_for_the_next_start_only(tmp_path):
    """Kafka's `.kafka_cleanshutdown` (KIP-966): written last by a clean shutdown with the broker
    epoch, taken away at the next start, so a crash after that start reads as unclean."""
    lm = manager(tmp_path)
    assert lm.take_clean_shutdown_epoch() == -1  # a new dir
    lm.shutdown(clean=True, broker_epoch=42)
    assert json.loads((tmp_path / CLEAN_SHUTDOWN_FILE).read_text()) == {
        "version": 0,
        "brokerEpoch": 42,
    }
    again = manager(tmp_path)
    assert again.take_clean_shutdown_epoch() == 42
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    again.shutdown(clean=False, broker_epoch=43)  # a crash (kill -9, power loss) writes nothing
    assert manager(tmp_path).take_clean_shutdown_epoch() == -1


def test_an_unreadable_clean_shutdown_marker_counts_as_a_crash(tmp_path):
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_text("{torn")
    assert manager(tmp_path).take_clean_shutdown_epoch() == -1
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
