"""The request pipeline's measure stage: Kafka's `RequestMetrics` (`RequestChannel.scala`)
for every request a broker, the controller or a coordinator serves.

Per request type (`request=<Kafka's ApiKeys name>`), in `kafka.network:type=RequestMetrics`:

- `RequestsPerSec` (counter, also per `version`), `ErrorsPerSec` (counter per `error`, every
  error code of the response counted as Kafka's `errorCounts` does, `NONE` included);
- summaries in ms: `RequestQueueTimeMs` (whole request received → the handler starts; here
  the wait for a `queued.max.requests` slot and the loop), `LocalTimeMs` (the handler, less
  its remote time), `RemoteTimeMs` (time the handler waited on others: purgatory, the
  controller, replicas: `RequestContext.remote_ns`, which those waits add to),
  `ThrottleTimeMs` (the throttle stage's decision), `ResponseQueueTimeMs` (handler done →
  the response starts going out: encoding waits for the loop), `ResponseSendTimeMs`
  (writing it, `sendfile` for Fetch, waiting for the socket to drain), `TotalTimeMs`;
- `RequestBytes` (summary of request sizes).

A Fetch is counted as `Fetch` and as `FetchConsumer` or `FetchFollower` (a replica id ≥ 0),
as Kafka does. The metrics of one (request, version) are looked up once and kept, so a
request costs a few clock reads, two counter additions and eight histogram updates.
`KafkaServer` calls `on_sent` once the response is written (or at once when none is due:
Produce acks=0), as Kafka's network thread completes the request's metrics.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import time
import types
import typing
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.metrics.metric import MetricName
from sparklog.metrics.registry import Histogram, Meter, Metrics
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.codec import EncodedBody
from sparklog.protocol.connection import Request, RequestContext
from sparklog.protocol.pipeline import RequestStage

_DOMAIN = "kafka.network"
_TYPE = "RequestMetrics"
_NS_PER_MS = 1_000_000.0


def request_name(api_key: int) -> str:
    """Kafka's `ApiKeys.name` (`ApiVersions`, `OffsetForLeaderEpoch`, ...)."""
    try:
        key = ApiKey(api_key)
    except ValueError:
        return f"Unknown{api_key}"
    return "".join(part.capitalize() for part in key.name.split("_"))


class _ApiMetrics:
    """The metrics of one request name (and the RequestsPerSec of one version)."""

    __slots__ = (
        "metrics",
        "request",
        "requests",
        "errors",
        "queue",
        "local",
        "remote",
        "throttle",
        "response_queue",
        "response_send",
        "total",
        "size",
    )

    def __init__(self, metrics: Metrics, request: str, version: int) -> None:
        def histogram(name: str) -> Histogram:
            return metrics.histogram(MetricName.of(_DOMAIN, _TYPE, name, {"request": request}))

        self.metrics = metrics
        self.request = request
        self.requests = metrics.meter(
            MetricName.of(
                _DOMAIN, _TYPE, "RequestsPerSec", {"request": request, "version": str(version)}
            )
        )
        self.errors: dict[int, Meter] = {}
        self.queue = histogram("RequestQueueTimeMs")
        self.local = histogram("LocalTimeMs")
        self.remote = histogram("RemoteTimeMs")
        self.throttle = histogram("ThrottleTimeMs")
        self.response_queue = histogram("ResponseQueueTimeMs")
        self.response_send = histogram("ResponseSendTimeMs")
        self.total = histogram("TotalTimeMs")
        self.size = histogram("RequestBytes")

    def error(self, code: int) -> Meter:
        meter = self.errors.get(code)
        if meter is None:
            name = ErrorCode(code).name.upper() if code in _ERROR_CODES else str(code)
            meter = self.errors[code] = self.metrics.meter(
                MetricName.of(
                    _DOMAIN, _TYPE, "ErrorsPerSec", {"request": self.request, "error": name}
                )
            )
        return meter


_ERROR_CODES = frozenset(int(c) for c in ErrorCode)


class RequestMetrics(RequestStage):
    """The "measure" stage of a server's pipeline, recording into `metrics`."""

    name = "measure"

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._apis: dict[tuple[int, int, bool], tuple[_ApiMetrics, ...]] = {}
        self._by_name: dict[tuple[str, int], _ApiMetrics] = {}

    def on_request(self, request: Request) -> Any | None:
        context = request.context
        context.dequeued_ns = time.monotonic_ns()
        _HANDLING.set(context)  # the handler's task: `remote_wait` finds the request here
        return None

    def on_response(self, request: Request, response: Any | None) -> Any | None:
        request.context.handled_ns = time.monotonic_ns()
        return response

    def on_sent(self, request: Request, body: Any | None, start_ns: int, end_ns: int) -> None:
        """The response left at `end_ns` (writing began at `start_ns`): record the request."""
        context = request.context
        received_ns = context.received_ns or context.dequeued_ns
        dequeued_ns = context.dequeued_ns or received_ns
        handled_ns = context.handled_ns or start_ns
        remote_ns = min(context.remote_ns, handled_ns - dequeued_ns)
        queue_ms = (dequeued_ns - received_ns) / _NS_PER_MS
        local_ms = (handled_ns - dequeued_ns - remote_ns) / _NS_PER_MS
        remote_ms = remote_ns / _NS_PER_MS
        response_queue_ms = (start_ns - handled_ns) / _NS_PER_MS
        send_ms = (end_ns - start_ns) / _NS_PER_MS
        total_ms = (end_ns - received_ns) / _NS_PER_MS
        throttle_ms = context.throttle_time_ms
        size = request.size_bytes
        now_ms = self.metrics.now_ms()  # one clock read for the eight histograms
        codes = error_codes(body)
        for api in self._apis_of(request):
            api.requests.mark()
            api.size.update(size, now_ms)
            api.queue.update(queue_ms, now_ms)
            api.local.update(local_ms, now_ms)
            api.remote.update(remote_ms, now_ms)
            api.throttle.update(throttle_ms, now_ms)
            api.response_queue.update(response_queue_ms, now_ms)
            api.response_send.update(send_ms, now_ms)
            api.total.update(total_ms, now_ms)
            for code, n in codes.items():
                api.error(code).mark(n)

    def _apis_of(self, request: Request) -> tuple[_ApiMetrics, ...]:
        """The metrics a request counts in (looked up once per api, version and, for Fetch,
        consumer or follower)."""
        api_key, version = request.api_key, request.api_version
        follower = api_key == ApiKey.FETCH and _fetch_replica_id(request.body) >= 0
        key = (api_key, version, follower)
        apis = self._apis.get(key)
        if apis is None:
            apis = self._apis[key] = self._new_apis(api_key, version, follower)
        return apis

    def _new_apis(self, api_key: int, version: int, follower: bool) -> tuple[_ApiMetrics, ...]:
        main = self._api(request_name(api_key), version)
        if api_key != ApiKey.FETCH:
            return (main,)
        return (main, self._api("FetchFollower" if follower else "FetchConsumer", version))

    def _api(self, name: str, version: int) -> _ApiMetrics:
        api = self._by_name.get((name, version))
        if api is None:
            api = self._by_name[(name, version)] = _ApiMetrics(self.metrics, name, version)
        return api


def _fetch_replica_id(body: Any) -> int:
    replica_id = getattr(body, "replica_id", -1)
    state = getattr(body, "replica_state", None)
    if state is not None and replica_id < 0:  # v15+ (KIP-903)
        replica_id = getattr(state, "replica_id", -1)
    return int(replica_id)


# -- remote time ------------------------------------------------------------------------------

#: The context of the request the current task is handling (set by the measure stage).
_HANDLING: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar(
    "sparklog_handling", default=None
)


@contextlib.contextmanager
def remote_wait() -> Iterator[None]:
    """Count the time inside as the handled request's RemoteTimeMs (a wait on others:
    Kafka's purgatory — acks=all for the followers, a fetch for `fetch.min.bytes`). Outside a
    measured request it costs two clock reads and counts nothing."""
    began_ns = time.monotonic_ns()
    try:
        yield
    finally:
        context = _HANDLING.get()
        if context is not None:
            context.remote_ns += time.monotonic_ns() - began_ns


# -- the error counts of a response (Kafka's AbstractResponse.errorCounts) -------------------


_NO_ERRORS: Mapping[int, int] = {}


def error_codes(body: Any) -> Mapping[int, int]:
    """Every error code in a response, counted (top-level and per topic/partition/...)."""
    if isinstance(body, EncodedBody):  # written by a hot handler, which counted them
        return body.error_counts or _NO_ERRORS
    body = getattr(body, "body", body)  # a FileResponse's kio body
    counts: dict[int, int] = {}
    if body is not None and dataclasses.is_dataclass(body):
        _count(body, counts)
    return counts


def _count(entity: Any, counts: dict[int, int]) -> None:
    cls: Any = type(entity)
    codes, children = _plan(cls)
    for name in codes:
        code = getattr(entity, name)
        if code is not None:
            code = int(code)
            counts[code] = counts.get(code, 0) + 1
    for name in children:
        for child in getattr(entity, name) or ():
            _count(child, counts)


@cache
def _plan(cls: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The error-code fields of a kio entity class, and its fields of nested entities."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - not a kio entity: nothing to count
        return (), ()
    codes, children = [], []
    for f in dataclasses.fields(cls):
        hint = _unoptional(hints.get(f.name))
        if hint is ErrorCode:
            codes.append(f.name)
        elif typing.get_origin(hint) is tuple:
            args = typing.get_args(hint)
            if args and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
                children.append(f.name)
    return tuple(codes), tuple(children)


def _unoptional(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else Any
    return hint
