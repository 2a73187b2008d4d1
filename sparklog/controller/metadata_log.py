"""The controller's metadata log: `__cluster_metadata-0` + snapshots, durable in a directory or
an object store (DESIGN D7; `metadata.log.dir`).

The log brokers fetch is a sparklog `Log` in the controller's data dir
(`__cluster_metadata-0/`): one v2 batch per controller write, JSON record values, null keys.
Its durable copy is a `MetadataStore` (`metadata_store.py`): one object per write, created at
most once, in `metadata.log.dir` — the data dir itself by default, a shared filesystem's mount,
or `s3://bucket/prefix` — plus a snapshot of the image every `metadata.log.snapshot.records`
records. The working log is a cache rebuilt from the store at every start, so a driver
restarted on another host recovers the cluster.

Opening = load the newest snapshot, rebuild the working log, replay it from the snapshot's
offset, and return the image: the single-node equivalent of KRaft's snapshot + log replay.
Every append is durable before it is applied or announced (the store fsyncs or the object store
acknowledged it). The log is never truncated at the front: brokers follow it from offset 0.

Not thread-safe: owned by the controller's event loop thread; only the store's writes
(`write_batch`, `write_snapshot`) may run on a writer thread, one at a time.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sparklog.controller.metadata_store import (
    LOG_DIR_NAME,
    MetadataLogFencedError,
    MetadataStore,
    open_metadata_store,
    read_range,
)
from sparklog.errors import MessageTooLargeError
from sparklog.metadata.image import MetadataImage
from sparklog.metadata.log_records import MetadataRecordError, encode_record
from sparklog.records import SimpleRecord, build_batch, iter_batches
from sparklog.storage.config import LogConfig
from sparklog.storage.log import FetchDataInfo, Log

logger = logging.getLogger(__name__)

METADATA_LOG_DIR = LOG_DIR_NAME  # f"{METADATA_TOPIC}-{METADATA_PARTITION}"
#: One controller write is one batch; a 10,000-partition CreateTopics is ~2 MB of records.
METADATA_LOG_CONFIG = LogConfig(max_message_bytes=16 * 1024 * 1024)
_REPLAY_READ_BYTES = 4 * 1024 * 1024
_CONTROLLER_EPOCH = 0  # single-node controller: one leader epoch for the metadata log
_CLAIM_ATTEMPTS = 20


class MetadataLog:
    """Append-only metadata log plus periodic snapshots of the image."""

    def __init__(
        self,
        store: MetadataStore,
        log_: Log,
        snapshot_records: int,
        snapshot_offset: int,
    ) -> None:
        assert snapshot_records >= 1
        self.store = store
        self._log = log_
        self.snapshot_records = snapshot_records
        self.snapshot_offset = snapshot_offset  # offset of the newest durable snapshot (0: none)
        self._fenced: MetadataLogFencedError | None = None

    @property
    def directory(self) -> Path:
        """The working log's parent directory (on the driver's disk)."""
        return self._log.directory.parent

    @classmethod
    def open(
        cls,
        location: str | os.PathLike[str] | MetadataStore,
        *,
        now_ms: int,
        snapshot_records: int = 1000,
        storage_options: Mapping[str, str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> tuple[MetadataLog, MetadataImage]:
        """Open (or create) the metadata log durable at `location` (a directory, an
        object-store URI or a store) with its working copy in `cache_dir` (default: the
        directory); returns it and the replayed image."""
        if isinstance(location, str | os.PathLike):
            store = open_metadata_store(location, storage_options)
        else:
            store = location
        if cache_dir is None and store.directory is None:
            raise ValueError(f"{location} is an object store: give a local cache_dir")
        working_dir = Path(cache_dir) if cache_dir is not None else store.directory
        assert working_dir is not None
        working_dir.mkdir(parents=True, exist_ok=True)
        image = store.load_snapshot() or MetadataImage()
        snapshot_offset = image.offset
        log_ = Log.open(working_dir / METADATA_LOG_DIR, METADATA_LOG_CONFIG, now_ms=now_ms)
        try:
            store.recover(log_, now_ms)
            if log_.log_end_offset < image.offset:
                logger.warning(
                    "metadata log ends at %d, before the snapshot at %d: restarting it there",
                    log_.log_end_offset,
                    image.offset,
                )
                log_.truncate_fully_and_start_at(image.offset)
            if log_.log_start_offset > image.offset:
                raise MetadataRecordError(
                    f"metadata log in {store.location} starts at {log_.log_start_offset} but the "
                    f"image needs records from {image.offset}"
                )
            _replay(log_, image)
            log_.update_high_watermark(log_.log_end_offset)
        except BaseException:
            log_.close()
            raise
        return cls(store, log_, snapshot_records, snapshot_offset), image

    @property
    def end_offset(self) -> int:
        """The next offset to be written (every record below it is durable)."""
        return self._log.log_end_offset

    @property
    def leader_epoch(self) -> int:
        """The metadata log's leader epoch (one writer, so one epoch; DescribeQuorum)."""
        return _CONTROLLER_EPOCH

    @property
    def start_offset(self) -> int:
        return self._log.log_start_offset

    def append(self, records: Sequence[Mapping[str, Any]], now_ms: int) -> int:
        """Append `records` as one batch, make it durable, and return its first offset.

        Raises MetadataLogFencedError, now and on every later call, once another controller
        wrote the durable log past this one's view of it."""
        batch = self.prepare(records, now_ms)
        self.write_durably(batch)
        return self.appended(batch, now_ms)

    def claim(
        self,
        records: Callable[[], Sequence[Mapping[str, Any]]],
        now_ms: int,
        image: MetadataImage,
    ) -> Sequence[Mapping[str, Any]]:
        """Append `records()` (a starting controller's claim) at the durable log's end, whoever
        wrote last: when another controller (a zombie still running, or a driver starting at
        the same time) wrote the next offset first, read what it wrote into the log and
        `image`, and try again at the new end with `records()` computed anew. Returns the
        records written; the caller applies them to `image`."""
        for _attempt in range(_CLAIM_ATTEMPTS):
            written = records()
            batch = self.prepare(written, now_ms)
            try:
                self.store.write_batch(self._log.log_end_offset, batch)
            except MetadataLogFencedError:
                self.store.catch_up(self._log, now_ms)
                _replay(self._log, image)
                self._log.update_high_watermark(self._log.log_end_offset)
                continue
            self.appended(batch, now_ms)
            return written
        raise MetadataLogFencedError(
            f"another controller wrote the metadata log at {self.store.location} "
            f"{_CLAIM_ATTEMPTS} times while this one claimed it at start; stop the other driver"
        )

    def prepare(self, records: Sequence[Mapping[str, Any]], now_ms: int) -> bytes:
        """The next batch: `records` at the log end (written by `write_durably`)."""
        assert records, "a controller write has at least one record"
        self.check_not_fenced()
        batch = build_batch(
            [SimpleRecord(value=encode_record(r)) for r in records],
            base_offset=self._log.log_end_offset,
            now_ms=now_ms,
            partition_leader_epoch=_CONTROLLER_EPOCH,
        )
        if len(batch) > METADATA_LOG_CONFIG.max_message_bytes:
            raise MessageTooLargeError(
                f"a controller write of {len(batch)} bytes exceeds the metadata log's "
                f"{METADATA_LOG_CONFIG.max_message_bytes}"
            )
        return batch

    def write_durably(self, batch: bytes) -> None:
        """Make a prepared batch durable in the store (may run on a writer thread)."""
        base = next(iter_batches(batch)).header.base_offset
        self._on_store_call(self.store.write_batch, base, batch)

    def appended(self, batch: bytes, now_ms: int) -> int:
        """Append a durable batch to the working log (on the owner's thread); its first offset."""
        first = self._log.log_end_offset
        assert next(iter_batches(batch)).header.base_offset == first, "batches go at the end"
        self._log.append_as_follower(batch, now_ms)
        self._log.update_high_watermark(self._log.log_end_offset)
        return first

    def check_next_offset_free(self) -> None:
        """Probe the store for a write of another controller at this log's end (may run on a
        writer thread); MetadataLogFencedError, now and at every later write, if there is one."""
        self._on_store_call(self.store.check_next_offset_free, self._log.log_end_offset)

    def _on_store_call(self, call: Any, *args: Any) -> None:
        try:
            call(*args)
        except MetadataLogFencedError as e:
            if self._fenced is None:
                logger.error("%s", e)
            self._fenced = e
            raise

    @property
    def fenced(self) -> bool:
        """Whether another controller took the log over (this one must write nothing more)."""
        return self._fenced is not None

    def check_not_fenced(self) -> None:
        if self._fenced is not None:
            raise self._fenced

    def read(self, fetch_offset: int, max_bytes: int) -> FetchDataInfo:
        """Whole batches from the one holding `fetch_offset` (OffsetOutOfRangeError outside
        [start, end]); at least one batch when any exists, however large."""
        return self._log.read(fetch_offset, max_bytes)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets: (offset, timestamp) for -1 latest, -2 earliest, -3 max or a time."""
        return self._log.fetch_offset_by_timestamp(timestamp)

    def snapshot_due(self, image: MetadataImage) -> bool:
        """Whether `snapshot_records` records were applied since the last snapshot."""
        return image.offset - self.snapshot_offset >= self.snapshot_records

    def maybe_snapshot(self, image: MetadataImage) -> bool:
        """Write a snapshot when `snapshot_records` records were applied since the last one."""
        if not self.snapshot_due(image):
            return False
        self.write_snapshot(image)
        return True

    def write_snapshot(self, image: MetadataImage) -> None:
        self.store.write_snapshot(*self.snapshot_of(image))
        self.snapshot_offset = image.offset

    def snapshot_of(self, image: MetadataImage) -> tuple[int, bytes, bytes]:
        """What `store.write_snapshot` takes: the offset, the image as JSON and the batches
        since the store's last segment (read on the owner's thread)."""
        assert image.offset == self.end_offset, "snapshot of an image that is not the log's"
        self.check_not_fenced()
        data = json.dumps({"offset": image.offset, "image": image.to_dict()}, sort_keys=True)
        batches = read_range(self._log, self.store.segment_end, image.offset)
        return image.offset, data.encode(), batches

    def close(self) -> None:
        self._log.close()


def _replay(log_: Log, image: MetadataImage) -> None:
    """Apply every record in the log from `image.offset` to its end."""
    while image.offset < log_.log_end_offset:
        data = bytes(log_.read(image.offset, _REPLAY_READ_BYTES).records)  # no copy of bytes
        if image.apply_batches(data) == 0:
            raise MetadataRecordError(
                f"metadata log {log_.directory} has no readable record at offset {image.offset}"
            )
