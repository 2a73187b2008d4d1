"""Broker settings of the remote tier, Kafka's `RemoteLogManagerConfig` names and defaults.

Kafka plugs a `RemoteStorageManager` class in; sparklog's remote tier is always a Delta table
per topic under `remote.table.root` (a local path shared by the brokers, or an object-store
URI).

Brokers reach an object store with their own settings, `remote.table.storage.options.<key>`
(delta-rs / `object_store` option names, as `storage.options.<key>`: `AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, ...), or with the AWS_* variables
of their environment when none are given. The driver's `storage.options.*` (its state's
credentials) are never sent to brokers (`object_store.without_storage_options`), so the
operator gives the brokers credentials for the tables' root only, which may be narrower than
the driver's. These settings are sensitive: DescribeConfigs never lists them, messages
redact their values (`object_store.redact`), and Spark's conf redaction covers them
(`spark/redaction.is_secret_setting`). A broker started with `storage.options.*` of its own
(by hand, not by sparklog's launchers) uses them too; `remote.table.storage.options.*`
override them key by key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sparklog.settings import LONG_MAX, ConfigType, Range, Scope, Setting, define
from sparklog.storage.object_store import (
    STORAGE_OPTIONS_PREFIX,
    StorageLocationError,
    storage_options,
)


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

#: The brokers' object-store options for the topic tables (see the module doc).
REMOTE_TABLE_OPTIONS_PREFIX = "remote.table.storage.options."

REMOTE_TABLE_OPTIONS_SETTINGS = define(
    _remote(
        REMOTE_TABLE_OPTIONS_PREFIX,
        ConfigType.STRING,
        None,
        "the brokers' delta-rs storage options for topic tables on an object store "
        "(remote.table.storage.options.AWS_REGION=...); the driver's storage.options.* never "
        "reach brokers; without these a broker uses its AWS_* environment. Credentials among "
        "them, so every value is sensitive",
        sensitive=True,
        prefix=True,
    ),
)


def remote_table_storage_options(props: Mapping[str, object]) -> dict[str, str]:
    """The storage options a broker opens topic tables with: its `storage.options.*` (only
    a broker started by hand has any), overridden by `remote.table.storage.options.*`.
    Refuses `AWS_S3_ALLOW_UNSAFE_RENAME=true` (a table's fencing of a stale leader's copy
    rests on the store's conditional put, as the driver's state does)."""
    own = {
        STORAGE_OPTIONS_PREFIX + str(key)[len(REMOTE_TABLE_OPTIONS_PREFIX) :]: value
        for key, value in props.items()
        if str(key).startswith(REMOTE_TABLE_OPTIONS_PREFIX)
    }
    given = storage_options(props)
    try:
        return {**given, **storage_options(own)}
    except StorageLocationError as e:
        message = str(e).replace(STORAGE_OPTIONS_PREFIX, REMOTE_TABLE_OPTIONS_PREFIX, 1)
        raise StorageLocationError(message) from None


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
