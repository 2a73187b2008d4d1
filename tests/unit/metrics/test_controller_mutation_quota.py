"""The controller mutation quota (KIP-599) against Kafka's `ControllerMutationQuotaManager`:
a token bucket of `quota × window` credits checked before admission (strict) or after
(permissive), throttle time `-tokens / quota`."""

from __future__ import annotations

import pytest

from sparklog.errors import ThrottlingQuotaExceededError
from sparklog.metrics.controller_mutation_quota import (
    CONTROLLER_MUTATION_RATE,
    ControllerMutationQuotaManager,
    TokenBucket,
)
from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Metrics
from sparklog.metrics.stats import MetricConfig, Quota

#: Kafka's defaults: 11 windows of 1 s
QUOTA_CONFIG = MetricConfig(samples=11, time_window_ms=1000)


class Source:
    """A quota per (user, client id); the real one is `metadata.quotas.QuotasImage`."""

    def __init__(self, quotas: dict[tuple[str, str], float]) -> None:
        self.quotas = quotas
        self.asked: list[str] = []

    def client_quota(self, key: str, user: str, client_id: str) -> float | None:
        self.asked.append(key)
        return self.quotas.get((user, client_id))


def manager(quotas: dict[tuple[str, str], float]) -> tuple[ControllerMutationQuotaManager, Metrics]:
    metrics = Metrics(clock=lambda: 0)
    return ControllerMutationQuotaManager(metrics, QUOTA_CONFIG, Source(quotas)), metrics


def test_token_bucket_is_kafkas() -> None:
    config = QUOTA_CONFIG.with_quota(Quota.upper_bound(2.0))
    bucket = TokenBucket()
    assert bucket.measure(config, 10_000) == 22.0  # full: 2/s × 11 s
    bucket.record(config, 30, 10_000)
    assert bucket.measure(config, 10_000) == -8.0
    assert bucket.measure(config, 12_000) == -4.0  # refilled at 2/s
    assert bucket.measure(config, 100_000) == 22.0  # never above the burst


def test_no_quota_is_unbounded() -> None:
    quotas, _metrics = manager({})
    quota = quotas.new_quota("alice", "app", strict=True)
    assert not quota.bounded
    for _ in range(100):
        quota.record(1000, 0)
    assert quota.throttle_time_ms == 0
    assert quotas.source is not None
    assert quotas.source.asked[0] == CONTROLLER_MUTATION_RATE  # type: ignore[attr-defined]


def test_strict_refuses_once_the_bucket_is_below_zero() -> None:
    quotas, metrics = manager({("alice", "app"): 2.0})
    first = quotas.new_quota("alice", "app", strict=True)
    first.record(20, 1000)  # 22 credits: fits
    first.record(10, 1000)  # 2 left: admitted whole, the bucket goes to -8
    assert first.throttle_time_ms == 0
    with pytest.raises(ThrottlingQuotaExceededError) as refused:
        first.record(1, 1000)
    assert refused.value.code == 89
    assert first.throttle_time_ms == 4000  # 8 credits at 2/s
    assert first.is_exceeded()
    tokens = metrics.metric(
        MetricName.of(
            "kafka.server", "ControllerMutation", "tokens", {"user": "alice", "client-id": "app"}
        )
    )
    assert tokens is not None and tokens.value(1000) == -8.0  # the refused topic cost nothing
    later = quotas.new_quota("alice", "app", strict=True)
    with pytest.raises(ThrottlingQuotaExceededError):
        later.record(1, 4999)
    later = quotas.new_quota("alice", "app", strict=True)
    later.record(1, 5000)  # back at zero after 4 s: admitted
    assert later.throttle_time_ms == 0


def test_permissive_accepts_and_throttles() -> None:
    quotas, _metrics = manager({("alice", "app"): 2.0})
    quota = quotas.new_quota("alice", "app", strict=False)
    quota.record(30, 1000)
    quota.record(10, 1000)  # accepted although over: older versions do not know error 89
    assert quota.throttle_time_ms == 9000  # -18 credits at 2/s
    assert not quota.is_exceeded()


def test_entities_are_apart_and_quota_changes_apply_live() -> None:
    source = {("alice", "app"): 1.0, ("bob", "app"): 1.0}
    quotas, _metrics = manager(source)
    quotas.new_quota("alice", "app", strict=True).record(12, 0)  # 11 credits: to -1
    with pytest.raises(ThrottlingQuotaExceededError):
        quotas.new_quota("alice", "app", strict=True).record(1, 0)  # alice's bucket is empty...
    quotas.new_quota("bob", "app", strict=True).record(12, 0)  # ...bob's is his own
    source[("alice", "app")] = 100.0  # an AlterClientQuotas raising alice's quota
    quotas.new_quota("alice", "app", strict=True).record(1, 10)  # -1 + 1 credit in 10 ms


def test_default_entity_tags_share_one_bucket() -> None:
    class Resolved:
        limit = 1.0
        tags = (("user", ""), ("client-id", "<default>"))

    metrics = Metrics(clock=lambda: 0)

    class DefaultSource:
        def client_quota(self, key: str, user: str, client_id: str) -> Resolved:
            return Resolved()

    quotas = ControllerMutationQuotaManager(metrics, QUOTA_CONFIG, DefaultSource())
    quotas.new_quota("u1", "c1", strict=True).record(12, 0)
    with pytest.raises(ThrottlingQuotaExceededError):
        quotas.new_quota("u2", "c2", strict=True).record(1, 0)  # the same default entity


def test_quotas_come_from_the_metadata_image_by_kafkas_precedence() -> None:
    from sparklog.metadata.image import MetadataImage
    from sparklog.metadata.mutation_admission import ImageQuotaSource
    from sparklog.metadata.quotas import ClientQuotaEntity, quota_record

    image = MetadataImage()
    quotas = ControllerMutationQuotaManager(
        Metrics(clock=lambda: 0), QUOTA_CONFIG, ImageQuotaSource(lambda: image)
    )
    assert not quotas.new_quota("alice", "app", strict=True).bounded  # no record: no limit
    image.apply(quota_record(ClientQuotaEntity.of({"user": None}), CONTROLLER_MUTATION_RATE, 1.0))
    image.apply(
        quota_record(ClientQuotaEntity.of({"user": "admin"}), CONTROLLER_MUTATION_RATE, 100.0)
    )
    quotas.new_quota("alice", "app", strict=True).record(12, 0)  # /users/<default>: 11 credits
    with pytest.raises(ThrottlingQuotaExceededError):
        quotas.new_quota("alice", "app", strict=True).record(1, 0)
    quotas.new_quota("admin", "app", strict=True).record(500, 0)  # /users/admin: 1,100 credits


def test_the_user_tag_is_kafkas_sanitized_principal_name() -> None:
    # DefaultQuotaCallback.quotaMetricTags: Sanitizer.sanitize(principal name)
    quotas, metrics = manager({("CN=app,O=x", ""): 5.0})
    quota = quotas.new_quota("CN=app,O=x", "", strict=True)
    quota.record(1, 0)
    users = {m.name.tag("user") for m in metrics if m.name.type == "ControllerMutation"}
    assert users == {"CN%3Dapp%2CO%3Dx"}


def test_the_controller_quota_windows_are_their_own_settings() -> None:
    from sparklog.metrics.config import MetricsConfig

    config = MetricsConfig.from_properties(
        {"controller.quota.window.num": "5", "controller.quota.window.size.seconds": "2"}
    )
    assert config.controller_quota_config == MetricConfig(samples=5, time_window_ms=2000)
    assert config.quota_config == MetricConfig(samples=11, time_window_ms=1000)
