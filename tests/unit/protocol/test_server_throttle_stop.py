"""A server stopping while connections are muted for a throttle (KIP-219) ends them at once:
a muted connection has nothing in flight, so shutdown does not wait out its throttle."""

from __future__ import annotations

import asyncio
import struct

from sparklog.protocol import kio_build
from sparklog.protocol.api_versions import BROKER_APIS, ApiKey
from sparklog.protocol.pipeline import RequestStage
from sparklog.protocol.server import KafkaServer

THROTTLE_MS = 60_000


class ThrottleEverything(RequestStage):
    name = "throttle"

    def on_request(self, request):
        request.context.throttle_time_ms = THROTTLE_MS
        return None


def test_stop_ends_a_muted_connection_without_waiting_out_its_throttle():
    async def handler(request):
        return kio_build.response(request, {"error_code": 0, "api_keys": []})

    async def main() -> None:
        server = KafkaServer(handler, BROKER_APIS, stages=[ThrottleEverything()])
        await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        body = struct.pack(">hhih", ApiKey.API_VERSIONS, 3, 1, -1) + b"\x00\x01\x01\x00"
        writer.write(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        await reader.readexactly(size)  # answered at once (KIP-219) ...
        while not server.muted_connections:  # ... then muted for a minute
            await asyncio.sleep(0.01)
        # stop() cancels the muted connection; before, it waited 5 s for it to end by itself
        # and then cancelled it as a backstop
        loop = asyncio.get_running_loop()
        started = loop.time()
        await server.stop()
        assert loop.time() - started < 4.0, "stop() waited for a muted connection"
        assert server.muted_connections == 0 and server.connection_count == 0
        assert await reader.read() == b""  # the connection was closed
        writer.close()

    asyncio.run(main())
