"""The group coordinator's settings, with Kafka's names and defaults (`GroupCoordinatorConfig`,
`OffsetConfig`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True, slots=True)
class GroupConfig:
    """Kafka's broker-side group settings; `from_properties` reads them by their Kafka names."""

    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = 2**31 - 1
    offset_metadata_max_bytes: int = 4096
    offsets_retention_minutes: int = 10_080
    offsets_retention_check_interval_ms: int = 600_000
    offsets_commit_timeout_ms: int = 5_000
    #: Extra time a flush waits for more commits to join it (sparklog's; 0 = flush at once).
    offsets_commit_linger_ms: int = 2
    #: Delta table maintenance (checkpoint, compaction, vacuum) every this many commits.
    offsets_table_maintenance_commits: int = 100
    offsets_table_path: str | None = None
    # KIP-848 consumer groups
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    group_consumer_max_size: int = 2**31 - 1
    group_consumer_assignors: str = "uniform,range"

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> GroupConfig:
        """Settings from a Kafka-style properties dict; unknown keys are ignored (they belong to
        other parts of the cluster). A value that is not a number names the key."""
        values: dict[str, object] = {}
        for f in dataclasses.fields(cls):
            key = f.name.replace("_", ".")
            if key not in props:
                continue
            raw = props[key]
            if f.name in ("offsets_table_path", "group_consumer_assignors"):
                values[f.name] = str(raw)
                continue
            try:
                values[f.name] = int(str(raw))
            except ValueError:
                raise ValueError(f"{key}={raw!r} is not an integer") from None
        config = cls(**values)  # type: ignore[arg-type]
        if config.group_min_session_timeout_ms > config.group_max_session_timeout_ms:
            raise ValueError(
                "group.min.session.timeout.ms must not exceed group.max.session.timeout.ms"
            )
        return config
