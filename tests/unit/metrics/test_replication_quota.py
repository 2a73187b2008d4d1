"""KIP-73's replication quota against Kafka's `ReplicationQuotaManager` and its config parsing."""

from __future__ import annotations

import pytest

from sparklog.metrics.registry import Metrics
from sparklog.metrics.replication_quota import (
    ALL_PARTITIONS,
    LEADER_RATE,
    ReplicationQuotaManager,
    parse_throttled_replicas,
    quota_window,
    throttled_rate,
)
from sparklog.metrics.stats import MetricConfig
from sparklog.settings import LONG_MAX, ConfigError
from sparklog.storage.config import LogConfig


def test_throttled_replicas_name_this_brokers_partitions() -> None:
    assert parse_throttled_replicas("0:1, 1:2 ,2:1", 1) == {0, 2}
    assert parse_throttled_replicas("0:1,1:2", 3) == frozenset()
    assert parse_throttled_replicas(" * ", 7) is ALL_PARTITIONS
    assert parse_throttled_replicas("", 1) == frozenset()


@pytest.mark.parametrize("bad", ["0-1", "a:1", "*,0:1", "0:1:2"])
def test_a_malformed_replica_list_is_refused_with_kafkas_rule(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"the literal '\*' or a list of replicas"):
        LogConfig.from_properties({"leader.replication.throttled.replicas": bad})
    ok = LogConfig.from_properties({"follower.replication.throttled.replicas": "0:1, 1:2"})
    assert ok.follower_replication_throttled_replicas == "0:1,1:2"


def test_the_broker_rate_prefers_the_brokers_own_over_the_default() -> None:
    assert throttled_rate([{}, {}], LEADER_RATE) == LONG_MAX
    assert throttled_rate([{LEADER_RATE: "100"}, {}], LEADER_RATE) == 100
    assert throttled_rate([{LEADER_RATE: "100"}, {LEADER_RATE: "5"}], LEADER_RATE) == 5
    window = quota_window({"replication.quota.window.num": "3"})
    assert (window.samples, window.time_window_ms) == (3, 1000)


def test_only_out_of_sync_replicas_of_throttled_partitions_are_held_over_the_quota() -> None:
    quota = ReplicationQuotaManager(
        Metrics(clock=lambda: 0), MetricConfig(samples=2, time_window_ms=1000), "LeaderReplication"
    )
    quota.mark_throttled("t", frozenset({0}))
    assert not quota.should_throttle("t", 0, in_sync=False, now_ms=0)  # no rate: unlimited
    quota.update_quota(1000)
    quota.record(999, 0)
    assert not quota.should_throttle("t", 0, in_sync=False, now_ms=0)  # 999 B over 1 s
    quota.record(2, 0)
    assert quota.should_throttle("t", 0, in_sync=False, now_ms=0)
    assert not quota.should_throttle("t", 0, in_sync=True, now_ms=0)  # never the ISR
    assert not quota.should_throttle("t", 1, in_sync=False, now_ms=0)  # not listed
    assert not quota.should_throttle("u", 0, in_sync=False, now_ms=0)
    assert not quota.should_throttle("t", 0, in_sync=False, now_ms=2500)  # the window moved on
    quota.set_throttled({"t": frozenset()})
    assert not quota.is_throttled("t", 0)
