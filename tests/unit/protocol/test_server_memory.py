"""What a connection's partly received request costs the server's memory (issue 27): the
memory pool (`queued.max.request.bytes`) is reserved before a request's buffer grows, buffers
grow with the bytes that arrive, and a closed connection's buffers are freed at once."""

from __future__ import annotations

import asyncio
import socket
import struct
import tracemalloc

from sparklog.protocol.api_versions import BROKER_APIS
from sparklog.protocol.server import KafkaServer


async def _until(condition, what: str) -> None:
    for _ in range(2_000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never saw {what}")


def _connections(server: KafkaServer) -> list:
    return [w.transport.get_protocol().conn for w in server._connections.values()]


def test_a_request_waiting_for_the_memory_pool_allocates_nothing_and_close_frees_it():
    async def go():
        server = KafkaServer(lambda _r: None, BROKER_APIS, queued_max_request_bytes=1_000_000)
        await server.start()
        loop = asyncio.get_running_loop()
        hog, late = socket.socket(), socket.socket()
        for s in (hog, late):
            s.setblocking(False)
            await loop.sock_connect(s, (server.host, server.port))
        try:
            await loop.sock_sendall(hog, struct.pack(">i", 2_000_000) + b"\0" * 100)
            await _until(lambda: server.memory_pool.reserved >= 1_000_000, "the hog's reservation")
            tracemalloc.start()
            await loop.sock_sendall(late, struct.pack(">i", 50 << 20) + b"\0" * (64 << 10))
            await _until(
                lambda: any(c.incomplete_request_bytes > 40 << 20 for c in _connections(server)),
                "the late request's size",
            )
            for _ in range(20):  # turns of the loop in which it could read on
                await asyncio.sleep(0.005)
            grown, _peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert grown < 1 << 20, f"{grown} bytes allocated for a request the pool holds back"
            assert server.memory_pool.reserved < 50 << 20
            (late_conn,) = [
                c for c in _connections(server) if c.incomplete_request_bytes > 40 << 20
            ]
            hog.close()  # the pool frees: the late request reserves and reads on
            await _until(lambda: late_conn.allocated_bytes >= 64 << 10, "the late request read")
            late.close()
            await _until(lambda: server.connection_count == 0, "both connections closed")
            assert late_conn.allocated_bytes == 0
            assert server.memory_pool.reserved == 0
        finally:
            hog.close()
            late.close()
            await server.stop()

    asyncio.run(go())
