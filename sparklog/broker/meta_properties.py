"""A broker data dir's identity and lock (Kafka's `MetaProperties`, `meta.properties`; D6).

`meta.properties` holds `version=1`, `cluster.id`, `node.id` and `directory.id`; a `.lock`
file is held with `fcntl.flock` while a broker uses the dir, so two processes (or two brokers
in one process: flock locks belong to the open file) never share it, and a dir whose lock can
be taken is free to adopt. `resolve_data_dir` implements the launcher's rule: adopt an unclaimed
identity of this cluster found in the base dir, else take the given node id.
"""

from __future__ import annotations

import base64
import fcntl
import logging
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sparklog.storage.checkpoint import write_atomically

logger = logging.getLogger(__name__)

META_PROPERTIES_FILE = "meta.properties"
LOCK_FILE = ".lock"
LISTENER_PORT_FILE = ".listener-port"


class DataDirError(Exception):
    """A data dir cannot be used: foreign cluster, other node id, held by another broker."""


def kafka_uuid_string(value: uuid.UUID) -> str:
    """Kafka's `Uuid.toString`: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def parse_kafka_uuid(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


@dataclass(frozen=True, slots=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    directory_id: str
    version: int = 1

    def to_text(self) -> str:
        stamp = time.strftime("%a %b %d %H:%M:%S %Z %Y")
        return (
            f"#\n#{stamp}\ncluster.id={self.cluster_id}\ndirectory.id={self.directory_id}\n"
            f"node.id={self.node_id}\nversion={self.version}\n"
        )


def read_meta_properties(data_dir: Path) -> MetaProperties | None:
    """The identity stored in `data_dir`, None when it has none yet."""
    path = data_dir / META_PROPERTIES_FILE
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return None
    props: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _sep, value = line.partition("=")
            props[key.strip()] = value.strip()
    try:
        return MetaProperties(
            cluster_id=props["cluster.id"],
            node_id=int(props["node.id"]),
            directory_id=props.get("directory.id", ""),
            version=int(props.get("version", "1")),
        )
    except (KeyError, ValueError) as e:
        raise DataDirError(f"{path} is malformed ({e}); fix or remove it") from None


def write_meta_properties(data_dir: Path, meta: MetaProperties) -> None:
    write_atomically(data_dir / META_PROPERTIES_FILE, meta.to_text().encode("utf-8"))


def read_listener_ports(data_dir: Path) -> dict[str, int]:
    """The port each listener of this data dir's broker last bound ({} when never or
    unreadable). A file from before several listeners holds one port: the first listener's,
    under the name ""."""
    try:
        text = (data_dir / LISTENER_PORT_FILE).read_text("ascii")
    except OSError:
        return {}
    ports = {}
    for line in text.splitlines():
        name, _sep, port = line.strip().rpartition("=")
        if port.isdigit() and 0 < int(port) < 65536:
            ports[name] = int(port)
    return ports


def write_listener_ports(data_dir: Path, ports: Mapping[str, int]) -> None:
    """`NAME=port` per listener (what `read_listener_ports` reads back)."""
    text = "".join(f"{name}={port}\n" for name, port in ports.items())
    write_atomically(data_dir / LISTENER_PORT_FILE, text.encode("ascii"))


class DataDirLock:
    """An exclusive, non-blocking flock on `<data dir>/.lock`, held until `release()`."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        assert self._fd is None
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def acquire(self) -> DataDirLock:
        if not self.try_acquire():
            raise DataDirError(
                f"data dir {self.data_dir} is in use by another broker (its {LOCK_FILE} is locked)"
            )
        return self

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def claim_data_dir(
    data_dir: Path, cluster_id: str, node_id: int
) -> tuple[MetaProperties, DataDirLock]:
    """Lock `data_dir` and make sure it carries this broker's identity (writing it if new)."""
    lock = DataDirLock(data_dir).acquire()
    try:
        meta = read_meta_properties(data_dir)
        if meta is None:
            meta = MetaProperties(cluster_id, node_id, kafka_uuid_string(uuid.uuid4()))
            write_meta_properties(data_dir, meta)
        elif meta.cluster_id != cluster_id:
            raise DataDirError(
                f"data dir {data_dir} belongs to cluster {meta.cluster_id!r}, but the controller "
                f"runs cluster {cluster_id!r}; use an empty log.dirs or remove its meta.properties"
            )
        elif meta.node_id != node_id:
            raise DataDirError(
                f"data dir {data_dir} holds node id {meta.node_id}, not {node_id}; start the "
                f"broker with node id {meta.node_id} or give it another log.dirs"
            )
    except BaseException:
        lock.release()
        raise
    return meta, lock


def resolve_data_dir(
    base_dir: Path, cluster_id: str, node_id: int
) -> tuple[Path, MetaProperties, DataDirLock]:
    """D6: adopt an unclaimed identity of this cluster in `base_dir`, else `broker-<node_id>`."""
    base_dir.mkdir(parents=True, exist_ok=True)
    for candidate in sorted(p for p in base_dir.iterdir() if p.is_dir()):
        meta = _readable_meta(candidate)
        if meta is None or meta.cluster_id != cluster_id:
            continue
        lock = DataDirLock(candidate)
        if lock.try_acquire():
            logger.info("adopting identity node.id=%d in %s", meta.node_id, candidate)
            return candidate, meta, lock
    data_dir = base_dir / f"broker-{node_id}"
    meta, lock = claim_data_dir(data_dir, cluster_id, node_id)
    return data_dir, meta, lock


def _readable_meta(candidate: Path) -> MetaProperties | None:
    try:
        return read_meta_properties(candidate)
    except DataDirError as e:
        logger.warning("skipping %s: %s", candidate, e)
        return None
