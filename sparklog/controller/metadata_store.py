"""Where the controller's metadata log is durable: a local directory or an object store.

`MetadataLog` always serves brokers from a working `Log` on the driver's disk
(`__cluster_metadata-0/`); a `MetadataStore` decides what makes a write durable and what
`open` recovers from:

- `LocalMetadataStore` (a path: the driver's disk, or a shared filesystem's mount): the
  working log *is* the durable copy, as before: each append is fsynced before it returns,
  snapshots are written atomically beside it, `meta.properties` holds the cluster id.
- `ObjectMetadataStore` (`s3://bucket/prefix`): every controller write is one object
  `__cluster_metadata-0/batches/<base offset>` written with conditional put
  (`If-None-Match: *`); the working log on local disk is only a cache, rebuilt from the
  objects at every start. A snapshot adds `snapshots/<offset>.json` and a segment object
  `__cluster_metadata-0/segments/<base>-<end>` holding the batches since the previous
  segment, so a start reads a few segments and the batches after the last one.

Fencing: the batch objects are never deleted, so the key of every offset a controller could
next write is taken once written. Two controllers that both believe the log ends at N (a
zombie driver and its successor) race for `batches/N`; the loser gets
`MetadataLogFencedError` and stops writing, and the log can never fork. A retried put whose
first attempt landed finds its own bytes there and succeeds.

Not thread-safe: owned by the controller's event loop thread, like `MetadataLog`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from sparklog.controller.image import MetadataImage, MetadataRecordError
from sparklog.records import iter_batches
from sparklog.storage.checkpoint import write_atomically
from sparklog.storage.log import Log
from sparklog.storage.object_store import (
    StorageLocationError,
    is_object_store_uri,
    local_path,
    open_object_store,
)

log = logging.getLogger(__name__)

META_PROPERTIES = "meta.properties"
SNAPSHOT_FILE = "metadata.snapshot.json"
_BATCHES = "__cluster_metadata-0/batches/"
_SEGMENTS = "__cluster_metadata-0/segments/"
_SNAPSHOTS = "snapshots/"
_SNAPSHOTS_KEPT = 2


class MetadataLogFencedError(Exception):
    """Another controller wrote the durable metadata log past this one's view of it."""


class MetadataStore(Protocol):
    """What makes the metadata log durable (see the module doc)."""

    #: where it is, for messages
    location: str

    def read_meta_properties(self) -> str | None:
        """The text of `meta.properties` (the cluster id), None when the store is new."""

    def create_meta_properties(self, text: str) -> str:
        """Write `meta.properties` unless present; returns the text that is there now."""

    def load_snapshot(self) -> MetadataImage | None:
        """The newest snapshot's image; MetadataRecordError if it is corrupt."""

    def recover(self, working: Log, now_ms: int) -> None:
        """Make the working log hold every durable batch (and nothing else)."""

    def append(self, working: Log, batch: bytes, now_ms: int) -> None:
        """Make `batch` (its offsets set) durable and append it to the working log."""

    def write_snapshot(self, offset: int, data: bytes, working: Log) -> None:
        """Persist a snapshot of the image at `offset` (JSON `data`)."""


def open_metadata_store(
    location: str | os.PathLike[str], storage_options: Mapping[str, str] | None = None
) -> MetadataStore:
    """The store for `metadata.log.dir`: an object store for a URI, else a local directory."""
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


class LocalMetadataStore:
    """A directory (local disk or shared filesystem) holding the log itself, fsynced."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.location = str(directory)
        directory.mkdir(parents=True, exist_ok=True)

    def read_meta_properties(self) -> str | None:
        try:
            return (self.directory / META_PROPERTIES).read_text()
        except FileNotFoundError:
            return None

    def create_meta_properties(self, text: str) -> str:
        write_atomically(self.directory / META_PROPERTIES, text.encode())
        return text

    def load_snapshot(self) -> MetadataImage | None:
        path = self.directory / SNAPSHOT_FILE
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        return parse_snapshot(data, str(path))

    def recover(self, working: Log, now_ms: int) -> None:
        """Nothing to do: the working log is the durable copy (the log's own recovery has
        dropped a torn tail)."""

    def append(self, working: Log, batch: bytes, now_ms: int) -> None:
        working.append_as_follower(batch, now_ms)
        working.flush()

    def write_snapshot(self, offset: int, data: bytes, working: Log) -> None:
        write_atomically(self.directory / SNAPSHOT_FILE, data)


class ObjectMetadataStore:
    """Batch, segment and snapshot objects under an object-store URI (see the module doc)."""

    def __init__(self, uri: str, storage_options: Mapping[str, str], store: object = None) -> None:
        self.location = uri.rstrip("/")
        #: an `obstore` store rooted at `uri` (tests pass an in-memory one)
        self._store = store if store is not None else open_object_store(uri, storage_options)
        self._segment_end = 0  # every batch below this offset is in a segment object

    # -- objects ----------------------------------------------------------------------------

    def _get(self, key: str) -> bytes | None:
        import obstore

        try:
            return bytes(obstore.get(self._store, key).bytes())
        except FileNotFoundError as e:
            if "NoSuchBucket" in str(e):
                raise self._unreachable("read", key, e) from None
            return None
        except Exception as e:  # noqa: BLE001 - obstore's errors, named for the user
            raise self._unreachable("read", key, e) from None

    def _put_if_absent(self, key: str, data: bytes) -> bool:
        """Create `key`; False when it exists with other bytes (True when with these: a retried
        put whose first attempt landed)."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            obstore.put(self._store, key, data, mode="create")
            return True
        except (AlreadyExistsError, PreconditionError):
            return self._get(key) == data
        except Exception as e:  # noqa: BLE001 - obstore's errors, named for the user
            raise self._unreachable("write", key, e) from None

    def _keys(self, prefix: str) -> list[str]:
        import obstore

        try:
            pages = list(obstore.list(self._store, prefix))
        except Exception as e:  # noqa: BLE001 - obstore's errors, named for the user
            raise self._unreachable("list", prefix, e) from None
        return sorted(str(meta["path"]) for page in pages for meta in page)

    def _unreachable(self, op: str, key: str, e: Exception) -> StorageLocationError:
        first = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        return StorageLocationError(
            f"metadata.log.dir {self.location}: cannot {op} {key}: {first}. Check that the "
            "bucket exists and the storage.options.* settings (AWS_ENDPOINT_URL, credentials, "
            "AWS_REGION, AWS_ALLOW_HTTP for http endpoints)"
        )

    # -- MetadataStore ----------------------------------------------------------------------

    def read_meta_properties(self) -> str | None:
        data = self._get(META_PROPERTIES)
        return None if data is None else data.decode()

    def create_meta_properties(self, text: str) -> str:
        if self._put_if_absent(META_PROPERTIES, text.encode()):
            return text
        found = self.read_meta_properties()  # another driver formatted it first: join it
        assert found is not None
        return found

    def load_snapshot(self) -> MetadataImage | None:
        keys = self._keys(_SNAPSHOTS)
        if not keys:
            return None
        data = self._get(keys[-1])
        if data is None:
            raise MetadataRecordError(f"metadata snapshot {self.location}/{keys[-1]} vanished")
        return parse_snapshot(data, f"{self.location}/{keys[-1]}")

    def recover(self, working: Log, now_ms: int) -> None:
        """Rebuild the working log from the objects: segments, then the batches after them."""
        working.truncate_fully_and_start_at(0)
        segments = {}
        for key in self._keys(_SEGMENTS):
            base, _, end = key.rsplit("/", 1)[1].partition("-")
            segments[int(base)] = (int(end), key)
        batches = {int(key.rsplit("/", 1)[1]): key for key in self._keys(_BATCHES)}
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
        log.info("metadata log recovered from %s up to offset %d", self.location, offset)

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

    def append(self, working: Log, batch: bytes, now_ms: int) -> None:
        base = next(iter_batches(batch)).header.base_offset
        assert base == working.log_end_offset, "a batch goes at the working log's end"
        if not self._put_if_absent(_batch_key(base), batch):
            raise MetadataLogFencedError(
                f"the metadata log at {self.location} already holds offset {base}, written by "
                "another controller (or by an earlier write of this one whose outcome was "
                "unknown); this controller stops writing. Restart the driver to reload it"
            )
        working.append_as_follower(batch, now_ms)

    def write_snapshot(self, offset: int, data: bytes, working: Log) -> None:
        if offset > self._segment_end:
            chunk = _read_range(working, self._segment_end, offset)
            self._put_if_absent(f"{_SEGMENTS}{self._segment_end:020d}-{offset:020d}", chunk)
            self._segment_end = offset
        self._put_if_absent(f"{_SNAPSHOTS}{offset:020d}.json", data)
        self._delete_old_snapshots()

    def _delete_old_snapshots(self) -> None:
        import obstore

        for key in self._keys(_SNAPSHOTS)[:-_SNAPSHOTS_KEPT]:
            try:
                obstore.delete(self._store, key)
            except Exception:  # noqa: BLE001 - an old snapshot left behind costs only space
                log.warning("could not delete old metadata snapshot %s/%s", self.location, key)


def _batch_key(base_offset: int) -> str:
    return f"{_BATCHES}{base_offset:020d}"


def _read_range(working: Log, start: int, end: int) -> bytes:
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
