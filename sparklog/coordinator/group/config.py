"""The group coordinator's settings, with Kafka's names and defaults (`GroupCoordinatorConfig`,
`OffsetConfig`), declared into the settings registry."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from sparklog.settings import ConfigError, ConfigType, Scope, Setting, define
from sparklog.structs import INT32_MAX

_INT, _LONG, _STR = ConfigType.INT, ConfigType.LONG, ConfigType.STRING


def _group(name: str, kind: ConfigType, default: object, doc: str) -> Setting:
    return Setting(name, kind, default, doc=doc, scope=Scope.COORDINATOR, group="group")


GROUP_SETTINGS = define(
    _group("group.min.session.timeout.ms", _INT, 6_000, "shortest session a member may ask"),
    _group("group.max.session.timeout.ms", _INT, 1_800_000, "longest session a member may ask"),
    _group("group.initial.rebalance.delay.ms", _INT, 3_000, "an empty group's first wait"),
    _group("group.max.size", _INT, INT32_MAX, "members per classic group"),
    _group("offset.metadata.max.bytes", _INT, 4096, "metadata per committed offset"),
    _group("offsets.retention.minutes", _INT, 10_080, "an empty group's offsets expire after"),
    _group("offsets.retention.check.interval.ms", _LONG, 600_000, "how often expiry runs"),
    _group("offsets.commit.timeout.ms", _INT, 5_000, "REQUEST_TIMED_OUT after this"),
    _group(
        "offsets.commit.linger.ms",
        _INT,
        2,
        "sparklog's own: extra time a flush waits for more commits (0 = flush at once)",
    ),
    _group(
        "offsets.table.maintenance.commits",
        _INT,
        100,
        "sparklog's own: Delta table maintenance (checkpoint, compaction, vacuum) interval",
    ),
    _group(
        "offsets.table.path",
        _STR,
        None,
        "the coordinators' Delta table (default <metadata.log.dir>/__consumer_offsets)",
    ),
    # KIP-848 consumer groups
    _group("group.consumer.session.timeout.ms", _INT, 45_000, "a consumer member's session"),
    _group("group.consumer.heartbeat.interval.ms", _INT, 5_000, "a consumer member's heartbeat"),
    _group(
        "group.consumer.min.session.timeout.ms",
        _INT,
        45_000,
        "smallest consumer.session.timeout.ms a group config may set",
    ),
    _group(
        "group.consumer.max.session.timeout.ms",
        _INT,
        60_000,
        "largest consumer.session.timeout.ms a group config may set",
    ),
    _group(
        "group.consumer.min.heartbeat.interval.ms",
        _INT,
        5_000,
        "smallest consumer.heartbeat.interval.ms a group config may set",
    ),
    _group(
        "group.consumer.max.heartbeat.interval.ms",
        _INT,
        15_000,
        "largest consumer.heartbeat.interval.ms a group config may set",
    ),
    _group("group.consumer.max.size", _INT, INT32_MAX, "members per consumer group"),
    _group("group.consumer.assignors", _STR, "uniform,range", "server-side assignors"),
)
_D = GROUP_SETTINGS.default


@dataclasses.dataclass(frozen=True, slots=True)
class GroupConfig:
    """Kafka's broker-side group settings; `from_properties` reads them by their Kafka names."""

    group_min_session_timeout_ms: int = _D("group.min.session.timeout.ms")
    group_max_session_timeout_ms: int = _D("group.max.session.timeout.ms")
    group_initial_rebalance_delay_ms: int = _D("group.initial.rebalance.delay.ms")
    group_max_size: int = _D("group.max.size")
    offset_metadata_max_bytes: int = _D("offset.metadata.max.bytes")
    offsets_retention_minutes: int = _D("offsets.retention.minutes")
    offsets_retention_check_interval_ms: int = _D("offsets.retention.check.interval.ms")
    offsets_commit_timeout_ms: int = _D("offsets.commit.timeout.ms")
    offsets_commit_linger_ms: int = _D("offsets.commit.linger.ms")
    offsets_table_maintenance_commits: int = _D("offsets.table.maintenance.commits")
    offsets_table_path: str | None = _D("offsets.table.path")
    group_consumer_session_timeout_ms: int = _D("group.consumer.session.timeout.ms")
    group_consumer_heartbeat_interval_ms: int = _D("group.consumer.heartbeat.interval.ms")
    group_consumer_min_session_timeout_ms: int = _D("group.consumer.min.session.timeout.ms")
    group_consumer_max_session_timeout_ms: int = _D("group.consumer.max.session.timeout.ms")
    group_consumer_min_heartbeat_interval_ms: int = _D("group.consumer.min.heartbeat.interval.ms")
    group_consumer_max_heartbeat_interval_ms: int = _D("group.consumer.max.heartbeat.interval.ms")
    group_consumer_max_size: int = _D("group.consumer.max.size")
    group_consumer_assignors: str = _D("group.consumer.assignors")

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> GroupConfig:
        """Settings from a Kafka-style properties dict; unknown keys are ignored (they belong to
        other parts of the cluster). A malformed value raises ConfigError naming the key."""
        config = cls(**GROUP_SETTINGS.parse(props, unknown="ignore"))
        if config.group_min_session_timeout_ms > config.group_max_session_timeout_ms:
            raise ConfigError(
                "group.min.session.timeout.ms must not exceed group.max.session.timeout.ms"
            )
        return config
