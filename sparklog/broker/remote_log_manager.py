"""Copying partition logs to their topic's Delta table, and expiring it (Kafka's
`RemoteLogManager` copy and expiration tasks; KIP-405, DESIGN D17).

A round (`RemoteLogManager.run_round`, in a worker thread) visits each topic whose logs here
have a remote tier (`Log.remote_log_enabled`: broker `remote.log.storage.system.enable`, topic
`remote.storage.enable`) once its period passed (`remote.log.manager.task.interval.ms`, or
`remote.table.freshness.ms` when that is >= 0 and shorter):

- every replica learns what the table holds (`copied_end_offset`) and records it as the log's
  `highest_offset_in_remote_storage`, which is all local retention may delete;
- the leader of each partition copies whole batches from the copied end (the log start for a
  first copy, which backfills an existing topic) up to min(HW, LSO): closed segments only, or
  also the stable prefix of the active segment when `remote.table.freshness.ms` >= 0. All of a
  topic's partitions led here go into ONE `TopicTable.append` (one Delta commit per topic per
  round, whatever the partition count), with the aborted transactions of each range from the
  transaction index. `remote.log.copy.disable` stops copies;
- the leader applies the whole log's `retention.ms` / `retention.bytes` (counting local bytes
  not in the table) and DeleteRecords (the log start) to the table, and moves the log start to
  the table's new start.

A `FencedUploadError` (another copier, e.g. the previous leader, moved the end) commits
nothing: the next round re-reads the table and continues from there, so nothing is copied twice
or skipped. A `RemoteStorageError` backs the topic off (`remote.log.manager.task.retry.
backoff.ms` doubling up to `.max.ms`), logged once until it heals; local retention keeps
everything not copied meanwhile. The copy byte rate (`remote.log.manager.copy.max.bytes.per.
second`) is a token bucket over rounds.

Topic lifecycle (`on_topics`): a topic deleted, or `remote.storage.enable` turned off with
`remote.log.delete.on.disable`, gets its table dropped by the broker that led its partition 0
(or, leaderless, was its lowest replica) when it last saw the topic; every broker forgets its
open handle. If that broker was down then, or restarted before the drop succeeded (pending
drops live in memory), the table stays (drop it by hand, docs/tiered-storage.md "Limits"): no
broker scans the root for tables of unknown topic ids, since one whose metadata lags would
take a just-created topic's table for an orphan.

Sans-IO apart from the table and the logs: times are passed in. One round at a time.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sparklog.broker.remote_tables import RemoteTables
from sparklog.errors import KafkaError
from sparklog.records.batch_header import batch_size_at, read_header
from sparklog.storage.log import Log
from sparklog.storage.remote.config import RemoteLogManagerConfig
from sparklog.storage.remote.tier import (
    FencedUploadError,
    RemoteStorageError,
    SegmentUpload,
    TopicTable,
)

logger = logging.getLogger(__name__)

#: most bytes one partition, and one topic, copies per round (bound the memory of a round; a
#: backlog takes several rounds, each one commit)
MAX_UPLOAD_BYTES = 32 << 20
MAX_ROUND_BYTES = 128 << 20
#: shortest period between two copies of a topic (remote.table.freshness.ms = 0 means "as
#: fresh as this allows", not a busy loop of Delta commits)
MIN_PERIOD_MS = 50
#: table maintenance (compaction of small files, checkpoint, vacuum: `maintain()`, when the
#: table has it) after this many commits by this broker, by the leader of partition 0 only
MAINTAIN_EVERY_COMMITS = 100


@dataclass(frozen=True, slots=True)
class TieredPartition:
    """A partition replica hosted here, as the event loop saw it when the round was planned."""

    topic: str
    partition: int
    topic_id: uuid.UUID
    log: Log
    is_leader: bool
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class TopicState:
    """What the manager remembers of a topic between rounds (from the metadata)."""

    topic_id: uuid.UUID
    remote_enabled: bool
    delete_on_disable: bool
    #: this broker drops (and maintains) the table: it leads partition 0, or partition 0 has
    #: no leader and this is its lowest replica
    leads_partition_zero: bool


@dataclass(slots=True)
class PartitionProgress:
    """Per-partition gauges: offsets the table lacks and how long ago it was caught up."""

    pending_offsets: int = 0
    pending_bytes: int = 0
    pending_segments: int = 0
    caught_up_ms: int = -1


@dataclass(slots=True)
class _Backoff:
    failures: int = 0
    logged: bool = False


class CopyByteRate:
    """`remote.log.manager.copy.max.bytes.per.second` as a token bucket holding at most one
    second of bytes; a copy may take at most the tokens there are (one batch at least)."""

    def __init__(self, bytes_per_second: int, now_ms: int) -> None:
        self.rate = bytes_per_second
        self.tokens = float(bytes_per_second)
        self._at = now_ms

    def available(self, now_ms: int) -> int:
        elapsed = max(0, now_ms - self._at)
        self._at = now_ms
        self.tokens = min(float(self.rate), self.tokens + self.rate * elapsed / 1000)
        return int(self.tokens)

    def spend(self, size: int) -> None:
        self.tokens -= size


@dataclass
class RoundStats:
    """What a round did (tests and logs)."""

    commits: int = 0
    copied_bytes: int = 0
    copied_offsets: int = 0
    fenced: int = 0
    failed_topics: list[str] = field(default_factory=list)
    dropped_tables: list[str] = field(default_factory=list)


class RemoteLogManager:
    """Copies and expires the remote tier of the partitions hosted here (see module doc)."""

    def __init__(
        self, config: RemoteLogManagerConfig, tables: RemoteTables, *, now_ms: int
    ) -> None:
        self.config = config
        self.tables = tables
        self.rate = CopyByteRate(config.remote_log_manager_copy_max_bytes_per_second, now_ms)
        self._round_lock = threading.Lock()
        self._due: dict[str, int] = {}
        self._backoff: dict[str, _Backoff] = {}
        self._known: dict[str, TopicState] = {}
        self._pending_drops: dict[str, uuid.UUID] = {}
        self._commits_since_maintenance: dict[str, int] = {}
        self._value_settings: dict[str, tuple[int, str, str]] = {}
        self._trimmed: dict[tuple[str, int], int] = {}
        self.progress: dict[tuple[str, int], PartitionProgress] = {}
        #: totals for Kafka's RemoteCopyBytesPerSec / RemoteCopyRequestsPerSec
        self.copied_bytes_total = 0
        self.copy_requests_total = 0
        self.failed_copy_requests_total = 0
        self.closed = False

    # -- metadata ---------------------------------------------------------------------------

    def on_topics(self, topics: Mapping[str, TopicState]) -> None:
        """The metadata moved: remember which tables to drop (topic deleted or re-created, or
        remote storage disabled with `remote.log.delete.on.disable`) by this broker; the next
        round drops them. Call from the event loop."""
        with self._round_lock:
            for name, before in list(self._known.items()):
                now = topics.get(name)
                gone = now is None or now.topic_id != before.topic_id
                disabled = now is not None and not gone and not now.remote_enabled
                if gone or disabled:
                    del self._known[name]
                    self.tables.forget(name)  # re-enabled later: open (create) it afresh
                    self._value_settings.pop(name, None)
                    wanted = gone or (now is not None and now.delete_on_disable)
                    if before.remote_enabled and before.leads_partition_zero and wanted:
                        self._pending_drops[name] = before.topic_id
                    self._due.pop(name, None)
            for name, state in topics.items():
                if state.remote_enabled:
                    self._known[name] = state
                    if self._pending_drops.get(name) == state.topic_id:
                        del self._pending_drops[name]  # enabled again before the drop ran

    # -- the round --------------------------------------------------------------------------

    def run_round(self, partitions: Sequence[TieredPartition], now_ms: int) -> RoundStats:
        """One pass over the topics that are due (worker thread; see module doc)."""
        stats = RoundStats()
        with self._round_lock:
            if self.closed:
                return stats
            self._drop_pending(stats)
            by_topic: dict[str, list[TieredPartition]] = {}
            for p in partitions:
                if p.log.remote_log_enabled and not p.log.closed:
                    by_topic.setdefault(p.topic, []).append(p)
            for gone in [t for t in self._due if t not in by_topic]:
                del self._due[gone]  # not tiered here any more: no wake-ups for it
            for topic, parts in sorted(by_topic.items()):
                if now_ms < self._due.get(topic, 0):
                    continue
                self._due[topic] = now_ms + self._period_ms(parts[0].log)
                try:
                    self._topic_round(topic, parts, now_ms, stats)
                except RemoteStorageError as e:
                    copying = any(p.is_leader for p in parts)
                    self._failed(topic, e, now_ms, stats, loud=copying)
                except Exception as e:  # noqa: BLE001 - a log closed under us, a bug: one topic
                    if not any(p.log.closed for p in parts):
                        logger.exception("the remote tier round of %s failed", topic)
                    self._failed(topic, RemoteStorageError(repr(e)), now_ms, stats, loud=False)
                else:
                    self._healed(topic)
        return stats

    def failures(self, topic: str) -> int:
        """Rounds of `topic` that failed in a row (0 once one succeeds)."""
        state = self._backoff.get(topic)
        return 0 if state is None else state.failures

    def next_due_ms(self, now_ms: int) -> int:
        """When the earliest topic is due (the runner sleeps until then, bounded)."""
        with self._round_lock:
            interval = self.config.remote_log_manager_task_interval_ms
            due = min(self._due.values(), default=now_ms + interval)
        return max(now_ms, due)

    def close(self) -> None:
        """No round after this one (waits for one in flight)."""
        with self._round_lock:
            self.closed = True

    def _period_ms(self, log: Log) -> int:
        interval = self.config.remote_log_manager_task_interval_ms
        freshness = log.config.remote_table_freshness_ms
        if freshness < 0:
            return interval
        return min(interval, max(MIN_PERIOD_MS, freshness))

    def _topic_round(
        self, topic: str, parts: list[TieredPartition], now_ms: int, stats: RoundStats
    ) -> None:
        copying = any(p.is_leader for p in parts)
        table = self.tables.table(topic, parts[0].topic_id, create=copying)
        table.refresh()
        if copying:
            self._configure_values(table, parts[0].log)
        for p in parts:
            end = table.copied_end_offset(p.partition)
            if end is not None:
                p.log.update_highest_offset_in_remote_storage(end - 1)
        leaders = [p for p in parts if p.is_leader]
        if not leaders:
            return
        if not leaders[0].log.config.remote_log_copy_disable:
            self._copy(table, leaders, now_ms, stats)
        for p in leaders:
            self._expire(table, p, now_ms)
            self._track(p, now_ms)
        self._maybe_maintain(table)

    def _configure_values(self, table: TopicTable, log: Log) -> None:
        """Hand the topic's `remote.table.value.format` / `.schema` to the table when they
        changed (typed value columns of later uploads; `configure_values`, when the table
        has it). A schema the table refuses is logged once; uploads go on without it."""
        wanted = (log.config.remote_table_value_format, log.config.remote_table_value_schema)
        configure = getattr(table, "configure_values", None)
        applied = (id(table), *wanted)  # a table opened afresh starts binary
        if configure is None or self._value_settings.get(table.topic) == applied:
            return
        self._value_settings[table.topic] = applied
        try:
            configure(*wanted)
        except ValueError as e:  # ValueSchemaError
            logger.error("the table of %s keeps its value columns: %s", table.topic, e)

    def _maybe_maintain(self, table: TopicTable) -> None:
        """Compact, checkpoint and vacuum the table now and then (off the produce path: this
        is the worker thread), by one broker per topic (the leader of partition 0)."""
        topic = table.topic
        known = self._known.get(topic)
        maintain = getattr(table, "maintain", None)
        due = self._commits_since_maintenance.get(topic, 0) >= MAINTAIN_EVERY_COMMITS
        if not due or maintain is None or known is None or not known.leads_partition_zero:
            return
        self._commits_since_maintenance[topic] = 0
        try:
            done = maintain()
        except RemoteStorageError as e:
            logger.warning("maintenance of the table of %s failed (next time): %s", topic, e)
        else:
            logger.info("maintained the table of %s: %s", topic, done)

    # -- copy -------------------------------------------------------------------------------

    def _copy(
        self, table: TopicTable, leaders: list[TieredPartition], now_ms: int, stats: RoundStats
    ) -> None:
        uploads: list[SegmentUpload] = []
        room = MAX_ROUND_BYTES
        for p in leaders:
            budget = min(self.rate.available(now_ms), room, MAX_UPLOAD_BYTES)
            if budget <= 0:
                break
            upload = self._upload_for(table, p, budget)
            if upload is not None:
                uploads.append(upload)
                self.rate.spend(len(upload.records))
                room -= len(upload.records)
        if not uploads:
            return
        self.copy_requests_total += 1
        try:
            version = table.append(uploads)
        except FencedUploadError as e:
            stats.fenced += 1
            self._due[table.topic] = now_ms  # re-read the table and continue next round
            logger.info(
                "copy of %s fenced (%s); continuing from what the table holds", table.topic, e
            )
            return
        except RemoteStorageError:
            self.failed_copy_requests_total += 1
            raise
        by_partition = {p.partition: p for p in leaders}
        for upload in uploads:
            by_partition[upload.partition].log.update_highest_offset_in_remote_storage(
                upload.end_offset - 1
            )
            stats.copied_bytes += len(upload.records)
            stats.copied_offsets += upload.end_offset - upload.start_offset
        self.copied_bytes_total += sum(len(u.records) for u in uploads)
        if version is not None:
            stats.commits += 1
            topic = table.topic
            self._commits_since_maintenance[topic] = (
                self._commits_since_maintenance.get(topic, 0) + 1
            )

    def _upload_for(
        self, table: TopicTable, p: TieredPartition, max_bytes: int
    ) -> SegmentUpload | None:
        """The partition's next range: whole batches from the copied end (first copy: the
        log's start) below min(HW, LSO), and below the active segment unless the topic has
        `remote.table.freshness.ms` >= 0; None when there is nothing to copy. Offsets
        DeleteRecords removed before they were copied are skipped: the range then starts at
        the copied end with its first batch at the log start."""
        log = p.log
        copied = table.copied_end_offset(p.partition)
        start = log.local_log_start_offset if copied is None else copied
        read_from = max(start, log.log_start_offset)
        upper = min(log.high_watermark, log.last_stable_offset)
        if log.config.remote_table_freshness_ms < 0:
            upper = min(upper, log.active_segment.base_offset)
        if upper <= read_from:
            return None
        if read_from < log.local_log_start_offset:
            raise RemoteStorageError(
                f"{p.topic}-{p.partition}: the table ends at {start}, below the local log start "
                f"{log.local_log_start_offset}; the offsets between are in neither tier"
            )
        try:
            data = log.read(read_from, max_bytes, upper_bound_offset=upper).records
        except KafkaError as e:  # the log moved under us (truncation, deletion): next round
            logger.debug("%s-%d: nothing copied this round: %s", p.topic, p.partition, e)
            return None
        records = bytes(data) if not isinstance(data, bytes) else data
        if not records:
            return None
        first, end = _batch_span(records)
        if copied is not None and (first < copied or (first > copied and read_from == copied)):
            raise RemoteStorageError(
                f"{p.topic}-{p.partition}: the table ends at {copied}, not at a batch boundary "
                f"of the local log (its batch there starts at {first})"
            )
        aborted = tuple(log.collect_aborted_transactions(first, end))
        range_start = first if copied is None else copied
        return SegmentUpload(p.partition, range_start, end, records, aborted, p.leader_epoch)

    # -- expiry -----------------------------------------------------------------------------

    def _expire(self, table: TopicTable, p: TieredPartition, now_ms: int) -> None:
        """DeleteRecords and whole-log retention on the table; the log start follows."""
        log = p.log
        table_start = table.start_offset(p.partition)
        if table_start is None:
            return
        key = (p.topic, p.partition)
        if log.log_start_offset > table_start and self._trimmed.get(key) != log.log_start_offset:
            # once per log start: a batch straddling it stays, and asking again would commit
            table.delete_before(p.partition, log.log_start_offset)
            self._trimmed[key] = log.log_start_offset
        config = log.config
        if config.retention_ms < 0 and config.retention_bytes < 0:
            return
        retention_bytes = config.retention_bytes
        if retention_bytes >= 0:
            retention_bytes = max(0, retention_bytes - log.only_local_bytes())
        new_start = table.expire(
            p.partition,
            retention_ms=config.retention_ms,
            retention_bytes=retention_bytes,
            now_ms=now_ms,
        )
        if new_start is not None and new_start > log.log_start_offset:
            log.maybe_increment_log_start_offset(min(new_start, log.high_watermark))

    # -- lifecycle --------------------------------------------------------------------------

    def _drop_pending(self, stats: RoundStats) -> None:
        for topic, topic_id in list(self._pending_drops.items()):
            try:
                self.tables.table(topic, topic_id, create=True).drop()
            except RemoteStorageError as e:
                logger.warning("dropping the table of %s failed (retrying): %s", topic, e)
                continue
            del self._pending_drops[topic]
            self.tables.forget(topic)
            stats.dropped_tables.append(topic)
            logger.info("dropped the remote tier of %s (topic id %s)", topic, topic_id)

    def _failed(
        self, topic: str, error: RemoteStorageError, now_ms: int, stats: RoundStats, *, loud: bool
    ) -> None:
        """Back the topic off; a copying leader logs the first failure as an error (a follower,
        which only reads what the table holds, e.g. before the leader created it, at debug)."""
        state = self._backoff.setdefault(topic, _Backoff())
        state.failures += 1
        c = self.config
        delay = min(
            c.remote_log_manager_task_retry_backoff_max_ms,
            c.remote_log_manager_task_retry_backoff_ms * 2 ** min(state.failures - 1, 30),
        )
        self._due[topic] = now_ms + delay
        stats.failed_topics.append(topic)
        if loud and not state.logged:
            state.logged = True
            logger.error(
                "the remote tier of %s failed (local data is kept; retrying with back-off up "
                "to %d ms): %s",
                topic,
                c.remote_log_manager_task_retry_backoff_max_ms,
                error,
            )
        else:
            logger.debug("the remote tier of %s still fails: %s", topic, error)

    def _healed(self, topic: str) -> None:
        state = self._backoff.pop(topic, None)
        if state is not None and state.logged:
            logger.info("the remote tier of %s works again", topic)

    def _track(self, p: TieredPartition, now_ms: int) -> None:
        log = p.log
        progress = self.progress.setdefault((p.topic, p.partition), PartitionProgress())
        copied_end = log.highest_offset_in_remote_storage + 1
        upper = min(log.high_watermark, log.last_stable_offset)
        progress.pending_offsets = max(0, upper - max(copied_end, log.log_start_offset))
        progress.pending_bytes = log.only_local_bytes()
        segments = log.segments
        ends = [s.base_offset for s in segments[1:]]
        progress.pending_segments = sum(1 for end in ends if end > copied_end)
        if progress.pending_offsets == 0:
            progress.caught_up_ms = now_ms

    def forget_partitions(self, keep: set[tuple[str, int]]) -> None:
        """Drop the gauges of partitions no longer hosted or led here."""
        for key in [k for k in self.progress if k not in keep]:
            del self.progress[key]
        for key in [k for k in self._trimmed if k not in keep]:
            del self._trimmed[key]


def _batch_span(records: bytes) -> tuple[int, int]:
    """(base offset of the first batch, next offset after the last) of whole v2 batches."""
    first = read_header(records, 0).base_offset
    pos, last_pos = 0, 0
    while pos < len(records):
        size = batch_size_at(records, pos)
        if size is None or pos + size > len(records):
            break
        last_pos, pos = pos, pos + size
    return first, read_header(records, last_pos).next_offset
