"""Fetch positions and buffered data: requests, responses, draining, control and aborted batches."""

from __future__ import annotations

import pytest

from sparklog.client.fetcher import ARROW_COLUMNS, Fetcher, SubscriptionState
from sparklog.client.request_builder import build_response
from sparklog.errors import OffsetOutOfRangeError
from sparklog.protocol.api_versions import ApiKey
from sparklog.records import SimpleRecord, build_batch
from sparklog.records.compression import CompressionType
from sparklog.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from sparklog.structs import TopicPartition

from .helpers import cluster

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


def fetcher(reset: str = "earliest", isolation_level: int = 0) -> Fetcher:
    return Fetcher(
        SubscriptionState(reset),
        fetch_min_bytes=1,
        fetch_max_bytes=1 << 20,
        fetch_max_wait_ms=500,
        max_partition_fetch_bytes=1 << 16,
        isolation_level=isolation_level,
    )


def records(base_offset: int, count: int, **kwargs) -> bytes:
    return build_batch(
        [
            SimpleRecord(
                value=f"v{base_offset + i}".encode(),
                key=b"k",
                timestamp=1000 + i,
                headers=(("h", b"x"),),
            )
            for i in range(count)
        ],
        base_offset=base_offset,
        **kwargs,
    )


def response(
    parts: dict[TopicPartition, tuple[int, bytes]],
    aborted=None,
    hw: int = 100,
    session_id: int = 0,
    error_code: int = 0,
):
    topics: dict[str, list[dict]] = {}
    for tp, (code, data) in parts.items():
        topics.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "error_code": code,
                "high_watermark": hw,
                "last_stable_offset": hw,
                "log_start_offset": 0,
                "aborted_transactions": aborted,
                "preferred_read_replica": -1,
                "records": data,
            }
        )
    return build_response(
        ApiKey.FETCH,
        12,
        {
            "throttle_time": 0,
            "error_code": error_code,
            "session_id": session_id,
            "responses": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        },
    )


def test_requests_cover_fetchable_partitions_per_leader():
    f = fetcher()
    subs = f.subscriptions
    subs.assign([T0, T1, TopicPartition("u", 0)])
    subs.seek(T0, 5)
    subs.seek(T1, 7)
    c = cluster({"t": [1, 2], "u": [-1]})
    requests, no_leader = f.fetch_requests(c, busy_nodes=set())
    assert set(requests) == {1, 2}
    fields, offsets = requests[1]
    assert offsets == {T0: 5}
    assert fields["topics"][0]["partitions"][0]["fetch_offset"] == 5
    # a full fetch that asks for a session (KIP-227)
    assert (fields["session_id"], fields["session_epoch"], fields["max_wait"]) == (0, 0, 500)
    assert no_leader == set()  # u-0 has no position yet, so it is not fetched
    subs.state(T1).paused = True
    requests, _ = f.fetch_requests(c, busy_nodes={1})
    assert requests == {}


def test_fetches_go_through_an_incremental_session_per_broker():
    """After a full fetch opens a session, a request lists only partitions whose fetch offset
    moved, a partition left out of a response keeps its position, a session error is no user
    error and makes the next request full, and close asks the broker to drop the session."""
    f = fetcher()
    subs = f.subscriptions
    subs.assign([T0, T1])
    subs.seek(T0, 0)
    subs.seek(T1, 0)
    c = cluster({"t": [1, 1]})
    (fields, offsets), *_ = f.fetch_requests(c, set())[0].values()
    assert (fields["session_id"], fields["session_epoch"]) == (0, 0)
    full = f.on_fetch_response(
        offsets, response({T0: (0, records(0, 3)), T1: (0, b"")}, session_id=42), 1
    )
    assert full.errors == []
    assert [r.offset for _tp, r in f.drain(10)] == [0, 1, 2]

    (fields, offsets), *_ = f.fetch_requests(c, set())[0].values()
    assert (fields["session_id"], fields["session_epoch"]) == (42, 1)
    sent = [
        (t["topic"], p["partition"], p["fetch_offset"])
        for t in fields["topics"]
        for p in t["partitions"]
    ]
    assert sent == [("t", 0, 3)] and fields["forgotten_topics_data"] == []
    assert offsets == {T0: 3, T1: 0}  # the session still fetches both
    f.on_fetch_response(offsets, response({}, session_id=42), 1)  # nothing new anywhere
    assert (subs.state(T0).position, subs.state(T1).position) == (3, 0)

    subs.state(T1).paused = True
    (fields, offsets), *_ = f.fetch_requests(c, set())[0].values()
    assert fields["session_epoch"] == 2 and fields["topics"] == []
    assert fields["forgotten_topics_data"] == [{"topic": "t", "partitions": [1]}]
    refused = f.on_fetch_response(
        offsets, response({}, error_code=71), 1
    )  # INVALID_FETCH_SESSION_EPOCH
    assert (refused.errors, refused.refresh_metadata) == ([], False)
    (fields, offsets), *_ = f.fetch_requests(c, set())[0].values()
    assert (fields["session_id"], fields["session_epoch"]) == (42, 0)  # close 42, open anew
    assert [p["partition"] for t in fields["topics"] for p in t["partitions"]] == [0]
    f.on_fetch_response(offsets, response({T0: (0, b"")}, session_id=43), 1)
    closing = f.close_session_requests()
    assert {n: (x["session_id"], x["session_epoch"], x["topics"]) for n, x in closing.items()} == {
        1: (43, -1, [])
    }
    assert f.close_session_requests() == {}


def test_partitions_without_leader_are_reported():
    f = fetcher()
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 0)
    requests, no_leader = f.fetch_requests(cluster({"t": [-1]}), set())
    assert requests == {} and no_leader == {"t"}


def test_drain_returns_records_from_the_position_and_advances_it():
    f = fetcher()
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 3)
    data = records(0, 5) + records(5, 5, compression=CompressionType.ZSTD)
    result = f.on_fetch_response({T0: 3}, response({T0: (0, data)}))
    assert not result.refresh_metadata and not result.out_of_range
    assert f.subscriptions.state(T0).high_watermark == 100
    first = f.drain(4)
    assert [r.offset for _, r in first] == [3, 4, 5, 6]
    assert f.subscriptions.state(T0).position == 7
    rest = f.drain(100)
    assert [r.offset for _, r in rest] == [7, 8, 9]
    assert rest[0][1].value == b"v7" and rest[0][1].headers == (("h", b"x"),)
    assert f.subscriptions.state(T0).position == 10
    assert f.buffered_partitions() == set()


def test_the_next_fetch_is_sent_before_the_buffered_response_is_decoded():
    """Pipelining: with one response buffered the partition is fetched again at the offset
    after its last batch; the second response is held behind the first and drained after it,
    and no third fetch goes out while two are held."""
    f = fetcher()
    c = cluster({"t": [1]})
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 0)
    assert f.fetch_requests(c, set())[0][1][1] == {T0: 0}
    f.on_fetch_response({T0: 0}, response({T0: (0, records(0, 5))}))
    requests, _ = f.fetch_requests(c, set())
    assert requests[1][1] == {T0: 5}  # nothing decoded yet: the offset came from headers
    assert f.fetch_requests(c, set())[0] == {}  # once per buffered response
    f.on_fetch_response({T0: 5}, response({T0: (0, records(5, 3))}))
    assert f.fetch_requests(c, set())[0] == {}  # two held: wait for the drain
    assert [r.offset for _, r in f.drain(3)] == [0, 1, 2]
    assert [r.offset for _, r in f.drain(100)] == [3, 4, 5, 6, 7]
    assert f.fetch_requests(c, set())[0][1][1] == {T0: 8}


def test_no_prefetch_past_the_high_watermark():
    """A response that reached the high watermark is not followed by a prefetch, which would
    only wait at the broker and hold up the next fetch to that leader."""
    f = fetcher()
    c = cluster({"t": [1]})
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 0)
    f.on_fetch_response({T0: 0}, response({T0: (0, records(0, 5))}, hw=5))
    assert f.fetch_requests(c, set())[0] == {}
    f.drain(100)
    assert f.fetch_requests(c, set())[0][1][1] == {T0: 5}  # the ordinary fetch, once drained


def test_a_seek_drops_a_prefetched_response():
    f = fetcher()
    c = cluster({"t": [1]})
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 0)
    f.on_fetch_response({T0: 0}, response({T0: (0, records(0, 5))}))
    assert f.fetch_requests(c, set())[0][1][1] == {T0: 5}
    f.subscriptions.seek(T0, 20)
    f.clear_buffer([T0])  # what the consumer's seek does
    f.on_fetch_response({T0: 5}, response({T0: (0, records(5, 3))}))
    assert f.drain(100) == [] and f.subscriptions.state(T0).position == 20
    assert f.fetch_requests(c, set())[0][1][1] == {T0: 20}


def test_a_seek_while_fetching_discards_the_stale_data():
    f = fetcher()
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 0)
    f.subscriptions.seek(T0, 50)
    f.on_fetch_response({T0: 0}, response({T0: (0, records(0, 3))}))
    assert f.drain(10) == []
    assert f.subscriptions.state(T0).position == 50


def test_paused_partitions_keep_their_data_until_resumed():
    f = fetcher()
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 0)
    f.on_fetch_response({T0: 0}, response({T0: (0, records(0, 3))}))
    f.subscriptions.state(T0).paused = True
    assert f.drain(10) == []
    f.subscriptions.state(T0).paused = False
    assert [r.offset for _, r in f.drain(10)] == [0, 1, 2]


def test_control_batches_and_compaction_gaps_move_the_position():
    f = fetcher()
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 0)
    commit = build_end_txn_marker_batch(
        EndTransactionMarker(ControlRecordType.COMMIT, 0),
        producer_id=1,
        producer_epoch=0,
        timestamp_ms=5,
        base_offset=2,
    )
    gap = build_batch(
        [SimpleRecord(b"a", timestamp=1), SimpleRecord(b"b", timestamp=1)],
        base_offset=3,
        offset_deltas=[0, 4],
    )
    f.on_fetch_response({T0: 0}, response({T0: (0, records(0, 2) + commit)}))
    assert [r.offset for _, r in f.drain(10)] == [0, 1]
    assert f.subscriptions.state(T0).position == 3  # past the marker
    f.on_fetch_response({T0: 3}, response({T0: (0, gap)}))
    assert [r.offset for _, r in f.drain(10)] == [3, 7]
    assert f.subscriptions.state(T0).position == 8


def test_read_committed_drops_aborted_transactions():
    f = fetcher(isolation_level=1)
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 0)
    txn = dict(producer_id=9, producer_epoch=0, is_transactional=True)
    abort = build_end_txn_marker_batch(
        EndTransactionMarker(ControlRecordType.ABORT, 0),
        producer_id=9,
        producer_epoch=0,
        timestamp_ms=5,
        base_offset=4,
    )
    data = records(0, 2) + records(2, 2, **txn) + abort + records(5, 1, **txn)
    f.on_fetch_response(
        {T0: 0}, response({T0: (0, data)}, aborted=[{"producer_id": 9, "first_offset": 2}])
    )
    got = [r.offset for _, r in f.drain(10)]
    assert got == [0, 1, 5]
    assert f.subscriptions.state(T0).position == 6


def test_out_of_range_resets_or_reports_without_a_policy():
    f = fetcher(reset="latest")
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 99)
    f.on_fetch_response({T0: 99}, response({T0: (1, b"")}))
    assert f.subscriptions.needing_reset() == {T0: "latest"}
    strict = fetcher(reset="none")
    strict.subscriptions.assign([T0])
    strict.subscriptions.seek(T0, 99)
    result = strict.on_fetch_response({T0: 99}, response({T0: (1, b"")}))
    assert result.out_of_range == {T0: 99}
    error = strict.out_of_range_error(result.out_of_range)
    assert isinstance(error, OffsetOutOfRangeError) and "t-0 at 99" in str(error)


def test_leader_errors_ask_for_metadata_and_others_are_reported():
    f = fetcher()
    f.subscriptions.assign([T0, T1])
    f.subscriptions.seek(T0, 0)
    f.subscriptions.seek(T1, 0)
    result = f.on_fetch_response({T0: 0, T1: 0}, response({T0: (6, b""), T1: (29, b"")}))
    assert result.refresh_metadata
    assert len(result.errors) == 1 and "t-1" in str(result.errors[0])


def test_a_partial_batch_at_the_end_is_ignored():
    f = fetcher()
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 0)
    whole = records(0, 2)
    f.on_fetch_response({T0: 0}, response({T0: (0, whole + records(2, 3)[:40])}))
    assert [r.offset for _, r in f.drain(10)] == [0, 1]
    assert f.subscriptions.state(T0).position == 2


@pytest.mark.parametrize("limit", [1, 3, 100])
def test_drain_arrow_equals_drain(limit):
    data = records(0, 4) + records(4, 3, compression=CompressionType.LZ4)
    per_record, arrow = fetcher(), fetcher()
    for f in (per_record, arrow):
        f.subscriptions.assign([T0, T1])
        f.subscriptions.seek(T0, 1)
        f.subscriptions.seek(T1, 0)
        f.on_fetch_response({T0: 1, T1: 0}, response({T0: (0, data), T1: (0, records(0, 2))}))
    expected, got = [], []
    for _ in range(12):
        expected += [
            {
                "key": r.key,
                "value": r.value,
                "topic": tp.topic,
                "partition": tp.partition,
                "offset": r.offset,
                "timestamp": r.timestamp,
                "timestampType": int(r.timestamp_type),
                "headers": [{"key": "h", "value": b"x"}],
            }
            for tp, r in per_record.drain(limit)
        ]
        batch = arrow.drain_arrow(limit, include_headers=True)
        assert batch.num_rows <= limit
        assert tuple(batch.schema.names) == (*ARROW_COLUMNS, "headers")
        got += batch.to_pylist()
    assert len(expected) == 8
    assert got == expected
    assert (
        arrow.subscriptions.state(T0).position == per_record.subscriptions.state(T0).position == 7
    )
