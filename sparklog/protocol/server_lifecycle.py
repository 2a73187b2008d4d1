"""The lifecycle the three servers share (broker, controller, group coordinator): one listener
and some background tasks on one event loop, started and stopped in a fixed order, hosted either
on a caller's loop or on a loop thread of their own.

A server implements `async start()` (bind the listener, then spawn its background tasks: it
serves once `start()` returned) and `async shutdown()` (stop in reverse: its own order of
listener, tasks and state). This base gives each the same plumbing, so the three servers start,
stop and are hosted alike (Kafka's servers share the `startup()` / `shutdown()` /
`awaitShutdown()` shape the same way):

- `start_in_thread()` / `stop()`: run the server on a `LoopThread` of its own (the driver's
  controller and coordinator, brokers in tests and the embedded cluster); `stop()` runs
  `shutdown()` there and joins the thread even if the shutdown failed;
- `call_in_loop(fn)`: `fn()` on the server's loop, from any thread;
- `_enter_loop()`: what `start()` does first, recording the loop it runs on;
- `_bind_listener(...)`: build and bind a listening `KafkaServer` (port 0: the port the OS
  chose) for one listener and its `ListenerSecurity`; the broker builds its listeners, with its connection limits, at construction and
  binds it in `start()` after claiming its data dir;
- `_spawn(coro, name)` / `_cancel_tasks()`: background tasks owned by the server, a failed
  one reported to `_on_task_failed`, all cancelled and awaited at shutdown.

Thread-safety: `start_in_thread`, `stop` and `call_in_loop` from any thread but the server's
loop; everything else on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Self, TypeVar

from sparklog.metrics.config import MetricsConfig
from sparklog.metrics.http_endpoint import MetricsSource, add_server
from sparklog.protocol.authorization import authorize_stage, stages_with
from sparklog.protocol.loop_thread import LoopThread
from sparklog.protocol.pipeline import RequestStage
from sparklog.protocol.request_metrics import RequestMetrics
from sparklog.protocol.server import KafkaServer
from sparklog.protocol.socket_server_metrics import register_loop_metrics
from sparklog.security.listeners import ListenerSecurity

logger = logging.getLogger(__name__)

T = TypeVar("T")


class ServerLifecycle:
    """Base of a server with one loop, one listener and background tasks (see module doc)."""

    #: the name of the loop thread `start_in_thread` starts
    thread_name = "sparklog-server"
    #: how long `start_in_thread` waits for `start()` by default
    start_timeout_s: float | None = 30.0
    #: a `metrics.prometheus.port` taken by another process is replaced by a free one (a
    #: broker task: executors on one host cannot share it); else starting fails
    metrics_port_fallback = False

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread_id: int | None = None
        self._runner: LoopThread | None = None
        self._tasks: list[asyncio.Task] = []
        #: this server's registry as the process's Prometheus endpoint exposes it
        self.metrics_source: MetricsSource | None = None
        #: the measure stage of its listeners (None: `sparklog.metrics.enabled=false`)
        self.request_metrics: RequestMetrics | None = None

    async def start(self) -> None:
        raise NotImplementedError

    async def shutdown(self) -> None:
        raise NotImplementedError

    # -- on the loop ------------------------------------------------------------------------

    def _enter_loop(self) -> asyncio.AbstractEventLoop:
        """Record the running loop as this server's (the first thing `start()` does), and
        expose the server's registry (`self.metrics`) through the process's Prometheus
        endpoint (`metrics.http_endpoint`: bound when `metrics.prometheus.port` asks)."""
        loop = self._loop = asyncio.get_running_loop()
        self._loop_thread_id = threading.get_ident()
        metrics = getattr(self, "metrics", None)
        if metrics is not None and self.metrics_source is None:
            name = self.thread_name.removeprefix("sparklog-")
            config = getattr(self, "metrics_config", None) or MetricsConfig()
            self.metrics_source = add_server(
                name, metrics, config, loop, any_port_if_taken=self.metrics_port_fallback
            )
            if config.sparklog_metrics_enabled:  # off: not even two clock reads per turn
                register_loop_metrics(metrics, loop)
        return loop

    def _close_metrics(self) -> None:
        """Stop exposing this server's registry (its shutdown does this)."""
        source, self.metrics_source = self.metrics_source, None
        if source is not None:
            source.close()

    @property
    def metrics_port(self) -> int:
        """The port this process serves `/metrics` on (0: none): `metrics.prometheus.port`
        of the first server of the process that asked for one."""
        return self.metrics_source.port if self.metrics_source is not None else 0

    def _measure_stages(self) -> tuple[RequestStage, ...]:
        """The measure stage of this server's listeners (Kafka's `RequestMetrics` into
        `self.metrics`), kept as `self.request_metrics`; none with
        `sparklog.metrics.enabled=false`."""
        config = getattr(self, "metrics_config", None)
        if config is None or not config.sparklog_metrics_enabled:
            return ()
        if self.request_metrics is None:
            self.request_metrics = RequestMetrics(getattr(self, "metrics"))  # noqa: B009
        return (self.request_metrics,)

    async def _bind_listener(
        self,
        handler: Callable[[Any], Awaitable[Any]],
        apis: Any,
        *,
        host: str,
        port: int,
        name: str,
        security: ListenerSecurity | None = None,
        **limits: Any,
    ) -> KafkaServer:
        """Bind a listener on (`host`, `port`) serving `apis` with `handler`, and return it
        listening: its `port` is the bound one (port 0 asks the OS for a free one).
        `security`: which listener it is and how its connections are secured (None: a
        PLAINTEXT listener named PLAINTEXT)."""
        server = KafkaServer(
            handler, apis, host=host, port=port, name=name, security=security, **limits
        )
        metrics = getattr(self, "metrics", None)
        if metrics is not None:
            server.bind_metrics(metrics)
        await server.start()
        return server

    def _authorized_stages(
        self, props: Mapping[str, object] | None, image: Callable[[], Any], node_id: int
    ) -> list[RequestStage]:
        """The pipeline stages of this server's listeners with its authorize stage
        (`authorizer.class.name`, fed from `image()`'s ACLs), kept as `self.authorization`,
        bound to the server's `audit` sink and `audit_config` (`audit.log.allowed`)."""
        audit_config = getattr(self, "audit_config", None)
        self.authorization = authorize_stage(
            props,
            image,
            node_id=node_id,
            audit=getattr(self, "audit", None),
            audit_allowed=None if audit_config is None else audit_config.audit_log_allowed,
        )
        return stages_with(self.authorization, *self._measure_stages())

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task:
        """Run `coro` as a background task of this server, cancelled by `_cancel_tasks`."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        task.add_done_callback(self._task_done)
        self._tasks.append(task)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        error = None if task.cancelled() else task.exception()
        if error is not None:
            self._on_task_failed(task, error)

    def _on_task_failed(self, task: asyncio.Task, error: BaseException) -> None:
        """A background task ended with `error` (default: log it)."""
        logger.error("%s failed: %r", task.get_name(), error)

    async def _cancel_tasks(self) -> None:
        """Cancel every background task (but the calling one) and wait until each ended."""
        current = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not current]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    # -- hosting on a loop thread -----------------------------------------------------------

    def start_in_thread(self, timeout_s: float | None = None) -> Self:
        """Run the server on a loop thread of its own; returns once `start()` returned
        (raising what it raised), waiting at most `timeout_s` (default `start_timeout_s`)."""
        wait_s = self.start_timeout_s if timeout_s is None else timeout_s
        return self._start_on_thread(self.start, wait_s)

    def _start_on_thread(
        self, start: Callable[[], Coroutine[Any, Any, None]], wait_s: float | None
    ) -> Self:
        assert self._runner is None, f"{self!r} already has a loop thread"
        runner = LoopThread(self.thread_name)
        self._runner = runner
        try:
            runner.start(start, wait_s)
        except BaseException:
            if runner.loop is None or runner.loop.is_closed():
                self._runner = None  # the start failed and its thread ended; a timeout keeps it
            raise
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Shut down a server hosted by `start_in_thread` and join its thread (a server
        started on a caller's loop is shut down there, with `await shutdown()`)."""
        self._stop_on_thread(self.shutdown, timeout_s)

    def _stop_on_thread(
        self, shutdown: Callable[[], Coroutine[Any, Any, None]], timeout_s: float
    ) -> bool:
        """Run `shutdown()` on the loop thread and join it; False when there is none."""
        runner, self._runner = self._runner, None
        if runner is None:
            return False
        runner.stop(shutdown, timeout_s)
        return True

    def call_in_loop(self, fn: Callable[[], T], timeout_s: float = 30.0) -> T:
        """`fn()` run on the server's loop (tests use it to look at or poke loop-owned state
        safely)."""
        loop = self._loop
        assert loop is not None, f"{self!r} runs no loop"

        async def call() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout_s)
