"""The event loop's idle share (NetworkProcessorAvgIdlePercent) and a listener's
socket-server metrics, on a real KafkaServer."""

from __future__ import annotations

import asyncio
import math

from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Metrics
from sparklog.protocol.api_versions import BROKER_APIS
from sparklog.protocol.server import KafkaServer
from sparklog.protocol.socket_server_metrics import (
    LoopIdleMeter,
    loop_idle_meter,
    register_loop_metrics,
)

S = 1_000_000_000


def test_idle_ratio_is_the_share_of_time_in_select_over_the_window():
    meter = LoopIdleMeter()
    t0 = meter.started_ns
    meter.on_select(t0, t0 + S // 4)  # idle a quarter second
    meter.on_select(t0 + S // 2, t0 + S)  # busy a quarter, idle half a second
    assert meter.idle_ratio(t0 + S) == 0.75
    assert meter.idle_ratio(t0 + 2 * S) == 0.375  # a busy second after it
    # after the window, old checkpoints drop out: 30 s more, busy half of each second
    now = t0 + S
    for _ in range(40):
        meter.on_select(now + S // 2, now + S)
        now += S
    assert math.isclose(meter.idle_ratio(now), 0.5)


def test_the_loops_selector_is_timed_once_and_gauges_read_it():
    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        meter = loop_idle_meter(loop)
        assert meter is not None and loop_idle_meter(loop) is meter
        metrics = Metrics()
        register_loop_metrics(metrics, loop)
        await asyncio.sleep(0.05)  # waiting in select
        assert meter.idle_ns > 0
        idle = metrics.metric(
            MetricName.of("kafka.network", "SocketServer", "NetworkProcessorAvgIdlePercent")
        )
        handler = metrics.metric(
            MetricName.of("kafka.server", "KafkaRequestHandlerPool", "RequestHandlerAvgIdlePercent")
        )
        assert idle is not None and handler is not None
        return idle.value(), handler.value()

    idle, handler = asyncio.run(main())
    assert 0.0 < idle <= 1.0 and 0.0 < handler <= 1.0


def _value(metrics: Metrics, name: str) -> float:
    metric = metrics.metric(
        MetricName.of("kafka.server", "socket-server-metrics", name, {"listener": "PLAINTEXT"})
    )
    assert metric is not None, name
    return metric.value()


def test_a_listener_counts_its_connections():
    async def handler(request):  # never called: the connections send nothing
        return None

    async def main() -> None:
        metrics = Metrics()
        server = KafkaServer(handler, BROKER_APIS)
        server.bind_metrics(metrics)
        await server.start()
        try:
            streams = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(3)]
            while server.connection_count < 3:
                await asyncio.sleep(0.01)
            assert _value(metrics, "connection-count") == 3
            assert _value(metrics, "connection-creation-total") == 3
            assert _value(metrics, "connection-creation-rate") > 0
            for _reader, writer in streams[:2]:
                writer.close()
            while server.connection_count > 1:
                await asyncio.sleep(0.01)
            assert _value(metrics, "connection-close-total") == 2
            assert _value(metrics, "connection-count") == 1
            assert _value(metrics, "failed-authentication-total") == 0
        finally:
            await server.stop()

    asyncio.run(main())
