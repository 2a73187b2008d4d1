"""Opening a partition log from disk, with crash recovery (Kafka's `LogLoader`).

Steps: finish or discard interrupted cleaner swaps (`.swap` files complete, `.cleaned` and
`.deleted` files go), open every segment, then validate every batch from the segment holding
the recovery point on (and any segment whose indexes are missing or inconsistent), cutting
the log at the first torn or corrupt batch and dropping any segment after it. Finally the
leader-epoch cache is trimmed to the log and producer state is loaded from the newest
snapshot and replayed from there.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from sparklog.records.batch import NO_PARTITION_LEADER_EPOCH
from sparklog.storage.abstract_index import CorruptIndexError
from sparklog.storage.checkpoint import CorruptCheckpointError
from sparklog.storage.config import LogConfig
from sparklog.storage.epoch_cache import LeaderEpochFileCache
from sparklog.storage.producer_state import ProducerStateManager
from sparklog.storage.segment import LogSegment, file_name

logger = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(
    r"^(\d{20})\.(log|index|timeindex|txnindex)(\.swap|\.cleaned|\.deleted)?$"
)
EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"


def load_log(
    cls,
    directory: Path,
    config: LogConfig,
    *,
    now_ms: int,
    recovery_point: int,
    log_start_offset: int,
    producer_id_expiration_ms: int,
    remote_storage_system_enable: bool = False,
):
    """Open the log in `directory` (see module doc); `cls` is `Log`. A log with a remote tier
    keeps the checkpointed `log_start_offset` below its first segment (the tier holds those)."""
    directory.mkdir(parents=True, exist_ok=True)
    _finish_interrupted_swaps(directory)
    segments = _open_segments(directory, config, now_ms)
    segments = _recover_segments(segments, recovery_point)
    if not segments:
        segments = [LogSegment(directory, log_start_offset, config, created_ms=now_ms)]
    local_log_start_offset = max(log_start_offset, segments[0].base_offset)
    log_end_offset = segments[-1].read_next_offset()
    epoch_cache = _load_epoch_cache(directory, segments)
    epoch_cache.truncate_from_end(log_end_offset)
    producer_state = ProducerStateManager(
        directory, producer_id_expiration_ms=producer_id_expiration_ms
    )
    instance = cls(
        directory,
        config,
        segments,
        log_start_offset=log_start_offset,
        recovery_point=min(recovery_point, log_end_offset),
        epoch_cache=epoch_cache,
        producer_state=producer_state,
        now_ms=now_ms,
        remote_storage_system_enable=remote_storage_system_enable,
    )
    epoch_cache.truncate_from_start(instance.log_start_offset)
    reloaded = producer_state.load(local_log_start_offset, log_end_offset, now_ms)
    for corrupt in reloaded.corrupt_snapshots:
        logger.warning(
            "deleted corrupt producer snapshot %d in %s: %s",
            corrupt.offset,
            directory,
            corrupt.reason,
        )
    instance.replay_producer_state(reloaded.map_end_offset)
    return instance


def _finish_interrupted_swaps(directory: Path) -> None:
    """`.cleaned`/`.deleted` files are garbage; a `.swap` segment is a finished clean that
    replaces the old segments it covers (Kafka: the rename to `.swap` is the commit point)."""
    swaps: list[int] = []
    for path in directory.iterdir():
        match = _SEGMENT_FILE.match(path.name)
        if not match or not match.group(3):
            continue
        if match.group(3) in (".cleaned", ".deleted"):
            path.unlink(missing_ok=True)
        elif match.group(2) == "log":
            swaps.append(int(match.group(1)))
    for base in sorted(swaps):
        swap_log = directory / file_name(base, ".log.swap")
        next_offset = LogSegment(directory, base, LogConfig(), created_ms=0, suffix=".swap")
        end = next_offset.read_next_offset()
        next_offset.close()
        for path in list(directory.iterdir()):
            match = _SEGMENT_FILE.match(path.name)
            if match and not match.group(3) and base <= int(match.group(1)) < max(end, base + 1):
                path.unlink()
        for kind in ("log", "index", "timeindex", "txnindex"):
            swapped = directory / file_name(base, f".{kind}.swap")
            if swapped.exists():
                swapped.rename(directory / file_name(base, f".{kind}"))
        logger.info("completed interrupted segment swap at %d in %s", base, directory)
        assert not swap_log.exists()


def _open_segments(directory: Path, config: LogConfig, now_ms: int) -> list[LogSegment]:
    bases = sorted(
        int(m.group(1))
        for p in directory.iterdir()
        if (m := _SEGMENT_FILE.match(p.name)) and m.group(2) == "log" and not m.group(3)
    )
    segments = []
    for base in bases:
        missing_index = (
            not (directory / file_name(base, ".index")).exists()
            or not (directory / file_name(base, ".timeindex")).exists()
        )
        segment = LogSegment(directory, base, config, created_ms=now_ms)
        segment.needs_recovery = missing_index and segment.size_bytes > 0
        segments.append(segment)
    return segments


def _recover_segments(segments: list[LogSegment], recovery_point: int) -> list[LogSegment]:
    """Validate what may be unflushed or inconsistent; cut at the first bad batch."""
    for i, segment in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
        unflushed = next_base is None or next_base > recovery_point
        needs = unflushed or segment.needs_recovery
        if not needs:
            try:
                segment.sanity_check()
            except CorruptIndexError as e:
                logger.warning("rebuilding indexes of %s: %s", segment.log_path, e)
                needs = True
        if not needs:
            continue
        truncated = segment.recover()
        if truncated:
            logger.warning(
                "truncated %d invalid bytes at the end of %s", truncated, segment.log_path
            )
        end = segment.read_next_offset()
        later = segments[i + 1 :]
        if truncated and later or (later and later[0].base_offset < end):
            for dropped in later:
                logger.warning("deleting %s after a corrupt or torn segment", dropped.log_path)
                dropped.delete()
            return segments[: i + 1]
    # drop an empty leading segment set only when nothing else remains handled by caller
    return segments


def _load_epoch_cache(directory: Path, segments: list[LogSegment]) -> LeaderEpochFileCache:
    path = directory / EPOCH_CHECKPOINT_FILE
    try:
        return LeaderEpochFileCache(path)
    except CorruptCheckpointError as e:
        logger.warning("rebuilding %s from the batches: %s", path, e)
        path.unlink(missing_ok=True)
    cache = LeaderEpochFileCache(path)
    for segment in segments:
        for found in segment.iter_batches():
            epoch = found.header.partition_leader_epoch
            latest = cache.latest_epoch
            if epoch != NO_PARTITION_LEADER_EPOCH and (latest is None or epoch > latest):
                cache.assign(epoch, found.header.base_offset)
    return cache
