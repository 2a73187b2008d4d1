"""Log compaction: keep the latest record per key (Kafka's `LogCleaner` and `Cleaner`; what is
kept of each batch is decided in `offset_map.py`, which log is cleaned in `cleaner_manager.py`,
the cleaner thread is `log_cleaner.py`).

Theory of operation. A round cleans one log (chosen by `CleanerManager`, see
`cleaner_manager.py`) in two passes over the segments below the first uncleanable offset:

1. *Offset map.* The dirty section [first dirty offset, first uncleanable offset) is read
   into an `OffsetMap` key -> latest offset, skipping aborted transactional batches, until the
   map's memory budget is full. `end_offset` = the map's latest offset + 1 is how far this
   round cleans; it becomes the log's new first dirty offset.
2. *Copy.* Every segment from the log start to `end_offset` is re-read (clean section too),
   in groups whose combined size fits one segment (`group_segments_by_size`). Each group is
   rewritten into one `<base>.*.cleaned` segment, keeping a record iff it is the latest of its
   key (or beyond the map), it has a key, and it is not a tombstone whose delete horizon passed.
   Batches keep their base offset, last offset delta, producer id/epoch, base sequence,
   attributes and leader epoch (Kafka's `MemoryRecords.filterTo`); the cleaned segment then
   replaces the group through `Log.replace_segments` (the `.swap` rename is the commit point).

Retention rules, as Kafka's `Cleaner.cleanInto`:

- Tombstones and markers (KIP-534): the first clean that keeps a tombstone, or a marker whose
  transaction has no data left, rewrites its batch with a delete horizon
  (now + `delete.retention.ms`) in the base timestamp; a clean after the horizon drops it.
- Aborted transactional batches are dropped (the aborted ranges come from the txn indexes); an
  ABORT marker stays, and its entry is copied into the cleaned `.txnindex`, while any batch of
  its transaction remains; a COMMIT marker stays while the round saw data of its transaction.
- The batch holding an active producer's last sequence (or, with no data, its last marker) is
  kept, emptied if need be (`RETAIN_EMPTY`), so idempotence and fencing survive compaction.
- The last batch of each group is kept (emptied if need be), so a cleaned segment always ends
  at its group's last offset: the loader's swap completion then replaces exactly the group.
  Kafka keeps only the round's last batch this way.

Concurrency: the cleaner reads segments with `Log.read_segment_bytes` (the log lock is held per
chunk) and writes the `.cleaned` segment without any log lock; only `replace_segments` takes
it. Retention or truncation running meanwhile makes the round give up
(`LogCleaningAbortedError`) and delete its `.cleaned` files. `LogCleaner` runs rounds on a
daemon thread (`log_cleaner.py`); `clean_once(now_ms)` runs one round on the caller's thread
(tests).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparklog.records.batch import (
    RecordBatch,
    batch_size_at,
    iter_batches,
    read_header,
)
from sparklog.records.errors import CorruptRecordError
from sparklog.settings import (
    Check,
    ConfigType,
    Range,
    Scope,
    Setting,
    UpdateMode,
    Validator,
    define,
)
from sparklog.storage.cleaner_manager import (
    LogCleaningAbortedError,
    LogToClean,
    segments_in_range,
)
from sparklog.storage.local_log import SegmentsChangedError
from sparklog.storage.offset_map import (
    BatchFilter,
    CleanedTransactionMetadata,
    CleanerStats,
    LastRecord,
    OffsetMap,
)
from sparklog.storage.segment import LogSegment, file_name
from sparklog.structs import INT32_MAX, TopicPartition

if TYPE_CHECKING:
    from sparklog.storage.log import Log

logger = logging.getLogger(__name__)

__all__ = [
    "CleanedTransactionMetadata",
    "Cleaner",
    "CleanerConfig",
    "CleanerStats",
    "LastRecord",
    "LogCleaningAbortedError",
    "group_segments_by_size",
]

CLEANED_SUFFIX = ".cleaned"


def _cleaner(name: str, kind: ConfigType, default: object, doc: str, rule: Validator) -> Setting:
    return Setting(
        f"log.cleaner.{name}",
        kind,
        default,
        rule,
        doc=doc,
        scope=Scope.BROKER,
        group="cleaner",
        attribute=name.replace(".", "_"),
        dynamic=UpdateMode.CLUSTER_WIDE,  # Kafka's `LogCleaner.ReconfigurableConfigs`
    )


#: Kafka's `CleanerConfig` settings (the broker's `log.cleaner.*`).
CLEANER_SETTINGS = define(
    _cleaner(
        "dedupe.buffer.size",
        ConfigType.LONG,
        128 * 1024 * 1024,
        "memory for the key -> offset map of one cleaning round",
        Range(1),
    ),
    _cleaner("io.buffer.size", ConfigType.INT, 512 * 1024, "read/write buffer", Range(1)),
    _cleaner(
        "io.buffer.load.factor",
        ConfigType.DOUBLE,
        0.9,
        "how full the offset map may get",
        Check(lambda v: 0 < v <= 1, "in (0, 1]"),
    ),
    _cleaner("backoff.ms", ConfigType.LONG, 15_000, "sleep when nothing is cleanable", Range(0)),
)
_C = CLEANER_SETTINGS.default


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """Broker-level cleaner settings, Kafka's `log.cleaner.*` names and defaults."""

    dedupe_buffer_size: int = _C("log.cleaner.dedupe.buffer.size")
    io_buffer_size: int = _C("log.cleaner.io.buffer.size")
    io_buffer_load_factor: float = _C("log.cleaner.io.buffer.load.factor")
    backoff_ms: int = _C("log.cleaner.backoff.ms")

    def __post_init__(self) -> None:
        CLEANER_SETTINGS.check_values(self)

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> CleanerConfig:
        """From broker properties named like Kafka's (`log.cleaner.backoff.ms`, ...)."""
        return cls(**CLEANER_SETTINGS.parse(props, what="cleaner setting"))


# -- grouping ------------------------------------------------------------------------------


def group_segments_by_size(
    segments: Sequence[LogSegment],
    max_size_bytes: int,
    max_index_size_bytes: int,
    first_uncleanable_offset: int,
) -> list[list[LogSegment]]:
    """Consecutive segments grouped so each group's log bytes fit `segment.bytes`, its offset
    and time index bytes fit `segment.index.bytes`, and its offsets fit int32 relative to the
    group's base (Kafka's `groupSegmentsBySize`); each group becomes one cleaned segment."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_bytes = segments[i].size_bytes
        index_bytes = segments[i].offset_index.size_bytes
        time_index_bytes = segments[i].time_index.size_bytes
        i += 1
        while i < len(segments):
            candidate = segments[i]
            # The candidate's last offset, bounded by the next base (or the round's end).
            last_offset = (
                segments[i + 1].base_offset - 1
                if i + 1 < len(segments)
                else first_uncleanable_offset - 1
            )
            if not (
                log_bytes + candidate.size_bytes <= max_size_bytes
                and index_bytes + candidate.offset_index.size_bytes <= max_index_size_bytes
                and time_index_bytes + candidate.time_index.size_bytes <= max_index_size_bytes
                and (candidate.size_bytes == 0 or last_offset - group[0].base_offset <= INT32_MAX)
            ):
                break
            group.append(candidate)
            log_bytes += candidate.size_bytes
            index_bytes += candidate.offset_index.size_bytes
            time_index_bytes += candidate.time_index.size_bytes
            i += 1
        groups.append(group)
    return groups


# -- one log ---------------------------------------------------------------------------------


def last_records_of_active_producers(log_: Log) -> dict[int, LastRecord]:
    """Kafka's `UnifiedLog.lastRecordsOfActiveProducers`, read from the log's producer state."""
    return {
        producer_id: LastRecord(last if last >= 0 else None, epoch)
        for producer_id, (last, epoch) in log_.last_records_of_active_producers().items()
    }


class Cleaner:
    """Cleans one log per `clean` call (Kafka's `Cleaner`); reusable, owns its offset map.

    `check_done(tp)` runs before each I/O chunk and raises to stop the round.
    Thread-safety: one thread at a time.
    """

    def __init__(
        self,
        config: CleanerConfig | None = None,
        check_done: Callable[[TopicPartition], None] | None = None,
    ) -> None:
        self.config = config or CleanerConfig()
        self.offset_map = OffsetMap(
            self.config.dedupe_buffer_size, self.config.io_buffer_load_factor
        )
        self._check_done = check_done or (lambda tp: None)

    def clean(self, cleanable: LogToClean, now_ms: int) -> tuple[int, CleanerStats]:
        """Clean `cleanable.log`; returns the offset the next round starts at, and stats."""
        log_ = cleanable.log
        tp = cleanable.topic_partition
        stats = CleanerStats()
        segments = log_.segments
        upper = cleanable.first_uncleanable_offset
        self.build_offset_map(tp, log_, segments, cleanable.first_dirty_offset, upper, stats)
        end_offset = self.offset_map.latest_offset + 1
        if end_offset <= cleanable.first_dirty_offset:
            raise ValueError(
                f"log.cleaner.dedupe.buffer.size ({self.config.dedupe_buffer_size}) cannot hold "
                f"the keys of one batch of {log_.directory.name} at {cleanable.first_dirty_offset}"
            )
        to_clean = segments_in_range(segments, 0, end_offset)
        groups = group_segments_by_size(
            to_clean, log_.config.segment_bytes, log_.config.segment_index_bytes, upper
        )
        txn = CleanedTransactionMetadata()
        for group in groups:
            # The segment after the group exists: the active one is never cleaned.
            group_end = segments[segments.index(group[-1]) + 1].base_offset
            self.clean_segments(tp, log_, group, group_end, now_ms, stats, txn, upper)
            stats.groups_cleaned += 1
        stats.buffer_utilization = self.offset_map.utilization
        return end_offset, stats

    # -- pass 1: the offset map ---------------------------------------------------------------

    def build_offset_map(
        self,
        tp: TopicPartition,
        log_: Log,
        segments: Sequence[LogSegment],
        start_offset: int,
        end_offset: int,
        stats: CleanerStats,
    ) -> None:
        """Fill the offset map from [start, end), stopping where its budget runs out."""
        self.offset_map.clear()
        dirty = segments_in_range(segments, start_offset, end_offset)
        txn = CleanedTransactionMetadata()
        txn.add_aborted_transactions(log_.collect_aborted_transactions(start_offset, end_offset))
        for i, segment in enumerate(dirty):
            next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end_offset
            if self._map_segment(tp, log_, segment, start_offset, next_start, txn, stats):
                logger.debug("offset map full in segment %d of %s", segment.base_offset, tp)
                return

    def _map_segment(
        self,
        tp: TopicPartition,
        log_: Log,
        segment: LogSegment,
        start_offset: int,
        next_segment_start: int,
        txn: CleanedTransactionMetadata,
        stats: CleanerStats,
    ) -> bool:
        """Add one segment's keys; True when the map filled up inside it."""
        offset_map = self.offset_map
        for batch in self._read_batches(tp, log_, segment):
            header = batch.header
            stats.map_bytes_read += header.size_in_bytes
            if header.last_offset < start_offset:
                continue
            if header.is_control:
                txn.on_control_batch_read(header, batch.records())
                stats.map_messages_read += header.records_count
            elif txn.on_batch_read(header):
                stats.map_messages_read += header.records_count  # aborted: keys do not count
            else:
                for record in batch.records():
                    stats.map_messages_read += 1
                    if record.key is None or record.offset < start_offset:
                        continue
                    if not offset_map.put(record.key, record.offset):
                        return True
            offset_map.update_latest_offset(header.last_offset)
        # Offsets may have gaps (an earlier clean): the whole segment has been read.
        offset_map.update_latest_offset(next_segment_start - 1)
        return False

    # -- pass 2: copying ----------------------------------------------------------------------

    def clean_segments(
        self,
        tp: TopicPartition,
        log_: Log,
        group: list[LogSegment],
        group_end_offset: int,
        now_ms: int,
        stats: CleanerStats,
        txn: CleanedTransactionMetadata,
        round_upper_offset: int,
    ) -> None:
        """Rewrite `group` (ending before `group_end_offset`) into one segment and swap it in."""
        cleaned = _new_cleaned_segment(log_, group)
        txn.cleaned_index = cleaned.txn_index
        batch_filter = BatchFilter(
            self.offset_map,
            txn,
            last_records_of_active_producers(log_),
            now_ms=now_ms,
            delete_retention_ms=log_.config.delete_retention_ms,
            round_upper_offset=round_upper_offset,
            stats=stats,
        )
        try:
            for i, segment in enumerate(group):
                upper = group[i + 1].base_offset if i + 1 < len(group) else group_end_offset
                # The whole segment's range: the cleaned .txnindex is rebuilt from these.
                txn.add_aborted_transactions(
                    log_.collect_aborted_transactions(segment.base_offset, upper)
                )
                last = i == len(group) - 1
                self._clean_into(tp, log_, segment, cleaned, batch_filter, last_in_group=last)
            cleaned.on_becoming_inactive()
            cleaned.flush()  # fsync here, not under the log lock inside replace_segments
            try:
                log_.replace_segments(cleaned, group)
            except SegmentsChangedError as e:  # retention or truncation changed the group
                raise LogCleaningAbortedError(str(e)) from e
        except BaseException:
            if cleaned.suffix == CLEANED_SUFFIX:  # past the swap commit point the loader owns it
                cleaned.delete()
            raise

    def _clean_into(
        self,
        tp: TopicPartition,
        log_: Log,
        source: LogSegment,
        dest: LogSegment,
        batch_filter: BatchFilter,
        *,
        last_in_group: bool,
    ) -> None:
        stats = batch_filter.stats
        out: list[bytes] = []
        out_bytes = 0
        source_size = source.size_bytes
        for batch in self._read_batches(tp, log_, source, source_size):
            header = batch.header
            is_last = last_in_group and batch.position + header.size_in_bytes == source_size
            kept = batch_filter.filter(batch, last_in_group=is_last)
            stats.bytes_read += header.size_in_bytes
            if kept is None:
                continue
            assert dest.can_hold(header.last_offset), "groups keep offsets within int32"
            out.append(kept)
            out_bytes += len(kept)
            stats.bytes_written += len(kept)
            if out_bytes >= self.config.io_buffer_size:
                _append_batches(dest, out)
                out, out_bytes = [], 0
        _append_batches(dest, out)

    # -- reading ------------------------------------------------------------------------------

    def _read_batches(
        self, tp: TopicPartition, log_: Log, segment: LogSegment, size: int | None = None
    ) -> Iterator[RecordBatch]:
        """The batches of a non-active segment, CRC-checked, read a chunk at a time."""
        size = segment.size_bytes if size is None else size
        position = 0
        chunk_bytes = self.config.io_buffer_size
        while position < size:
            self._check_done(tp)
            wanted = min(chunk_bytes, size - position)
            data = log_.read_segment_bytes(segment, position, wanted)
            if data is None or len(data) < wanted:
                raise LogCleaningAbortedError(
                    f"segment {segment.base_offset} of {tp} was removed or truncated while "
                    "being cleaned"
                )
            consumed = 0
            for batch in iter_batches(data, allow_partial_tail=True):
                batch.position += position
                batch.ensure_valid()
                consumed = batch.position - position + batch.header.size_in_bytes
                yield batch
            if consumed == 0:
                # One batch larger than the buffer: read exactly that batch next.
                needed = batch_size_at(data, 0)
                if needed is None or needed > size - position:
                    raise CorruptRecordError(
                        position, f"batch at {position} of {tp} runs past the segment"
                    )
                chunk_bytes = max(chunk_bytes, needed)
                continue
            chunk_bytes = self.config.io_buffer_size
            position += consumed


def _append_batches(dest: LogSegment, batches: list[bytes]) -> None:
    if not batches:
        return
    headers = [read_header(b) for b in batches]
    dest.append(b"".join(batches), headers)


def _new_cleaned_segment(log_: Log, group: list[LogSegment]) -> LogSegment:
    """An empty `<base>.*.cleaned` segment, removing leftovers of an earlier failed round
    (Kafka's `createNewCleanedSegment`)."""
    base = group[0].base_offset
    for kind in (".log", ".index", ".timeindex", ".txnindex"):
        (log_.directory / file_name(base, kind + CLEANED_SUFFIX)).unlink(missing_ok=True)
    return LogSegment(
        log_.directory, base, log_.config, created_ms=group[-1].created_ms, suffix=CLEANED_SUFFIX
    )


# -- the background thread ----------------------------------------------------------------------
