"""Quotas configured but not hit cost the Fetch path nothing: with 1,000 client-quota
entities the client does not match, the throttle stage hands the handler's `FileResponse`
(sendfile ranges) back untouched, asks for no loop timing and caps nothing; a client whose
quota is not reached keeps its `FileResponse` too (its bytes counted from the file ranges,
never read into memory)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from sparklog.broker.quotas import BrokerQuotas, ThrottleStage
from sparklog.metadata.quotas import ClientQuotaEntity, QuotasImage, quota_record
from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Metrics
from sparklog.metrics.stats import MetricConfig
from sparklog.protocol import codec, kio_build
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.authorization import stages_with
from sparklog.protocol.connection import Request, RequestContext
from sparklog.protocol.file_response import FileResponse, placeholder
from sparklog.protocol.pipeline import RequestPipeline
from sparklog.records.file_records import FileRecords, FileSlice

QUOTA_WINDOWS = MetricConfig(samples=11, time_window_ms=1000)
RECORD_BYTES = 4096


def others_quotas(count: int = 1000) -> QuotasImage:
    """`count` entities of other users and client ids (what bench_quotas configures)."""
    image = QuotasImage()
    for i in range(count):
        entity = ClientQuotaEntity.of(
            ({"user": f"user-{i}"}, {"client-id": f"app-{i}"})[i % 2]
            if i % 3
            else {"user": f"user-{i}", "client-id": f"app-{i}"}
        )
        for key in ("producer_byte_rate", "consumer_byte_rate", "request_percentage"):
            image.replay(quota_record(entity, key, 50.0 if key == "request_percentage" else 1e6))
    return image


def fetch_request(client_id: str = "consumer") -> Request:
    body = kio_build.build(
        codec.request_schema(ApiKey.FETCH, 12),
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": 50 * 2**20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    return Request(int(ApiKey.FETCH), 12, 1, client_id, body, 100, RequestContext())


def file_response(req: Request, segment: Path) -> FileResponse:
    """A Fetch response whose records are a range of `segment`, as `handle_fetch` builds."""
    key = placeholder(0)
    fd = os.open(segment, os.O_RDONLY)
    try:
        records = FileRecords((FileSlice(fd, 0, RECORD_BYTES),))
    finally:
        os.close(fd)
    partition = {
        "partition_index": 0,
        "error_code": 0,
        "high_watermark": 1,
        "last_stable_offset": 1,
        "log_start_offset": 0,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": key,
    }
    body = kio_build.response(
        req,
        {
            "error_code": 0,
            "session_id": 0,
            "responses": [{"topic": "t", "partitions": [partition]}],
        },
    )
    return FileResponse(body, {key: records})


def serve_fetch(image: QuotasImage, segment: Path, client_id: str) -> tuple[Request, Any, Metrics]:
    """One Fetch through a pipeline with the broker's throttle stage over `image`; the
    handler's FileResponse must come out of the pipeline as it went in."""
    metrics = Metrics()
    stage = ThrottleStage(BrokerQuotas(metrics, QUOTA_WINDOWS, lambda: image), metrics)
    req = fetch_request(client_id)
    built: list[FileResponse] = []

    async def handler(request: Request) -> Any:
        built.append(file_response(request, segment))
        return built[0]

    pipeline = RequestPipeline(handler, stages_with(stage))
    answered = asyncio.run(pipeline(req))
    assert answered is built[0], "the stage replaced the handler's FileResponse"
    return req, answered, metrics


def segment_file(tmp_path: Path) -> Path:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"r" * RECORD_BYTES)
    return path


def test_unmatched_quotas_leave_the_zero_copy_fetch_alone(tmp_path: Path) -> None:
    req, answered, metrics = serve_fetch(others_quotas(), segment_file(tmp_path), "consumer")
    assert isinstance(answered, FileResponse)
    (records,) = answered.records.values()
    assert not records.pieces[0].file.closed  # still to be sent by sendfile
    context = req.context
    assert (context.throttle_time_ms, context.time_handler, context.handler_ns) == (0, False, 0)
    assert context.fetch_max_bytes_cap is None
    # nothing recorded: no per-client sensor was made for a client no quota matches
    assert not [name for name in metrics.metrics() if name.type == "Fetch"]
    answered.close()


def test_a_quota_not_reached_keeps_the_file_response_and_counts_its_bytes(
    tmp_path: Path,
) -> None:
    image = others_quotas()
    image.replay(
        quota_record(ClientQuotaEntity.of({"client-id": "reader"}), "consumer_byte_rate", 1e9)
    )
    req, answered, metrics = serve_fetch(image, segment_file(tmp_path), "reader")
    assert isinstance(answered, FileResponse)
    (records,) = answered.records.values()
    assert not records.pieces[0].file.closed
    assert req.context.throttle_time_ms == 0
    rate = metrics.metric(
        MetricName.of("kafka.server", "Fetch", "byte-rate", {"user": "", "client-id": "reader"})
    )
    assert rate is not None and rate.value() > 0  # the file range's length was counted
    answered.close()
