"""The request pipeline: the one place where cross-cutting policy wraps every handler call.

Theory of operation. `KafkaServer` hands each decoded request to a `RequestPipeline`, which
runs its stages' `on_request` hooks in order, then the handler, then the stages'
`on_response` hooks in reverse order (the first stage sees the response last, as a servlet
filter chain or Kafka's `KafkaApis.handle` → `RequestChannel.sendResponse` path does). The
stages, in Kafka's order:

1. **authenticate** — is the connection's principal still good for this request? (KIP-368
   re-authentication, an expired session). The connection's own state machine
   (`ServerConnection`, pre-authentication → authenticated) already refuses anything but
   ApiVersions and the SASL handshake before authentication, as Kafka's
   `SaslServerAuthenticator` does. Today: a PLAINTEXT connection is authenticated as
   `User:ANONYMOUS` when it opens; this stage allows.
2. **authorize** — binds the authorizer to the request (`RequestContext.authorizer`), so that
   handlers and the response builders answer authorized operations through it
   (`authorized_operations`). Today: no authorizer, every supported operation.
3. **throttle** — quotas (KIP-13 bandwidth, KIP-124 request time, KIP-599 mutation rate) set
   `RequestContext.throttle_time_ms`, which every response builder writes as the response's
   `throttle_time_ms` (`throttle_time_ms(request)`); the server then mutes the connection
   for that long (KIP-219) or, for request versions before KIP-219, delays the answer
   (`api_versions.client_throttles`). Brokers: `broker.quotas.ThrottleStage`; elsewhere 0. A stage may
   ask for the handler's event-loop time (`RequestContext.time_handler` → `handler_ns`).
4. **measure** — request metrics (Kafka's `RequestMetrics`: time in queue, local, throttle,
   response send) around the handler (`protocol.request_metrics.RequestMetrics`); the
   server tells the stages when the response was written (`on_sent`).

A stage overrides `on_request` (return a response body to answer without calling the
handler: a refusal) and/or `on_response` (look at or replace the response); the pipeline
calls only the hooks a stage overrides, so today's no-op stages cost nothing per request.
Handlers never write `throttle_time_ms` or `authorized_operations` themselves: they state the
resource (`authorized_operations(request, ResourceType.TOPIC, name)`) and the pipeline's
context decides.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, cast

from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.connection import Request, RequestContext
from sparklog.security.acl import AUTHORIZED_OPERATIONS_OMITTED, AclOperation, ResourceType
from sparklog.security.audit import LOG_ONLY, AuditEvent
from sparklog.security.authorizer import authorized_operations as _authorized_operations

#: A handler returns the response body, or None when no response is due (Produce acks=0).
Handler = Callable[[Request], Awaitable[Any | None]]


class RequestStage:
    """One cross-cutting policy around every handler call; override what you need."""

    #: the stage's slot in the pipeline ("authenticate", "authorize", "throttle", "measure")
    name = "stage"

    def on_request(self, request: Request) -> Any | None:
        """Before the handler: None to go on, or the response body to answer with instead."""
        return None

    def on_response(self, request: Request, response: Any | None) -> Any | None:
        """After the handler (or a refusing stage): the response to send (None: no answer)."""
        return response

    def on_sent(self, request: Request, body: Any | None, start_ns: int, end_ns: int) -> None:
        """The server wrote the response `body` (None: none was due) from `start_ns` to
        `end_ns` (`time.monotonic_ns()`): Kafka's network thread completing the request."""


class AllowAuthenticated(RequestStage):
    """Authentication gate: lets every request of an authenticated connection through (the
    connection refuses unauthenticated ones itself)."""

    name = "authenticate"


class NoAuthorizer(RequestStage):
    """Authorization with no `authorizer.class.name`: everything is allowed, and a resource's
    authorized operations are all it supports (`RequestContext.authorizer` stays None)."""

    name = "authorize"


class NoQuotas(RequestStage):
    """Throttling with no quotas configured: throttle time 0, the channel is never muted."""

    name = "throttle"


class NoMetrics(RequestStage):
    """Request metrics: the hook point `metrics/` fills (Kafka's `RequestMetrics`)."""

    name = "measure"


def default_stages() -> list[RequestStage]:
    return [AllowAuthenticated(), NoAuthorizer(), NoQuotas(), NoMetrics()]


class RequestPipeline:
    """The handler wrapped in its ordered stages; call it with a request."""

    def __init__(self, handler: Handler, stages: Sequence[RequestStage] | None = None) -> None:
        self.handler = handler
        self.stages = list(default_stages() if stages is None else stages)
        names = [s.name for s in self.stages]
        assert len(set(names)) == len(names), f"stage names repeat: {names}"
        # only the hooks a stage overrides run
        self._before = [
            s.on_request for s in self.stages if type(s).on_request is not RequestStage.on_request
        ]
        self._after = [
            s.on_response
            for s in reversed(self.stages)
            if type(s).on_response is not RequestStage.on_response
        ]
        self._sent = [s.on_sent for s in self.stages if type(s).on_sent is not RequestStage.on_sent]
        #: whether a stage wants `on_sent` (the server then reads the clock around sends)
        self.measures = bool(self._sent)

    def stage(self, name: str) -> RequestStage:
        """The stage called `name` (KeyError naming the stages there are)."""
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(f"no stage {name!r} in the pipeline ({[s.name for s in self.stages]})")

    def with_stage(self, stage: RequestStage) -> RequestPipeline:
        """A pipeline with `stage` in place of the stage of the same name (or appended)."""
        stages = [stage if s.name == stage.name else s for s in self.stages]
        if stage not in stages:
            stages.append(stage)
        return RequestPipeline(self.handler, stages)

    async def __call__(self, request: Request) -> Any | None:
        if not self._before and not self._after:
            return await self.handler(request)
        response = None
        for hook in self._before:
            response = hook(request)
            if response is not None:
                break
        else:
            if request.context.time_handler:  # a stage asked (the request quota)
                response = await _LoopTimed(self.handler(request), request.context)
            else:
                response = await self.handler(request)
        for after in self._after:
            response = after(request, response)
        return response

    def on_sent(self, request: Request, body: Any | None, start_ns: int, end_ns: int) -> None:
        for sent in self._sent:
            sent(request, body, start_ns, end_ns)


class _LoopTimed:
    """Awaits a handler's coroutine step by step, adding the time each step held the loop to
    `context.handler_ns` (what Kafka's request quota charges: I/O thread time, here
    event-loop time; time suspended, waiting for replicas or in a purgatory, is free)."""

    __slots__ = ("_coro", "_context")

    def __init__(self, coro: Awaitable[Any | None], context: RequestContext) -> None:
        self._coro = coro
        self._context = context

    def __await__(self) -> Generator[Any, Any, Any | None]:
        steps = self._coro.__await__()
        context = self._context
        clock = time.perf_counter_ns
        value: Any = None
        error: BaseException | None = None
        while True:
            start = clock()
            try:
                yielded = steps.send(value) if error is None else steps.throw(error)
            except StopIteration as done:
                context.handler_ns += clock() - start
                return cast(Any, done.value)
            except BaseException:
                context.handler_ns += clock() - start
                raise
            context.handler_ns += clock() - start
            try:
                value = yield yielded
                error = None
            except BaseException as e:  # cancellation: pass it to the handler
                value, error = None, e


# -- response fields the pipeline owns --------------------------------------------------------


def throttle_time_ms(request: Request) -> int:
    """The `throttle_time_ms` every response to `request` carries (the throttle stage's
    decision; 0 without quotas). Response builders call this; handlers never write it."""
    return request.context.throttle_time_ms


#: The request flag asking for a resource type's authorized operations (Metadata v8+,
#: DescribeCluster, DescribeGroups v3+, ConsumerGroupDescribe); absent means not asked.
_INCLUDE_FLAGS = {
    ResourceType.TOPIC: "include_topic_authorized_operations",
    ResourceType.CLUSTER: "include_cluster_authorized_operations",
    ResourceType.GROUP: "include_authorized_operations",
}


def authorized_operations(
    request: Request, resource_type: ResourceType, name: str, *, include: bool | None = None
) -> int:
    """The `authorized_operations` bit field of one resource in the answer to `request`:
    omitted (INT32_MIN) unless the client asked (`include`; by default the request's own
    flag for the resource type), else what the request's authorizer allows its session
    (every supported operation without one)."""
    if include is None:
        include = bool(getattr(request.body, _INCLUDE_FLAGS[resource_type], False))
    if not include:
        return AUTHORIZED_OPERATIONS_OMITTED
    context = request.context
    return _authorized_operations(context.authorizer, context.session, resource_type, name)


def authorize(
    request: Request,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
    *,
    audit_denied: bool = True,
) -> bool:
    """Whether `request`'s session may perform `operation` on the literal resource
    (`resource_type`, `name`): True without an authorizer. Handlers call this for every
    check Kafka's "Operations and Resources on Protocols" table lists, and answer a refusal
    with the resource type's *_AUTHORIZATION_FAILED error. A denial is reported to the
    request's audit sink (unless `audit_denied` is false: Kafka's quiet checks, e.g. topics
    left out of an all-topics Metadata answer); a grant only with `audit.log.allowed`."""
    context = request.context
    authorizer = context.authorizer
    if authorizer is None:
        return True
    allowed = authorizer.authorize(context.session, operation, resource_type, name)
    if (not allowed and audit_denied) or (allowed and context.audit_allowed):
        session = context.session
        api = ApiKey(request.api_key).name if request.api_key in ApiKey._value2member_map_ else ""
        (context.audit or LOG_ONLY).record(
            AuditEvent(
                time_ms=int(time.time() * 1000),
                principal=str(session.principal),
                client_address=session.client_address,
                listener=session.listener_name,
                api=api or str(request.api_key),
                resource_type=resource_type.name,
                resource_name=name,
                operation=operation.name,
                decision="ALLOWED" if allowed else "DENIED",
                node_id=context.node_id,
            )
        )
    return allowed
