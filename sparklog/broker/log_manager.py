"""The logs in one broker data dir and their background work (Kafka's `LogManager`).

Layout (D4): `<data dir>/<topic>-<partition>/` per partition log with a `partition.metadata`
file naming its topic id, plus the broker-level checkpoints `recovery-point-offset-checkpoint`,
`log-start-offset-checkpoint` and `replication-offset-checkpoint` (high watermarks), written by
the scheduler thread every `log.flush.offset.checkpoint.interval.ms` /
`log.flush.start.offset.checkpoint.interval.ms` and on shutdown. Loading opens every log with its
checkpointed recovery point (`Log.open` recovers what follows it). A log whose topic is gone
from the metadata, or whose topic id differs (the topic was deleted and re-created while this
broker was away), is renamed `<dir>.<id>-stray` and left for an operator, as Kafka does. A clean
shutdown writes `.kafka_cleanshutdown` (the broker epoch) last; the next start takes it away
before opening any log and tells the controller the epoch (KIP-966: without it the controller
must assume the log lost its unflushed tail).

The scheduler thread runs retention (`log.retention.check.interval.ms`), the flush policy
(`log.flush.scheduler.interval.ms`) and the checkpoints; the log cleaner (compaction, and
retention of compacted logs) runs in its own thread when `log.cleaner.enable` is true.

Thread-safety: the manager's map of logs is guarded by a lock; each `Log` guards itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from sparklog.broker.config import BrokerConfig
from sparklog.broker.log_dir_failure import LogDirFailureChannel
from sparklog.broker.meta_properties import kafka_uuid_string, parse_kafka_uuid
from sparklog.storage.checkpoint import (
    CorruptCheckpointError,
    OffsetCheckpointFile,
    fsync_dir,
    write_atomically,
)
from sparklog.storage.config import LogConfig
from sparklog.storage.log import Log
from sparklog.storage.log_cleaner import LogCleaner
from sparklog.structs import TopicPartition

logger = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
#: Kafka's `CleanShutdownFileHandler`: written last by a clean shutdown, holding the broker epoch
#: then; deleted at start. A start without it may follow a power loss that took the log's
#: unflushed tail, which the controller must know (KIP-966's unclean-shutdown detection).
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
PARTITION_METADATA_FILE = "partition.metadata"

#: (topic, partition) -> (topic id, config) when this broker hosts it, else None
HostedLookup = Callable[[str, int], "tuple[uuid.UUID, LogConfig] | None"]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def parse_log_dir_name(name: str) -> TopicPartition | None:
    """`my-topic-3` -> ("my-topic", 3); None for anything else (stray, delete, files)."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit() or "." in partition:
        return None
    if name.endswith(("-delete", "-stray", "-future")):
        return None
    return TopicPartition(topic, int(partition))


def read_partition_metadata(directory: Path) -> uuid.UUID | None:
    try:
        text = (directory / PARTITION_METADATA_FILE).read_text("utf-8")
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        key, _sep, value = line.partition(":")
        if key.strip() == "topic_id":
            try:
                return parse_kafka_uuid(value.strip())
            except ValueError:
                return None
    return None


def write_partition_metadata(directory: Path, topic_id: uuid.UUID) -> None:
    text = f"version: 0\ntopic_id: {kafka_uuid_string(topic_id)}\n"
    write_atomically(directory / PARTITION_METADATA_FILE, text.encode("utf-8"))


class LogManager:
    """Owns the partition logs of one data dir (already locked by the caller)."""

    def __init__(
        self,
        data_dir: Path,
        config: BrokerConfig,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.data_dir = data_dir
        self.config = config
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._logs: dict[TopicPartition, Log] = {}
        self._recovery_points = OffsetCheckpointFile(data_dir / RECOVERY_POINT_CHECKPOINT)
        self._log_starts = OffsetCheckpointFile(data_dir / LOG_START_OFFSET_CHECKPOINT)
        self._high_watermarks = OffsetCheckpointFile(data_dir / REPLICATION_OFFSET_CHECKPOINT)
        self._stopping = threading.Event()
        self._scheduler: threading.Thread | None = None
        self.cleaner = _make_cleaner(config)
        self.dir_failures = LogDirFailureChannel(data_dir)
        self.retention_runs = 0
        self.segments_deleted = 0
        #: what every log's fsyncs run inside (the broker's LogFlushStats timer)
        self.flush_timer: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext

    # -- clean shutdown marker (KIP-966) ----------------------------------------------------

    def take_clean_shutdown_epoch(self) -> int:
        """The broker epoch the last clean shutdown wrote, or -1 (crash, power loss, new dir);
        the marker is deleted (durably) before any log is opened, so a crash from here on is
        seen as unclean by the next start (Kafka's LogManager.loadLogs, KAFKA-10471)."""
        path = self.data_dir / CLEAN_SHUTDOWN_FILE
        try:
            content = json.loads(path.read_text(encoding="utf-8"))
            epoch = int(content["brokerEpoch"])
        except FileNotFoundError:
            return -1
        except (OSError, ValueError, KeyError, TypeError) as e:
            logger.warning("%s is unreadable (%s): this start counts as after a crash", path, e)
            epoch = -1
        path.unlink(missing_ok=True)
        fsync_dir(self.data_dir)
        return epoch

    def _write_clean_shutdown_marker(self, broker_epoch: int) -> None:
        content = {"version": 0, "brokerEpoch": broker_epoch}
        try:
            write_atomically(self.data_dir / CLEAN_SHUTDOWN_FILE, json.dumps(content).encode())
        except OSError as e:  # the next start counts as after a crash: safe, only slower
            logger.error("writing the clean shutdown marker failed: %s", e)

    # -- loading ----------------------------------------------------------------------------

    def load_logs(self, hosted: HostedLookup) -> dict[TopicPartition, Log]:
        """Open (recovering) every partition log in the dir that the metadata says we host."""
        recovery_points = self._read_checkpoint(self._recovery_points)
        log_starts = self._read_checkpoint(self._log_starts)
        high_watermarks = self._read_checkpoint(self._high_watermarks)
        self._remove_leftover_deletions()
        for directory in sorted(p for p in self.data_dir.iterdir() if p.is_dir()):
            tp = parse_log_dir_name(directory.name)
            if tp is None:
                continue
            found = hosted(*tp)
            stored_id = read_partition_metadata(directory)
            if found is None or (stored_id is not None and stored_id != found[0]):
                self._mark_stray(directory, "its topic is not hosted here any more")
                continue
            topic_id, config = found
            opened = Log.open(
                directory,
                config,
                now_ms=self._clock_ms(),
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=log_starts.get(tp, 0),
                producer_id_expiration_ms=self.config.producer_id_expiration_ms,
                remote_storage_system_enable=self.remote_storage_system_enable,
            )
            if tp in high_watermarks:
                opened.update_high_watermark(high_watermarks[tp])
            if stored_id is None:
                write_partition_metadata(directory, topic_id)
            self._add(tp, opened)
            logger.info("loaded %r", opened)
        return self.logs()

    def _read_checkpoint(self, checkpoint: OffsetCheckpointFile) -> dict[TopicPartition, int]:
        try:
            return checkpoint.read()
        except CorruptCheckpointError as e:
            logger.warning("ignoring %s (logs recover from their start): %s", checkpoint.path, e)
            return {}

    def _remove_leftover_deletions(self) -> None:
        for directory in self.data_dir.glob("*-delete"):
            shutil.rmtree(directory, ignore_errors=True)

    def _mark_stray(self, directory: Path, why: str) -> None:
        target = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}-stray")
        logger.warning("moving %s aside to %s: %s", directory, target.name, why)
        directory.rename(target)

    def _add(self, tp: TopicPartition, log_: Log) -> None:
        log_.flush_timer = self.flush_timer
        with self._lock:
            self._logs[tp] = log_
        if self.cleaner is not None:
            self.cleaner.add_log(log_, tp)

    # -- logs -------------------------------------------------------------------------------

    def logs(self) -> dict[TopicPartition, Log]:
        with self._lock:
            return dict(self._logs)

    def get_log(self, topic: str, partition: int) -> Log | None:
        with self._lock:
            return self._logs.get(TopicPartition(topic, partition))

    def get_or_create_log(
        self, topic: str, partition: int, topic_id: uuid.UUID, config: LogConfig
    ) -> Log:
        """The partition's log, created empty (with its `partition.metadata`) if new."""
        tp = TopicPartition(topic, partition)
        existing = self.get_log(topic, partition)
        if existing is not None:
            return existing
        directory = self.data_dir / f"{topic}-{partition}"
        stored_id = read_partition_metadata(directory) if directory.exists() else None
        if stored_id is not None and stored_id != topic_id:
            self._mark_stray(directory, f"it belongs to an older topic id {stored_id}")
        created = Log.open(
            directory,
            config,
            now_ms=self._clock_ms(),
            producer_id_expiration_ms=self.config.producer_id_expiration_ms,
            remote_storage_system_enable=self.remote_storage_system_enable,
        )
        write_partition_metadata(directory, topic_id)
        self._add(tp, created)
        logger.info("created log %s with topic id %s", directory.name, topic_id)
        return created

    @property
    def remote_storage_system_enable(self) -> bool:
        """The broker has a remote tier: `remote.log.storage.system.enable` and a
        `remote.table.root` (topics opt in with `remote.storage.enable`)."""
        remote = self.config.remote
        return remote.remote_log_storage_system_enable and bool(remote.remote_table_root)

    def update_config(self, topic: str, partition: int, config: LogConfig) -> None:
        """A topic config changed; new segments and checks use it from now on. A log whose
        remote tier goes away (`remote.storage.enable` off) starts at its local log start."""
        found = self.get_log(topic, partition)
        if found is not None and found.config != config:
            was_remote = found.remote_log_enabled
            found.config = config
            if was_remote and not found.remote_log_enabled:
                found.maybe_increment_log_start_offset(found.local_log_start_offset)
                found.update_highest_offset_in_remote_storage(-1)

    def delete_log(self, topic: str, partition: int) -> None:
        """The partition left this broker: close its log and remove its directory."""
        tp = TopicPartition(topic, partition)
        with self._lock:
            removed = self._logs.pop(tp, None)
        if removed is None:
            return
        if self.cleaner is not None:
            self.cleaner.remove_log(tp)
        removed.close()
        target = removed.directory.with_name(f"{removed.directory.name}.{uuid.uuid4().hex}-delete")
        removed.directory.rename(target)
        shutil.rmtree(target, ignore_errors=True)
        logger.info("deleted log %s", removed.directory.name)

    # -- background work --------------------------------------------------------------------

    def start_background(self) -> None:
        """Start the scheduler thread and the cleaner."""
        assert self._scheduler is None
        self._stopping.clear()
        self._scheduler = threading.Thread(
            target=self._run_scheduler, name=f"kafka-scheduler-{self.data_dir.name}", daemon=True
        )
        self._scheduler.start()
        if self.cleaner is not None:
            self.cleaner.start()

    def _tasks(self) -> list[tuple[int, Callable[[int], object]]]:
        c = self.config
        return [
            (c.log_retention_check_interval_ms, self.cleanup_logs),
            (c.log_flush_scheduler_interval_ms, self.flush_dirty_logs),
            (c.log_flush_offset_checkpoint_interval_ms, lambda _now: self.checkpoint_offsets()),
            (
                c.log_flush_start_offset_checkpoint_interval_ms,
                lambda _now: self.checkpoint_log_start_offsets(),
            ),
        ]

    def _run_scheduler(self) -> None:
        tasks = self._tasks()
        start = self._clock_ms()
        next_run = [start + max(1, interval) for interval, _ in tasks]
        while not self._stopping.is_set():
            now = self._clock_ms()
            for i, (interval, task) in enumerate(tasks):
                if now >= next_run[i]:
                    self._run_task(task, now)
                    next_run[i] = now + max(1, interval)
            wait_ms = max(1, min(next_run) - self._clock_ms())
            self._stopping.wait(min(wait_ms, 60_000) / 1000)

    def _run_task(self, task: Callable[[int], object], now_ms: int) -> None:
        if self.dir_failures.offline:
            return
        try:
            task(now_ms)
        except OSError as e:  # a full or failing disk takes the dir offline
            self.dir_failures.mark_offline(e, f"background task {task}")
        except Exception:  # noqa: BLE001 - one failed pass must not end background work
            logger.exception("background task %s failed in %s", task, self.data_dir)

    def cleanup_logs(self, now_ms: int) -> int:
        """Retention of delete-policy logs (compacted ones are the cleaner's); returns the
        number of segments deleted."""
        deleted = 0
        for tp, log_ in self.logs().items():
            if log_.closed or (self.cleaner is not None and log_.config.compact):
                continue
            try:
                deleted += log_.delete_old_segments(now_ms)
            except Exception:  # noqa: BLE001
                if not log_.closed:  # deleted concurrently: nothing to do
                    logger.exception("retention of %s-%d failed", *tp)
        self.retention_runs += 1
        self.segments_deleted += deleted
        if deleted:
            logger.info("retention deleted %d segment(s) in %s", deleted, self.data_dir)
        return deleted

    def flush_dirty_logs(self, now_ms: int) -> None:
        for log_ in self.logs().values():
            if not log_.closed:
                log_.maybe_flush(now_ms)

    def checkpoint_offsets(self) -> None:
        """Write the recovery points and high watermarks of every open log."""
        logs = {tp: lg for tp, lg in self.logs().items() if not lg.closed}
        self._recovery_points.write({tp: lg.recovery_point for tp, lg in logs.items()})
        self._high_watermarks.write({tp: lg.high_watermark for tp, lg in logs.items()})

    def checkpoint_log_start_offsets(self) -> None:
        logs = {tp: lg for tp, lg in self.logs().items() if not lg.closed}
        self._log_starts.write({tp: lg.log_start_offset for tp, lg in logs.items()})

    # -- shutdown ---------------------------------------------------------------------------

    def shutdown(self, *, clean: bool = True, broker_epoch: int = -1) -> None:
        """Stop background work and close every log; a clean shutdown flushes and writes the
        checkpoints first (an unclean one leaves recovery to the next start), then, when every
        log closed and `broker_epoch` is known, the clean shutdown marker."""
        self._stopping.set()
        if self._scheduler is not None:
            self._scheduler.join()
            self._scheduler = None
        if self.cleaner is not None:
            self.cleaner.stop()
        logs = self.logs()
        clean = clean and not self.dir_failures.offline  # nothing more is written to a dead dir
        all_flushed = clean
        for tp, log_ in logs.items():
            if clean:
                try:
                    log_.close()
                except OSError as e:  # a full or failed disk: close as a crash would
                    logger.error("closing %s-%d failed (%s); recovery will check it", *tp, e)
                    _close_without_flush(log_)
                    all_flushed = False
        if clean:
            checkpoints = (
                (self._recovery_points, {tp: lg.recovery_point for tp, lg in logs.items()}),
                (self._high_watermarks, {tp: lg.high_watermark for tp, lg in logs.items()}),
                (self._log_starts, {tp: lg.log_start_offset for tp, lg in logs.items()}),
            )
            for checkpoint, values in checkpoints:
                try:
                    checkpoint.write(values)
                except OSError as e:  # the previous checkpoint stays; recovery re-scans more
                    logger.error("writing a checkpoint on shutdown failed: %s", e)
            if all_flushed and broker_epoch >= 0:
                self._write_clean_shutdown_marker(broker_epoch)
        else:
            for log_ in logs.values():
                _close_without_flush(log_)
        with self._lock:
            self._logs.clear()


def _close_without_flush(log_: Log) -> None:
    """Release file handles as a killed process would: no fsync, no checkpoint, no snapshot."""
    for segment in log_.segments:
        with contextlib.suppress(Exception):  # best effort: the process 'died'
            segment.close()
    log_.closed = True


def _make_cleaner(config: BrokerConfig) -> LogCleaner | None:
    """The log cleaner (compaction) unless `log.cleaner.enable` is false."""
    if not config.log_cleaner_enable:
        return None
    return LogCleaner(config.cleaner, clock_ms=wall_clock_ms)
