"""Cluster snapshots from Metadata responses, refresh timing, request building, reconnect backoff."""

from __future__ import annotations

import datetime

import pytest

from sparklog.client.broker_connection import CLIENT_APIS
from sparklog.client.metadata import Cluster, MetadataState, group_by_leader
from sparklog.client.network import ReconnectBackoff
from sparklog.client.request_builder import (
    build_request,
    build_response,
    duration_ms,
    timestamp_ms,
)
from sparklog.protocol import codec
from sparklog.protocol.api_versions import BROKER_APIS, ApiKey, pick_version
from sparklog.structs import TopicPartition

from .helpers import cluster


def metadata_response(version: int, topics: list[dict], brokers=(1, 2)):
    return build_response(
        ApiKey.METADATA,
        version,
        {
            "throttle_time": 0,
            "brokers": [
                {"node_id": b, "host": "127.0.0.1", "port": 9000 + b, "rack": None} for b in brokers
            ],
            "cluster_id": "c1",
            "controller_id": 1,
            "topics": topics,
        },
    )


def topic(name: str, leaders: list[int], error_code: int = 0) -> dict:
    return {
        "error_code": error_code,
        "name": name,
        "topic_id": None,
        "is_internal": False,
        "partitions": [
            {
                "error_code": 0,
                "partition_index": i,
                "leader_id": leader,
                "leader_epoch": 3,
                "replica_nodes": [leader],
                "isr_nodes": [leader],
                "offline_replicas": [],
            }
            for i, leader in enumerate(leaders)
        ],
    }


@pytest.mark.parametrize("version", [1, 7, 12])
def test_cluster_from_a_metadata_response_of_any_version(version):
    response = metadata_response(version, [topic("b", [2, 1]), topic("missing", [], error_code=3)])
    # Round-trip through bytes, as a broker's answer would arrive.
    frame = codec.encode_response(response, 7)[4:]
    _cid, decoded = codec.decode_response(frame, ApiKey.METADATA, version)
    c = Cluster.from_response(decoded)
    assert sorted(c.brokers) == [1, 2]
    assert c.controller_id == 1
    assert c.partition_count("b") == 2
    assert c.leader_for(TopicPartition("b", 0)) == 2
    assert c.leader_for(TopicPartition("b", 5)) is None
    assert c.topic_errors == {"missing": 3}
    assert "missing" not in c.topics
    assert c.topics["b"].partitions[1].leader_epoch == (3 if version >= 7 else -1)


def test_leaders_not_listed_as_brokers_count_as_unknown():
    c = cluster({"t": [1, 3, -1]}, brokers=(1,))
    assert c.available_partitions("t") == [0]
    by_node, unknown = group_by_leader(c, [TopicPartition("t", p) for p in range(3)])
    assert by_node == {1: [TopicPartition("t", 0)]}
    assert unknown == [TopicPartition("t", 1), TopicPartition("t", 2)]


def test_with_topics_replaces_only_the_requested_topics():
    old = cluster({"a": [1], "b": [1]})
    new = cluster({"b": [2, 2]}, brokers=(2,))
    merged = old.with_topics(new, ["b"])
    assert merged.partition_count("a") == 1 and merged.partition_count("b") == 2
    assert list(merged.brokers) == [2]


def test_refresh_is_due_first_then_every_max_age():
    state = MetadataState(max_age_ms=1000, retry_backoff_ms=100)
    assert state.time_to_next_update_ms(0) == 0
    state.on_attempt(0)
    state.on_update(cluster({"t": [1]}), 0)
    assert state.time_to_next_update_ms(400) == 600
    assert state.time_to_next_update_ms(1000) == 0


def test_requested_updates_and_missing_topics_wait_only_for_the_backoff():
    state = MetadataState(max_age_ms=1000, retry_backoff_ms=100)
    state.on_attempt(0)
    state.on_update(cluster({"t": [1]}), 0)
    state.request_update()
    assert state.time_to_next_update_ms(30) == 70
    assert state.time_to_next_update_ms(100) == 0
    state.on_attempt(100)
    state.on_update(cluster({"t": [1]}), 100)
    assert state.add_topics(["u"]) is True
    assert state.add_topics(["u"]) is False
    assert state.time_to_next_update_ms(200) == 0


def test_a_partition_without_leader_keeps_refresh_requested():
    state = MetadataState(max_age_ms=10_000, retry_backoff_ms=100)
    state.on_update(cluster({"t": [1, -1]}), 0)
    assert state.update_requested
    state.on_update(cluster({"t": [1, 2]}), 0)
    assert not state.update_requested


def test_reconnect_backoff_doubles_to_the_max_and_resets():
    backoff = ReconnectBackoff(50, 300)
    assert backoff.delay_ms(0) == 0
    delays = []
    for now in (0, 1000, 2000, 3000, 4000):
        backoff.on_failure(now)
        delays.append(backoff.delay_ms(now))
    assert delays == [50, 100, 200, 300, 300]
    assert backoff.delay_ms(4100) == 200
    backoff.on_success()
    assert backoff.delay_ms(4100) == 0


def test_build_request_drops_fields_a_version_lacks_and_converts_durations():
    fields = {
        "replica_id": -1,
        "isolation_level": 1,
        "topics": [
            {
                "name": "t",
                "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}],
            }
        ],
    }
    v1 = build_request(ApiKey.LIST_OFFSETS, 1, fields)
    v7 = build_request(ApiKey.LIST_OFFSETS, 7, fields)
    assert not hasattr(v1, "isolation_level")
    assert v7.isolation_level == 1 and v7.topics[0].partitions[0].current_leader_epoch == -1
    produce = build_request(
        ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 1500, "topic_data": [], "transactional_id": None}
    )
    assert produce.timeout == datetime.timedelta(milliseconds=1500)
    assert duration_ms(produce.timeout) == 1500
    # Every request the client builds encodes at both ends of its version range.
    for version in (3, 11):
        raw = codec.encode_request(
            build_request(
                ApiKey.PRODUCE, version, {**fields, "acks": 1, "timeout": 5, "topic_data": []}
            ),
            1,
            "x",
        )
        assert codec.decode_request(raw[4:])[1].acks == 1


def test_timestamps_convert_from_kio_datetimes():
    assert timestamp_ms(None) == -1
    assert timestamp_ms(datetime.datetime(1970, 1, 1, 0, 0, 1, tzinfo=datetime.UTC)) == 1000
    assert timestamp_ms(5) == 5


def test_client_versions_overlap_what_sparklog_brokers_serve():
    for api_key, ours in CLIENT_APIS.items():
        theirs = BROKER_APIS.get(api_key)
        if theirs is not None:
            assert pick_version(ours, theirs, api_key) >= ours[0]
