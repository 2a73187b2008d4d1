"""The measure stage (Kafka's RequestMetrics) on a real KafkaServer over a socket, error
counts of kio responses, and `sparklog.metrics.enabled=false` leaving it out."""

from __future__ import annotations

import asyncio
import struct

from sparklog.errors import TopicAlreadyExistsError
from sparklog.metrics.config import MetricsConfig
from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Metrics
from sparklog.protocol import kio_build
from sparklog.protocol.api_versions import BROKER_APIS, ApiKey
from sparklog.protocol.codec import EncodedBody
from sparklog.protocol.pipeline import RequestPipeline
from sparklog.protocol.request_metrics import RequestMetrics, error_codes, request_name
from sparklog.protocol.server import KafkaServer
from sparklog.protocol.server_lifecycle import ServerLifecycle


def test_request_names_are_kafkas():
    assert request_name(ApiKey.API_VERSIONS) == "ApiVersions"
    assert request_name(ApiKey.OFFSET_FOR_LEADER_EPOCH) == "OffsetForLeaderEpoch"
    assert request_name(ApiKey.DESCRIBE_CLIENT_QUOTAS) == "DescribeClientQuotas"


def test_error_codes_count_every_entity_of_a_kio_response():
    from sparklog.protocol import codec

    cls = codec.response_schema(ApiKey.CREATE_TOPICS, 7)
    topic = {"num_partitions": 1, "replication_factor": 1, "configs": [], "error_message": None}
    response = kio_build.build(
        cls,
        {
            "throttle_time": 0,
            "topics": [
                {"name": "a", "topic_id": None, "error_code": 0, **topic},
                {
                    "name": "b",
                    "topic_id": None,
                    "error_code": TopicAlreadyExistsError.code,
                    **topic,
                },
                {"name": "c", "topic_id": None, "error_code": 0, **topic},
            ],
        },
    )
    assert error_codes(response) == {0: 2, TopicAlreadyExistsError.code: 1}
    assert error_codes(EncodedBody(b"", False, {0: 3})) == {0: 3}
    assert error_codes(None) == {}


def test_every_request_is_counted_and_timed_once_its_response_was_written():
    metrics = Metrics()

    async def handler(request):
        return kio_build.response(request, {"error_code": 0, "api_keys": []})

    async def main() -> None:
        server = KafkaServer(handler, BROKER_APIS, stages=[RequestMetrics(metrics)])
        await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            for correlation_id in range(3):  # ApiVersions v3, flexible header with no tags
                body = struct.pack(">hhih", ApiKey.API_VERSIONS, 3, correlation_id, -1)
                body += b"\x00" + b"\x01\x01\x00"  # header tags; client software name/version
                writer.write(struct.pack(">i", len(body)) + body)
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                await reader.readexactly(size)
            writer.close()
        finally:
            await server.stop()

    asyncio.run(main())
    requests = metrics.metric(
        MetricName.of(
            "kafka.network",
            "RequestMetrics",
            "RequestsPerSec",
            {"request": "ApiVersions", "version": "3"},
        )
    )
    assert requests is not None and requests.value() == 3
    total = metrics.histogram(
        MetricName.of("kafka.network", "RequestMetrics", "TotalTimeMs", {"request": "ApiVersions"})
    )
    assert total.count == 3 and total.sum > 0
    errors = metrics.metric(
        MetricName.of(
            "kafka.network",
            "RequestMetrics",
            "ErrorsPerSec",
            {"request": "ApiVersions", "error": "NONE"},
        )
    )
    assert errors is not None and errors.value() == 3


class _Server(ServerLifecycle):
    def __init__(self, enabled: bool) -> None:
        super().__init__()
        self.metrics = Metrics()
        self.metrics_config = MetricsConfig(sparklog_metrics_enabled=enabled)


def test_metrics_disabled_leaves_the_measure_stage_out():
    async def handler(request):
        return None

    assert _Server(False)._measure_stages() == ()
    (stage,) = _Server(True)._measure_stages()
    assert isinstance(stage, RequestMetrics)
    assert RequestPipeline(handler, [stage]).measures
    assert not RequestPipeline(handler).measures  # the default stages read no clock
