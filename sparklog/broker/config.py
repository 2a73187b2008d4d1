"""Broker settings with Kafka's names and defaults (Kafka's `KafkaConfig`, the broker part).

The broker's settings are declared here into the registry (`sparklog.settings`);
`BrokerConfig.from_properties({"log.retention.check.interval.ms": "100", ...})` parses them
once. The cluster settings and topic defaults (`num.partitions`, `log.retention.ms` or
`retention.ms`, `message.max.bytes`, ...) are read by the controller's `ControllerConfig` from
the same dict, so a broker and its controller agree on them; a broker keeps that object as
`cluster`. A name no component of the cluster declares (broker, topic, controller or
coordinator scope) is kept in `unknown` and logged once, as Kafka logs "supplied but isn't a
known config" (Kafka warns; sparklog logs at INFO, as before the registry); a bad value raises
`ConfigError` (a ValueError) naming the setting, the value and what it accepts.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from sparklog.metadata.configs import CLUSTER_SETTINGS, ControllerConfig
from sparklog.security.listener_config import ListenerConfig
from sparklog.security.listeners import LISTENER_SETTINGS, LISTENERS, with_default_host
from sparklog.security.principal import PRINCIPAL_SETTINGS
from sparklog.security.ssl_factory import SERVER_SSL_SETTINGS
from sparklog.settings import (
    LONG_MAX,
    REGISTRY,
    SERVER_SCOPES,
    ConfigError,
    ConfigType,
    Importance,
    Range,
    Scope,
    Setting,
    define,
)
from sparklog.storage.cleaner import CLEANER_SETTINGS, CleanerConfig
from sparklog.storage.config import LogConfig
from sparklog.storage.log_validator import DEFAULT_DECOMPRESSED_MAX_BYTES
from sparklog.storage.remote.config import REMOTE_LOG_SETTINGS, RemoteLogManagerConfig
from sparklog.structs import INT32_MAX

logger = logging.getLogger(__name__)

_INT, _LONG, _BOOL, _STR = ConfigType.INT, ConfigType.LONG, ConfigType.BOOLEAN, ConfigType.STRING


def _broker(name: str, kind: ConfigType, default: object, doc: str, **extra: object) -> Setting:
    return Setting(name, kind, default, doc=doc, scope=Scope.BROKER, group="broker", **extra)  # type: ignore[arg-type]


def _nullable(raw: object) -> str | None:
    text = str(raw).strip()
    return None if text in ("", "null") else text


#: Kafka's `SocketServerConfigs`, `ReplicationConfigs`, `ServerLogConfigs` ... that a broker
#: reads, and sparklog's own broker settings (`sparklog.*`).
BROKER_SETTINGS = define(
    _broker("broker.rack", _STR, None, "rack of this broker", parser=_nullable),
    _broker("socket.request.max.bytes", _INT, 104_857_600, "largest request"),
    _broker("max.connections", _INT, INT32_MAX, "connections the broker accepts"),
    _broker("max.connections.per.ip", _INT, INT32_MAX, "connections per client address"),
    _broker(
        "max.connections.per.ip.overrides",
        _STR,
        "",
        "host:count,host:count (a host name or IP; names resolve when the broker starts)",
    ),
    _broker("connections.max.idle.ms", _LONG, 600_000, "idle connections are closed"),
    _broker("queued.max.requests", _INT, 500, "requests queued per connection"),
    _broker("queued.max.request.bytes", _LONG, -1, "bytes of queued requests (-1: no bound)"),
    _broker("fetch.max.bytes", _INT, 57_671_680, "largest Fetch response"),
    _broker(
        "max.incremental.fetch.session.cache.slots",
        _INT,
        1_000,
        "incremental fetch sessions (KIP-227) the broker keeps",
    ),
    _broker(
        "min.incremental.fetch.session.eviction.ms",
        _INT,
        120_000,
        "how long a fetch session sits idle before a new one may take its place",
    ),
    _broker("num.replica.fetchers", _INT, 1, "fetchers per leader broker"),
    _broker("replica.fetch.max.bytes", _INT, 1_048_576, "per partition per follower Fetch"),
    _broker("replica.fetch.response.max.bytes", _INT, 10_485_760, "per follower Fetch"),
    _broker("replica.fetch.wait.max.ms", _INT, 500, "follower Fetch long-poll"),
    _broker("replica.fetch.min.bytes", _INT, 1, "follower Fetch min bytes"),
    _broker("replica.fetch.backoff.ms", _INT, 1_000, "pause after a fetch error"),
    _broker("replica.socket.timeout.ms", _INT, 30_000, "fetcher request timeout"),
    _broker("replica.lag.time.max.ms", _LONG, 30_000, "a follower this far behind leaves the ISR"),
    _broker("controlled.shutdown.enable", _BOOL, True, "hand leaderships over before stopping"),
    _broker("log.retention.check.interval.ms", _LONG, 300_000, "how often retention runs"),
    _broker("log.flush.scheduler.interval.ms", _LONG, LONG_MAX, "how often flush.ms is checked"),
    _broker("log.flush.offset.checkpoint.interval.ms", _INT, 60_000, "recovery-point checkpoints"),
    _broker(
        "log.flush.start.offset.checkpoint.interval.ms",
        _INT,
        60_000,
        "log-start-offset checkpoints",
    ),
    _broker("log.cleaner.enable", _BOOL, True, "run the log cleaner (compaction)"),
    _broker(
        "initial.broker.registration.timeout.ms",
        _INT,
        60_000,
        "how long a starting broker waits for the controller",
    ),
    _broker("controller.socket.timeout.ms", _INT, 30_000, "broker -> controller timeout"),
    _broker("producer.id.expiration.ms", _INT, 86_400_000, "idle producer ids are forgotten"),
    _broker(
        "sparklog.batch.decompressed.max.bytes",
        _INT,
        DEFAULT_DECOMPRESSED_MAX_BYTES,
        "sparklog's own: the most one client batch's compressed records section may unpack "
        "to (never less than a topic's max.message.bytes); more is refused with "
        "RECORD_TOO_LARGE. The default is Kafka's socket.request.max.bytes",
        validator=Range(
            0,
            INT32_MAX,
            text="0..2147483647 bytes (a topic's max.message.bytes is always allowed)",
        ),
    ),
    _broker(
        "transaction.partition.verification.enable",
        _BOOL,
        True,
        "KIP-890 produce-time transaction verification",
    ),
    _broker(
        "sparklog.fetch.zero.copy",
        _BOOL,
        True,
        "sparklog's own: answer Fetch with sendfile from the segment files (Kafka always "
        "does on plaintext listeners; false copies the bytes through Python)",
    ),
)
#: Settings a launcher sets for its brokers (not user settings, not described).
INTERNAL_SETTINGS = define(
    Setting(
        "sparklog.group.coordinator.endpoint",
        _STR,
        None,
        doc="host:port of the driver's group coordinator (set by the launchers)",
        scope=Scope.BROKER,
        group="internal",
        importance=Importance.LOW,
    ),
    Setting(
        "listeners.host",
        _STR,
        None,
        doc="the Spark launcher's bind host (sparklog only): the host of every listener "
        "naming none (default listeners=PLAINTEXT://<it>:0)",
        scope=Scope.BROKER,
        group="internal",
        importance=Importance.LOW,
    ),
)
#: Kafka settings accepted without effect: they do not apply to sparklog's design (one
#: listener, asyncio, the driver's controller). Declared so they are not reported unknown.
INERT_SETTINGS = define(
    *(
        Setting(
            name,
            _STR,
            None,
            doc="accepted; has no effect in sparklog",
            scope=Scope.BROKER,
            group="inert",
            importance=Importance.LOW,
        )
        for name in (
            "node.id",
            "log.dirs",
            "log.dir",
            "process.roles",
            "controller.quorum.voters",
            "num.network.threads",
            "num.io.threads",
            "num.recovery.threads.per.data.dir",
        )
    )
)
#: What a broker parses: its own settings, the cluster settings it also reads, its cleaner's.
_SHARED = ("broker.heartbeat.interval.ms", "broker.session.timeout.ms", "auto.create.topics.enable")
_TABLE = (
    BROKER_SETTINGS
    | {LISTENERS: LISTENER_SETTINGS[LISTENERS]}
    | {n: CLUSTER_SETTINGS[n] for n in _SHARED}
    | CLEANER_SETTINGS
    | REMOTE_LOG_SETTINGS
)
_D = _TABLE.default
_ATTRS = frozenset(s.attr for s in _TABLE.values())


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """One broker's settings; attribute = Kafka name with dots as underscores."""

    listeners: str = _D("listeners")
    broker_rack: str | None = _D("broker.rack")
    socket_request_max_bytes: int = _D("socket.request.max.bytes")
    max_connections: int = _D("max.connections")
    max_connections_per_ip: int = _D("max.connections.per.ip")
    max_connections_per_ip_overrides: str = _D("max.connections.per.ip.overrides")
    connections_max_idle_ms: int = _D("connections.max.idle.ms")
    queued_max_requests: int = _D("queued.max.requests")
    queued_max_request_bytes: int = _D("queued.max.request.bytes")
    fetch_max_bytes: int = _D("fetch.max.bytes")
    max_incremental_fetch_session_cache_slots: int = _D("max.incremental.fetch.session.cache.slots")
    min_incremental_fetch_session_eviction_ms: int = _D("min.incremental.fetch.session.eviction.ms")
    num_replica_fetchers: int = _D("num.replica.fetchers")
    replica_fetch_max_bytes: int = _D("replica.fetch.max.bytes")
    replica_fetch_response_max_bytes: int = _D("replica.fetch.response.max.bytes")
    replica_fetch_wait_max_ms: int = _D("replica.fetch.wait.max.ms")
    replica_fetch_min_bytes: int = _D("replica.fetch.min.bytes")
    replica_fetch_backoff_ms: int = _D("replica.fetch.backoff.ms")
    replica_socket_timeout_ms: int = _D("replica.socket.timeout.ms")
    replica_lag_time_max_ms: int = _D("replica.lag.time.max.ms")
    controlled_shutdown_enable: bool = _D("controlled.shutdown.enable")
    log_retention_check_interval_ms: int = _D("log.retention.check.interval.ms")
    log_flush_scheduler_interval_ms: int = _D("log.flush.scheduler.interval.ms")
    log_flush_offset_checkpoint_interval_ms: int = _D("log.flush.offset.checkpoint.interval.ms")
    log_flush_start_offset_checkpoint_interval_ms: int = _D(
        "log.flush.start.offset.checkpoint.interval.ms"
    )
    log_cleaner_enable: bool = _D("log.cleaner.enable")
    broker_heartbeat_interval_ms: int = _D("broker.heartbeat.interval.ms")
    broker_session_timeout_ms: int = _D("broker.session.timeout.ms")
    initial_broker_registration_timeout_ms: int = _D("initial.broker.registration.timeout.ms")
    controller_socket_timeout_ms: int = _D("controller.socket.timeout.ms")
    auto_create_topics_enable: bool = _D("auto.create.topics.enable")
    producer_id_expiration_ms: int = _D("producer.id.expiration.ms")
    sparklog_batch_decompressed_max_bytes: int = _D("sparklog.batch.decompressed.max.bytes")
    transaction_partition_verification_enable: bool = _D(
        "transaction.partition.verification.enable"
    )
    sparklog_fetch_zero_copy: bool = _D("sparklog.fetch.zero.copy")
    #: host:port of the driver's coordinator; None when the broker runs without one
    sparklog_group_coordinator_endpoint: str | None = None
    #: cluster settings and topic defaults, parsed as the controller parses them
    cluster: ControllerConfig = field(default_factory=ControllerConfig)
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)
    #: the remote tier's settings (`remote.log.*`, `remote.table.root`; storage/remote/config.py)
    remote: RemoteLogManagerConfig = field(default_factory=RemoteLogManagerConfig)
    #: the listeners, advertised endpoints and per-listener settings (security/listeners.py)
    listener_config: ListenerConfig = field(default_factory=ListenerConfig.from_properties)
    #: every property as given
    originals: Mapping[str, str] = field(default_factory=dict)
    unknown: tuple[str, ...] = ()

    @classmethod
    def from_properties(cls, props: Mapping[str, object] | None = None) -> BrokerConfig:
        """Parse Kafka-named broker properties; raises ConfigError naming a bad value."""
        given = {str(k): str(v) for k, v in (props or {}).items()}
        values = _TABLE.parse(given, unknown="ignore", by_attr=True)
        cleaner = CleanerConfig(
            **{a: values.pop(a) for a in CLEANER_SETTINGS.defaults_by_attr() if a in values}
        )
        remote = RemoteLogManagerConfig(
            **{a: values.pop(a) for a in REMOTE_LOG_SETTINGS.defaults_by_attr() if a in values}
        )
        endpoint = given.get("sparklog.group.coordinator.endpoint")
        listener_props = dict(given)
        if "listeners.host" in given:  # the launcher's bind host, for listeners naming none
            values["listeners"] = listener_props[LISTENERS] = with_default_host(
                given.get(LISTENERS), given["listeners.host"]
            )
        unknown = [
            name
            for name in given
            if name not in _ATTRS and REGISTRY.find(name, SERVER_SCOPES) is None
        ]
        if unknown:
            logger.info("broker settings not known to sparklog (ignored): %s", ", ".join(unknown))
        return cls(
            **values,
            sparklog_group_coordinator_endpoint=endpoint or None,
            cluster=ControllerConfig.from_properties(given),
            cleaner=cleaner,
            remote=remote,
            listener_config=ListenerConfig.from_properties(listener_props),
            originals=given,
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
        """(host, port) the first broker listener binds (port 0 = any free port)."""
        first = self.listener_config.broker_listeners[0]
        return first.bind_host, first.port

    def broker_properties(self) -> dict[str, str]:
        """The broker's own settings by Kafka name (DescribeConfigs of a BROKER resource adds
        these to the cluster settings)."""
        out = BROKER_SETTINGS.formatted(self)
        out.update(self.listener_config.formatted())
        out[LISTENERS] = self.listeners
        out.update(
            {
                n: CLUSTER_SETTINGS[n].format(getattr(self, CLUSTER_SETTINGS[n].attr))
                for n in _SHARED
            }
        )
        out.update(CLEANER_SETTINGS.formatted(self.cleaner))
        out.update(REMOTE_LOG_SETTINGS.formatted(self.remote))
        return out

    def described_settings(self) -> dict[str, tuple[str, bool]]:
        """`broker_properties()` with whether each was given: what DescribeConfigs lists,
        with the server-wide `ssl.*` settings (as given, else their defaults; the sensitive
        ones answer null, as Kafka's `ConfigHelper` does)."""
        out = {n: (v, n in self.originals) for n, v in self.broker_properties().items()}
        for s in (*SERVER_SSL_SETTINGS.values(), *PRINCIPAL_SETTINGS.values()):
            if s.name in self.originals:
                raw = self.originals[s.name]
                try:
                    out[s.name] = (s.format(s.parse(raw)), True)
                except ConfigError:  # refused when a TLS listener starts; shown as given
                    out[s.name] = (str(raw), True)
            else:
                out[s.name] = (s.default_text, False)
        return out
