"""A corrupt batch reaches the consumer (issue 27 item 6): every record before it comes out,
then every drain raises `CorruptBatchError` naming topic, partition and offset, and the position
stays (Kafka's `CompletedFetch` and `FetchCollector`). A batch found corrupt in fetched data
stops the partition until a seek; a broker's CORRUPT_MESSAGE answer keeps it fetched, after a
backoff, until a replica serves it. Per record and Arrow, native core on and off."""

from __future__ import annotations

import struct

import pytest

from sparklog.client.completed_fetch import NO_COMPLETE_BATCH
from sparklog.client.fetcher import Fetcher, SubscriptionState
from sparklog.errors import CorruptBatchError, CorruptMessageError
from sparklog.records import native
from sparklog.records.compression import CompressionType

from .helpers import cluster
from .test_fetcher import T0, T1, fetcher, records, response

CORRUPT_MESSAGE = 2


@pytest.fixture(params=["native", "python"])
def codec(request):
    core = native.set_enabled(request.param == "native")
    if request.param == "native" and core is None:
        pytest.skip("the native core is not built")
    yield request.param
    native.set_enabled(True)


def drain_offsets(f: Fetcher, how: str, limit: int, tp=T0) -> list[int]:
    if how == "arrow":
        batch = f.drain_arrow(limit, include_headers=False)
        return [
            o
            for p, o in zip(
                batch["partition"].to_pylist(), batch["offset"].to_pylist(), strict=True
            )
            if p == tp.partition
        ]
    return [r.offset for t, r in f.drain(limit) if t == tp]


def flip_value_byte(batch: bytes) -> bytes:
    """The batch with a bit of its last record's value flipped: its CRC-32C no longer matches."""
    damaged = bytearray(batch)
    damaged[-2] ^= 0x20
    return bytes(damaged)


def bad_length(batch: bytes, length: int) -> bytes:
    damaged = bytearray(batch)
    struct.pack_into(">i", damaged, 8, length)
    return bytes(damaged)


def assert_raising_at(f: Fetcher, how: str, offset: int, times: int = 3) -> CorruptBatchError:
    """Every drain raises the same error and the position stays."""
    errors = []
    for _ in range(times):
        with pytest.raises(CorruptBatchError) as caught:
            drain_offsets(f, how, 100)
        errors.append(caught.value)
    error = errors[0]
    assert (error.topic, error.partition, error.offset) == (T0.topic, T0.partition, offset)
    assert isinstance(error, CorruptMessageError) and error.code == CORRUPT_MESSAGE
    assert not error.retriable
    assert f"{T0.topic}-{T0.partition} at offset {offset}" in str(error)
    assert all(e is error for e in errors)
    assert f.subscriptions.state(T0).position == offset
    return error


def fetched_offset(f: Fetcher, now_ms: int, tp=T0) -> int | None:
    """The offset the next Fetch asks for `tp` at `now_ms`, None when it is not fetched."""
    requests, _ = f.fetch_requests(cluster({"t": [1, 1]}), set(), now_ms=now_ms)
    return next((offsets[tp] for _, offsets in requests.values() if tp in offsets), None)


def assert_stopped_at(f: Fetcher, how: str, offset: int, times: int = 3) -> CorruptBatchError:
    """As `assert_raising_at`, and the partition is not fetched, however much time passes:
    Kafka's consumer keeps the bad bytes and raises until a seek (they would come back)."""
    error = assert_raising_at(f, how, offset, times)
    assert not error.refetching and "seek()" in str(error)
    assert fetched_offset(f, 0) is None and fetched_offset(f, 10**12) is None
    return error


@pytest.mark.parametrize("how", ["records", "arrow"])
@pytest.mark.parametrize("limit", [1, 4, 100])
@pytest.mark.parametrize(
    "damage",
    ["crc", "length-too-small", "compressed-crc"],
)
def test_records_before_a_corrupt_batch_come_out_then_every_drain_raises(codec, how, limit, damage):
    if damage == "crc":
        bad = flip_value_byte(records(6, 3))
    elif damage == "length-too-small":
        bad = bad_length(records(6, 3), 20)
    else:
        bad = flip_value_byte(records(6, 3, compression=CompressionType.ZSTD))
    data = records(0, 3) + records(3, 3, compression=CompressionType.LZ4) + bad + records(9, 3)
    f = fetcher()
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 1)
    f.on_fetch_response({T0: 1}, response({T0: (0, data)}))
    got: list[int] = []
    while len(got) < 5:
        got += drain_offsets(f, how, limit)
    assert got == [1, 2, 3, 4, 5], "every record before the damage, nothing after"
    error = assert_stopped_at(f, how, 6)
    assert "CRC-32C" in error.reason or "batchLength" in error.reason

    f.subscriptions.seek(T0, 9)  # past the batch: fetched again, nothing raised
    f.clear_buffer([T0])
    assert drain_offsets(f, how, 100) == []
    requests, _ = f.fetch_requests(cluster({"t": [1]}), set())
    assert requests[1][1] == {T0: 9}
    f.on_fetch_response({T0: 9}, response({T0: (0, records(9, 3))}))
    assert drain_offsets(f, how, 100) == [9, 10, 11]


@pytest.mark.parametrize("how", ["records", "arrow"])
def test_a_corrupt_first_batch_raises_at_once(codec, how):
    f = fetcher()
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 0)
    f.on_fetch_response({T0: 0}, response({T0: (0, flip_value_byte(records(0, 3)))}))
    assert_stopped_at(f, how, 0)


@pytest.mark.parametrize("how", ["records", "arrow"])
def test_bytes_without_one_complete_batch_are_corrupt(codec, how):
    """A KIP-74 broker sends the first batch whole (Kafka's broker swaps an incomplete first
    batch for an empty answer), so a response of bytes with no complete batch has a damaged
    length field; refetching would return the same bytes for ever."""
    f = fetcher()
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 0)
    f.on_fetch_response({T0: 0}, response({T0: (0, bad_length(records(0, 3), 1 << 20))}))
    assert assert_stopped_at(f, how, 0).reason == NO_COMPLETE_BATCH


@pytest.mark.parametrize("how", ["records", "arrow"])
def test_a_broker_answering_corrupt_message_raises_and_is_asked_again(codec, how):
    """Kafka's consumer raises on CORRUPT_MESSAGE (it used to be retried here for ever, with
    no error and no log line); the other partition's records of the same poll come out
    first, the error with the next drain. The partition is fetched again after
    retry.backoff.ms: the broker refused its own damaged copy, another may be served."""
    f = fetcher()
    f.subscriptions.assign([T0, T1])
    f.subscriptions.seek(T0, 7)
    f.subscriptions.seek(T1, 0)
    result = f.on_fetch_response(
        {T0: 7, T1: 0},
        response({T0: (CORRUPT_MESSAGE, b""), T1: (0, records(0, 2))}),
        now_ms=1_000,
    )
    assert not result.refresh_metadata and not result.errors
    error = assert_raising_at(f, how, 7)
    assert "CORRUPT_MESSAGE" in error.reason and error.refetching
    assert "goes on by itself" in str(error) and "seek()" in str(error)
    f.subscriptions.state(T0).paused = True  # a paused partition raises nothing
    assert drain_offsets(f, how, 100, T1) == [0, 1]
    f.subscriptions.state(T0).paused = False
    assert_raising_at(f, how, 7, times=1)
    assert fetched_offset(f, 1_099) is None, "not before retry.backoff.ms"
    assert fetched_offset(f, 1_100) == 7
    f.subscriptions.seek(T0, 7)  # a seek ends the raising too, and fetches at once
    assert drain_offsets(f, how, 100) == []
    assert fetched_offset(f, 0) == 7


@pytest.mark.parametrize("how", ["records", "arrow"])
def test_a_batch_refused_then_served_is_delivered_without_a_seek(codec, how):
    """The broker answers CORRUPT_MESSAGE four times (its copy is damaged), then serves the
    batch (leadership moved to a good copy, or the segment was repaired): every drain raises
    while it is refused, the refetches back off (100, 200, 400, 800 ms: retry.backoff.ms
    doubling, at most retry.backoff.max.ms), and then every record comes out, in order, with
    no seek. It used to stop there until a seek (Kafka's consumer fetches again)."""
    f = Fetcher(
        SubscriptionState("earliest"),
        fetch_min_bytes=1,
        fetch_max_bytes=1 << 20,
        fetch_max_wait_ms=500,
        max_partition_fetch_bytes=1 << 16,
        isolation_level=0,
        retry_backoff_ms=100,
        retry_backoff_max_ms=800,
    )
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 0)
    assert fetched_offset(f, 0) == 0
    f.on_fetch_response({T0: 0}, response({T0: (0, records(0, 3) + records(3, 3))}), now_ms=0)
    assert fetched_offset(f, 0) == 6  # the pipelined fetch past the buffered data
    f.on_fetch_response({T0: 6}, response({T0: (CORRUPT_MESSAGE, b"")}), now_ms=10)
    assert drain_offsets(f, how, 100) == [0, 1, 2, 3, 4, 5]
    assert drain_offsets(f, how, 100) == [], "a prefetch refused: asked again at the position"
    now = 20
    assert fetched_offset(f, now) == 6
    waits = []
    for _ in range(4):  # refused four times
        f.on_fetch_response({T0: 6}, response({T0: (CORRUPT_MESSAGE, b"")}), now_ms=now)
        error = assert_raising_at(f, how, 6, times=2)
        assert error.refetching
        wait = 1
        while fetched_offset(f, now + wait) is None:
            assert_raising_at(f, how, 6, times=1)  # every poll, poll(0) too, raises
            wait += 1
        waits.append(wait)
        now += wait
        assert fetched_offset(f, now) == 6
    assert waits == [100, 200, 400, 800]
    f.on_fetch_response({T0: 6}, response({T0: (0, records(6, 4) + records(10, 2))}), now_ms=now)
    got = []
    for _ in range(10):
        got += drain_offsets(f, how, 3)
    assert got == list(range(6, 12)), "every record, once, in order, without a seek"
    assert f.subscriptions.state(T0).position == 12
    assert fetched_offset(f, now) == 12

    # Refused again later: the backoff starts over at retry.backoff.ms.
    f.on_fetch_response({T0: 12}, response({T0: (CORRUPT_MESSAGE, b"")}), now_ms=now)
    assert_raising_at(f, how, 12, times=1)
    assert fetched_offset(f, now + 99) is None and fetched_offset(f, now + 100) == 12


def test_a_refused_batch_keeps_raising_through_a_leader_change():
    """While leadership moves the partition is still known bad: every drain raises; the new
    leader's answer without error ends it (here an empty one: nothing to read yet)."""
    f = fetcher()
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 4)
    f.on_fetch_response({T0: 4}, response({T0: (CORRUPT_MESSAGE, b"")}), now_ms=0)
    assert fetched_offset(f, 100) == 4
    result = f.on_fetch_response({T0: 4}, response({T0: (6, b"")}), now_ms=100)  # NOT_LEADER
    assert result.refresh_metadata
    assert_raising_at(f, "records", 4)
    assert fetched_offset(f, 100) == 4  # the consumer's node backoff times this one
    f.on_fetch_response({T0: 4}, response({T0: (0, b"")}), now_ms=150)
    assert f.drain(100) == [] and f.drain(100) == []
    f.on_fetch_response({T0: 4}, response({T0: (0, records(4, 2))}), now_ms=200)
    assert [r.offset for _, r in f.drain(100)] == [4, 5]


def test_data_served_after_a_refusal_can_still_be_corrupt_in_the_response():
    """The refetch is served, but the client's CRC check fails on it (a replica whose copy is
    damaged too, served unchecked as Apache Kafka's broker does): the records before the bad
    batch come out, then the partition stops there until a seek, as Kafka's consumer does."""
    f = fetcher()
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 0)
    f.on_fetch_response({T0: 0}, response({T0: (CORRUPT_MESSAGE, b"")}), now_ms=0)
    assert_raising_at(f, "records", 0, times=1)
    data = records(0, 2) + flip_value_byte(records(2, 2))
    f.on_fetch_response({T0: 0}, response({T0: (0, data)}), now_ms=100)
    assert [r.offset for _, r in f.drain(100)] == [0, 1]
    assert_stopped_at(f, "records", 2)


def test_records_of_other_partitions_drained_with_the_damage_come_out_first(codec):
    f = fetcher()
    f.subscriptions.assign([T0, T1])
    f.subscriptions.seek(T0, 0)
    f.subscriptions.seek(T1, 0)
    data = records(0, 2) + flip_value_byte(records(2, 2))
    f.on_fetch_response({T0: 0, T1: 0}, response({T0: (0, data), T1: (0, records(0, 3))}))
    got = [(tp.partition, r.offset) for tp, r in f.drain(100)]
    assert got == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    assert_stopped_at(f, "records", 2)


def test_a_prefetch_answered_corrupt_message_waits_for_the_data_before_it():
    """The pipelined fetch past the buffered data hits the damage: the buffered records come
    out, and the error once the position reaches the damage (a fetch at the position asks)."""
    f = fetcher()
    c = cluster({"t": [1]})
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 0)
    f.on_fetch_response({T0: 0}, response({T0: (0, records(0, 5))}))
    assert f.fetch_requests(c, set())[0][1][1] == {T0: 5}
    f.on_fetch_response({T0: 5}, response({T0: (CORRUPT_MESSAGE, b"")}))
    assert [r.offset for _, r in f.drain(100)] == [0, 1, 2, 3, 4]
    assert f.drain(100) == []
    assert f.fetch_requests(c, set())[0][1][1] == {T0: 5}
    f.on_fetch_response({T0: 5}, response({T0: (CORRUPT_MESSAGE, b"")}))
    assert assert_raising_at(f, "records", 5).refetching


def test_data_buffered_past_a_corrupt_batch_is_dropped():
    """Batches after the damage arrived in a prefetch: nothing past the damage comes out."""
    f = fetcher()
    c = cluster({"t": [1]})
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 0)
    f.on_fetch_response(
        {T0: 0}, response({T0: (0, records(0, 2) + flip_value_byte(records(2, 2)))})
    )
    assert f.fetch_requests(c, set())[0][1][1] == {T0: 4}  # headers say the data goes on
    f.on_fetch_response({T0: 4}, response({T0: (0, records(4, 3))}))
    assert [r.offset for _, r in f.drain(100)] == [0, 1]
    assert_stopped_at(f, "records", 2)
    assert f.buffered_partitions() == set()


@pytest.mark.parametrize("how", ["records", "arrow"])
def test_a_batch_unpacking_past_the_readers_bound_stops_the_partition(codec, how, monkeypatch):
    """Issue 27: a broker cannot make a consumer unpack more than the readers' bound for one
    batch (2 GiB - 1, lowered to 1 MiB here): the records before such a batch come out, then
    the partition stops at it as at a corrupt one."""
    from sparklog.records import SimpleRecord, build_batch, compression

    monkeypatch.setattr(compression, "DECOMPRESSED_MAX_BYTES", 1 << 20)
    bomb = build_batch(
        [SimpleRecord(bytes(3 << 20), None, 0)], base_offset=3, compression=CompressionType.ZSTD
    )
    data = records(0, 3) + bomb + records(4, 3)
    f = fetcher()
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 0)
    f.on_fetch_response({T0: 0}, response({T0: (0, data)}))
    got: list[int] = []
    while len(got) < 3:
        got += drain_offsets(f, how, 100)
    assert got == [0, 1, 2]
    error = assert_stopped_at(f, how, 3)
    assert f"decompresses to more than {1 << 20} bytes" in error.reason
