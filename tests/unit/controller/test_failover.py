"""Failover on the sans-IO controller: clean and unclean elections, controlled shutdown, leader
balancing, ElectLeaders, topic refusals tied to replication, and controller restarts."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from sparklog.controller.leader_balance import ElectionType, imbalanced_brokers
from sparklog.controller.quorum_controller import QuorumController
from sparklog.controller.results import ApiError
from sparklog.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    InvalidConfigError,
    InvalidReplicationFactorError,
    PreferredLeaderNotAvailableError,
    UnknownTopicOrPartitionError,
)
from sparklog.metadata.configs import ControllerConfig
from sparklog.metadata.image import MetadataImage
from sparklog.metadata.log_records import PARTITION, PARTITION_CHANGE
from sparklog.structs import NO_LEADER

from .harness import CLUSTER_ID, SESSION_TIMEOUT_MS, Harness


def expire(h: Harness, *alive: int) -> list[int]:
    """Let every lease but those of `alive` expire; the fenced ids."""
    h.advance(SESSION_TIMEOUT_MS + 1)
    h.heartbeat_all(*alive)
    return h.tick()


def check_epoch_history(log: list[dict[str, Any]]) -> None:
    """Per partition: epochs never go back, a new leader always has a new leader epoch, and
    no leader epoch ever names two leaders (so no two brokers lead at once)."""
    state: dict[tuple[str, int], tuple[int, int, int]] = {}
    leaders_by_epoch: dict[tuple[str, int, int], int] = {}
    for r in log:
        if r["type"] not in (PARTITION, PARTITION_CHANGE):
            continue
        key = (r["topic_id"], r["partition"])
        leader, leader_epoch, partition_epoch = r["leader"], r["leader_epoch"], r["partition_epoch"]
        if key in state:
            old_leader, old_leader_epoch, old_partition_epoch = state[key]
            assert partition_epoch > old_partition_epoch and leader_epoch >= old_leader_epoch
            if leader != old_leader:
                assert leader_epoch > old_leader_epoch, (key, r)
        state[key] = (leader, leader_epoch, partition_epoch)
        if leader != NO_LEADER:
            assert leaders_by_epoch.setdefault((*key, leader_epoch), leader) == leader


# -- elections --------------------------------------------------------------------------------


def test_rf3_all_isr_fenced_stays_offline_until_an_isr_member_returns():
    h = Harness()
    h.start_brokers(3)
    h.create("t", 1, 3)
    expire(h, 2)  # 0 and 1 go: isr [2], leader 2
    expire(h)  # 2 goes too: offline, isr [2] kept
    (p,) = h.partitions("t")
    assert (p.leader, p.isr) == (NO_LEADER, (2,))
    h.heartbeat(0)
    h.heartbeat(1)
    assert h.partitions("t")[0].leader == NO_LEADER  # replicas outside the ISR: no clean leader
    h.heartbeat(2)
    (p,) = h.partitions("t")
    assert (p.leader, p.isr) == (2, (2,))
    check_epoch_history(h.log)


def test_an_unfenced_replica_outside_the_isr_is_not_added_to_it():
    h = Harness()
    h.start_brokers(3)
    h.create("t", 1, 3)
    expire(h, 0, 1)
    assert h.partitions("t")[0].isr == (0, 1)
    h.heartbeat(2)
    assert not h.image.broker(2).fenced
    assert h.partitions("t")[0].isr == (0, 1)  # only the leader's AlterPartition adds it


def test_unclean_election_picks_the_first_live_replica_and_warns(caplog):
    h = Harness()
    h.start_brokers(3)
    h.create("t", 1, 2, configs={"unclean.leader.election.enable": "true"})
    (p,) = h.partitions("t")
    assert p.replicas == (0, 1)
    expire(h, 0, 2)  # isr [0]
    with caplog.at_level(logging.WARNING, logger="sparklog.controller.replication_control"):
        expire(h, 1, 2)  # the ISR ([0]) dies; 1 is live but was out of the ISR
    (p,) = h.partitions("t")
    assert (p.leader, p.isr) == (1, (1,))
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "t-0" in warning.getMessage() and "[0]" in warning.getMessage()
    assert "may be lost" in warning.getMessage()
    check_epoch_history(h.log)


def test_clean_only_partition_stays_offline_when_its_isr_dies():
    h = Harness()
    h.start_brokers(3)
    h.create("t", 1, 2)
    expire(h, 0, 2)
    expire(h, 1, 2)
    (p,) = h.partitions("t")
    assert (p.leader, p.isr) == (NO_LEADER, (0,))


# -- controlled shutdown ----------------------------------------------------------------------


def test_controlled_shutdown_moves_leaders_and_is_never_elected_again():
    h = Harness()
    h.start_brokers(3)
    h.create("t", 3, 3)
    assert [p.leader for p in h.partitions("t")] == [0, 1, 2]
    reply = h.heartbeat(0, want_shut_down=True)
    assert (reply.should_shut_down, reply.is_fenced) == (True, True)
    parts = h.partitions("t")
    assert all(p.leader != 0 and 0 not in p.isr for p in parts)
    assert parts[0].leader == 1 and parts[0].leader_epoch == 1
    # Still heartbeating without asking: it stays fenced and leads nothing.
    reply = h.heartbeat(0)
    assert reply.is_fenced
    expire(h, 0)  # everyone else goes away: 0 may not be elected
    assert all(p.leader == NO_LEADER for p in h.partitions("t"))
    # A new process under the same id (it registers again) is a normal broker.
    h.register(0, incarnation="new-process")
    assert not h.heartbeat(0).is_fenced
    check_epoch_history(h.log)


def test_controlled_shutdown_of_the_only_isr_member_takes_the_partition_offline():
    h = Harness()
    h.start_brokers(2)
    h.create("t", 1, 1)
    (p,) = h.partitions("t")
    reply = h.heartbeat(p.leader, want_shut_down=True)
    assert reply.should_shut_down
    assert h.partitions("t")[0].leader == NO_LEADER


# -- leader balancing -------------------------------------------------------------------------


def test_auto_rebalance_moves_leadership_back_after_the_interval():
    config = ControllerConfig.from_properties({"leader.imbalance.check.interval.seconds": "10"})
    h = Harness(config)
    h.start_brokers(3)
    h.create("t", 3, 3)
    assert h.tick() == []  # first tick schedules the check
    expire(h, 1, 2)
    h.heartbeat(0)  # back, but leading nothing
    assert [p.leader for p in h.partitions("t")] == [1, 1, 2]
    assert grow(h, 0) == [0, 1, 2]
    assert imbalanced_brokers(h.image, 10) == {0}
    h.advance(10_000)
    h.heartbeat_all(0, 1, 2)
    assert h.tick() == []
    assert [p.leader for p in h.partitions("t")] == [0, 1, 2]
    assert h.partitions("t")[0].leader_epoch == 2
    check_epoch_history(h.log)


def grow(h: Harness, broker_id: int) -> list[int]:
    """The leaders add `broker_id` back to every ISR; the partitions changed."""
    from sparklog.metadata.alter_partition import IsrChange

    changed = []
    for p in h.partitions("t"):
        if broker_id in p.isr or broker_id not in p.replicas:
            continue
        epoch = h.image.broker(p.leader).broker_epoch
        change = IsrChange(
            p.topic_id, p.partition, p.leader_epoch, p.partition_epoch, (*p.isr, broker_id)
        )
        (out,) = h.commit(h.controller.alter_partition(h.now_ms, p.leader, epoch, [change]))
        assert out.error_code == 0
        changed.append(p.partition)
    return changed


def test_no_rebalance_when_disabled_or_below_the_threshold():
    config = ControllerConfig.from_properties(
        {"auto.leader.rebalance.enable": "false", "leader.imbalance.check.interval.seconds": "1"}
    )
    h = Harness(config)
    h.start_brokers(2)
    h.create("t", 2, 2)
    expire(h, 1)
    h.heartbeat(0)
    grow(h, 0)
    h.advance(5_000)
    h.heartbeat_all(0, 1)
    h.tick()
    assert [p.leader for p in h.partitions("t")] == [1, 1]
    assert imbalanced_brokers(h.image, 100) == set()  # 1 of 1 is 100 %: not above 100


def test_elect_leaders_preferred_and_unclean():
    h = Harness()
    h.start_brokers(3)
    h.create("t", 2, 2)
    expire(h, 1, 2)  # p0 [0,1] -> leader 1; p1 [1,2] keeps 1
    h.heartbeat(0)
    results = h.commit(h.controller.elect_leaders(ElectionType.PREFERRED, [("t", 0), ("t", 1)]))
    assert [e.code for _, e in results] == [
        PreferredLeaderNotAvailableError.code,  # 0 is not in the ISR yet
        ElectionNotNeededError.code,
    ]
    grow(h, 0)
    results = h.commit(h.controller.elect_leaders(ElectionType.PREFERRED, None))
    assert results == [(("t", 0), ApiError())]  # "all": not-needed ones are left out
    assert h.partitions("t")[0].leader == 0
    (result,) = h.commit(h.controller.elect_leaders(ElectionType.UNCLEAN, [("nope", 0)]))
    assert result[1].code == UnknownTopicOrPartitionError.code
    expire(h, 0)  # p1 [1, 2] loses both: offline with ISR [2]
    assert (h.partitions("t")[1].leader, h.partitions("t")[1].isr) == (NO_LEADER, (2,))
    ((_, error),) = h.commit(h.controller.elect_leaders(ElectionType.UNCLEAN, [("t", 1)]))
    assert error.code == EligibleLeadersNotAvailableError.code
    h.heartbeat(1)  # live again, but outside the ISR [2]: no clean election
    assert h.partitions("t")[1].leader == NO_LEADER
    ((_, error),) = h.commit(h.controller.elect_leaders(ElectionType.UNCLEAN, [("t", 1)]))
    assert error.is_success
    p1 = h.partitions("t")[1]
    assert (p1.leader, p1.isr) == (1, (1,))
    check_epoch_history(h.log)


# -- topic refusals ---------------------------------------------------------------------------


def test_replication_factor_above_the_live_brokers_is_refused_with_kafkas_message():
    h = Harness()
    h.start_brokers(2)
    result = h.create("t", 1, 3)
    assert result.error.code == InvalidReplicationFactorError.code
    assert result.error.message == (
        "Unable to replicate the partition 3 time(s): The target replication factor of 3 "
        "cannot be reached because only 2 broker(s) are registered."
    )


def test_min_insync_above_the_replication_factor_is_refused():
    h = Harness(ControllerConfig.from_properties({"min.insync.replicas": "2"}))
    h.start_brokers(3)
    result = h.create("t", 1, 1)  # the default min.insync.replicas=2 > 1
    assert result.error.code == InvalidConfigError.code
    assert "min.insync.replicas=2" in result.error.message
    assert "replication factor 1" in result.error.message
    result = h.create("u", 1, 2, configs={"min.insync.replicas": "3"})
    assert result.error.code == InvalidConfigError.code
    assert h.create("v", 1, 2).error.is_success
    assert h.create("w", assignments=((0, (0, 1, 2)),)).error.is_success


def test_altering_min_insync_above_the_replication_factor_is_refused():
    from sparklog.metadata.configs import AlterConfigOp, ConfigResource, OpType

    h = Harness()
    h.start_brokers(3)
    h.create("t", 1, 2)
    resource = ConfigResource(2, "t")
    ((_, error),) = h.commit(
        h.controller.incremental_alter_configs(
            [(resource, [AlterConfigOp("min.insync.replicas", OpType.SET, "3")])]
        )
    )
    assert error.code == InvalidConfigError.code and "at most 2" in error.message
    ((_, error),) = h.commit(h.controller.alter_configs([(resource, {"min.insync.replicas": "2"})]))
    assert error.is_success
    assert h.image.topic_config("t")["min.insync.replicas"] == "2"


# -- controller restart -----------------------------------------------------------------------


def restart(h: Harness) -> None:
    """A new controller over the image replayed from the log (leases are gone)."""
    h.controller = QuorumController(h.controller.config, CLUSTER_ID, h.replayed())


@pytest.mark.parametrize("reregister", [False, True])
def test_restart_fences_everyone_then_elects_again_with_epochs_moving_forward(reregister):
    h = Harness()
    h.start_brokers(3)
    h.create("t", 3, 3)
    expire(h, 1, 2)
    h.heartbeat(0)
    before = {p.partition: p for p in h.partitions("t")}
    restart(h)
    assert h.image == MetadataImage.from_dict(h.image.to_dict())
    assert sorted(h.tick()) == [0, 1, 2]  # nobody holds a lease after a restart
    assert all(p.leader == NO_LEADER for p in h.partitions("t"))
    for broker_id in (2, 0, 1):
        if reregister:
            h.register(broker_id)
        h.heartbeat(broker_id)
    after = {p.partition: p for p in h.partitions("t")}
    for index, p in after.items():
        assert p.leader != NO_LEADER
        assert p.leader_epoch > before[index].leader_epoch
        assert p.partition_epoch > before[index].partition_epoch
    check_epoch_history(h.log)
    restart(h)  # twice: the second replay sees the first restart's records
    assert h.image == h.replayed()


def test_activate_after_restart_keeps_brokers_that_heartbeat_in_time():
    h = Harness()
    h.start_brokers(3)
    h.create("t", 3, 3)
    before = [(p.leader, p.leader_epoch) for p in h.partitions("t")]
    restart(h)
    h.controller.activate(h.now_ms)
    assert h.tick() == []
    assert [(p.leader, p.leader_epoch) for p in h.partitions("t")] == before
    h.advance(SESSION_TIMEOUT_MS // 2)
    h.heartbeat_all(0, 1)  # broker 2 died while the controller was down
    h.advance(SESSION_TIMEOUT_MS // 2 + 2)
    h.heartbeat_all(0, 1)
    assert h.tick() == [2]
    assert [p.leader for p in h.partitions("t")] == [0, 1, 0]
    check_epoch_history(h.log)


def test_elect_leaders_refuses_an_unknown_election_type():
    from sparklog.errors import InvalidRequestError

    h = Harness()
    h.start_brokers(1)
    with pytest.raises(InvalidRequestError):
        h.controller.elect_leaders(7, None)


def test_the_next_fencing_check_is_due_when_the_earliest_lease_ends():
    from sparklog.controller.cluster_control import BrokerHeartbeatManager

    leases = BrokerHeartbeatManager(1500)
    assert leases.next_expiry_ms([0, 1]) is None
    leases.touch(0, 1000)
    leases.touch(1, 1200)
    assert leases.next_expiry_ms([0, 1]) == 2501
    assert leases.first_stale(2500, [0, 1]) is None
    assert leases.first_stale(2501, [0, 1]) == 0
    assert leases.next_expiry_ms([1]) == 2701
