"""Broker settings with Kafka's names and defaults (Kafka's `KafkaConfig`, the broker part).

`BrokerConfig.from_properties({"log.retention.check.interval.ms": "100", ...})` parses the
settings a broker uses. The cluster settings and topic defaults (`num.partitions`,
`log.retention.ms` or `retention.ms`, `message.max.bytes`, ...) are read by the controller's
`ControllerConfig` from the same dict, so a broker and its controller agree on them; a broker
keeps that object as `cluster`. Settings no part of sparklog knows are kept in `unknown` and
logged once, as Kafka logs "supplied but isn't a known config"; a bad value raises ValueError.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from sparklog.controller.configs import TOPIC_CONFIG_SYNONYMS, ControllerConfig
from sparklog.storage.cleaner import CleanerConfig
from sparklog.storage.config import LONG_MAX, LogConfig
from sparklog.storage.log_validator import DEFAULT_DECOMPRESSED_MAX_BYTES

logger = logging.getLogger(__name__)

#: Settings read by the controller or other parts of sparklog (accepted without a warning).
_OTHER_NAMES = frozenset(
    {
        "num.partitions",
        "default.replication.factor",
        "offset.metadata.max.bytes",  # the group coordinator's
        "metadata.log.snapshot.records",
        "log.retention.minutes",
        "log.retention.hours",
        "log.roll.hours",
        "log.roll.jitter.hours",
        # Kafka settings that do not apply to sparklog's design (one listener, asyncio)
        "node.id",
        "log.dirs",
        "log.dir",
        "process.roles",
        "controller.quorum.voters",
        "num.network.threads",
        "num.io.threads",
        "num.recovery.threads.per.data.dir",
        "advertised.listeners",
        "listener.security.protocol.map",
        "inter.broker.listener.name",
        *TOPIC_CONFIG_SYNONYMS,
        *TOPIC_CONFIG_SYNONYMS.values(),
    }
)
_OTHER_PREFIXES = ("group.", "transaction.", "offsets.", "metadata.", "controller.", "sparklog.")


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """One broker's settings; attribute = Kafka name with dots as underscores."""

    listeners: str = "PLAINTEXT://127.0.0.1:0"
    broker_rack: str | None = None
    socket_request_max_bytes: int = 104_857_600
    max_connections: int = 2_147_483_647
    max_connections_per_ip: int = 2_147_483_647
    #: Kafka's `host:count,host:count` (a host name or IP; names resolve when the broker starts)
    max_connections_per_ip_overrides: str = ""
    connections_max_idle_ms: int = 600_000
    queued_max_requests: int = 500
    queued_max_request_bytes: int = -1
    fetch_max_bytes: int = 57_671_680
    #: incremental fetch sessions (KIP-227): how many the broker keeps, and how long one must
    #: sit idle before a new one may take its place
    max_incremental_fetch_session_cache_slots: int = 1_000
    min_incremental_fetch_session_eviction_ms: int = 120_000
    # replication (Kafka's ReplicationConfigs): follower fetchers and the ISR
    num_replica_fetchers: int = 1
    replica_fetch_max_bytes: int = 1_048_576
    replica_fetch_response_max_bytes: int = 10_485_760
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_backoff_ms: int = 1_000
    replica_socket_timeout_ms: int = 30_000
    replica_lag_time_max_ms: int = 30_000
    controlled_shutdown_enable: bool = True
    log_retention_check_interval_ms: int = 300_000
    log_flush_scheduler_interval_ms: int = LONG_MAX
    log_flush_offset_checkpoint_interval_ms: int = 60_000
    log_flush_start_offset_checkpoint_interval_ms: int = 60_000
    log_cleaner_enable: bool = True
    broker_heartbeat_interval_ms: int = 2_000
    broker_session_timeout_ms: int = 9_000
    initial_broker_registration_timeout_ms: int = 60_000
    controller_socket_timeout_ms: int = 30_000
    auto_create_topics_enable: bool = True
    producer_id_expiration_ms: int = 86_400_000
    #: sparklog's own (Kafka has none): the most one client batch's compressed records section
    #: may unpack to (never less than a topic's max.message.bytes); more is refused with
    #: RECORD_TOO_LARGE. The default is Kafka's socket.request.max.bytes (see log_validator).
    sparklog_batch_decompressed_max_bytes: int = DEFAULT_DECOMPRESSED_MAX_BYTES
    #: cluster settings and topic defaults, parsed as the controller parses them
    cluster: ControllerConfig = field(default_factory=ControllerConfig)
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)
    #: every property as given
    originals: Mapping[str, str] = field(default_factory=dict)
    unknown: tuple[str, ...] = ()

    @classmethod
    def from_properties(cls, props: Mapping[str, object] | None = None) -> BrokerConfig:
        """Parse Kafka-named broker properties; raises ValueError naming a bad value."""
        props = {str(k): str(v) for k, v in (props or {}).items()}
        fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in _NON_SETTINGS}
        values: dict[str, object] = {}
        cleaner_props: dict[str, str] = {}
        unknown: list[str] = []
        for name, raw in props.items():
            attr = name.replace(".", "_")
            if attr in fields:
                values[attr] = _parse(name, fields[attr].type, raw)
            elif name.startswith("log.cleaner.") and name[12:].replace(".", "_") in _CLEANER:
                cleaner_props[name] = raw
            elif name == "listeners.host":  # the Spark launcher's bind host (sparklog only)
                values["listeners"] = f"PLAINTEXT://{raw}:0"
            elif name not in _OTHER_NAMES and not name.startswith(_OTHER_PREFIXES):
                unknown.append(name)
        bound = values.get("sparklog_batch_decompressed_max_bytes", 0)
        if not 0 <= bound < 2**31:  # type: ignore[operator]
            raise ValueError(
                f"invalid value {bound} for sparklog.batch.decompressed.max.bytes: expected "
                "0..2147483647 bytes (a topic's max.message.bytes is always allowed)"
            )
        if unknown:
            logger.info("broker settings not known to sparklog (ignored): %s", ", ".join(unknown))
        return cls(
            **values,
            cluster=ControllerConfig.from_properties(props),
            cleaner=CleanerConfig.from_properties(cleaner_props),
            originals=props,
            unknown=tuple(unknown),
        )

    @property
    def default_log_config(self) -> LogConfig:
        """The topic defaults this broker applies to topics without overrides."""
        return self.cluster.topic_defaults

    @property
    def message_max_bytes(self) -> int:
        return self.cluster.topic_defaults.max_message_bytes

    def log_config_for(self, overrides: Mapping[str, str]) -> LogConfig:
        """A topic's effective LogConfig: its overrides on top of the defaults."""
        return LogConfig.from_properties(overrides, base=self.cluster.topic_defaults)

    def connection_limit_overrides(self) -> dict[str, int]:
        """`max.connections.per.ip.overrides` as {ip: limit}; raises ValueError naming a bad
        entry (Kafka refuses to start on one too)."""
        out: dict[str, int] = {}
        for entry in filter(
            None, (e.strip() for e in self.max_connections_per_ip_overrides.split(","))
        ):
            host, sep, count = entry.rpartition(":")
            if not sep or not host or not count.strip().isdigit():
                raise ValueError(
                    f"invalid max.connections.per.ip.overrides entry {entry!r}: expected "
                    "host:count, e.g. 127.0.0.1:50,client.example:10"
                )
            try:
                ip = socket.gethostbyname(host.strip())
            except OSError as e:
                raise ValueError(
                    f"max.connections.per.ip.overrides: cannot resolve {host!r} ({e})"
                ) from None
            out[ip] = int(count)
        return out

    @property
    def listener_host_port(self) -> tuple[str, int]:
        """(host, port) of the PLAINTEXT listener (port 0 = any free port)."""
        first = self.listeners.split(",")[0].strip()
        _proto, _sep, address = first.rpartition("://")
        host, _sep, port = address.rpartition(":")
        if not port.isdigit():
            raise ValueError(f"listeners {self.listeners!r}: expected PLAINTEXT://host:port")
        return host or "127.0.0.1", int(port)

    def broker_properties(self) -> dict[str, str]:
        """The broker's own settings by Kafka name (DescribeConfigs of a BROKER resource adds
        these to the cluster settings)."""
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            if f.name in _NON_SETTINGS:
                continue
            value = getattr(self, f.name)
            out[f.name.replace("_", ".")] = _format(value)
        for f in dataclasses.fields(self.cleaner):
            out[f"log.cleaner.{f.name.replace('_', '.')}"] = _format(getattr(self.cleaner, f.name))
        return out


_NON_SETTINGS = frozenset({"cluster", "cleaner", "originals", "unknown"})
_CLEANER = frozenset(f.name for f in dataclasses.fields(CleanerConfig))


def _format(value: object) -> str:
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _parse(name: str, type_name: object, raw: str) -> object:
    text = raw.strip()
    if type_name in (bool, "bool"):
        if text.lower() not in ("true", "false"):
            raise ValueError(f"invalid value {raw!r} for {name}: expected true or false")
        return text.lower() == "true"
    if type_name in (int, "int"):
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"invalid value {raw!r} for {name}: expected an integer") from None
    if type_name == "str | None" and text in ("", "null"):
        return None
    return text
