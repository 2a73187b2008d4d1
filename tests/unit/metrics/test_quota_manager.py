"""Client quota managers against Kafka's semantics (`ClientQuotaManager`,
`ClientRequestQuotaManager`): throttle time, un-recording, the fetch cap, live quota changes,
expiry, and the cluster-scope seams (`usage`, `set_shares`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from sparklog.metrics.metric import MetricName
from sparklog.metrics.quota_manager import (
    INACTIVE_SENSOR_EXPIRATION_MS,
    ClientQuotaManager,
    ClientRequestQuotaManager,
    ConnectionRateQuotaManager,
    QuotaType,
)
from sparklog.metrics.registry import Metrics
from tests.support.quota_fakes import QUOTA_WINDOWS, Clock, Resolved


@dataclass
class TinySource:
    """A stand-in for `metadata.quotas.QuotasImage`: exact (user, client id) quotas, then a
    client-id-only quota, then a user-only quota."""

    quotas: dict[tuple[str | None, str | None, str], float] = field(default_factory=dict)
    version: int = 0
    lookups: int = 0

    def set(self, user: str | None, client_id: str | None, key: str, limit: float) -> None:
        self.quotas[(user, client_id, key)] = limit
        self.version += 1

    def remove(self, user: str | None, client_id: str | None, key: str) -> None:
        del self.quotas[(user, client_id, key)]
        self.version += 1

    def client_quota(self, key: str, user: str, client_id: str) -> Resolved | None:
        self.lookups += 1
        for u, c in ((user, client_id), (None, client_id), (user, None)):
            limit = self.quotas.get((u, c, key))
            if limit is not None:
                return Resolved(limit, (("user", u or ""), ("client-id", c or "")))
        return None


def manager(
    quota_type: QuotaType = QuotaType.PRODUCE,
) -> tuple[ClientQuotaManager, TinySource, Clock, Metrics]:
    clock = Clock(5_000_000)
    metrics = Metrics(clock=clock)
    source = TinySource()
    return (
        ClientQuotaManager(metrics, quota_type, QUOTA_WINDOWS, lambda: source),
        source,
        clock,
        metrics,
    )


def test_no_quota_no_throttle_and_nothing_recorded() -> None:
    qm, _source, clock, metrics = manager()
    assert qm.record_and_get_throttle_time_ms("alice", "c1", 10**9, clock.ms) == 0
    assert qm.entity_count() == 0
    assert len(metrics) == 0
    assert qm.max_value_in_quota_window("alice", "c1") is None


def test_throttle_time_is_excess_over_quota_times_window() -> None:
    qm, source, clock, metrics = manager()
    source.set(None, "c1", "producer_byte_rate", 1000)
    # 10 windows' worth (10,000 B over Kafka's minimum 10 s window) is exactly the quota
    assert qm.record_and_get_throttle_time_ms("alice", "c1", 10_000, clock.ms) == 0
    # 11,000 B: rate 1,100 B/s over 10 s, (1100 - 1000) / 1000 × 10,000 ms = 1,000 ms
    assert qm.record_and_get_throttle_time_ms("alice", "c1", 1_000, clock.ms) == 1000
    rate = metrics.metric(
        MetricName.of("kafka.server", "Produce", "byte-rate", {"user": "", "client-id": "c1"})
    )
    assert rate is not None and rate.value() == pytest.approx(1100)
    qm.record_throttle_time("alice", "c1", 1000, clock.ms)
    throttle = metrics.metric(
        MetricName.of("kafka.server", "Produce", "throttle-time", {"user": "", "client-id": "c1"})
    )
    assert throttle is not None and throttle.value() == 1000


def test_a_client_at_its_quota_is_not_throttled_and_a_burst_is() -> None:
    qm, source, clock, _metrics = manager()
    source.set(None, "c1", "producer_byte_rate", 1000)
    for _ in range(30):  # 900 B each second for 30 s: steady below the quota
        assert qm.record_and_get_throttle_time_ms("u", "c1", 900, clock.ms) == 0
        clock.ms += 1000
    # a 4,000 B burst in a new window (the oldest recycled): 10 × 900 + 4,000 B over
    # the 10 s window is 1,300 B/s, (1300 - 1000) / 1000 × 10 s = 3 s
    throttle = qm.record_and_get_throttle_time_ms("u", "c1", 4000, clock.ms)
    assert throttle == 3000


def test_clients_of_one_entity_share_its_quota() -> None:
    qm, source, clock, _metrics = manager()
    source.set("alice", None, "producer_byte_rate", 1000)
    assert qm.record_and_get_throttle_time_ms("alice", "a", 8_000, clock.ms) == 0
    # a second client id of the same user: the user's 1,000 B/s is shared
    assert qm.record_and_get_throttle_time_ms("alice", "b", 4_000, clock.ms) == 2000
    # another user has no quota
    assert qm.record_and_get_throttle_time_ms("bob", "b", 100_000, clock.ms) == 0


def test_unrecord_takes_back_a_throttled_fetch() -> None:
    qm, source, clock, _metrics = manager(QuotaType.FETCH)
    source.set(None, "c", "consumer_byte_rate", 1000)
    assert qm.record_and_get_throttle_time_ms("u", "c", 15_000, clock.ms) > 0
    qm.unrecord("u", "c", 15_000, clock.ms)
    assert qm.rates(clock.ms)[(("user", ""), ("client-id", "c"))] == 0
    assert qm.record_and_get_throttle_time_ms("u", "c", 5_000, clock.ms) == 0


def test_fetch_cap_is_what_fits_in_the_quota_window() -> None:
    qm, source, _clock, _metrics = manager(QuotaType.FETCH)
    source.set(None, "c", "consumer_byte_rate", 1000)
    # Kafka's getMaxValueInQuotaWindow: limit × (samples − 1) × window seconds
    assert qm.max_value_in_quota_window("u", "c") == 10_000


def test_quota_change_applies_to_live_sensors() -> None:
    qm, source, clock, _metrics = manager()
    source.set(None, "c", "producer_byte_rate", 1000)
    assert qm.record_and_get_throttle_time_ms("u", "c", 10_000, clock.ms) == 0
    source.set(None, "c", "producer_byte_rate", 500)  # lowered at runtime
    # 10,001 B over 10 s against 500 B/s: (1000.1 - 500) / 500 × 10 s
    assert qm.record_and_get_throttle_time_ms("u", "c", 1, clock.ms) == 10_002
    source.remove(None, "c", "producer_byte_rate")  # removed: no limit any more
    assert qm.record_and_get_throttle_time_ms("u", "c", 10**6, clock.ms) == 0


def test_resolutions_are_cached_until_the_source_changes() -> None:
    qm, source, clock, _metrics = manager()
    source.set(None, "c", "producer_byte_rate", 10**9)
    for _ in range(100):
        qm.record_and_get_throttle_time_ms("u", "c", 1, clock.ms)
    assert source.lookups == 1
    source.set(None, "other", "producer_byte_rate", 1)
    qm.record_and_get_throttle_time_ms("u", "c", 1, clock.ms)
    assert source.lookups == 3  # the live entity re-resolved, then the client


def test_idle_quota_sensors_expire_after_an_hour() -> None:
    qm, source, clock, metrics = manager()
    source.set(None, "c", "producer_byte_rate", 1000)
    qm.record_and_get_throttle_time_ms("u", "c", 1, clock.ms)
    assert qm.expire(clock.ms + INACTIVE_SENSOR_EXPIRATION_MS) == 0
    assert qm.expire(clock.ms + INACTIVE_SENSOR_EXPIRATION_MS + 1) == 1
    assert qm.entity_count() == 0 and len(metrics) == 0
    # and it comes back on the next request
    assert qm.record_and_get_throttle_time_ms("u", "c", 1, clock.ms) == 0
    assert qm.entity_count() == 1


def test_usage_and_shares_for_cluster_scope() -> None:
    qm, source, clock, _metrics = manager()
    source.set(None, "c", "producer_byte_rate", 1000)
    tags = (("user", ""), ("client-id", "c"))
    qm.record_and_get_throttle_time_ms("u", "c", 300, clock.ms)
    clock.ms += 1000  # a new window
    qm.record_and_get_throttle_time_ms("u", "c", 200, clock.ms)
    assert qm.usage(clock.ms) == {tags: 200}
    assert qm.usage(clock.ms + 1000) == {tags: 0}  # nothing yet in the next window
    # this broker's share is a third: 500 B recorded over the 10 s window is 50 B/s of
    # 333 B/s, fine; 4,000 more B is 450 B/s, over the share but under the whole quota
    qm.set_shares({tags: 1 / 3})
    assert qm.quota_limit("u", "c") == pytest.approx(1000 / 3)
    assert qm.record_and_get_throttle_time_ms("u", "c", 4_000, clock.ms) > 0
    qm.set_shares({})
    assert qm.quota_limit("u", "c") == 1000
    with pytest.raises(ValueError, match="within"):
        qm.set_shares({tags: 1.5})


def test_request_quota_is_a_percentage_of_loop_time_capped_at_one_window() -> None:
    clock = Clock(5_000_000)
    metrics = Metrics(clock=clock)
    source = TinySource()
    source.set(None, "c", "request_percentage", 10)  # 10 % of the loop
    qm = ClientRequestQuotaManager(metrics, QUOTA_WINDOWS, lambda: source)
    # 1 s of loop time over the 10 s window is exactly 10 %
    assert qm.record_request_and_get_throttle_time_ms("u", "c", 10**9, clock.ms) == 0
    # 1 s more is 20 %: Kafka's throttle would be 10 s, capped at one window (1 s)
    assert qm.record_request_and_get_throttle_time_ms("u", "c", 10**9, clock.ms) == 1000
    qm.record_exempt(10**9, clock.ms)
    exempt = metrics.metric(MetricName.of("kafka.server", "Request", "exempt-request-time"))
    assert exempt is not None and exempt.value() == pytest.approx(10)


class IpSource(TinySource):
    def ip_quota(self, ip: str) -> Resolved | None:
        limit = self.quotas.get((None, ip, "connection_creation_rate"))
        return None if limit is None else Resolved(limit, (("ip", ip),))


def test_connection_rate_over_the_quota_is_closed_after_the_throttle_and_not_counted() -> None:
    clock = Clock(5_000_000)
    metrics = Metrics(clock=clock)
    source = IpSource()
    qm = ConnectionRateQuotaManager(metrics, QUOTA_WINDOWS, lambda: source)
    assert qm.record_and_get_throttle_time_ms("10.0.0.1", clock.ms) == 0  # no quota
    source.set(None, "10.0.0.1", "connection_creation_rate", 2)
    # 2/s over the 10 s window: 20 connections at once are fine, the 21st is 0.5 s over
    # (21 / 10 s = 2.1/s: (2.1 - 2) / 2 × 10 s)
    assert [qm.record_and_get_throttle_time_ms("10.0.0.1", clock.ms) for _ in range(20)] == [0] * 20
    assert qm.record_and_get_throttle_time_ms("10.0.0.1", clock.ms) == 500
    # refused connections are not counted: the next one is refused just as long
    assert qm.record_and_get_throttle_time_ms("10.0.0.1", clock.ms) == 500
    assert qm.throttled_connections == 2
    assert qm.record_and_get_throttle_time_ms("10.0.0.2", clock.ms) == 0  # another IP


def test_connection_rate_is_exposed_under_kafkas_ip_metric_name() -> None:
    """Kafka's `ConnectionQuotas.IpQuotaEntity` metric: `connection-accept-rate` in the
    `socket-server-metrics` group with the `ip` tag, i.e. what the JMX exporter serves as
    `kafka_server_socket_server_metrics_connection_accept_rate{ip=...}`."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from sparklog.metrics.prometheus import RegistryCollector

    clock = Clock(5_000_000)
    metrics = Metrics(clock=clock)
    source = IpSource()
    source.set(None, "10.0.0.1", "connection_creation_rate", 2)
    qm = ConnectionRateQuotaManager(metrics, QUOTA_WINDOWS, lambda: source)
    for _ in range(5):
        qm.record_and_get_throttle_time_ms("10.0.0.1", clock.ms)
    collectors = CollectorRegistry()
    collectors.register(RegistryCollector(metrics))
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(generate_latest(collectors).decode())
        for s in f.samples
    }
    key = ("kafka_server_socket_server_metrics_connection_accept_rate", (("ip", "10.0.0.1"),))
    assert key in samples, sorted(samples)
    assert samples[key] > 0


def test_connection_throttle_is_capped_at_one_quota_window() -> None:
    """Kafka bounds the IP connection throttle by `quota.window.size.seconds`
    (`QuotaUtils.boundedThrottleTime` with `maxThrottleTimeMs`). An integer rate of 1/s or more
    never earns more than 1 s from one connection; a quota of 0 (refused by AlterClientQuotas,
    but a replayed record may hold it) would otherwise hold the connection 11 s."""
    clock = Clock(5_000_000)
    source = IpSource()
    source.set(None, "10.0.0.1", "connection_creation_rate", 0)
    qm = ConnectionRateQuotaManager(Metrics(clock=clock), QUOTA_WINDOWS, lambda: source)
    assert qm.record_and_get_throttle_time_ms("10.0.0.1", clock.ms) == 1000


def test_the_user_tag_of_quota_metrics_is_kafkas_sanitized_principal_name() -> None:
    """Kafka tags quota metrics with `Sanitizer.sanitize(principal.getName)`: an mTLS
    principal `CN=app,OU=x y*~` shows as `CN%3Dapp%2COU%3Dx%20y%2A%7E`, so dashboards and
    alerts written against Kafka's `kafka_server_produce_byte_rate{user=...}` match."""
    qm, source, clock, metrics = manager()
    user = "CN=app,OU=x y*~"
    source.set(user, None, "producer_byte_rate", 1000)
    qm.record_and_get_throttle_time_ms(user, "c1", 100, clock.ms)
    qm.record_throttle_time(user, "c1", 5, clock.ms)
    tags = {"user": "CN%3Dapp%2COU%3Dx%20y%2A%7E", "client-id": ""}
    for name in ("byte-rate", "throttle-time"):
        assert metrics.metric(MetricName.of("kafka.server", "Produce", name, tags)) is not None
    assert qm.usage(clock.ms)  # the quota entity itself keeps the principal's own name
    assert next(iter(qm.usage(clock.ms))) == (("user", user), ("client-id", ""))
