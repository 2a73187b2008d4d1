"""The controller's metadata log on the driver's disk: `__cluster_metadata-0` + a snapshot.

Layout (in the controller's data dir)::

    __cluster_metadata-0/          a sparklog `Log`: one v2 batch per controller write,
                                   JSON record values, null keys
    metadata.snapshot.json         {"offset": N, "image": MetadataImage.to_dict()}, written
                                   atomically every `metadata.log.snapshot.records` records

Opening = load the snapshot (if any), replay the log from its offset, and return the image:
the single-node equivalent of KRaft's snapshot + log replay. Every append is fsynced before it
returns, so what a response announces survives a crash; a torn tail is dropped by the log's
own recovery. The log is never truncated at the front: brokers follow it from offset 0.

Not thread-safe: owned by the controller's event loop thread.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sparklog.controller.image import MetadataImage, MetadataRecordError, encode_record
from sparklog.records import SimpleRecord, build_batch
from sparklog.storage.checkpoint import write_atomically
from sparklog.storage.config import LogConfig
from sparklog.storage.log import FetchDataInfo, Log

log = logging.getLogger(__name__)

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
METADATA_LOG_DIR = f"{METADATA_TOPIC}-{METADATA_PARTITION}"
SNAPSHOT_FILE = "metadata.snapshot.json"
#: One controller write is one batch; a 10,000-partition CreateTopics is ~2 MB of records.
METADATA_LOG_CONFIG = LogConfig(max_message_bytes=16 * 1024 * 1024)
_REPLAY_READ_BYTES = 4 * 1024 * 1024
_CONTROLLER_EPOCH = 0  # single-node controller: one leader epoch for the metadata log


class MetadataLog:
    """Append-only metadata log plus periodic snapshots of the image."""

    def __init__(
        self, directory: Path, log_: Log, snapshot_records: int, snapshot_offset: int
    ) -> None:
        assert snapshot_records >= 1
        self.directory = directory
        self._log = log_
        self.snapshot_records = snapshot_records
        self.snapshot_offset = snapshot_offset  # offset of the newest snapshot on disk (0: none)

    @classmethod
    def open(
        cls, directory: str | os.PathLike[str], *, now_ms: int, snapshot_records: int = 1000
    ) -> tuple[MetadataLog, MetadataImage]:
        """Open (or create) the metadata log in `directory`; returns it and the replayed image."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        image = load_snapshot(directory / SNAPSHOT_FILE) or MetadataImage()
        snapshot_offset = image.offset
        log_ = Log.open(directory / METADATA_LOG_DIR, METADATA_LOG_CONFIG, now_ms=now_ms)
        try:
            if log_.log_end_offset < image.offset:
                log.warning(
                    "metadata log ends at %d, before the snapshot at %d: restarting it there",
                    log_.log_end_offset,
                    image.offset,
                )
                log_.truncate_fully_and_start_at(image.offset)
            if log_.log_start_offset > image.offset:
                raise MetadataRecordError(
                    f"metadata log in {directory} starts at {log_.log_start_offset} but the image "
                    f"needs records from {image.offset}"
                )
            _replay(log_, image)
            log_.update_high_watermark(log_.log_end_offset)
        except BaseException:
            log_.close()
            raise
        return cls(directory, log_, snapshot_records, snapshot_offset), image

    @property
    def end_offset(self) -> int:
        """The next offset to be written (every record below it is durable)."""
        return self._log.log_end_offset

    @property
    def start_offset(self) -> int:
        return self._log.log_start_offset

    def append(self, records: Sequence[Mapping[str, Any]], now_ms: int) -> int:
        """Append `records` as one batch, fsync it, and return its first offset."""
        assert records, "a controller write has at least one record"
        batch = build_batch([SimpleRecord(value=encode_record(r)) for r in records], now_ms=now_ms)
        info = self._log.append_as_leader(batch, _CONTROLLER_EPOCH, now_ms)
        self._log.flush()
        self._log.update_high_watermark(self._log.log_end_offset)
        return info.first_offset

    def read(self, fetch_offset: int, max_bytes: int) -> FetchDataInfo:
        """Whole batches from the one holding `fetch_offset` (OffsetOutOfRangeError outside
        [start, end]); at least one batch when any exists, however large."""
        return self._log.read(fetch_offset, max_bytes)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets: (offset, timestamp) for -1 latest, -2 earliest, -3 max or a time."""
        return self._log.fetch_offset_by_timestamp(timestamp)

    def maybe_snapshot(self, image: MetadataImage) -> bool:
        """Write a snapshot when `snapshot_records` records were applied since the last one."""
        if image.offset - self.snapshot_offset < self.snapshot_records:
            return False
        self.write_snapshot(image)
        return True

    def write_snapshot(self, image: MetadataImage) -> None:
        assert image.offset == self.end_offset, "snapshot of an image that is not the log's"
        data = json.dumps({"offset": image.offset, "image": image.to_dict()}, sort_keys=True)
        write_atomically(self.directory / SNAPSHOT_FILE, data.encode())
        self.snapshot_offset = image.offset

    def close(self) -> None:
        self._log.close()


def load_snapshot(path: Path) -> MetadataImage | None:
    """The image in a snapshot file, None when there is none; MetadataRecordError if corrupt."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise MetadataRecordError(f"metadata snapshot {path} is not JSON: {e}") from None
    if not isinstance(data, dict) or "image" not in data or "offset" not in data:
        raise MetadataRecordError(f"metadata snapshot {path} lacks offset or image")
    image = MetadataImage.from_dict(data["image"])
    if image.offset != data["offset"]:
        raise MetadataRecordError(f"metadata snapshot {path}: offset and image disagree")
    return image


def _replay(log_: Log, image: MetadataImage) -> None:
    """Apply every record in the log from `image.offset` to its end."""
    while image.offset < log_.log_end_offset:
        data = log_.read(image.offset, _REPLAY_READ_BYTES).records
        if image.apply_batches(data) == 0:
            raise MetadataRecordError(
                f"metadata log {log_.directory} has no readable record at offset {image.offset}"
            )
