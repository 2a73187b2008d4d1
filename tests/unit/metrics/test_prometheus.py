"""The Prometheus exposition: the JMX exporter's (Strimzi's rules) names for Kafka's metrics,
parsed back with prometheus_client's own text parser, and the process endpoint over HTTP."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sparklog.metrics.config import MetricsConfig
from sparklog.metrics.http_endpoint import MetricsEndpoint, MetricsSource
from sparklog.metrics.metric import MetricName
from sparklog.metrics.prometheus import RegistryCollector, families, merge
from sparklog.metrics.registry import Metrics
from sparklog.metrics.stats import Rate
from sparklog.protocol.loop_thread import LoopThread


def _clock() -> int:
    return 1_000


def _samples(text: str) -> dict[tuple[str, frozenset], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _types(text: str) -> dict[str, str]:
    return {f.name: f.type for f in text_string_to_metric_families(text)}


def _exposition(registry: Metrics, labels=None) -> str:
    collectors = CollectorRegistry()
    collectors.register(RegistryCollector(registry, labels))
    return generate_latest(collectors).decode()


def test_meter_is_a_counter_named_as_strimzi_names_it():
    m = Metrics(clock=_clock)
    name = MetricName.of("kafka.server", "BrokerTopicMetrics", "BytesInPerSec", {"topic": "t"})
    m.meter(name).mark(123)
    m.meter(MetricName.of("kafka.server", "BrokerTopicMetrics", "BytesInPerSec")).mark(200)
    text = _exposition(m)
    samples = _samples(text)
    assert (
        samples[("kafka_server_brokertopicmetrics_bytesin_total", frozenset({("topic", "t")}))]
        == 123
    )
    assert samples[("kafka_server_brokertopicmetrics_bytesin_total", frozenset())] == 200
    assert _types(text)["kafka_server_brokertopicmetrics_bytesin"] == "counter"
    assert "# TYPE kafka_server_brokertopicmetrics_bytesin_total counter" in text


def test_gauges_and_percent_gauges():
    m = Metrics(clock=_clock)
    m.gauge(MetricName.of("kafka.server", "ReplicaManager", "UnderReplicatedPartitions"), lambda: 3)
    m.gauge(
        MetricName.of("kafka.network", "SocketServer", "NetworkProcessorAvgIdlePercent"),
        lambda: 0.75,
    )
    samples = _samples(_exposition(m))
    assert samples[("kafka_server_replicamanager_underreplicatedpartitions", frozenset())] == 3
    key = ("kafka_network_socketserver_networkprocessoravgidle_percent", frozenset())
    assert samples[key] == 0.75


def test_histogram_is_a_summary_with_strimzi_quantile_labels_and_count_sum():
    m = Metrics(clock=_clock)
    h = m.histogram(
        MetricName.of("kafka.network", "RequestMetrics", "TotalTimeMs", {"request": "Produce"})
    )
    for v in (1.0, 2.0, 3.0, 100.0):
        h.update(v)
    text = _exposition(m)
    assert _types(text)["kafka_network_requestmetrics_totaltimems"] == "summary"
    samples = _samples(text)
    req = ("request", "Produce")
    assert samples[("kafka_network_requestmetrics_totaltimems_count", frozenset({req}))] == 4
    assert samples[("kafka_network_requestmetrics_totaltimems_sum", frozenset({req}))] == 106
    quantiles = {
        dict(labels)["quantile"]: v
        for (n, labels), v in samples.items()
        if n == "kafka_network_requestmetrics_totaltimems"
    }
    assert set(quantiles) == {"0.50", "0.75", "0.95", "0.98", "0.99", "0.999"}
    assert quantiles["0.50"] <= quantiles["0.99"]
    assert quantiles["0.99"] >= 90  # the 100 ms request, within the bins' 5 %


def test_kafka_metrics_library_names_and_dashed_tags():
    m = Metrics(clock=_clock)
    sensor = m.sensor("Produce-u-c")
    name = MetricName.of("kafka.server", "Produce", "byte-rate", {"user": "u", "client-id": "c"})
    sensor.add(name, Rate())
    sensor.record(1000.0, now_ms=1_000)
    m.meter(
        MetricName.of(
            "kafka.server",
            "socket-server-metrics",
            "failed-authentication-total",
            {"listener": "SASL"},
        )
    ).mark(2)
    samples = _samples(_exposition(m))
    labels = frozenset({("user", "u"), ("client_id", "c")})
    assert ("kafka_server_produce_byte_rate", labels) in samples
    key = (
        "kafka_server_socket_server_metrics_failed_authentication_total",
        frozenset({("listener", "SASL")}),
    )
    assert samples[key] == 2


def test_merge_joins_registries_under_one_type_line_with_a_label_each():
    a, b = Metrics(clock=_clock), Metrics(clock=_clock)
    name = MetricName.of(
        "kafka.network", "RequestMetrics", "RequestsPerSec", {"request": "Metadata"}
    )
    a.meter(name).mark(1)
    b.meter(name).mark(2)
    merged = merge([families(a, {"server": "broker-0"}), families(b, {"server": "broker-1"})])
    from sparklog.metrics.prometheus import Snapshot

    text = generate_latest(Snapshot(merged)).decode()  # type: ignore[arg-type]
    assert text.count("# TYPE kafka_network_requestmetrics_requests_total counter") == 1
    samples = _samples(text)
    n = "kafka_network_requestmetrics_requests_total"
    assert samples[(n, frozenset({("request", "Metadata"), ("server", "broker-0")}))] == 1
    assert samples[(n, frozenset({("request", "Metadata"), ("server", "broker-1")}))] == 2


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def test_endpoint_reads_each_registry_on_its_own_loop_and_closes_with_the_last():
    async def idle() -> None:
        pass

    threads = [LoopThread(f"test-loop-{i}") for i in range(2)]
    loops = [t.start(idle, 10) for t in threads]
    endpoint = MetricsEndpoint()
    regs = [Metrics(), Metrics()]
    name = MetricName.of("kafka.server", "BrokerTopicMetrics", "MessagesInPerSec")
    read_on: list[object] = []
    for i, reg in enumerate(regs):
        reg.meter(name).mark(10 + i)
        reg.gauge(
            MetricName.of("kafka.server", "ReplicaManager", "LeaderCount"),
            lambda: read_on.append(asyncio.get_running_loop()) or 1,
        )
    try:
        sources = [
            endpoint.add(MetricsSource(f"broker-{i}", reg, loop), "127.0.0.1", -1)
            for i, (reg, loop) in enumerate(zip(regs, loops, strict=True))
        ]
        port = endpoint.port
        assert port > 0 and sources[1].port == port
        status, content_type, text = _get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
        samples = _samples(text)
        n = "kafka_server_brokertopicmetrics_messagesin_total"
        assert samples[(n, frozenset({("server", "broker-0")}))] == 10
        assert samples[(n, frozenset({("server", "broker-1")}))] == 11
        assert sorted(map(id, read_on)) == sorted(map(id, loops))  # each on its own loop
        # and the process's own figures, as the JMX exporter adds the JVM's
        assert ("process_cpu_seconds_total", frozenset()) in samples

        status, _ct, body = _get(f"http://127.0.0.1:{port}/sd")
        assert status == 200 and json.loads(body)[0]["targets"] == [f"127.0.0.1:{port}"]
        assert _get(f"http://127.0.0.1:{port}/nope")[0] == 404

        # a server whose loop is gone is left out; the others are still served
        threads[1].stop(idle, 10)
        samples = _samples(_get(f"http://127.0.0.1:{port}/metrics")[2])
        assert (n, frozenset({("server", "broker-0")})) in samples
        assert (n, frozenset({("server", "broker-1")})) not in samples

        for source in sources:
            source.close()
        assert endpoint.port == 0
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
    finally:
        threads[0].stop(idle, 10)


def test_one_server_is_exposed_without_a_server_label():
    async def idle() -> None:
        pass

    thread = LoopThread("test-loop")
    loop = thread.start(idle, 10)
    endpoint = MetricsEndpoint()
    reg = Metrics()
    reg.meter(MetricName.of("kafka.server", "BrokerTopicMetrics", "BytesOutPerSec")).mark(5)
    try:
        source = endpoint.add(MetricsSource("broker-7", reg, loop), "127.0.0.1", -1)
        samples = _samples(_get(f"http://127.0.0.1:{source.port}/metrics")[2])
        assert samples[("kafka_server_brokertopicmetrics_bytesout_total", frozenset())] == 5
        source.close()
    finally:
        thread.stop(idle, 10)


def test_a_port_in_use_is_a_clear_error():
    import socket

    async def idle() -> None:
        pass

    thread = LoopThread("test-loop")
    loop = thread.start(idle, 10)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        endpoint = MetricsEndpoint()
        try:
            with pytest.raises(OSError, match="metrics.prometheus.port"):
                endpoint.add(MetricsSource("controller", Metrics(), loop), "127.0.0.1", port)
        finally:
            thread.stop(idle, 10)


def test_metrics_config_port_defaults_off():
    assert MetricsConfig().metrics_prometheus_port == 0


def test_percentiles_of_several_quantiles_merge_once_and_agree_with_one_at_a_time():
    import random

    from sparklog.metrics.stats import MetricConfig, Percentiles

    config = MetricConfig()
    rng = random.Random(31)
    for _ in range(100):
        stat = Percentiles()
        for _ in range(rng.randint(0, 40)):
            stat.record(config, rng.random() * rng.choice([1, 100, 10_000]), 1_000)
        quantiles = [0.5, 0.999, 0.0, 0.75, 1.0, 0.95, 0.3]
        together = stat.percentiles(config, quantiles, 1_000)
        alone = [stat.percentile(config, q, 1_000) for q in quantiles]
        assert [str(v) for v in together] == [str(v) for v in alone]


def test_a_big_registry_is_read_in_slices_letting_its_loop_serve_between():
    from sparklog.metrics import http_endpoint

    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        registry = Metrics()
        for i in range(3 * http_endpoint.SNAPSHOT_SLICE):
            registry.gauge(
                MetricName.of("kafka.log", "Log", "Size", {"partition": str(i)}), lambda: 1
            )
        ticks = 0

        async def other_work() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        worker = loop.create_task(other_work())
        await asyncio.sleep(0)
        before = ticks
        source = MetricsSource("broker-0", registry, loop)
        snapshot = await asyncio.wrap_future(http_endpoint._snapshot_on_loop(source, None))
        worker.cancel()
        return ticks - before, len(snapshot[0].samples)

    ran_between, samples = asyncio.run(main())
    assert samples == 3 * http_endpoint_slice()
    assert ran_between >= 2  # the loop ran other work between the slices


def http_endpoint_slice() -> int:
    from sparklog.metrics.http_endpoint import SNAPSHOT_SLICE

    return SNAPSHOT_SLICE


def test_connections_over_the_bound_are_answered_busy_at_once():
    import socket

    from sparklog.metrics.http_endpoint import MAX_HTTP_CONNECTIONS

    async def idle() -> None:
        pass

    thread = LoopThread("test-loop")
    loop = thread.start(idle, 10)
    endpoint = MetricsEndpoint()
    source = endpoint.add(MetricsSource("broker-0", Metrics(), loop), "127.0.0.1", -1)
    silent = [
        socket.create_connection(("127.0.0.1", source.port)) for _ in range(MAX_HTTP_CONNECTIONS)
    ]
    try:
        assert _get(f"http://127.0.0.1:{source.port}/metrics")[0] == 503
        for s in silent:
            s.close()
        silent = []
        status = 503
        while status == 503:  # until the endpoint saw the silent ones go
            status = _get(f"http://127.0.0.1:{source.port}/metrics")[0]
        assert status == 200
    finally:
        for s in silent:
            s.close()
        source.close()
        thread.stop(idle, 10)
