"""Sizes and timings of one simulated run (Kafka's setting names, scaled down ~10x so a run
covers many lease expiries and elections in a few simulated tens of seconds)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Mutations:
    """Deliberate bugs for the self-test: each must make some seed fail."""

    follower_skips_truncation: bool = False  # fetch right away, never OffsetForLeaderEpoch
    high_watermark_is_max: bool = False  # leader HW = max LEO over the ISR instead of min
    no_maximal_isr: bool = False  # HW over the committed ISR while an expansion is in flight
    no_eligible_leader_replicas: bool = False  # a cluster from before KIP-966 (feature at 0)


@dataclass(frozen=True, slots=True)
class SimSettings:
    brokers: int = 3
    partitions: int = 2
    replication_factor: int = 3
    min_insync_replicas: int = 2
    producers: int = 2
    # broker <-> controller
    broker_heartbeat_interval_ms: int = 500
    broker_session_timeout_ms: int = 2_000
    registration_backoff_ms: int = 300
    metadata_max_wait_ms: int = 500
    controller_tick_interval_ms: int = 200
    leader_imbalance_check_interval_seconds: int = 3
    # replication
    replica_lag_time_max_ms: int = 3_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_backoff_ms: int = 100
    replica_fetch_max_records: int = 20
    alter_partition_backoff_ms: int = 100
    replica_high_watermark_checkpoint_interval_ms: int = 1_000
    # the OS writes dirty log pages back every so often (what a power loss keeps)
    log_writeback_ms: tuple[int, int] = (500, 3_000)
    rpc_timeout_ms: int = 1_000
    # clients
    produce_timeout_ms: int = 1_000  # the leader's acks=all wait (Produce `timeout_ms`)
    request_timeout_ms: int = 1_500
    retry_backoff_ms: int = 100
    producer_think_ms: tuple[int, int] = (20, 250)
    consumer_poll_interval_ms: int = 300
    consumer_max_records: int = 50
    # the Spark launcher relaunches a broker that stopped itself after this long
    relaunch_delay_ms: int = 1_000
    # phases
    warmup_ms: int = 1_500
    workload_ms: int = 24_000
    settle_ms: int = 16_000
