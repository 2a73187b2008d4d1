"""Sans-IO framing: requests and responses cut from arbitrary byte chunks, bad frames refused."""

from __future__ import annotations

import struct

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from sparklog.protocol import codec
from sparklog.protocol.api_versions import (
    BROKER_APIS,
    SASL_APIS_VERSIONS,
    ApiKey,
    UnsupportedApiError,
    pick_version,
)
from sparklog.protocol.async_client import api_versions_response
from sparklog.protocol.connection import (
    NEED_DATA,
    ClientConnection,
    ProtocolError,
    ServerConnection,
)


def metadata_request(*names: str) -> MetadataRequest:
    return MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=n) for n in names),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def test_requests_survive_any_chunking():
    client = ClientConnection("tester")
    wire = b"".join(client.send_request(metadata_request(f"t{i}"))[1] for i in range(5))
    for chunk_size in (1, 3, 7, len(wire)):
        server = ServerConnection(BROKER_APIS)
        got = []
        for i in range(0, len(wire), chunk_size):
            server.receive_data(wire[i : i + chunk_size])
            while (req := server.next_request()) is not NEED_DATA:
                got.append(req)
        assert [r.correlation_id for r in got] == [0, 1, 2, 3, 4]
        assert [r.body.topics[0].name for r in got] == [f"t{i}" for i in range(5)]
        assert all(r.client_id == "tester" and r.api_key == ApiKey.METADATA for r in got)


def test_round_trip_through_both_sides():
    client = ClientConnection()
    server = ServerConnection(BROKER_APIS)
    _, data = client.send_request(
        ApiVersionsRequest(client_software_name="x", client_software_version="1")
    )
    server.receive_data(data)
    request = server.next_request()
    assert request.api_key == ApiKey.API_VERSIONS and request.api_version == 3
    client.receive_data(server.send_response(request, api_versions_response(BROKER_APIS, 3)))
    correlation_id, body = client.next_response()
    assert correlation_id == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in body.api_keys} == {
        int(k): v for k, v in {**BROKER_APIS, **SASL_APIS_VERSIONS}.items()
    }
    assert client.next_response() is NEED_DATA


def test_oversize_frame_is_a_protocol_error():
    server = ServerConnection(BROKER_APIS, max_request_bytes=100)
    server.receive_data(struct.pack(">i", 101) + b"x" * 10)
    with pytest.raises(ProtocolError, match="socket.request.max.bytes"):
        server.next_request()


def test_unknown_api_and_garbage_are_protocol_errors():
    server = ServerConnection(BROKER_APIS)
    server.receive_data(struct.pack(">ihhi", 8, 999, 0, 1))
    with pytest.raises(ProtocolError, match="unsupported API"):
        server.next_request()
    server = ServerConnection(BROKER_APIS)
    body = struct.pack(">hhi", int(ApiKey.METADATA), 12, 5) + b"\xff\xff\xff"
    server.receive_data(struct.pack(">i", len(body)) + body)
    with pytest.raises(ProtocolError, match="malformed"):
        server.next_request()


def test_api_versions_at_unknown_version_is_answered_not_dropped():
    server = ServerConnection(BROKER_APIS)
    body = struct.pack(">hhi", int(ApiKey.API_VERSIONS), 99, 42) + b"\x00\x00"
    server.receive_data(struct.pack(">i", len(body)) + body)
    request = server.next_request()
    assert request.body is None and request.correlation_id == 42


def test_responses_out_of_order_are_refused():
    client = ClientConnection()
    client.send_request(metadata_request("a"))
    from sparklog.protocol.codec import encode_response

    client.receive_data(encode_response(api_versions_response(BROKER_APIS, 0), 7))
    with pytest.raises(ProtocolError):
        client.next_response()


def test_version_negotiation():
    assert pick_version((0, 12), (1, 9), 3) == 9
    with pytest.raises(UnsupportedApiError, match="METADATA"):
        pick_version((10, 12), (1, 9), 3)
    with pytest.raises(UnsupportedApiError):
        pick_version((0, 1), None, 0)


def _frames(*sizes: int) -> tuple[bytes, list[bytes]]:
    bodies = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    return b"".join(struct.pack(">i", len(b)) + b for b in bodies), bodies


@pytest.mark.parametrize("reuse", [False, True])
@pytest.mark.parametrize("chunk", [1000, 65_536, 300_001])
def test_large_frames_come_out_whole_fed_or_received_into(reuse, chunk):
    from sparklog.protocol.frames import DIRECT_FRAME_BYTES, FrameBuffer

    stream, bodies = _frames(10, DIRECT_FRAME_BYTES * 2, 7, DIRECT_FRAME_BYTES + 1, 3)
    for use_recv_into in (False, True):
        buffer = FrameBuffer(1 << 30, reuse_large=reuse)
        got, at = [], 0
        while at < len(stream):
            target = buffer.receive_buffer() if use_recv_into else None
            if target is not None:  # what recv_into does
                n = min(len(target), chunk, len(stream) - at)
                target[:n] = stream[at : at + n]
                target.release()
                buffer.received(n)
            else:
                n = min(chunk, len(stream) - at)
                buffer.feed(stream[at : at + n])
            at += n
            while (frame := buffer.next_frame()) is not None:
                assert frame.readonly, "kio reads read-only buffers only"
                got.append(bytes(frame))  # a reused buffer is overwritten by the next frame
        assert got == bodies
        assert buffer.buffered_bytes == 0 and buffer.incomplete_frame_bytes == 0


def _produce_frame(correlation_id: int, fill: bytes) -> bytes:
    import pyarrow as pa

    from sparklog.client.request_builder import build_request
    from sparklog.records.arrow_encode import build_batches

    (records,) = build_batches(pa.table({"value": [fill * 1000] * 40}), now_ms=0)
    body = build_request(
        ApiKey.PRODUCE,
        9,
        {
            "acks": -1,
            "timeout": 1000,
            "transactional_id": None,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    return codec.encode_request(body, correlation_id, "c")


def test_large_requests_received_into_one_reused_buffer_keep_their_bytes():
    # The server receives every large request into one buffer; a request it handed out must
    # not change when the next one lands there (kio's decode must have copied the records).
    server = ServerConnection(BROKER_APIS, direct_frame_bytes=16 * 1024)
    first, second = _produce_frame(1, b"a"), _produce_frame(2, b"b")
    assert len(first) > 16 * 1024
    requests = []
    for frame in (first, second):
        server.receive_data(frame[:100])
        target = server.receive_buffer()
        assert target is not None and len(target) == len(frame) - 100, "the rest goes direct"
        target[:] = frame[100:]
        server.received(len(frame) - 100)
        assert server.has_request()
        requests.append(server.next_request())
        assert not server.has_request() and server.next_request() is NEED_DATA
    records = [r.body.topic_data[0].partition_data[0].records for r in requests]
    assert bytes(records[0]).count(b"a" * 1000) == 40
    assert bytes(records[1]).count(b"b" * 1000) == 40


def test_a_frame_of_a_bad_size_counts_as_a_request_so_the_server_refuses_it():
    server = ServerConnection(BROKER_APIS, max_request_bytes=1000)
    server.receive_data(struct.pack(">i", 5000) + b"\0" * 10)
    assert server.has_request()
    with pytest.raises(ProtocolError):
        server.next_request()


def test_a_huge_request_gets_a_buffer_of_its_own_and_does_not_stay():
    from sparklog.protocol.frames import REUSED_REQUEST_BUFFER_BYTES, FrameBuffer

    frames = FrameBuffer(
        1 << 30, reuse_large=True, direct_frame_bytes=16 * 1024,
        reuse_max_bytes=REUSED_REQUEST_BUFFER_BYTES,
    )  # fmt: skip
    buffers = []
    for size in (100_000, 100_000, REUSED_REQUEST_BUFFER_BYTES + 1, 100_000):
        frames.feed(struct.pack(">i", size) + b"x" * 10)
        while (target := frames.receive_buffer()) is not None:
            target[:] = b"y" * len(target)
            frames.received(len(target))
            target.release()
        frame = frames.next_frame()
        assert frame is not None and len(frame) == size and bytes(frame[-3:]) == b"yyy"
        buffers.append(frame.obj)
    usual, again, huge, after = buffers
    assert usual is again is after, "requests of usual sizes share one buffer"
    assert huge is not usual and len(huge) == REUSED_REQUEST_BUFFER_BYTES + 1
    assert len(usual) < REUSED_REQUEST_BUFFER_BYTES, "the huge one was not kept"


def test_partial_frames_hold_memory_as_their_bytes_arrive_not_their_declared_size():
    # Issue 27: 20 connections declaring 100 MiB and sending a little took 1.5 GB, the whole
    # declared size being allocated when the size arrived. A frame's buffer now grows with
    # the bytes received (doubling), so a connection holds at most twice what it sent.
    import tracemalloc

    declared, sent = 100 << 20, 1024
    tracemalloc.start()
    try:
        connections = [ServerConnection(BROKER_APIS) for _ in range(4)]
        for conn in connections:
            conn.receive_data(struct.pack(">i", declared) + b"\0" * sent)
            assert conn.incomplete_request_bytes == declared + 4  # what the pool reserves
            assert not conn.has_request()
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < len(connections) * (256 << 10), f"{held} bytes for 4 x 1 KiB received"
    for conn in connections:
        assert conn.allocated_bytes <= 128 << 10
        conn.close()
        assert conn.allocated_bytes == 0


def test_a_large_frame_buffer_grows_with_what_arrived_and_keeps_every_byte():
    from sparklog.protocol.frames import FIRST_FRAME_BUFFER_BYTES

    server = ServerConnection(BROKER_APIS, direct_frame_bytes=16 * 1024)
    frame = _produce_frame(3, b"c")
    server.receive_data(frame[:100])
    at = 100
    while (target := server.receive_buffer()) is not None:
        assert server.allocated_bytes <= max(2 * at, FIRST_FRAME_BUFFER_BYTES) + 8 * 1024
        n = min(len(target), 5000)
        target[:n] = frame[at : at + n]
        target.release()
        server.received(n)
        at += n
    assert at == len(frame)
    request = server.next_request()
    assert bytes(request.body.topic_data[0].partition_data[0].records).count(b"c" * 1000) == 40


def test_a_size_prefix_over_socket_request_max_bytes_is_refused_before_any_allocation():
    # Kafka's InvalidReceiveException: the connection closes on the 4-byte size alone.
    server = ServerConnection(BROKER_APIS)  # socket.request.max.bytes: 104857600
    server.receive_data(struct.pack(">i", 104_857_601))
    assert server.allocated_bytes < 1024 and server.incomplete_request_bytes == 0
    assert server.has_request()
    with pytest.raises(ProtocolError, match="socket.request.max.bytes"):
        server.next_request()
