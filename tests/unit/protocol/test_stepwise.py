"""Large messages built and encoded a step at a time (so a server can let other connections run
between steps) come out identical to kio's one-call build and encode."""

from __future__ import annotations

import asyncio

import pytest

from sparklog.protocol import codec, cooperative, kio_build, stepwise
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.connection import Request


def _Request(api_key: int, api_version: int) -> Request:
    return Request(api_key, api_version, 0, None, None, 0)


def _metadata(topics: int) -> dict:
    partition = {
        "error_code": 0, "leader_id": 1, "leader_epoch": 0,
        "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": [],
    }  # fmt: skip
    return {
        "throttle_time": 0,
        "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
        "cluster_id": "c",
        "controller_id": 1,
        "topics": [
            {"error_code": 0, "name": f"t{i}", "topic_id": None, "is_internal": False,
             "partitions": [{**partition, "partition_index": j} for j in range(i % 3)]}
            for i in range(topics)
        ],
    }  # fmt: skip


def _fetch(partitions: int) -> dict:
    parts = [
        {"partition_index": j, "error_code": 0, "high_watermark": 5, "last_stable_offset": 5,
         "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
         "records": b"abc", "current_leader": {"leader_id": 2, "leader_epoch": 3}}
        for j in range(partitions)
    ]  # fmt: skip
    return {
        "throttle_time": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [{"topic": "a", "partitions": parts}, {"topic": "b", "partitions": parts[:2]}],
    }


def _produce(partitions: int) -> dict:
    return {
        "throttle_time": 0,
        "responses": [
            {"name": "t", "partition_responses": [
                {"index": j, "error_code": 0, "base_offset": j, "log_append_time": -1,
                 "log_start_offset": 0, "record_errors": [], "error_message": None}
                for j in range(partitions)]}
        ],
        "node_endpoints": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
    }  # fmt: skip


CASES = [
    (ApiKey.METADATA, 1, _metadata),
    (ApiKey.METADATA, 12, _metadata),
    (ApiKey.FETCH, 4, _fetch),
    (ApiKey.FETCH, 12, _fetch),
    (ApiKey.PRODUCE, 11, _produce),  # a tagged field on the message taken apart
]


@pytest.mark.parametrize(("api_key", "version", "make"), CASES)
@pytest.mark.parametrize("entries", [10, 3_000])
def test_stepwise_build_and_encode_equal_kio(api_key, version, make, entries):
    request, data = _Request(api_key, version), make(entries)
    whole = kio_build.response(request, data)
    built = asyncio.run(kio_build.response_cooperatively(request, data))
    assert built == whole
    steps = stepwise.encode_response_steps(whole, 42)
    assert cooperative.finish(steps) == codec.encode_response(whole, 42)


def test_a_large_message_is_encoded_in_many_steps_a_small_one_in_one():
    request = _Request(ApiKey.METADATA, 12)

    def steps(entity) -> int:
        gen, count = stepwise.encode_response_steps(entity, 1), 0
        for _ in gen:
            count += 1
        return count

    assert steps(kio_build.response(request, _metadata(5))) == 1
    assert steps(kio_build.response(request, _metadata(3_000))) >= 3_000
