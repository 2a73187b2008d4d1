"""Client quota enforcement on a broker (KIP-13 bandwidth, KIP-124 request time, KIP-219
throttling): Kafka's `ClientQuotaManager` and `ClientRequestQuotaManager`, sans-IO.

Theory of operation. Every Produce (request bytes), Fetch (response bytes) and, with a
`request_percentage` quota, every request (its event-loop time) is recorded into the quota
sensor of the client's **quota entity**: the entity the quota source resolved the
(user, client id) pair to, named by its metric tags (`user`, `client-id`). Clients that
resolve to one entity share its sensor (a user quota is shared by all that user's client
ids); a default quota (`/users/<default>`) gives each user its own sensor with the default
limit (the tags carry the real names, as Kafka's `DefaultQuotaCallback.quotaMetricTags`).
The sensor's `Rate` spans `quota.window.num` windows of `quota.window.size.seconds`; when a
record takes it over the limit the sensor raises `QuotaViolation` and the client is throttled
for Kafka's `(observed − quota) / quota × windowSize` ms (`ClientQuotaManager.throttleTime`),
long enough for the rate to fall back to the quota. The broker's throttle stage
(`broker/quotas.py`) writes that into the response and mutes the connection (KIP-219).

No quota for a client means no limit: its requests are not recorded at all (Kafka records
them only once some quota of the type exists; here only for clients that have one, which
keeps a broker with 1,000 configured but unused entities at a dict lookup per request).

The manager never imports `metadata/`: it reads quotas through `QuotaSource`
(`metadata.quotas.QuotasImage` satisfies it), re-resolving a client only when the source's
`version` moves, and applies a changed limit to the live sensors at once (Kafka's
`updateQuotaMetricConfigs`). Quota sensors of an idle entity expire after an hour
(`INACTIVE_SENSOR_EXPIRATION_MS`, Kafka's `InactiveSensorExpirationTimeSeconds`).

Cluster scope (sparklog's `quota.scope=cluster`): `usage()` reports what each entity recorded
in the current window, and `set_shares()` makes this broker enforce `quota × share` for the
entities the driver handed out shares for, so a client spread over several brokers gets its
quota once in total.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, runtime_checkable

from sparklog.metrics.metric import MetricName, sanitize
from sparklog.metrics.registry import Metrics
from sparklog.metrics.sensor import QuotaViolation, Sensor
from sparklog.metrics.stats import Avg, MetricConfig, Quota, Rate

logger = logging.getLogger(__name__)

#: A quota entity's metric tags, in Kafka's order: (("user", u), ("client-id", c)).
QuotaTags = tuple[tuple[str, str], ...]

#: Kafka's `ClientQuotaManager.InactiveSensorExpirationTimeSeconds` (one hour).
INACTIVE_SENSOR_EXPIRATION_MS = 3_600_000

#: Kafka's `ClientRequestQuotaManager.NanosToPercentagePerSecond`: a request that held the
#: loop for 1 s records 100 (percent-seconds), so the `Rate` reads as a percentage.
NANOS_TO_PERCENTAGE_PER_SECOND = 100.0 / 1e9


class QuotaType(Enum):
    """Kafka's `QuotaType`: the metric group, the quota key and the quota metric's name."""

    PRODUCE = ("Produce", "producer_byte_rate", "byte-rate")
    FETCH = ("Fetch", "consumer_byte_rate", "byte-rate")
    REQUEST = ("Request", "request_percentage", "request-time")

    def __init__(self, group: str, key: str, metric: str) -> None:
        self.group = group
        self.key = key
        self.metric = metric


class ResolvedQuota(Protocol):
    """A quota the source resolved a client to: its limit and the entity's metric tags."""

    @property
    def limit(self) -> float: ...

    @property
    def tags(self) -> QuotaTags: ...


class QuotaSource(Protocol):
    """Where quotas come from (`metadata.quotas.QuotasImage`); `version` moves on every
    change so the manager can cache resolutions."""

    @property
    def version(self) -> int: ...

    def client_quota(self, key: str, user: str, client_id: str) -> ResolvedQuota | None: ...


@dataclass(frozen=True, slots=True)
class _Resolved:
    limit: float
    tags: QuotaTags


class ClientSensors:
    """One quota entity's sensors (Kafka's `ClientSensors`): the quota sensor whose `Rate`
    carries the quota, and the throttle-time sensor."""

    __slots__ = (
        "tags",
        "limit",
        "quota_sensor",
        "rate",
        "rate_name",
        "throttle_sensor",
        "last",
        "held_until",
    )

    def __init__(
        self,
        tags: QuotaTags,
        limit: float,
        quota_sensor: Sensor,
        rate: Rate,
        rate_name: MetricName,
        throttle_sensor: Sensor,
        last: tuple[str, str],
    ) -> None:
        self.tags = tags
        #: the entity's quota (before any cluster share)
        self.limit = limit
        self.quota_sensor = quota_sensor
        self.rate = rate
        self.rate_name = rate_name
        self.throttle_sensor = throttle_sensor
        #: the (user, client id) that last recorded: re-resolved when quotas change
        self.last = last
        #: when the longest throttle handed out so far ends (cluster scope: a muted client's
        #: rate says nothing of its demand until then)
        self.held_until = 0


SourceGetter = Callable[[], QuotaSource | None]


class ClientQuotaManager:
    """Byte-rate quotas of one type (Produce: `producer_byte_rate`, Fetch:
    `consumer_byte_rate`) on one broker."""

    def __init__(
        self,
        metrics: Metrics,
        quota_type: QuotaType,
        config: MetricConfig,
        source: SourceGetter,
    ) -> None:
        self.metrics = metrics
        self.quota_type = quota_type
        #: the quota windows: `quota.window.num` × `quota.window.size.seconds`
        self.config = MetricConfig(config.samples, config.time_window_ms)
        self._source = source
        self._versioned: QuotaSource | None = None
        self._version = -1
        self._resolved: dict[tuple[str, str], _Resolved | None] = {}
        self._entities: dict[QuotaTags, ClientSensors] = {}
        self._shares: dict[QuotaTags, float] = {}
        self._default_share = 1.0

    # -- resolution --------------------------------------------------------------------------

    def _resolve(self, user: str, client_id: str) -> _Resolved | None:
        source = self._source()
        if source is None:
            return None
        # a new image object (a snapshot loaded) may restart its count: key on both (the
        # object held, so its id cannot be reused)
        version = source.version
        if source is not self._versioned or version != self._version:
            self._versioned = source
            self._version = version
            self._resolved.clear()
            self._update_quotas(source)
        key = (user, client_id)
        try:
            return self._resolved[key]
        except KeyError:
            pass
        found = self._lookup(source, user, client_id)
        resolved = None if found is None else _Resolved(float(found.limit), tuple(found.tags))
        if len(self._resolved) >= 100_000:  # bounded: many one-off client ids
            self._resolved.clear()
        self._resolved[key] = resolved
        return resolved

    #: sensor names: `{group}{prefix}{tag values}` (`Produce-alice:app`, `Produce-topic:t`)
    _sensor_prefix = ""

    def _lookup(self, source: QuotaSource, user: str, client_id: str) -> ResolvedQuota | None:
        return source.client_quota(self.quota_type.key, user, client_id)

    def _update_quotas(self, source: QuotaSource) -> None:
        """Quotas changed: give each live entity its new limit (Kafka's
        `updateQuotaMetricConfigs`); an entity whose client now resolves elsewhere keeps its
        sensor until it expires, and new records go to the new entity's."""
        for entity in list(self._entities.values()):
            found = self._lookup(source, *entity.last)
            if found is not None and tuple(found.tags) == entity.tags:
                if float(found.limit) != entity.limit:
                    entity.limit = float(found.limit)
                    self._apply_limit(entity)
            elif found is None or tuple(found.tags) != entity.tags:
                # the quota went away (or moved): this entity no longer limits anyone
                entity.limit = float("inf")
                self._apply_limit(entity)

    def quota_limit(self, user: str, client_id: str) -> float | None:
        """The limit this broker enforces for the client (its share of it under cluster
        scope); None when it has no quota."""
        resolved = self._resolve(user, client_id)
        if resolved is None:
            return None
        return resolved.limit * self._shares.get(resolved.tags, self._default_share)

    # -- sensors -----------------------------------------------------------------------------

    def _sensors(self, resolved: _Resolved, user: str, client_id: str) -> ClientSensors:
        entity = self._entities.get(resolved.tags)
        if entity is not None and self.metrics.get_sensor(entity.quota_sensor.name) is not None:
            entity.last = (user, client_id)
            if entity.limit != resolved.limit:
                entity.limit = resolved.limit
                self._apply_limit(entity)
            return entity
        group = self.quota_type.group
        suffix = self._sensor_prefix + ":".join(v for _, v in resolved.tags)
        limit = resolved.limit * self._shares.get(resolved.tags, self._default_share)
        quota_sensor = self.metrics.sensor(
            f"{group}-{suffix}",
            self.config,
            inactive_expiration_ms=INACTIVE_SENSOR_EXPIRATION_MS,
        )
        rate = Rate()
        # Kafka's `DefaultQuotaCallback.quotaMetricTags`: the user tag is the sanitized name
        metric_tags = tuple((k, sanitize(v) if k == "user" else v) for k, v in resolved.tags)
        rate_name = MetricName.of(
            "kafka.server",
            group,
            self.quota_type.metric,
            metric_tags,
            f"Tracking {self.quota_type.metric} per user/client-id",
        )
        quota_sensor.add(rate_name, rate, self.config.with_quota(Quota.upper_bound(limit)))
        throttle_sensor = self.metrics.sensor(
            f"{group}ThrottleTime-{suffix}",
            self.config,
            inactive_expiration_ms=INACTIVE_SENSOR_EXPIRATION_MS,
        )
        throttle_sensor.add(
            MetricName.of(
                "kafka.server",
                group,
                "throttle-time",
                metric_tags,
                "Tracking average throttle-time per user/client-id",
            ),
            Avg(),
        )
        entity = ClientSensors(
            resolved.tags,
            resolved.limit,
            quota_sensor,
            rate,
            rate_name,
            throttle_sensor,
            (user, client_id),
        )
        self._entities[resolved.tags] = entity
        return entity

    def _apply_limit(self, entity: ClientSensors) -> None:
        limit = entity.limit * self._shares.get(entity.tags, self._default_share)
        entity.quota_sensor.set_quota(
            entity.rate_name, self.config.with_quota(Quota.upper_bound(limit))
        )

    # -- recording ---------------------------------------------------------------------------

    def record_and_get_throttle_time_ms(
        self, user: str, client_id: str, value: float, now_ms: int
    ) -> int:
        """Record `value` for the client; the throttle time its request earns (0: within
        its quota, or no quota). Kafka's `recordAndGetThrottleTimeMs`."""
        resolved = self._resolve(user, client_id)
        if resolved is None:
            return 0
        entity = self._sensors(resolved, user, client_id)
        try:
            entity.quota_sensor.record(value, now_ms)
        except QuotaViolation as e:
            return self.throttle_time_ms(entity, e, now_ms)
        return 0

    def current_throttle_time_ms(self, user: str, client_id: str, now_ms: int) -> int:
        """The throttle time the client's entity has earned so far without recording
        anything (0 when it is within its quota or has none)."""
        resolved = self._resolve(user, client_id)
        if resolved is None:
            return 0
        entity = self._entities.get(resolved.tags)
        if entity is None:
            return 0
        try:
            entity.quota_sensor.check_quotas(now_ms)
        except QuotaViolation as e:
            return self.throttle_time_ms(entity, e, now_ms)
        return 0

    def throttle_time_ms(self, entity: ClientSensors, e: QuotaViolation, now_ms: int) -> int:
        """Kafka's `throttleTime`: how long until the rate is back at the quota, as the
        excess over the quota times the rate's window."""
        if e.bound <= 0:  # a zero quota: hold the client for a whole quota window
            return int(self.config.samples * self.config.time_window_ms)
        window_ms = entity.rate.window_size_ms(self.config, now_ms)
        return max(0, round((e.value - e.bound) / e.bound * window_ms))

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back bytes recorded for a response that was not sent (a throttled Fetch
        returns no data: Kafka's `unrecordQuotaSensor`)."""
        resolved = self._resolve(user, client_id)
        if resolved is None:
            return
        entity = self._entities.get(resolved.tags)
        if entity is not None:
            entity.quota_sensor.record(-value, now_ms, check_quotas=False)

    def record_throttle_time(
        self, user: str, client_id: str, throttle_ms: int, now_ms: int
    ) -> None:
        """Record the throttle time a response carried into `throttle-time`."""
        resolved = self._resolve(user, client_id)
        if resolved is None:
            return
        entity = self._entities.get(resolved.tags)
        if entity is not None:
            entity.throttle_sensor.record(throttle_ms, now_ms, check_quotas=False)
            entity.held_until = max(entity.held_until, now_ms + throttle_ms)

    def max_value_in_quota_window(self, user: str, client_id: str) -> float | None:
        """The most a client may take in one quota window (Kafka's
        `getMaxValueInQuotaWindow`: limit × (samples − 1) × window seconds), the cap on a
        Fetch's `max_bytes`; None without a quota."""
        limit = self.quota_limit(user, client_id)
        if limit is None:
            return None
        return limit * (self.config.samples - 1) * self.config.time_window_ms / 1000

    # -- upkeep ------------------------------------------------------------------------------

    def expire(self, now_ms: int) -> int:
        """Drop the sensors of entities idle for an hour; how many entities went."""
        gone = [tags for tags, e in self._entities.items() if e.quota_sensor.has_expired(now_ms)]
        for tags in gone:
            entity = self._entities.pop(tags)
            self.metrics.remove_sensor(entity.quota_sensor.name)
            self.metrics.remove_sensor(entity.throttle_sensor.name)
        return len(gone)

    # -- cluster scope (qcluster's seams) ----------------------------------------------------

    def usage(self, now_ms: int) -> dict[QuotaTags, float]:
        """Per quota entity, what it recorded in the current quota window (bytes, or
        percent-seconds for the request quota): what the driver sums across brokers."""
        out: dict[QuotaTags, float] = {}
        for tags, entity in self._entities.items():
            stat = entity.rate.stat
            out[tags] = stat.current_window_value(self.config, now_ms)
        return out

    def rates(self, now_ms: int) -> dict[QuotaTags, float]:
        """Per quota entity, its measured rate over the quota windows (per second)."""
        return {tags: e.rate.measure(self.config, now_ms) for tags, e in self._entities.items()}

    def held_until(self) -> dict[QuotaTags, int]:
        """Per quota entity, when the last throttle it was given ends (0: never throttled)."""
        return {tags: e.held_until for tags, e in self._entities.items() if e.held_until}

    def set_shares(self, shares: Mapping[QuotaTags, float], default: float = 1.0) -> None:
        """Enforce `quota × share` for each entity named (cluster scope: the driver's
        split of the quota by demand); entities not named get `default` (1.0: the whole
        quota, per-broker scope). Replaces the previous shares; applied at once."""
        for tags, share in shares.items():
            if not 0.0 <= share <= 1.0:
                raise ValueError(f"quota share for {tags} must be within [0, 1], not {share}")
        self._shares = dict(shares)
        self._default_share = default
        for entity in self._entities.values():
            self._apply_limit(entity)

    def shares(self) -> dict[QuotaTags, float]:
        return dict(self._shares)

    def entity_count(self) -> int:
        return len(self._entities)


class ClientRequestQuotaManager(ClientQuotaManager):
    """`request_percentage` quotas (KIP-124): the share of this broker's event-loop handler
    time a client may use (a Python broker has one loop, so 100 is the whole loop; Kafka's
    is a share of one of `num.io.threads`). Throttles are capped at one quota window
    (Kafka's `maxThrottleTimeMs`); requests Kafka exempts (inter-broker, internal) are
    recorded into `exempt-request-time` only."""

    def __init__(self, metrics: Metrics, config: MetricConfig, source: SourceGetter) -> None:
        super().__init__(metrics, QuotaType.REQUEST, config, source)
        self.max_throttle_time_ms = config.time_window_ms
        self._exempt = metrics.sensor("exempt-request-time", self.config)
        self._exempt.add(
            MetricName.of(
                "kafka.server",
                "Request",
                "exempt-request-time",
                description="Tracking % of thread time used by requests exempt from quotas",
            ),
            Rate(),
        )

    def record_request_and_get_throttle_time_ms(
        self, user: str, client_id: str, loop_time_ns: int, now_ms: int
    ) -> int:
        """Record a request's event-loop time; its throttle time (at most one window)."""
        throttle_ms = self.record_and_get_throttle_time_ms(
            user, client_id, loop_time_ns * NANOS_TO_PERCENTAGE_PER_SECOND, now_ms
        )
        return min(throttle_ms, self.max_throttle_time_ms)

    def current_request_throttle_time_ms(self, user: str, client_id: str, now_ms: int) -> int:
        """The request quota's throttle time from the loop time recorded so far (capped)."""
        return min(
            self.current_throttle_time_ms(user, client_id, now_ms), self.max_throttle_time_ms
        )

    def record_loop_time(self, user: str, client_id: str, loop_time_ns: int, now_ms: int) -> None:
        """Record a request's event-loop time without checking the quota (the next request's
        `current_request_throttle_time_ms` sees it)."""
        resolved = self._resolve(user, client_id)
        if resolved is None:
            return
        entity = self._sensors(resolved, user, client_id)
        entity.quota_sensor.record(
            loop_time_ns * NANOS_TO_PERCENTAGE_PER_SECOND, now_ms, check_quotas=False
        )

    def record_exempt(self, loop_time_ns: int, now_ms: int) -> None:
        self._exempt.record(loop_time_ns * NANOS_TO_PERCENTAGE_PER_SECOND, now_ms)


@runtime_checkable
class TopicQuotaSource(Protocol):
    """Where per-topic byte rates come from (`QuotasImage.topic_quota`)."""

    def topic_quota(self, key: str, topic: str) -> ResolvedQuota | None: ...


class TopicQuotaManager(ClientQuotaManager):
    """sparklog's per-topic byte rates (`topic` entity: `producer_byte_rate`,
    `consumer_byte_rate`): all clients' bytes to (from) a topic on this broker share the
    topic's quota, each topic held to its own; a request is throttled for the most any of
    its topics earns (and the client quota's throttle, whichever is longer). Metrics
    `kafka.server:type=Produce|Fetch,topic=` `byte-rate`/`throttle-time`."""

    _sensor_prefix = "topic:"

    def _lookup(self, source: QuotaSource, user: str, client_id: str) -> ResolvedQuota | None:
        if not isinstance(source, TopicQuotaSource):
            return None
        return source.topic_quota(self.quota_type.key, client_id)  # the topic, see below

    def record_topics_and_get_throttle_time_ms(
        self, topic_bytes: Mapping[str, int], now_ms: int
    ) -> int:
        """Record each topic's bytes; the longest throttle any topic earns (0: none)."""
        throttle_ms = 0
        for topic, size in topic_bytes.items():
            if size:
                throttle_ms = max(
                    throttle_ms, self.record_and_get_throttle_time_ms("", topic, size, now_ms)
                )
        return throttle_ms

    def unrecord_topics(self, topic_bytes: Mapping[str, int], now_ms: int) -> None:
        for topic, size in topic_bytes.items():
            if size:
                self.unrecord("", topic, size, now_ms)


@runtime_checkable
class IpQuotaSource(Protocol):
    """Where `connection_creation_rate` quotas come from (`QuotasImage.ip_quota`)."""

    def ip_quota(self, ip: str) -> ResolvedQuota | None: ...


class ConnectionRateQuotaManager:
    """`connection_creation_rate` per client IP (KIP-612, Kafka's `ConnectionQuotas`): each
    new connection from an IP with a quota records 1 into that IP's rate; a connection that
    takes it over the quota is not recorded (it will not be served) and is closed after the
    throttle time (at most one quota window, as Kafka bounds it), so a client reconnecting in
    a loop is slowed to the quota."""

    def __init__(
        self, metrics: Metrics, config: MetricConfig, source: Callable[[], IpQuotaSource | None]
    ) -> None:
        self.metrics = metrics
        self.config = MetricConfig(config.samples, config.time_window_ms)
        self._source = source
        self._sensors: dict[QuotaTags, tuple[Sensor, Rate, MetricName, float]] = {}
        #: connections closed for going over their IP's rate
        self.throttled_connections = 0

    def record_and_get_throttle_time_ms(self, ip: str, now_ms: int) -> int:
        """Record a new connection from `ip`; 0 to serve it, else the ms after which to close
        it (Kafka's `recordIpConnectionMaybeThrottle`)."""
        source = self._source()
        found = source.ip_quota(ip) if source is not None else None
        if found is None:
            return 0
        tags = tuple(found.tags)
        limit = float(found.limit)
        entry = self._sensors.get(tags)
        if entry is None or self.metrics.get_sensor(entry[0].name) is None:
            sensor = self.metrics.sensor(
                "ConnectionRateQuota-" + ":".join(v for _, v in tags),
                self.config,
                inactive_expiration_ms=INACTIVE_SENSOR_EXPIRATION_MS,
            )
            rate = Rate()
            # Kafka's `ConnectionQuotas.IpQuotaEntity`: group socket-server-metrics, tag ip
            name = MetricName.of(
                "kafka.server",
                "socket-server-metrics",
                "connection-accept-rate",
                tags,
                "Tracking the rate of new connections per IP",
            )
            sensor.add(name, rate, self.config.with_quota(Quota.upper_bound(limit)))
            entry = (sensor, rate, name, limit)
            self._sensors[tags] = entry
        sensor, rate, name, known = entry
        if known != limit:  # the quota changed since
            sensor.set_quota(name, self.config.with_quota(Quota.upper_bound(limit)))
            self._sensors[tags] = (sensor, rate, name, limit)
        try:
            sensor.record(1.0, now_ms)
        except QuotaViolation as e:
            sensor.record(-1.0, now_ms, check_quotas=False)  # not served: not counted
            self.throttled_connections += 1
            # Kafka's `QuotaUtils.boundedThrottleTime`: at most one quota window
            # (`quota.window.size.seconds`, its `maxThrottleTimeMs`), a quota of 0 included
            cap_ms = int(self.config.time_window_ms)
            if e.bound <= 0:
                return cap_ms
            window_ms = rate.window_size_ms(self.config, now_ms)
            return min(cap_ms, max(1, round((e.value - e.bound) / e.bound * window_ms)))
        return 0

    def expire(self, now_ms: int) -> int:
        gone = [tags for tags, entry in self._sensors.items() if entry[0].has_expired(now_ms)]
        for tags in gone:
            self.metrics.remove_sensor(self._sensors.pop(tags)[0].name)
        return len(gone)
