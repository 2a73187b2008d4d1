"""Topic admin in the sans-IO controller: CreateTopics, DeleteTopics, CreatePartitions."""

from __future__ import annotations

import uuid

import pytest

from sparklog.controller.replication_control import NewPartitions, NewTopic
from sparklog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    PolicyViolationError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from sparklog.metadata.configs import ControllerConfig

from .harness import Harness


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.start_brokers(3)
    return harness


def replicas(h: Harness, name: str) -> list[tuple[int, ...]]:
    return [p.replicas for p in h.partitions(name)]


def test_create_topic_places_leader_i_mod_n_and_followers_after_it(h):
    result = h.create("orders", 4, 2)
    assert result.error.is_success and result.topic_id == uuid.UUID(int=1)
    assert (result.num_partitions, result.replication_factor) == (4, 2)
    assert replicas(h, "orders") == [(0, 1), (1, 2), (2, 0), (0, 1)]
    for p in h.partitions("orders"):
        assert p.isr == p.replicas and p.leader == p.replicas[0]
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)


def test_minus_one_means_the_cluster_defaults():
    h = Harness(ControllerConfig(num_partitions=3, default_replication_factor=2))
    h.start_brokers(2)
    result = h.create("t")
    assert (result.num_partitions, result.replication_factor) == (3, 2)
    assert len(h.partitions("t")) == 3


def test_placement_uses_only_unfenced_brokers(h):
    h.advance(10_000)
    h.heartbeat_all(0, 2)
    assert h.tick() == [1]
    h.create("t", 2, 2)
    assert replicas(h, "t") == [(0, 2), (2, 0)]


def test_replication_factor_larger_than_brokers_names_both_numbers(h):
    result = h.create("t", 1, 4)
    assert result.error.code == InvalidReplicationFactorError.code == 38
    assert result.error.message == (
        "Unable to replicate the partition 4 time(s): The target replication factor of 4 "
        "cannot be reached because only 3 broker(s) are registered."
    )
    assert h.image.topic("t") is None


@pytest.mark.parametrize(
    ("partitions", "rf", "code", "message"),
    [
        (
            0,
            1,
            InvalidPartitionsError.code,
            "Number of partitions was set to an invalid non-positive value.",
        ),
        (
            -2,
            1,
            InvalidPartitionsError.code,
            "Number of partitions was set to an invalid non-positive value.",
        ),
        (
            1,
            0,
            InvalidReplicationFactorError.code,
            "Replication factor was set to an invalid non-positive value.",
        ),
        (20_000, 1, PolicyViolationError.code, None),  # Kafka since KAFKA-17870
    ],
)
def test_non_positive_or_huge_counts_are_refused(h, partitions, rf, code, message):
    result = h.create("t", partitions, rf)
    assert result.error.code == code
    if message:
        assert result.error.message == message


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "Topic name is illegal, it can't be empty"),
        ("..", 'Topic name cannot be "." or ".."'),
        (
            "a b",
            'Topic name "a b" is illegal, it contains a character other than ASCII alphanumerics',
        ),
        ("x" * 250, "Topic name is illegal, it can't be longer than 249 characters"),
    ],
)
def test_illegal_topic_names_are_invalid_topic_errors(h, name, message):
    result = h.create(name, 1, 1)
    assert result.error.code == InvalidTopicError.code == 17
    assert result.error.message.startswith(message)


def test_the_metadata_topic_cannot_be_created(h):
    result = h.create("__cluster_metadata", 1, 1)
    assert result.error.code == InvalidRequestError.code
    assert result.error.message == "Creation of internal topic __cluster_metadata is prohibited."


def test_existing_and_colliding_names_are_refused(h):
    h.create("a.b", 1, 1)
    again = h.create("a.b", 1, 1)
    assert again.error.code == TopicAlreadyExistsError.code == 36
    assert again.error.message == "Topic 'a.b' already exists."
    collision = h.create("a_b", 1, 1)
    assert collision.error.code == InvalidTopicError.code
    assert collision.error.message == "Topic 'a_b' collides with existing topic: a.b"


def test_duplicates_in_one_request_fail_and_the_rest_succeeds(h):
    results = h.commit(
        h.controller.create_topics([NewTopic("x", 1, 1), NewTopic("y", 1, 1), NewTopic("x", 2, 1)])
    )
    assert [(r.name, r.error.code) for r in results] == [("x", 42), ("y", 0), ("x", 42)]
    assert results[0].error.message == "Duplicate topic name."
    assert h.image.topic_names() == ["y"]


def test_validate_only_checks_everything_and_writes_nothing(h):
    result = h.controller.create_topics([NewTopic("t", 2, 3)], validate_only=True)
    assert result.records == ()
    (ok,) = result.response
    assert ok.error.is_success and (ok.num_partitions, ok.replication_factor) == (2, 3)
    assert ok.topic_id is None
    (bad,) = h.controller.create_topics([NewTopic("t", 2, 4)], validate_only=True).response
    assert bad.error.code == InvalidReplicationFactorError.code


def test_topic_configs_are_validated_and_recorded_before_the_topic(h):
    result = h.create("t", 1, 1, configs={"retention.ms": "1000", "cleanup.policy": "compact"})
    assert result.error.is_success
    assert dict(h.image.topic_config("t")) == {"retention.ms": "1000", "cleanup.policy": "compact"}
    kinds = [r["type"] for r in h.log[-4:]]
    assert kinds == ["Config", "Config", "Topic", "Partition"]


@pytest.mark.parametrize(
    ("configs", "fragment"),
    [
        ({"retention.ms": "soon"}, "retention.ms"),
        ({"no.such.config": "1"}, "no.such.config"),
        ({"cleanup.policy": "forever"}, "cleanup.policy"),
        ({"retention.ms": None}, "Null value not supported for topic configs: retention.ms"),
        ({"segment.bytes": str(2**31)}, "Not a number of type INT"),
    ],
)
def test_bad_topic_configs_are_invalid_config(h, configs, fragment):
    result = h.create("t", 1, 1, configs=configs)
    assert result.error.code == InvalidConfigError.code == 40
    assert fragment in result.error.message
    assert h.image.topic("t") is None


def test_manual_assignment_sets_replicas_and_live_isr(h):
    h.advance(10_000)
    h.heartbeat_all(0, 1)
    h.tick()  # broker 2 fenced
    result = h.create("m", assignments=((0, (2, 1)), (1, (1, 0))))
    assert result.error.is_success and (result.num_partitions, result.replication_factor) == (2, 2)
    p0, p1 = h.partitions("m")
    assert (p0.replicas, p0.isr, p0.leader) == ((2, 1), (1,), 1)
    assert (p1.replicas, p1.isr, p1.leader) == ((1, 0), (1, 0), 1)


@pytest.mark.parametrize(
    ("assignments", "kwargs", "code", "message"),
    [
        (
            ((0, (0,)),),
            {"rf": 1},
            42,
            "A manual partition assignment was specified, but replication factor was not set to -1.",
        ),
        (
            ((0, (0,)),),
            {"partitions": 1},
            42,
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
        ),
        (
            ((0, (0,)), (0, (1,))),
            {},
            39,
            "Found multiple manual partition assignments for partition 0",
        ),
        (((1, (0,)),), {}, 39, "partitions should be a consecutive 0-based integer sequence"),
        (((0, ()),), {}, 39, "The manual partition assignment includes an empty replica list."),
        (
            ((0, (0, 9)),),
            {},
            39,
            "The manual partition assignment includes broker 9, but no such broker is registered.",
        ),
        (
            ((0, (1, 1)),),
            {},
            39,
            "The manual partition assignment includes the broker 1 more than once.",
        ),
        (
            ((0, (0, 1)), (1, (2,))),
            {},
            39,
            "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent with previous partitions, which have 2 replica(s).",
        ),
    ],
)
def test_bad_manual_assignments(h, assignments, kwargs, code, message):
    result = h.create("m", assignments=assignments, **kwargs)
    assert (result.error.code, result.error.message) == (code, message)


def test_manual_assignment_on_fenced_brokers_only_is_refused(h):
    h.advance(10_000)
    h.heartbeat_all(0)
    h.tick()
    result = h.create("m", assignments=((0, (1, 2)),))
    assert result.error.code == InvalidReplicaAssignmentError.code
    assert result.error.message == (
        "All brokers specified in the manual partition assignment for partition 0 are fenced "
        "or in controlled shutdown."
    )


def test_delete_topics_removes_topic_partitions_and_configs(h):
    h.create("a", 2, 1, configs={"retention.ms": "5"})
    h.create("b", 1, 1)
    results = h.commit(h.controller.delete_topics(["a", "missing", "b", "b"]))
    assert [(n, e.code) for n, e in results] == [("a", 0), ("missing", 3), ("b", 42), ("b", 42)]
    assert h.image.topic_names() == ["b"]
    assert dict(h.image.topic_config("a")) == {}
    assert h.log[-1]["type"] == "RemoveTopic"
    # A deleted name can be created again, with a new id.
    assert h.create("a", 1, 1).topic_id == uuid.UUID(int=3)


def test_create_partitions_continues_the_stripe(h):
    h.create("t", 2, 2)
    results = h.commit(h.controller.create_partitions([NewPartitions("t", 5)]))
    assert results == [("t", results[0][1])] and results[0][1].is_success
    assert replicas(h, "t") == [(0, 1), (1, 2), (2, 0), (0, 1), (1, 2)]


def test_create_partitions_with_assignments(h):
    h.create("t", 1, 2)
    results = h.commit(h.controller.create_partitions([NewPartitions("t", 3, ((2, 0), (0, 1)))]))
    assert results[0][1].is_success
    assert replicas(h, "t")[1:] == [(2, 0), (0, 1)]


@pytest.mark.parametrize(
    ("request_", "code", "message"),
    [
        (
            NewPartitions("nope", 2),
            UnknownTopicOrPartitionError.code,
            "Unable to find a topic named nope.",
        ),
        (NewPartitions("t", 2), InvalidPartitionsError.code, "Topic already has 2 partition(s)."),
        (
            NewPartitions("t", 1),
            InvalidPartitionsError.code,
            "The topic t currently has 2 partition(s); 1 would not be an increase.",
        ),
        (
            NewPartitions("t", 4, ((0, 1),)),
            InvalidReplicaAssignmentError.code,
            "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.",
        ),
        (
            NewPartitions("t", 3, ((0,),)),
            InvalidReplicaAssignmentError.code,
            "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent with previous partitions, which have 2 replica(s).",
        ),
    ],
)
def test_create_partitions_errors(h, request_, code, message):
    h.create("t", 2, 2)
    before = len(h.log)
    results = h.commit(h.controller.create_partitions([request_]))
    assert (results[0][1].code, results[0][1].message) == (code, message)
    assert len(h.log) == before


def test_create_partitions_needs_enough_live_brokers(h):
    h.create("t", 1, 3)
    h.advance(10_000)
    h.heartbeat_all(0, 1)
    h.tick()
    results = h.commit(h.controller.create_partitions([NewPartitions("t", 2)]))
    assert results[0][1].code == InvalidReplicationFactorError.code


def test_create_partitions_validate_only_writes_nothing(h):
    h.create("t", 1, 1)
    result = h.controller.create_partitions([NewPartitions("t", 4)], validate_only=True)
    assert result.records == () and result.response[0][1].is_success
