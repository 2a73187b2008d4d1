"""Broker settings of the remote tier, Kafka's `RemoteLogManagerConfig` names and defaults.

Kafka plugs a `RemoteStorageManager` class in; sparklog's remote tier is always a Delta table
per topic under `remote.table.root` (a local path shared by the brokers, or an object-store URI
opened with the `storage.options.<key>` settings, as the driver's state is:
`sparklog/storage/object_store.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sparklog.settings import LONG_MAX, ConfigType, Range, Scope, Setting, define


def _remote(name: str, kind: ConfigType, default: object, doc: str, **extra: object) -> Setting:
    return Setting(name, kind, default, doc=doc, scope=Scope.BROKER, group="remote", **extra)  # type: ignore[arg-type]


_L, _I = ConfigType.LONG, ConfigType.INT

REMOTE_LOG_SETTINGS = define(
    _remote(
        "remote.log.storage.system.enable",
        ConfigType.BOOLEAN,
        False,
        "enable the remote tier on this broker; topics opt in with remote.storage.enable",
    ),
    _remote(
        "remote.table.root",
        ConfigType.STRING,
        None,
        "where topic tables live: a local path every broker and the driver share, or an "
        "object-store URI (s3://bucket/prefix); one Delta table per topic below it",
    ),
    _remote(
        "remote.log.manager.task.interval.ms",
        _L,
        30_000,
        "how often the leader copies closed segments and expires tiered data",
        validator=Range(1),
    ),
    _remote(
        "remote.log.manager.task.retry.backoff.ms",
        _L,
        500,
        "first back-off after a failed copy or expiry",
        validator=Range(1),
    ),
    _remote(
        "remote.log.manager.task.retry.backoff.max.ms",
        _L,
        30_000,
        "longest back-off after repeated failures",
        validator=Range(1),
    ),
    _remote(
        "remote.fetch.max.wait.ms",
        _I,
        500,
        "how long a fetch of tiered offsets may wait for the table",
        validator=Range(1),
    ),
    _remote(
        "remote.log.manager.copy.max.bytes.per.second",
        _L,
        LONG_MAX,
        "byte rate the broker copies to the remote tier at most",
        validator=Range(1),
    ),
    _remote(
        "remote.log.manager.fetch.max.bytes.per.second",
        _L,
        LONG_MAX,
        "byte rate the broker reads from the remote tier at most",
        validator=Range(1),
    ),
    _remote(
        "remote.log.reader.threads",
        _I,
        10,
        "threads serving fetches of tiered offsets",
        validator=Range(1),
    ),
)
_D = REMOTE_LOG_SETTINGS.default


@dataclass(frozen=True, slots=True)
class RemoteLogManagerConfig:
    """A broker's remote-tier settings; attribute = Kafka name with dots as underscores."""

    remote_log_storage_system_enable: bool = _D("remote.log.storage.system.enable")
    remote_table_root: str | None = _D("remote.table.root")
    remote_log_manager_task_interval_ms: int = _D("remote.log.manager.task.interval.ms")
    remote_log_manager_task_retry_backoff_ms: int = _D("remote.log.manager.task.retry.backoff.ms")
    remote_log_manager_task_retry_backoff_max_ms: int = _D(
        "remote.log.manager.task.retry.backoff.max.ms"
    )
    remote_fetch_max_wait_ms: int = _D("remote.fetch.max.wait.ms")
    remote_log_manager_copy_max_bytes_per_second: int = _D(
        "remote.log.manager.copy.max.bytes.per.second"
    )
    remote_log_manager_fetch_max_bytes_per_second: int = _D(
        "remote.log.manager.fetch.max.bytes.per.second"
    )
    remote_log_reader_threads: int = _D("remote.log.reader.threads")

    def __post_init__(self) -> None:
        REMOTE_LOG_SETTINGS.check_values(self)

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> RemoteLogManagerConfig:
        """From broker properties named like Kafka's (`remote.fetch.max.wait.ms`, ...)."""
        return cls(**REMOTE_LOG_SETTINGS.parse(props, what="remote log setting", unknown="ignore"))
