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
from collections.abc import Mapping
from typing import Any

__all__ = [
    "STORAGE_OPTIONS_PREFIX",
    "StorageLocationError",
    "is_object_store_uri",
    "join_location",
    "open_object_store",
    "storage_options",
]

#: Settings `storage.options.<key>=<value>` become storage option `<key>`.
STORAGE_OPTIONS_PREFIX = "storage.options."

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


def open_object_store(uri: str, options: Mapping[str, str]) -> Any:
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
            return S3Store(bucket, prefix=prefix.strip("/") or None, config=config)
        return from_url(uri, config=config or None)
    except StorageLocationError:
        raise
    except Exception as e:  # noqa: BLE001 - obstore's configuration errors, named for the user
        raise StorageLocationError(
            f"cannot open {uri} with storage options {sorted(options)}: {e}; set "
            f"{STORAGE_OPTIONS_PREFIX}<option> settings (e.g. AWS_ENDPOINT_URL, AWS_REGION)"
        ) from None
