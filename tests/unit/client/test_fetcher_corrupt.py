"""A corrupt batch reaches the consumer (issue 27 item 6): every record before it comes out,
then every drain raises `CorruptBatchError` naming topic, partition and offset, the position
stays and the partition is not fetched, until a seek (Kafka's `CompletedFetch` and
`FetchCollector`). Per record and Arrow, native core on and off."""

from __future__ import annotations

import struct

import pytest

from sparklog.client.completed_fetch import NO_COMPLETE_BATCH
from sparklog.client.fetcher import Fetcher
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


def assert_stopped_at(f: Fetcher, how: str, offset: int, times: int = 3) -> CorruptBatchError:
    """Every drain raises the same error; the position stays; the partition is not fetched."""
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
    assert "seek()" in str(error)
    assert all(e is error for e in errors)
    assert f.subscriptions.state(T0).position == offset
    requests, _ = f.fetch_requests(cluster({"t": [1, 1]}), set())
    assert all(T0 not in offsets for _, offsets in requests.values())
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
def test_a_broker_answering_corrupt_message_stops_the_partition(codec, how):
    """Kafka's consumer raises on CORRUPT_MESSAGE (it used to be retried here for ever, with
    no error and no log line); the other partition's records of the same poll come out
    first, the error with the next drain."""
    f = fetcher()
    f.subscriptions.assign([T0, T1])
    f.subscriptions.seek(T0, 7)
    f.subscriptions.seek(T1, 0)
    result = f.on_fetch_response(
        {T0: 7, T1: 0}, response({T0: (CORRUPT_MESSAGE, b""), T1: (0, records(0, 2))})
    )
    assert not result.refresh_metadata and not result.errors
    error = assert_stopped_at(f, how, 7)
    assert "CORRUPT_MESSAGE" in error.reason
    f.subscriptions.state(T0).paused = True  # a paused partition raises nothing
    assert drain_offsets(f, how, 100, T1) == [0, 1]
    f.subscriptions.state(T0).paused = False
    assert_stopped_at(f, how, 7, times=1)
    f.subscriptions.seek(T0, 7)  # the same offset: fetched again (the replica may be repaired)
    requests, _ = f.fetch_requests(cluster({"t": [1, 1]}), set())
    assert requests[1][1][T0] == 7


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
    assert_stopped_at(f, "records", 5)


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
