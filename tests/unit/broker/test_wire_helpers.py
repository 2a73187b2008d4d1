"""Building kio messages from plain values, request parsing, and delayed operations."""

from __future__ import annotations

import asyncio
import datetime

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v4.response import FetchResponse as FetchResponseV4
from kio.schema.fetch.v12.request import FetchRequest as FetchRequestV12
from kio.schema.fetch.v12.response import FetchResponse as FetchResponseV12
from kio.schema.produce.v9.request import ProduceRequest

from sparklog.broker.delayed import DelayedOperations, wait_until
from sparklog.broker.fetch_params import FetchPartition, FetchResult
from sparklog.broker.request_parsing import (
    fetch_params,
    fetch_partition_data,
    fetch_partitions,
    produce_entries,
)
from sparklog.protocol import codec, kio_build
from sparklog.protocol.responses import group_by_topic
from sparklog.storage.txn_index import AbortedTxn


def fetch_response(cls):
    partition = fetch_partition_data(
        FetchPartition("t", 0, 0, 100),
        FetchResult(6, leader_id=2, leader_epoch=5),
        isolation_level=0,
    )
    return kio_build.build(
        cls,
        {
            "throttle_time": 3,
            "error_code": 0,
            "session_id": 0,
            "responses": group_by_topic([("t", partition)], "topic"),
        },
    )


def test_one_description_builds_every_version():
    old, new = fetch_response(FetchResponseV4), fetch_response(FetchResponseV12)
    assert old.throttle_time == datetime.timedelta(milliseconds=3)
    assert not hasattr(old, "session_id")
    p = new.responses[0].partitions[0]
    assert p.error_code == ErrorCode.not_leader_or_follower
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (2, 5)
    for body in (old, new):  # both encode
        assert codec.encode_response(body, 1)


def test_log_append_time_minus_one_is_null():
    from kio.schema.produce.v9.response import PartitionProduceResponse

    data = {
        "index": 0,
        "error_code": 0,
        "base_offset": 1,
        "log_append_time": -1,
        "record_errors": [],
    }
    assert kio_build.build(PartitionProduceResponse, data).log_append_time is None
    data["log_append_time"] = 1_700_000_000_123
    stamped = kio_build.build(PartitionProduceResponse, data).log_append_time
    assert round(stamped.timestamp() * 1000) == 1_700_000_000_123


def test_request_parsing_keeps_request_order():
    produce = kio_build.build(
        ProduceRequest,
        {
            "acks": 1,
            "timeout": 100,
            "topic_data": [
                {
                    "name": "b",
                    "partition_data": [
                        {"index": 1, "records": b"x"},
                        {"index": 0, "records": None},
                    ],
                },
                {"name": "a", "partition_data": [{"index": 0, "records": b"y"}]},
            ],
        },
    )
    assert list(produce_entries(produce).items()) == [
        (("b", 1), b"x"),
        (("b", 0), None),
        (("a", 0), b"y"),
    ]
    fetch = kio_build.build(
        FetchRequestV12,
        {
            "max_wait": 500,
            "min_bytes": 1,
            "isolation_level": 1,
            "topics": [
                {
                    "topic": "t",
                    "partitions": [
                        {
                            "partition": 2,
                            "fetch_offset": 7,
                            "partition_max_bytes": 9,
                            "current_leader_epoch": 4,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
        },
    )
    params = fetch_params(fetch)
    assert (params.max_wait_ms, params.isolation_level, params.replica_id) == (500, 1, -1)
    assert fetch_partitions(fetch) == [FetchPartition("t", 2, 7, 9, 4)]


def test_aborted_transactions_only_for_read_committed():
    result = FetchResult(0, 5, 3, 0, b"", (AbortedTxn(7, 1, 2, 3),))
    committed = fetch_partition_data(FetchPartition("t", 0, 0, 1), result, isolation_level=1)
    assert committed["aborted_transactions"] == [{"producer_id": 7, "first_offset": 1}]
    assert (
        fetch_partition_data(FetchPartition("t", 0, 0, 1), result, 0)["aborted_transactions"]
        is None
    )


def test_delayed_operations_wake_time_out_and_bound():
    async def go():
        ops = DelayedOperations(max_waiters=1)
        seen: list = []

        def check(woken):
            seen.append(None if woken is None else sorted(woken))
            return woken is not None and "b" in woken

        waiter = asyncio.create_task(wait_until(ops, ["a", "b"], check, 30))
        await asyncio.sleep(0)
        # over max_waiters: no wait at all, one look
        refused = await wait_until(ops, ["c"], lambda woken: False, 30)
        assert ops.notify("zzz") == 0
        assert ops.notify("a") == 1  # a spurious wake: the condition still does not hold
        await asyncio.sleep(0)
        assert not waiter.done()
        ops.notify("a")
        assert ops.notify("b") == 0  # already woken, not yet looked: "b" joins the woken set
        woken = await waiter
        timed_out = await wait_until(ops, ["a"], lambda woken: False, 0.01)
        looks: list = []

        def never(woken):
            looks.append(woken)
            return False

        closing = asyncio.create_task(wait_until(ops, ["k"], never, 30))
        await asyncio.sleep(0)
        ops.close()
        after_close = await closing
        return refused, woken, timed_out, after_close, seen, looks, ops.statistics()

    refused, woken, timed_out, after_close, seen, looks, stats = asyncio.run(go())
    assert (refused, woken, timed_out, after_close) == (False, True, False, False)
    # first a full look, then only what was notified since the last look
    assert seen == [None, ["a"], ["a", "b"]]
    assert looks == [None, None]  # at shutdown: a last full look
    assert stats["waiting"] == 0 and stats["keys"] == 0
