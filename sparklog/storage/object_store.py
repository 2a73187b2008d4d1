"""Locations of the driver's durable state: a local path or an object-store URI (DESIGN D7/D8).

The controller's metadata log (`metadata.log.dir`) and the coordinators' Delta table
(`offsets.table.path`) may live on a local disk, a shared filesystem (a local path to its
mount) or an object store (`s3://bucket/prefix`), so that a driver restarted on another host
finds them, as Spark's checkpoint location does for a streaming query.

Object-store credentials and endpoints are settings named `storage.options.<key>`, where
`<key>` is a delta-rs / `object_store` storage option (`AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ALLOW_HTTP`, ...); the same
options open the Delta table (through `deltalake`) and the metadata log's objects (through
`obstore`, the Python binding of the same Rust `object_store` crate).

Safety on S3: both writers rely on conditional put (`If-None-Match: *`, which S3 and
S3-compatible stores such as MinIO, R2 and s3proxy's filesystem backend honour): delta-rs
1.x commits `_delta_log/<version>.json` with it (no DynamoDB lock needed), and the metadata
log writes each batch object with it, so two drivers can never both write the same offset.
`AWS_S3_ALLOW_UNSAFE_RENAME=true` switches delta-rs back to a plain overwrite that would let a
zombie driver's commit replace its successor's; it is refused.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from sparklog.settings import ConfigType, Importance, Scope, Setting, define
from sparklog.storage.checkpoint import fsync_dir

if TYPE_CHECKING:
    from obstore.store import ObjectStore, S3Config

__all__ = [
    "STORAGE_OPTIONS_PREFIX",
    "DirectoryObjects",
    "Objects",
    "ObstoreObjects",
    "StorageLocationError",
    "is_object_store_uri",
    "join_location",
    "open_object_store",
    "redact",
    "remove_location",
    "storage_options",
    "without_storage_options",
]

#: Settings `storage.options.<key>=<value>` become storage option `<key>`.
STORAGE_OPTIONS_PREFIX = "storage.options."

#: Where the driver's state lives (docs/operations.md "Where the driver's state lives"); read by the
#: controller and the coordinators on the driver, never sent to brokers.
STATE_SETTINGS = define(
    Setting(
        "metadata.log.dir",
        ConfigType.STRING,
        None,
        doc="the controller's metadata log: a local path or an object-store URI "
        "(default: the controller's data dir)",
        importance=Importance.HIGH,
        scope=Scope.CONTROLLER,
        group="state",
    ),
    Setting(
        STORAGE_OPTIONS_PREFIX,
        ConfigType.STRING,
        None,
        doc="delta-rs storage options for an object store (storage.options.AWS_REGION=...); "
        "credentials among them, so every value is sensitive",
        scope=Scope.CONTROLLER,
        group="state",
        sensitive=True,
        prefix=True,
    ),
)

#: delta-rs options that `object_store` does not know (and that need no counterpart there).
_DELTA_ONLY_OPTIONS = frozenset(
    {
        "aws_s3_allow_unsafe_rename",
        "aws_s3_locking_provider",
        "delta_dynamo_table_name",
        "aws_force_credential_load",
        "dynamo_endpoint",
        "aws_endpoint_url_dynamodb",
    }
)
_TRUE = {"true", "1", "yes"}
#: AWS environment variables used when no storage option gives the value (delta-rs reads the
#: same ones, so the table and the metadata log agree)
_ENV_OPTIONS = (
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_ALLOW_HTTP",
)


class StorageLocationError(ValueError):
    """A state location or its storage options cannot be used; the message says the fix."""


def is_object_store_uri(location: str) -> bool:
    """Whether `location` names an object store (`s3://...`) rather than a local path."""
    scheme, sep, _ = str(location).partition("://")
    return bool(sep) and scheme.lower() != "file"


def local_path(location: str) -> str:
    """A local path for `location` (`file:///x` -> `/x`)."""
    text = str(location)
    return text[len("file://") :] if text.lower().startswith("file://") else text


def join_location(location: str, name: str) -> str:
    """`location/name` for a path or a URI."""
    return f"{str(location).rstrip('/')}/{name}"


def storage_options(settings: Mapping[str, object]) -> dict[str, str]:
    """The storage options in Kafka-style `settings` (`storage.options.AWS_REGION=...`).

    Refuses `AWS_S3_ALLOW_UNSAFE_RENAME=true`: sparklog's fencing of a zombie driver needs
    the store's conditional put."""
    options = {
        key[len(STORAGE_OPTIONS_PREFIX) :]: str(value)
        for key, value in settings.items()
        if key.startswith(STORAGE_OPTIONS_PREFIX) and len(key) > len(STORAGE_OPTIONS_PREFIX)
    }
    for key, value in options.items():
        if key.lower() == "aws_s3_allow_unsafe_rename" and value.strip().lower() in _TRUE:
            raise StorageLocationError(
                f"{STORAGE_OPTIONS_PREFIX}{key}={value}: unsafe renames let a stale driver "
                "overwrite its successor's commits; sparklog writes with the store's conditional "
                "put (If-None-Match), which S3 and S3-compatible stores support. Remove the option"
            )
    return options


def without_storage_options(settings: Mapping[str, Any]) -> dict[str, Any]:
    """`settings` minus every `storage.options.*` entry: what a broker gets. Only the driver's
    controller and coordinator reach the object store, so credentials never travel to
    executors (in a Spark task's payload), into a broker's settings (which it may describe or
    log) or into a broker process. The same goes for the other driver-only secrets."""
    return {
        k: v
        for k, v in settings.items()
        if not str(k).startswith(STORAGE_OPTIONS_PREFIX) and k not in _DRIVER_ONLY_SECRETS
    }


#: Other settings only the driver's controller reads that hold secrets: the first SCRAM
#: users' passwords (`sparklog.add.scram`, sparklog.metadata.scram_bootstrap).
_DRIVER_ONLY_SECRETS = frozenset({"sparklog.add.scram"})


#: storage options whose values are not secrets (shown in messages; every other value is not)
_PUBLIC_OPTIONS = frozenset(
    {"endpoint", "region", "default_region", "allow_http", "virtual_hosted_style_request"}
)


def redact(text: str, options: Mapping[str, str]) -> str:
    """`text` with the value of every secret storage option replaced by `[hidden]` (Kafka
    describes PASSWORD-type configs as null; an error message from a store might echo one)."""
    for key, value in options.items():
        if _canonical(key) not in _PUBLIC_OPTIONS and len(value) >= 4 and value in text:
            text = text.replace(value, "[hidden]")
    return text


def _object_store_config(options: Mapping[str, str]) -> dict[str, str]:
    """delta-rs style options as `object_store` configuration keys (case-insensitive there;
    `AWS_ENDPOINT_URL` and `AWS_ENDPOINT` are one key, so one is kept)."""
    config: dict[str, str] = {}
    given = {_canonical(key) for key in options}
    for key in _ENV_OPTIONS:
        if key in os.environ and _canonical(key) not in given:
            config[_canonical(key)] = os.environ[key]
    for key, value in options.items():
        if key.lower() not in _DELTA_ONLY_OPTIONS:
            config[_canonical(key)] = value
    return config


def _canonical(key: str) -> str:
    name = key.lower().removeprefix("aws_")
    return "endpoint" if name == "endpoint_url" else name


def remove_location(location: str, options: Mapping[str, str]) -> None:
    """Delete everything under `location`: a local directory tree, or every object under an
    object-store prefix (a dropped table). A missing location is no error."""
    if not is_object_store_uri(location):
        shutil.rmtree(local_path(location), ignore_errors=True)
        return
    import obstore

    objects = open_object_store(location, options)
    keys = [meta["path"] for page in obstore.list(objects) for meta in page]
    if keys:
        obstore.delete(objects, keys)


def open_object_store(uri: str, options: Mapping[str, str]) -> ObjectStore:
    """An `obstore` store rooted at `uri` (its keys are relative to the URI's path)."""
    try:
        from obstore.store import S3Store, from_url
    except ImportError as e:  # pragma: no cover - obstore is a dependency
        raise StorageLocationError(
            f"{uri} is on an object store, which needs the obstore package ({e}): "
            "pip install obstore"
        ) from None
    scheme, _, rest = uri.partition("://")
    config = _object_store_config(options)
    try:
        if scheme.lower() in ("s3", "s3a"):
            bucket, _, prefix = rest.partition("/")
            if not bucket:
                raise StorageLocationError(f"{uri}: an S3 location is s3://<bucket>/<prefix>")
            # the keys are the user's storage options, checked by obstore when it opens
            s3_config = cast("S3Config", config)
            return S3Store(bucket, prefix=prefix.strip("/") or None, config=s3_config)
        # any scheme: obstore checks the keys against that scheme's config when it opens
        return from_url(uri, config=config or None)  # type: ignore[arg-type]
    except StorageLocationError:
        raise
    except Exception as e:  # noqa: BLE001 - obstore's configuration errors, named for the user
        raise StorageLocationError(
            f"cannot open {uri} with storage options {sorted(options)}: {redact(str(e), config)}"
            f"; set {STORAGE_OPTIONS_PREFIX}<option> settings (e.g. AWS_ENDPOINT_URL, AWS_REGION)"
        ) from None


class Objects(Protocol):
    """Immutable objects under one location, created at most once: what the metadata log's
    fencing needs from an object store or a directory (`metadata_store.py`). Keys are relative
    `/`-separated paths; their zero-padded numbers sort as strings."""

    #: where the objects are, for messages
    location: str
    #: what to check when the location cannot be reached, for messages
    hint: str

    @property
    def options(self) -> Mapping[str, str]:
        """The options it was opened with (their secret values are hidden from messages)."""

    def get(self, key: str) -> bytes | None:
        """The object's bytes; None when there is no such object."""

    def create(self, key: str, data: bytes) -> bool:
        """Create the object durably; False (writing nothing) when `key` already exists."""

    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        """Sorted keys under the directory-like `prefix` (ending in "/"), after `start_after`."""

    def delete(self, key: str) -> None:
        """Remove the object if it exists."""


class ObstoreObjects:
    """`Objects` on an object store through `obstore`: create is a conditional put
    (`If-None-Match: *`), which S3 and S3-compatible stores evaluate atomically."""

    def __init__(
        self, uri: str, options: Mapping[str, str], store: ObjectStore | None = None
    ) -> None:
        self.location = uri.rstrip("/")
        #: for `redact` (messages never carry a credential)
        self.options = _object_store_config(options)
        self.hint = (
            "Check that the bucket exists and the storage.options.* settings (AWS_ENDPOINT_URL, "
            "credentials, AWS_REGION, AWS_ALLOW_HTTP for http endpoints)"
        )
        #: an `obstore` store rooted at `uri` (tests pass an in-memory one)
        self.store = store if store is not None else open_object_store(uri, options)

    def get(self, key: str) -> bytes | None:
        import obstore

        try:
            return bytes(obstore.get(self.store, key).bytes())
        except FileNotFoundError as e:
            if "NoSuchBucket" in str(e):
                raise
            return None

    def create(self, key: str, data: bytes) -> bool:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            obstore.put(self.store, key, data, mode="create")
        except (AlreadyExistsError, PreconditionError):
            return False
        return True

    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        import obstore

        pages = obstore.list(self.store, prefix, offset=start_after, chunk_size=1000)
        return sorted(str(meta["path"]) for page in pages for meta in page)

    def delete(self, key: str) -> None:
        import obstore

        obstore.delete(self.store, key)


class DirectoryObjects:
    """`Objects` as files under a directory: the driver's disk or a shared filesystem's mount.

    Create writes a temporary file, fsyncs it, and `link`s it to the key's path, then fsyncs
    the directory. Why link rather than `open(O_CREAT|O_EXCL)` of the final name: the name
    then appears at once with its whole, fsynced content, so no reader ever sees a partial
    object and a crash never leaves a torn file holding a key (which a successor could not tell
    from a live writer's unfinished one); `link` fails with EEXIST atomically on every POSIX
    filesystem and on NFS of any version (O_EXCL is atomic on NFS only from v3; open(2) gives
    link as the portable lock), and an NFS retransmission that answers EEXIST for our own link
    is recognised by the caller, who finds its own bytes there. obstore's `LocalStore` also
    creates by linking a staged file, but never fsyncs, so an acknowledged write could vanish
    with power; hence this class. Two fsyncs per create (file, directory)."""

    _TMP = ".tmp"

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.location = str(self.root)
        self.hint = "Check that the directory exists, is mounted and is writable"
        self.options: dict[str, str] = {}
        self._made: set[Path] = set()

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        assert key and all(p not in ("", ".", "..") for p in parts), f"bad object key {key!r}"
        return self.root.joinpath(*parts)

    def _ensure_dir(self, directory: Path) -> None:
        """Create `directory` (and parents) durably: each new entry's parent is fsynced."""
        if directory in self._made:
            return
        missing = []
        for d in (directory, *directory.parents):
            if d.is_dir():
                break
            missing.append(d)
        for d in reversed(missing):
            d.mkdir(exist_ok=True)
            fsync_dir(d.parent)
        self._made.add(directory)

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def create(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        self._ensure_dir(path.parent)
        tmp_dir = self.root / self._TMP
        self._ensure_dir(tmp_dir)
        tmp = tmp_dir / uuid.uuid4().hex
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(path.parent)
        return True

    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        assert prefix.endswith("/"), "a directory-like prefix"
        try:
            names = os.listdir(self._path(prefix.rstrip("/")))
        except FileNotFoundError:
            return []
        keys = sorted(prefix + name for name in names if not name.startswith("."))
        return keys if start_after is None else [k for k in keys if k > start_after]

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)
