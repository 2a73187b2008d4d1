"""Broker registration, heartbeats, leases and fencing in the sans-IO controller."""

from __future__ import annotations

import pytest

from sparklog.controller.cluster_control import (
    BrokerHeartbeat,
    BrokerIdNotRegisteredError,
    BrokerLaunchFacts,
    BrokerRegistrationRequest,
    DuplicateBrokerRegistrationError,
    InconsistentClusterIdError,
    broker_client_id,
    parse_broker_client_id,
)
from sparklog.errors import StaleBrokerEpochError
from sparklog.metadata.configs import ControllerConfig

from .harness import SESSION_TIMEOUT_MS, Harness


def test_broker_epoch_is_the_offset_of_its_registration_record():
    h = Harness()
    first = h.register(0)
    second = h.register(1)
    assert (first, second) == (0, 1)
    assert h.log[first]["type"] == "RegisterBroker" and h.log[first]["broker_id"] == 0
    assert h.image.broker(1).broker_epoch == 1
    assert h.image.broker(0).fenced and h.image.broker(1).fenced


def test_broker_is_unfenced_once_its_metadata_offset_passed_its_registration():
    h = Harness()
    h.register(0)
    epoch = h.register(1)
    # The broker applied records [0, epoch): it has not seen its own registration yet.
    reply = h.heartbeat(1, offset=epoch)
    assert (reply.is_caught_up, reply.is_fenced) == (False, True)
    assert h.image.broker(1).fenced
    reply = h.heartbeat(1, offset=epoch + 1)
    assert (reply.is_caught_up, reply.is_fenced, reply.should_shut_down) == (True, False, False)
    assert not h.image.broker(1).fenced
    assert h.log[-1] == {"type": "UnfenceBroker", "broker_id": 1, "broker_epoch": epoch}


def test_a_lease_expires_after_the_session_timeout_and_the_broker_is_fenced():
    h = Harness()
    h.start_brokers(2)
    h.advance(SESSION_TIMEOUT_MS)
    h.heartbeat(1)
    assert h.tick() == []  # exactly the timeout is still a valid session
    h.advance(1)
    assert h.tick() == [0]
    assert h.image.broker(0).fenced and not h.image.broker(1).fenced
    # A fenced broker that heartbeats again (caught up) is unfenced.
    assert not h.heartbeat(0).is_fenced


def test_tick_fences_one_broker_per_result_so_each_sees_the_previous():
    h = Harness()
    h.start_brokers(3)
    h.advance(SESSION_TIMEOUT_MS + 1)
    first = h.controller.tick(h.now_ms)
    assert first.response == 0
    assert [r["type"] for r in first.records] == ["FenceBroker"]
    h.commit(first)
    assert h.tick() == [1, 2]
    assert h.image.unfenced_brokers() == []


def test_second_incarnation_is_refused_while_the_first_holds_a_lease():
    h = Harness()
    h.start_brokers(1)
    with pytest.raises(DuplicateBrokerRegistrationError) as e:
        h.register(0, incarnation="another-process")
    assert e.value.code == 101
    assert str(e.value) == "Another broker is registered with that broker id."
    h.advance(SESSION_TIMEOUT_MS + 1)
    epoch = h.register(0, incarnation="another-process")
    assert h.image.broker(0).incarnation_id == "another-process"
    assert h.image.broker(0).broker_epoch == epoch and h.image.broker(0).fenced


def test_same_incarnation_may_register_again_and_gets_a_new_epoch():
    h = Harness()
    h.start_brokers(1)
    old = h.image.broker(0).broker_epoch
    new = h.register(0)
    assert new > old and h.image.broker(0).fenced


def test_registration_from_an_older_task_attempt_is_stale():
    h = Harness()
    h.register(0, attempt=2)
    h.advance(SESSION_TIMEOUT_MS + 1)
    with pytest.raises(DuplicateBrokerRegistrationError, match="older attempt 1 is stale"):
        h.register(0, incarnation="zombie", attempt=1)
    h.register(0, incarnation="retry", attempt=3)
    assert h.image.broker(0).task_attempt == 3


def test_wrong_cluster_id_and_negative_id_are_refused():
    h = Harness()
    request = BrokerRegistrationRequest(0, "other-cluster", "inc", "h", 1)
    with pytest.raises(InconsistentClusterIdError) as e:
        h.controller.register_broker(h.now_ms, request)
    assert e.value.code == 104 and "other-cluster" in str(e.value)
    request = BrokerRegistrationRequest(-1, h.controller.cluster_id, "inc", "h", 1)
    with pytest.raises(BrokerIdNotRegisteredError):
        h.controller.register_broker(h.now_ms, request)
    assert h.log == []


def test_heartbeat_with_an_older_epoch_is_told_to_shut_down():
    h = Harness()
    old = h.register(0)
    h.register(0)  # same id registered again: the older registration is gone
    reply = h.heartbeat(0, epoch=old)
    assert reply.error_code == StaleBrokerEpochError.code and reply.should_shut_down


def test_heartbeat_of_an_unknown_broker_is_a_stale_epoch_without_records():
    h = Harness()
    result = h.controller.heartbeat(h.now_ms, BrokerHeartbeat(7, 0, 0))
    assert result.response.error_code == StaleBrokerEpochError.code
    assert "No broker registration found for broker id 7" in result.response.error_message
    assert not result.response.should_shut_down and result.records == ()


def test_heartbeat_wanting_shutdown_fences_at_once_and_allows_it():
    h = Harness()
    h.start_brokers(2)
    reply = h.heartbeat(1, want_shut_down=True)
    assert reply.is_fenced and reply.should_shut_down
    assert h.image.broker(1).fenced


def test_launcher_shutdown_request_reaches_heartbeats_and_keeps_broker_fenced():
    h = Harness()
    h.register(0)
    h.register(1)
    h.controller.request_shutdown(1)
    assert not h.heartbeat(0).should_shut_down
    reply = h.heartbeat(1)
    assert reply.should_shut_down and reply.is_fenced  # not unfenced on its way down
    h.controller.request_shutdown()
    assert h.heartbeat(0).should_shut_down


def test_unregister_forgets_the_broker():
    h = Harness()
    h.start_brokers(2)
    h.commit(h.controller.unregister_broker(1))
    assert h.image.broker(1) is None
    assert h.log[-1] == {"type": "UnregisterBroker", "broker_id": 1, "broker_epoch": 1}
    with pytest.raises(BrokerIdNotRegisteredError):
        h.controller.unregister_broker(1)
    # Its lease is gone too: a new incarnation registers at once.
    h.register(1, incarnation="new")


def test_next_node_id_is_above_every_id_registered_or_handed_out():
    h = Harness()
    assert [h.controller.next_node_id() for _ in range(3)] == [0, 1, 2]
    h.register(7)
    assert h.controller.next_node_id() == 8
    h.commit(h.controller.unregister_broker(7))
    assert h.controller.next_node_id() == 9  # ids are never reused


def test_allocate_producer_ids_hands_out_consecutive_blocks():
    h = Harness()
    h.start_brokers(2)
    first = h.commit(h.controller.allocate_producer_ids(0, h.image.broker(0).broker_epoch))
    second = h.commit(h.controller.allocate_producer_ids(1, h.image.broker(1).broker_epoch))
    assert (first.producer_id_start, first.producer_id_len) == (0, 1000)
    assert (second.producer_id_start, second.producer_id_len) == (1000, 1000)
    assert h.image.next_producer_id == 2000
    with pytest.raises(
        StaleBrokerEpochError, match="Expected broker epoch 0, but got broker epoch 5"
    ):
        h.controller.allocate_producer_ids(0, 5)


def test_session_timeout_comes_from_the_config():
    h = Harness(ControllerConfig(broker_session_timeout_ms=300, broker_heartbeat_interval_ms=100))
    h.start_brokers(1)
    h.advance(301)
    assert h.tick() == [0]


@pytest.mark.parametrize(
    "facts",
    [
        BrokerLaunchFacts("3", 1, "/data/broker;odd/dir=x"),
        BrokerLaunchFacts(None, -1, None),
        BrokerLaunchFacts("exec-9", 0, None),
        BrokerLaunchFacts("exec-2", 3, "/d;metrics=x", "10.0.0.7:9404"),
    ],
)
def test_broker_client_id_round_trips_launch_facts(facts):
    client_id = broker_client_id(facts)
    assert client_id.startswith("sparklog-broker;")
    assert parse_broker_client_id(client_id) == facts


def test_the_brokers_client_id_carries_its_metrics_endpoint():
    from sparklog.broker.controller_client import launcher_client_id

    facts = parse_broker_client_id(launcher_client_id("e1", 2, "/data;x", "10.0.0.7:9404"))
    assert facts == BrokerLaunchFacts("e1", 2, "/data;x", "10.0.0.7:9404")
    assert parse_broker_client_id(launcher_client_id("e1", 2, "/d")).metrics_endpoint is None


def test_other_client_ids_carry_no_launch_facts():
    assert parse_broker_client_id("rdkafka") == BrokerLaunchFacts()
    assert parse_broker_client_id(None) == BrokerLaunchFacts()
    assert parse_broker_client_id("sparklog-broker;attempt=x").task_attempt == -1
