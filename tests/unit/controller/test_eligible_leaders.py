"""KIP-966 on the controller: Eligible Leader Replicas, the last known leader and unclean-
shutdown detection at registration, as Kafka 4.x's `PartitionChangeBuilder` and
`ClusterControlManager.registerBroker` do them (Kafka 4.1+ runs new clusters with them)."""

from __future__ import annotations

import uuid

import pytest

from sparklog.controller.isr_control import IsrChange
from sparklog.errors import InvalidUpdateVersionError
from sparklog.metadata.configs import AlterConfigOp, ConfigResource, ConfigResourceType, OpType
from sparklog.metadata.image import ELR_FEATURE, TRANSACTION_VERSION_FEATURE, MetadataImage
from sparklog.structs import NO_LEADER

from .harness import SESSION_TIMEOUT_MS, Harness


def expire(h: Harness, *alive: int) -> list[int]:
    """Let every lease but those of `alive` expire; the fenced ids."""
    h.advance(SESSION_TIMEOUT_MS + 1)
    h.heartbeat_all(*alive)
    return h.tick()


def restart(h: Harness, broker_id: int, *, clean: bool) -> None:
    """A new process of `broker_id` registers (with the clean-shutdown epoch or -1) and heartbeats
    until unfenced."""
    broker = h.image.broker(broker_id)
    assert broker is not None
    h.register(
        broker_id,
        incarnation=str(uuid.uuid4()),
        previous_epoch=broker.broker_epoch if clean else -1,
    )
    h.heartbeat(broker_id)


def state(h: Harness, topic: str = "t") -> tuple[int, tuple[int, ...], tuple[int, ...], tuple]:
    (p,) = h.partitions(topic)
    return p.leader, p.isr, p.elr, p.last_known_elr


def three_brokers(elr: bool = True, **configs: str) -> Harness:
    h = Harness(elr=elr)
    h.start_brokers(3)
    h.create("t", 1, 3, configs={"min.insync.replicas": "2", **configs})
    return h


def test_a_new_cluster_finalizes_eligible_leader_replicas_and_an_old_one_does_not():
    # a new cluster also runs transactions v2, as Kafka 4.x's bootstrap metadata finalizes
    assert Harness(elr=True).image.finalized_features == {
        ELR_FEATURE: 1,
        TRANSACTION_VERSION_FEATURE: 2,
    }
    assert Harness().image.finalized_features == {}
    h = Harness(elr=True)
    assert h.controller.bootstrap().records == ()  # only an empty log is bootstrapped


def test_replicas_leaving_an_isr_below_min_isr_become_eligible_leaders():
    h = three_brokers()
    expire(h, 0, 1)
    assert state(h) == (0, (0, 1), (), ())  # still at min ISR: no ELR
    expire(h, 0)
    assert state(h) == (0, (0,), (1,), ())
    expire(h)  # the last ISR member goes too: the ISR may be empty now
    assert state(h) == (NO_LEADER, (), (0, 1), (0,))
    assert h.replayed() == h.image


def test_the_power_lost_last_isr_member_does_not_lead_again_an_eligible_replica_does():
    """The defect KIP-966 fixes: the last ISR member restarts without a clean shutdown (its
    unflushed tail may be gone); it leaves the ELR and waits; the ELR member that left the ISR
    holding every committed record leads when it is back."""
    h = three_brokers()
    expire(h, 0, 1)
    expire(h, 0)
    expire(h)
    restart(h, 0, clean=False)
    assert state(h) == (NO_LEADER, (), (1,), (0,))  # offline: broker 0 is not a safe leader
    restart(h, 1, clean=True)
    assert state(h) == (1, (1,), (), ())
    assert h.replayed() == h.image


def test_without_the_feature_the_last_isr_member_leads_again_whatever_it_lost():
    h = three_brokers(elr=False)
    expire(h, 0, 1)
    expire(h, 0)
    expire(h)
    assert state(h) == (NO_LEADER, (0,), (), ())
    restart(h, 0, clean=False)
    assert state(h)[:2] == (0, (0,))


def test_a_clean_restart_keeps_the_broker_an_eligible_leader():
    h = three_brokers()
    expire(h, 0, 1)
    expire(h, 0)
    expire(h)
    restart(h, 0, clean=True)
    assert state(h) == (0, (0,), (1,), ())  # elected from the ELR: a clean election


def test_the_last_known_leader_is_elected_once_every_eligible_replica_restarted_uncleanly():
    """Kafka 4.x's last resort (`canElectLastKnownLeader`): with ISR and ELR empty, the last
    leader is elected when it is back, even with unclean election off; the ISR is it alone."""
    h = three_brokers()
    expire(h, 0, 1)
    expire(h, 0)
    expire(h)
    restart(h, 1, clean=False)
    assert state(h) == (NO_LEADER, (), (0,), (0,))
    restart(h, 0, clean=False)
    assert state(h) == (0, (0,), (), ())


def test_an_unclean_restart_takes_a_broker_out_of_the_elr_and_a_clean_one_does_not():
    h = three_brokers()
    expire(h, 0, 1)
    expire(h, 0)
    assert state(h) == (0, (0,), (1,), ())
    restart(h, 1, clean=True)
    assert state(h)[2] == (1,)  # still an eligible leader (the leader re-admits it to the ISR)
    expire(h, 0)
    restart(h, 1, clean=False)
    assert state(h) == (0, (0,), (), ())


def test_alter_partition_below_min_isr_fills_the_elr_and_reaching_it_clears_it():
    h = three_brokers()
    (p,) = h.partitions("t")
    epoch = h.image.broker(0).broker_epoch
    h.commit(
        h.controller.alter_partition(
            h.now_ms, 0, epoch, [IsrChange(p.topic_id, 0, p.leader_epoch, p.partition_epoch, (0,))]
        )
    )
    assert state(h) == (0, (0,), (1, 2), ())
    (p,) = h.partitions("t")
    h.commit(
        h.controller.alter_partition(
            h.now_ms,
            0,
            epoch,
            [IsrChange(p.topic_id, 0, p.leader_epoch, p.partition_epoch, (0, 2))],
        )
    )
    assert state(h) == (0, (0, 2), (), ())


def test_changing_min_insync_replicas_clears_the_elr():
    h = three_brokers()
    expire(h, 0)  # broker 1 leaves at min ISR, broker 2 below it
    assert state(h)[2] == (2,)
    op = AlterConfigOp("min.insync.replicas", OpType.SET, "1")
    resource = ConfigResource(ConfigResourceType.TOPIC, "t")
    ((_resource, error),) = h.commit(h.controller.incremental_alter_configs([(resource, [op])]))
    assert error.is_success
    assert state(h)[2:] == ((), ())
    assert h.log[-1] == {"type": "ClearElr", "topic_name": "t"}
    assert h.replayed() == h.image


def test_turning_the_feature_off_clears_every_elr_and_keeps_the_last_member():
    h = three_brokers()
    expire(h, 0)
    h.commit(h.controller.update_features(ELR_FEATURE, 0))
    assert not h.image.elr_enabled and state(h)[2] == ()
    expire(h)
    assert state(h) == (NO_LEADER, (0,), (), ())
    with pytest.raises(InvalidUpdateVersionError):
        h.controller.update_features(ELR_FEATURE, 2)


def test_elr_survives_a_snapshot():
    h = three_brokers()
    expire(h, 0)
    expire(h)
    again = MetadataImage.from_dict(h.image.to_dict())
    assert again == h.image and state(h)[2] == again.partitions().__next__().elr


def test_a_single_replica_topic_returns_through_its_elr():
    h = Harness(elr=True)
    h.start_brokers(1)
    h.create("one", 1, 1)
    expire(h)
    assert state(h, "one") == (NO_LEADER, (), (0,), (0,))
    restart(h, 0, clean=True)
    assert state(h, "one") == (0, (0,), (), ())
