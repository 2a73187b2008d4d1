"""The controller mutation quota (KIP-599, Kafka's `ControllerMutationQuotaManager`).

`controller_mutation_rate` bounds how many partitions a (user, client-id) may create or delete
per second: CreateTopics and CreatePartitions cost their new partitions, DeleteTopics the
deleted topic's partitions. Unlike the byte-rate quotas it is enforced *before* admission with
a token bucket (Kafka's `TokenBucket` stat): the bucket holds at most
`quota × quota.window.num × quota.window.size.seconds` credits, refills at `quota` per second,
and a mutation is refused while the bucket is below zero — so a burst up to the bucket's size
goes through at once, and one large mutation may drive it negative (it is admitted whole, as
Kafka admits a topic with more partitions than the burst) and delay the next.

Kafka's two flavours, by request version (`new_quota(..., strict=...)`):
- **strict** (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+): `record` raises
  `ThrottlingQuotaExceededError` for the topic (the caller answers it with
  THROTTLING_QUOTA_EXCEEDED) and leaves the bucket as it was;
- **permissive** (older versions, whose clients do not know error 89): the mutation is
  accepted and recorded, and the response carries the throttle time.
Either way the throttle time is how long until the bucket is back at zero:
`-tokens / quota` seconds (Kafka's `ControllerMutationQuotaManager.throttleTimeMs`).

Sans-IO (the caller passes `now_ms`); the quota comes from a `QuotaSource` (the controller's
`QuotasImage`, looked up by Kafka's precedence). Metrics, Kafka's names:
`kafka.server:type=ControllerMutation,user=,client-id=` `mutation-rate`, `tokens`,
`throttle-time`.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from sparklog.errors import ThrottlingQuotaExceededError
from sparklog.metrics.metric import MetricName, sanitize
from sparklog.metrics.registry import Metrics
from sparklog.metrics.stats import Avg, MetricConfig, Quota, Rate

logger = logging.getLogger(__name__)

#: the quota key (Kafka's `QuotaConfig.CONTROLLER_MUTATION_RATE_OVERRIDE_CONFIG`)
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
#: Kafka's `ThrottlingQuotaExceededException` message (Errors.THROTTLING_QUOTA_EXCEEDED)
THROTTLED_MESSAGE = "The throttling quota has been exceeded."
#: an idle entity's sensors go after an hour (Kafka's `ClientQuotaManager.InactiveSensorExpirationTimeSeconds`)
INACTIVE_SENSOR_EXPIRATION_MS = 3_600_000
_GROUP = "ControllerMutation"
#: the principal name of an unauthenticated client (`User:ANONYMOUS`)
_ANONYMOUS = "ANONYMOUS"


class QuotaSource(Protocol):
    """Where quotas come from (`metadata.quotas.QuotasImage`): the quota of `key` that applies
    to (user, client id) by Kafka's precedence, or None for no quota. The answer is a number or
    an object with `limit` (and optionally `tags`: the metric tags of the entity it resolved
    to, so clients sharing a default quota share its sensor, as Kafka's do)."""

    def client_quota(self, key: str, user: str, client_id: str) -> Any: ...


class TokenBucket:
    """Credits refilled at the quota's rate up to a burst (Kafka's `TokenBucket` stat).

    It starts full (Kafka's starts at `lastUpdateMs = 0`, so its first refill fills it)."""

    __slots__ = ("tokens", "last_update_ms")

    def __init__(self) -> None:
        self.tokens: float | None = None
        self.last_update_ms = 0

    @staticmethod
    def burst(config: MetricConfig) -> float:
        assert config.quota is not None
        return config.samples * config.time_window_ms / 1000.0 * config.quota.bound

    def _refill(self, config: MetricConfig, now_ms: int) -> float:
        assert config.quota is not None
        burst = self.burst(config)
        if self.tokens is None:
            self.tokens = burst
        elif now_ms > self.last_update_ms:
            refill = config.quota.bound * (now_ms - self.last_update_ms) / 1000.0
            self.tokens = min(burst, self.tokens + refill)
        self.last_update_ms = max(self.last_update_ms, now_ms)
        return self.tokens

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        if config.quota is None:
            return float(2**63 - 1)
        return self._refill(config, now_ms)

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        if config.quota is None:
            return
        self.tokens = min(self.burst(config), self._refill(config, now_ms) - value)


class MutationQuota:
    """The quota one request records its mutations against (Kafka's `ControllerMutationQuota`).

    `record(permits, now_ms)` per topic; `throttle_time_ms` is what the response carries."""

    def __init__(
        self, manager: ControllerMutationQuotaManager | None, entity: Any, strict: bool
    ) -> None:
        self._manager = manager
        self._entity = entity
        self.strict = strict
        self.throttle_time_ms = 0

    @property
    def bounded(self) -> bool:
        return self._manager is not None

    def is_exceeded(self) -> bool:
        """True once a strict record was refused (later topics of the request are refused
        without recording, as Kafka's `StrictControllerMutationQuota.isExceeded`)."""
        return self.strict and self.throttle_time_ms > 0

    def record(self, permits: float, now_ms: int) -> None:
        """Record `permits` partitions created or deleted; strict: raise
        `ThrottlingQuotaExceededError` (nothing recorded) when the bucket is below zero."""
        if self._manager is None or permits <= 0:
            return
        throttle_ms = self._manager._record(self._entity, permits, now_ms, self.strict)
        if throttle_ms > 0:
            self.throttle_time_ms = max(self.throttle_time_ms, throttle_ms)
            if self.strict:
                raise ThrottlingQuotaExceededError(THROTTLED_MESSAGE)


class _Entity:
    __slots__ = ("sensor_name", "tags", "limit", "bucket", "config", "throttle_sensor")

    def __init__(self, sensor_name: str, tags: tuple[tuple[str, str], ...]) -> None:
        self.sensor_name = sensor_name
        self.tags = tags
        self.limit = -1.0
        self.bucket = TokenBucket()
        self.config = MetricConfig()
        self.throttle_sensor = ""


class _Tokens:
    """The metric `tokens`: an entity's bucket measured with its current quota."""

    __slots__ = ("entity",)

    def __init__(self, entity: _Entity) -> None:
        self.entity = entity

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        pass  # `_record` records into the bucket itself, with the entity's live quota

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self.entity.bucket.measure(self.entity.config, now_ms)


class ControllerMutationQuotaManager:
    """One per controller (and per broker forwarding the mutating admin APIs)."""

    def __init__(
        self,
        metrics: Metrics,
        quota_config: MetricConfig,
        source: QuotaSource | None = None,
    ) -> None:
        self.metrics = metrics
        self.quota_config = quota_config
        self.source = source
        self._entities: dict[tuple[tuple[str, str], ...], _Entity] = {}

    def new_quota(self, user: str | None, client_id: str | None, *, strict: bool) -> MutationQuota:
        """The quota of a request from (user, client id): unbounded when no
        `controller_mutation_rate` applies (Kafka's `UnboundedControllerMutationQuota`)."""
        resolved = self._resolve(user or _ANONYMOUS, client_id or "")
        if resolved is None:
            return MutationQuota(None, None, strict)
        limit, tags = resolved
        entity = self._entity(tags, limit)
        return MutationQuota(self, entity, strict)

    def _resolve(
        self, user: str, client_id: str
    ) -> tuple[float, tuple[tuple[str, str], ...]] | None:
        if self.source is None:
            return None
        found = self.source.client_quota(CONTROLLER_MUTATION_RATE, user, client_id)
        if found is None:
            return None
        limit = float(getattr(found, "limit", found))
        tags = getattr(found, "tags", None)
        if tags is None:
            tags = (("user", user), ("client-id", client_id))
        # Kafka's `DefaultQuotaCallback.quotaMetricTags`: the user tag is the sanitized name
        return limit, tuple((str(k), sanitize(str(v)) if k == "user" else str(v)) for k, v in tags)

    def _entity(self, tags: tuple[tuple[str, str], ...], limit: float) -> _Entity:
        entity = self._entities.get(tags)
        if entity is None or self.metrics.get_sensor(entity.sensor_name) is None:
            name = "ControllerMutation-" + ":".join(v for _k, v in tags)
            entity = _Entity(name, tags)
            self._entities[tags] = entity
            self._register(entity)
        if entity.limit != limit:  # a quota altered at runtime applies at once
            entity.limit = limit
            entity.config = self.quota_config.with_quota(Quota.upper_bound(limit))
        return entity

    def _register(self, entity: _Entity) -> None:
        sensor = self.metrics.sensor(
            entity.sensor_name,
            self.quota_config,
            inactive_expiration_ms=INACTIVE_SENSOR_EXPIRATION_MS,
        )
        sensor.add(self._name("mutation-rate", entity.tags), Rate())
        # the bucket is recorded by `_record` with the entity's live quota; the metric
        # `tokens` shows the credits left
        sensor.add(self._name("tokens", entity.tags), _Tokens(entity))
        entity.throttle_sensor = entity.sensor_name + "-throttle"
        throttle = self.metrics.sensor(
            entity.throttle_sensor,
            self.quota_config,
            inactive_expiration_ms=INACTIVE_SENSOR_EXPIRATION_MS,
        )
        throttle.add(self._name("throttle-time", entity.tags), Avg())

    @staticmethod
    def _name(name: str, tags: tuple[tuple[str, str], ...]) -> MetricName:
        return MetricName.of("kafka.server", _GROUP, name, tags)

    def _record(self, entity: _Entity, permits: float, now_ms: int, strict: bool) -> int:
        """Record `permits` (strict: only when the bucket is not below zero); the throttle
        time in ms (0: within the quota)."""
        sensor = self.metrics.sensor(entity.sensor_name, self.quota_config)
        if not sensor.metrics:  # expired and made again: its stats are gone
            self._register(entity)
            sensor = self.metrics.sensor(entity.sensor_name, self.quota_config)
        tokens = entity.bucket.measure(entity.config, now_ms)
        if strict and tokens < 0:
            return self._throttled(entity, tokens, now_ms)
        # the quota check is ours (a bucket below zero), not Sensor's upper bound
        sensor.record(permits, now_ms, check_quotas=False)
        entity.bucket.record(entity.config, permits, now_ms)
        tokens = entity.bucket.measure(entity.config, now_ms)
        if not strict and tokens < 0:
            return self._throttled(entity, tokens, now_ms)
        return 0

    def _throttled(self, entity: _Entity, tokens: float, now_ms: int) -> int:
        if entity.limit > 0:
            throttle_ms = max(1, round(-tokens / entity.limit * 1000))
        else:  # a quota of 0 never refills: hold the client for the whole quota window
            throttle_ms = self.quota_config.samples * self.quota_config.time_window_ms
        self.metrics.sensor(entity.throttle_sensor, self.quota_config).record(
            throttle_ms, now_ms, check_quotas=False
        )
        logger.debug("controller mutations of %s throttled %d ms", entity.tags, throttle_ms)
        return int(throttle_ms)
