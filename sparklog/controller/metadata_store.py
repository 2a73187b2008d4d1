"""Where the controller's metadata log is durable: a directory or an object store, one way.

`MetadataLog` always serves brokers from a working `Log` on the driver's disk
(`__cluster_metadata-0/`); the `MetadataStore` is the durable copy it is rebuilt from at every
start. The store keeps immutable objects, each created at most once (`storage.object_store.
Objects`: a conditional put `If-None-Match: *` on an object store, an fsynced temp file
`link`ed into place in a directory — the driver's disk or a shared filesystem's mount):

    meta.properties                           the cluster id (the first formatter's)
    __cluster_metadata-0/batches/<offset>     one per controller write: its v2 batch
    __cluster_metadata-0/segments/<a>-<b>     at a snapshot: the batches [a, b), together
    snapshots/<offset>.json                   {"offset": N, "image": ...}; the newest two kept

A start reads the newest snapshot, the chain of segments from offset 0 and the batches after
it (listed from there, so a long-lived log is not listed whole).

Fencing (one model for both backends): batch objects are never deleted, so the key of every
offset a controller could next write is taken once written. Two controllers that both believe
the log ends at N (a zombie driver and its successor) race for `batches/N`; the loser gets
`MetadataLogFencedError` and stops writing, and the log can never fork. A controller claims
the log at start by writing first (`LeaderChange`), so it is the zombie that loses. A retried
create whose first attempt landed finds its own bytes there and succeeds.

Directories written by sparklog before this layout (`__cluster_metadata-0/*.log` as the durable
log, `metadata.snapshot.json`) are adopted at the first start: the old log becomes segment
`0-<end>`, the old snapshot is read until a newer one exists.

Thread-safety: `write_batch` and `write_snapshot` may run on a writer thread while the owner
reads nothing else of the store; one caller at a time (the controller serializes its writes).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sparklog.metadata.image import MetadataImage
from sparklog.metadata.log_records import LEADER_CHANGE, MetadataRecordError, decode_record
from sparklog.records import iter_batches
from sparklog.storage.log import Log
from sparklog.storage.object_store import (
    DirectoryObjects,
    Objects,
    ObstoreObjects,
    StorageLocationError,
    is_object_store_uri,
    local_path,
    redact,
)

if TYPE_CHECKING:
    from obstore.store import ObjectStore

logger = logging.getLogger(__name__)

META_PROPERTIES = "meta.properties"
#: the snapshot file of directories written before the object layout (read, never written)
LEGACY_SNAPSHOT_FILE = "metadata.snapshot.json"
LOG_DIR_NAME = "__cluster_metadata-0"
_BATCHES = f"{LOG_DIR_NAME}/batches/"
_SEGMENTS = f"{LOG_DIR_NAME}/segments/"
_SNAPSHOTS = "snapshots/"
_SNAPSHOTS_KEPT = 2


class MetadataLogFencedError(Exception):
    """Another controller wrote the durable metadata log past this one's view of it."""


def open_metadata_store(
    location: str | os.PathLike[str], storage_options: Mapping[str, str] | None = None
) -> MetadataStore:
    """The store for `metadata.log.dir`: an object store for a URI, else a directory."""
    text = str(location)
    if is_object_store_uri(text):
        return ObjectMetadataStore(text, storage_options or {})
    return LocalMetadataStore(Path(local_path(text)))


def parse_snapshot(data: bytes, name: str) -> MetadataImage:
    """The image in snapshot `data`; MetadataRecordError naming `name` if it is corrupt."""
    try:
        parsed = json.loads(data)
    except ValueError as e:
        raise MetadataRecordError(f"metadata snapshot {name} is not JSON: {e}") from None
    if not isinstance(parsed, dict) or "image" not in parsed or "offset" not in parsed:
        raise MetadataRecordError(f"metadata snapshot {name} lacks offset or image")
    image = MetadataImage.from_dict(parsed["image"])
    if image.offset != parsed["offset"]:
        raise MetadataRecordError(f"metadata snapshot {name}: offset and image disagree")
    return image


class MetadataStore:
    """Batch, segment and snapshot objects (see the module doc) over one `Objects` backend."""

    def __init__(self, objects: Objects, directory: Path | None = None) -> None:
        self.objects = objects
        self.location = objects.location
        #: the local directory of a directory store (the working log's default home)
        self.directory = directory
        self._segment_end = 0  # every batch below this offset is in a segment object

    # -- objects ----------------------------------------------------------------------------

    def _get(self, key: str) -> bytes | None:
        try:
            return self.objects.get(key)
        except Exception as e:  # noqa: BLE001 - the backend's errors, named for the user
            raise self._unreachable("read", key, e) from None

    def _put_if_absent(self, key: str, data: bytes) -> bool:
        """Create `key`; False when it exists with other bytes (True when with these: a retried
        create whose first attempt landed)."""
        try:
            if self.objects.create(key, data):
                return True
        except Exception as e:  # noqa: BLE001 - the backend's errors, named for the user
            raise self._unreachable("write", key, e) from None
        return self._get(key) == data

    def _keys(self, prefix: str, start_after: str | None = None) -> list[str]:
        try:
            return self.objects.list(prefix, start_after)
        except Exception as e:  # noqa: BLE001 - the backend's errors, named for the user
            raise self._unreachable("list", prefix, e) from None

    def _unreachable(self, op: str, key: str, e: Exception) -> StorageLocationError:
        first = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        first = redact(first, self.objects.options)
        return StorageLocationError(
            f"metadata.log.dir {self.location}: cannot {op} {key}: {first}. {self.objects.hint}"
        )

    # -- cluster id and snapshots -----------------------------------------------------------

    def read_meta_properties(self) -> str | None:
        """The text of `meta.properties` (the cluster id), None when the store is new."""
        data = self._get(META_PROPERTIES)
        return None if data is None else data.decode()

    def create_meta_properties(self, text: str) -> str:
        """Write `meta.properties` unless present; returns the text that is there now."""
        if self._put_if_absent(META_PROPERTIES, text.encode()):
            return text
        found = self.read_meta_properties()  # another driver formatted it first: join it
        assert found is not None
        return found

    def load_snapshot(self) -> MetadataImage | None:
        """The newest snapshot's image; MetadataRecordError if it is corrupt."""
        keys = self._keys(_SNAPSHOTS)
        if not keys:
            if self.directory is not None and (self.directory / LEGACY_SNAPSHOT_FILE).exists():
                path = self.directory / LEGACY_SNAPSHOT_FILE
                return parse_snapshot(path.read_bytes(), str(path))
            return None
        data = self._get(keys[-1])
        if data is None:
            raise MetadataRecordError(f"metadata snapshot {self.location}/{keys[-1]} vanished")
        return parse_snapshot(data, f"{self.location}/{keys[-1]}")

    def write_snapshot(self, offset: int, data: bytes, batches: bytes) -> None:
        """Persist a snapshot of the image at `offset` (JSON `data`), after a segment object of
        `batches`: the log's batches from `segment_end` to `offset`."""
        if offset > self._segment_end:
            self._put_if_absent(f"{_SEGMENTS}{self._segment_end:020d}-{offset:020d}", batches)
            self._segment_end = offset
        self._put_if_absent(f"{_SNAPSHOTS}{offset:020d}.json", data)
        for key in self._keys(_SNAPSHOTS)[:-_SNAPSHOTS_KEPT]:
            try:
                self.objects.delete(key)
            except Exception:  # noqa: BLE001 - an old snapshot left behind costs only space
                logger.warning("could not delete old metadata snapshot %s/%s", self.location, key)

    @property
    def segment_end(self) -> int:
        """Every batch below this offset is in a segment object."""
        return self._segment_end

    # -- the log ----------------------------------------------------------------------------

    def recover(self, working: Log, now_ms: int) -> None:
        """Rebuild the working log from the objects: segments, then the batches after them."""
        segments = {}
        for key in self._keys(_SEGMENTS):
            base, _, last = key.rsplit("/", 1)[1].partition("-")
            segments[int(base)] = (int(last), key)
        chain_end = 0
        while chain_end in segments and segments[chain_end][0] > chain_end:
            chain_end = segments[chain_end][0]
        after = _batch_key(chain_end - 1) if chain_end else None
        batches = {int(key.rsplit("/", 1)[1]): key for key in self._keys(_BATCHES, after)}
        if not segments and not batches and self._adopt_legacy_log(working, now_ms):
            return self.recover(working, now_ms)
        working.truncate_fully_and_start_at(0)
        offset = 0
        while True:
            if offset in segments and segments[offset][0] > offset:
                end, key = segments[offset]
                self._append_object(working, key, now_ms)
                self._segment_end = end
            elif offset in batches:
                self._append_object(working, batches[offset], now_ms)
            else:
                break
            if working.log_end_offset <= offset:
                raise MetadataRecordError(f"{self.location}: object at offset {offset} is empty")
            offset = working.log_end_offset
        beyond = [key for base, key in batches.items() if base >= offset]
        if beyond:
            raise MetadataRecordError(
                f"metadata log at {self.location} has no batch at offset {offset} but has "
                f"{beyond[0]}: objects are missing; restore them or start from a new location"
            )
        logger.info("metadata log recovered from %s up to offset %d", self.location, offset)

    def catch_up(self, working: Log, now_ms: int) -> None:
        """Append the batches another controller wrote after the working log's end."""
        end = working.log_end_offset
        for key in self._keys(_BATCHES, _batch_key(end - 1) if end else None):
            if int(key.rsplit("/", 1)[1]) != working.log_end_offset:
                break
            self._append_object(working, key, now_ms)

    def _adopt_legacy_log(self, working: Log, now_ms: int) -> bool:
        """A directory whose durable log is a plain `Log` (written before this layout): store its
        batches as segment 0-<end>. Whether there was one."""
        if self.directory is None:
            return False
        legacy_dir = self.directory / LOG_DIR_NAME
        if not any(legacy_dir.glob("*.log")):
            return False
        same = legacy_dir.resolve() == working.directory.resolve()
        legacy = working if same else Log.open(legacy_dir, working.config, now_ms=now_ms)
        try:
            end = legacy.log_end_offset
            if end == 0:
                return False
            self._put_if_absent(f"{_SEGMENTS}{0:020d}-{end:020d}", read_range(legacy, 0, end))
        finally:
            if not same:
                legacy.close()
        logger.info("adopted the metadata log in %s (offsets 0-%d) as a segment", legacy_dir, end)
        return True

    def _append_object(self, working: Log, key: str, now_ms: int) -> None:
        data = self._get(key)
        if data is None:
            raise MetadataRecordError(f"metadata log object {self.location}/{key} vanished")
        try:
            working.append_as_follower(data, now_ms)
        except Exception as e:
            raise MetadataRecordError(
                f"metadata log object {self.location}/{key} is not a valid batch: {e}"
            ) from None

    def write_batch(self, base_offset: int, batch: bytes) -> None:
        """Make `batch` (the log's next, at `base_offset`) durable; MetadataLogFencedError when
        another controller already wrote that offset."""
        if not self._put_if_absent(_batch_key(base_offset), batch):
            raise self._fenced_error(base_offset)

    def check_next_offset_free(self, end_offset: int) -> None:
        """MetadataLogFencedError when another controller wrote at `end_offset`, the offset this
        one would write next (an idle controller's probe: one read)."""
        if self._get(_batch_key(end_offset)) is not None:
            raise self._fenced_error(end_offset)

    def _fenced_error(self, offset: int) -> MetadataLogFencedError:
        return MetadataLogFencedError(
            f"FENCED: the metadata log at {self.location} already holds offset {offset}, "
            f"written by {self._writer_of(_batch_key(offset))}; this controller stops serving "
            "and acknowledges nothing more. The newer controller owns the cluster; stop this "
            "driver (or restart it to take the log over again)"
        )

    def _writer_of(self, key: str) -> str:
        """Who wrote the batch at `key`, for the fenced message."""
        try:
            data = self._get(key)
            record = decode_record(next(iter(next(iter_batches(data or b"")).records())).value)
        except Exception:  # noqa: BLE001 - only a message depends on it
            return "another controller"
        if record.get("type") != LEADER_CHANGE:
            return "another controller (or an earlier write of this one whose outcome was unknown)"
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.get("activated_ms", 0) / 1e3))
        return (
            f"the controller that started on host {record.get('host')} (pid {record.get('pid')}, "
            f"incarnation {record.get('incarnation_id')}) at {when}"
        )


class LocalMetadataStore(MetadataStore):
    """The store in a directory: the driver's disk, or a shared filesystem's mount."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        super().__init__(DirectoryObjects(directory), directory)


class ObjectMetadataStore(MetadataStore):
    """The store under an object-store URI (`s3://bucket/prefix`)."""

    def __init__(
        self, uri: str, storage_options: Mapping[str, str], store: ObjectStore | None = None
    ) -> None:
        super().__init__(ObstoreObjects(uri, storage_options, store))


def _batch_key(base_offset: int) -> str:
    return f"{_BATCHES}{base_offset:020d}"


def read_range(working: Log, start: int, end: int) -> bytes:
    """The working log's batches covering offsets [start, end), whole."""
    out = bytearray()
    offset = start
    while offset < end:
        data = bytes(working.read(offset, 4 * 1024 * 1024).records)
        kept = 0
        for batch in iter_batches(data):
            if batch.header.base_offset >= end:
                break
            kept = batch.position + batch.header.size_in_bytes
            offset = batch.header.last_offset + 1
        if kept == 0:
            raise StorageLocationError(f"cannot read the metadata log at offset {offset}")
        out += data[:kept]
    return bytes(out)
