"""The pieces of a broker's forwarding to the driver's coordinator, without sockets: Envelope
wrapping (KIP-590), the choice of broker FindCoordinator names, and the channel's pool (no
request waits behind another; an unreachable coordinator fails fast, then is retried)."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.envelope.v0.response import EnvelopeResponse
from kio.schema.errors import ErrorCode

from sparklog.broker.coordinator_channel import (
    CoordinatorChannel,
    CoordinatorUnreachableError,
    forward_timeout_s,
)
from sparklog.broker.coordinator_forwarding import coordinator_broker
from sparklog.protocol import codec, envelope, kio_build
from sparklog.protocol.api_versions import BROKER_APIS, GROUP_COORDINATOR_SERVED_APIS, ApiKey
from sparklog.protocol.connection import Request, ServerConnection


def request(api: ApiKey, version: int, data: dict, client_id: str = "consumer-1") -> Request:
    body = kio_build.build(codec.request_schema(api, version), data)
    return Request(int(api), version, 41, client_id, body, 0)


HEARTBEAT = {"group_id": "g", "generation_id": 3, "member_id": "m", "group_instance_id": None}
PRODUCE = {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": []}


def test_an_envelope_carries_the_request_and_the_client_and_back():
    inner = request(ApiKey.HEARTBEAT, 4, HEARTBEAT)
    wrapped = envelope.wrap(inner, "/10.1.2.3")
    assert wrapped.client_host_address == bytes([10, 1, 2, 3])
    assert wrapped.request_principal == envelope.ANONYMOUS_PRINCIPAL

    opened, client_host = envelope.unwrap(wrapped, GROUP_COORDINATOR_SERVED_APIS)
    assert client_host == "/10.1.2.3"
    assert (opened.api_key, opened.api_version) == (ApiKey.HEARTBEAT, 4)
    assert (opened.correlation_id, opened.client_id, opened.body) == (41, "consumer-1", inner.body)

    answer = kio_build.response(opened, {"throttle_time": 0, "error_code": 27})
    data = envelope.response_data(opened, answer)
    body = envelope.inner_body(inner, data)
    assert codec.encode_response(body, 41) == codec.encode_response(answer, 41)
    assert envelope.decode_inner(inner, data) == answer


def test_an_envelope_carries_the_clients_bytes_as_received():
    # KIP-590: the broker forwards the frame it received, not a re-encoding of its decoded
    # body; bytes the client put after the body (librdkafka does) travel with it too
    frame = codec.encode_request(request(ApiKey.HEARTBEAT, 4, HEARTBEAT).body, 41, "consumer-1")
    frame = (len(frame) - 4 + 2).to_bytes(4, "big") + frame[4:] + b"\0\0"
    conn = ServerConnection(BROKER_APIS)
    conn.receive_data(frame)
    received = conn.next_request()
    assert isinstance(received, Request)
    assert received.raw == frame[4:]

    wrapped = envelope.wrap(received, "/10.1.2.3")
    assert wrapped.request_data == frame[4:]
    opened, _client_host = envelope.unwrap(wrapped, GROUP_COORDINATOR_SERVED_APIS)
    assert (opened.correlation_id, opened.client_id, opened.body) == (
        41,
        "consumer-1",
        received.body,
    )

    # a request the broker serves itself keeps no copy
    produce = request(ApiKey.PRODUCE, 9, PRODUCE).body
    conn.receive_data(codec.encode_request(produce, 42, "producer-1"))
    served = conn.next_request()
    assert isinstance(served, Request) and served.raw is None


@pytest.mark.parametrize("version", [0, 3])  # a response header without tagged fields
def test_an_old_versions_answer_comes_back_byte_for_byte(version):
    inner = request(ApiKey.HEARTBEAT, version, HEARTBEAT)
    answer = kio_build.response(inner, {"throttle_time": 0, "error_code": 0})
    body = envelope.inner_body(inner, envelope.response_data(inner, answer))
    assert codec.encode_response(body, 41) == codec.encode_response(answer, 41)


def test_an_envelope_of_an_api_the_coordinator_does_not_serve_is_refused():
    produce = request(ApiKey.PRODUCE, 9, PRODUCE)
    with pytest.raises(envelope.EnvelopeError) as refused:
        envelope.unwrap(envelope.wrap(produce, ""), GROUP_COORDINATOR_SERVED_APIS)
    assert refused.value.code == 35  # UNSUPPORTED_VERSION


def test_find_coordinator_spreads_keys_and_is_stable():
    ids = [0, 1, 2]
    chosen = [coordinator_broker(f"group-{i}", ids) for i in range(300)]
    assert chosen == [coordinator_broker(f"group-{i}", ids) for i in range(300)]
    assert all(chosen.count(b) > 50 for b in ids)
    assert coordinator_broker("g", []) is None


def test_a_join_group_may_wait_for_its_rebalance_timeout():
    join = request(
        ApiKey.JOIN_GROUP,
        9,
        {
            "group_id": "g",
            "session_timeout": 10_000,
            "rebalance_timeout": 300_000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [],
            "reason": None,
        },
    )
    assert forward_timeout_s(join) > 300


class FakeConnection:
    """Answers each Envelope when the test releases it; one request at a time, like the
    coordinator's listener."""

    def __init__(self) -> None:
        self.closed = False
        self.busy = False
        self.release = asyncio.Event()

    async def request(self, body, *, timeout_s=None):
        assert not self.busy, "two requests on one connection"
        self.busy = True
        try:
            await self.release.wait()
        finally:
            self.busy = False
        return EnvelopeResponse(response_data=b"answer", error_code=ErrorCode(0))

    async def close(self) -> None:
        self.closed = True


def test_requests_in_flight_each_get_a_connection_and_are_reused():
    async def go():
        opened: list[FakeConnection] = []

        async def connect(host, port):
            opened.append(FakeConnection())
            return opened[-1]

        channel = CoordinatorChannel("127.0.0.1:9", connect=connect)
        hb = request(ApiKey.HEARTBEAT, 4, HEARTBEAT)
        slow = asyncio.ensure_future(channel.forward(hb, "/127.0.0.1"))
        await asyncio.sleep(0)
        fast = asyncio.ensure_future(channel.forward(hb, "/127.0.0.1"))
        await asyncio.sleep(0)
        opened[1].release.set()
        assert await fast == b"answer"
        assert not slow.done()  # the first still waits: nothing queued behind it
        third = await asyncio.gather(channel.forward(hb, "/127.0.0.1"))
        opened[0].release.set()
        await slow
        stats = channel.statistics()
        await channel.close()
        return len(opened), third, stats

    count, third, stats = asyncio.run(go())
    assert count == 2 and third == [b"answer"]  # the idle second connection was reused
    assert stats["forwarded"] == 3 and stats["in_flight"] == 0


def test_an_unreachable_coordinator_fails_fast_then_is_retried():
    async def go():
        now = [100.0]
        attempts = []

        async def connect(host, port):
            attempts.append(now[0])
            if len(attempts) < 3:
                raise ConnectionRefusedError("refused")
            conn = FakeConnection()
            conn.release.set()
            return conn

        channel = CoordinatorChannel("127.0.0.1:9", connect=connect, clock_s=lambda: now[0])
        hb = request(ApiKey.HEARTBEAT, 4, HEARTBEAT)
        outcomes = []
        for advance in (0, 0, 0.05, 0.05, 0.1):
            now[0] += advance
            try:
                outcomes.append(await channel.forward(hb, ""))
            except CoordinatorUnreachableError:
                outcomes.append("unreachable")
        return attempts, outcomes

    attempts, outcomes = asyncio.run(go())
    # refused; within the 50 ms backoff no attempt; refused again (backoff 100 ms); then up
    assert outcomes == ["unreachable"] * 4 + [b"answer"]
    assert attempts == pytest.approx([100.0, 100.05, 100.2])
