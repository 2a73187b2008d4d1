"""The process's Prometheus endpoint: `GET /metrics` (text format 0.0.4) for every server
registry of this process, and `GET /sd` (Prometheus HTTP service discovery) on the driver.

Theory of operation. A process has one endpoint (`metrics.prometheus.port`, 0 = off, -1 = any
free port), however many servers it hosts (the driver's controller and coordinators, an
embedded cluster's brokers, brokers of Spark tasks sharing an executor). Every server adds
its registry when it starts (`add_server`) from its own event loop, and removes it when it
stops; the endpoint binds when the first server asks for a port and closes when the last
server left. The endpoint's HTTP server runs on its own small event loop thread
("sparklog-metrics-http") and never reads a registry itself: a scrape asks each server's loop
for a snapshot of its registry (`prometheus.families`, run by `call_soon_threadsafe`), so a
registry is only ever read by the loop that records into it, and one stuck server costs the
scrape that server's metrics only (after `SNAPSHOT_TIMEOUT_S`), not the answer.

When the process hosts more than one server, each server's samples carry a `server` label
(`broker-1`, `controller`, `group-coordinator`), as names would collide otherwise (every
server has `RequestMetrics`); a process with one server (a broker in a Spark task) exposes
exactly the JMX exporter's names and labels.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from sparklog.metrics import prometheus
from sparklog.metrics.config import MetricsConfig
from sparklog.metrics.registry import Metrics

logger = logging.getLogger(__name__)

#: A scrape waits this long for each server's snapshot, then answers without it.
SNAPSHOT_TIMEOUT_S = 5.0
#: A request line and headers longer than this, or slower than the timeout, are refused.
_MAX_REQUEST_HEAD_BYTES = 16 * 1024
_REQUEST_TIMEOUT_S = 10.0
#: Connections served at once; more are answered 503 at once (a scrape storm must not pile up
#: snapshots on the servers' loops).
MAX_HTTP_CONNECTIONS = 16


@dataclass(eq=False)
class MetricsSource:
    """One server's registry, read on its own loop."""

    name: str  # "broker-1", "controller", "group-coordinator"
    registry: Metrics
    loop: asyncio.AbstractEventLoop
    endpoint: MetricsEndpoint | None = field(default=None, repr=False)
    #: what `/sd` lists for this server (Prometheus HTTP SD target groups), called on `loop`
    #: (the controller: its brokers' endpoints)
    service_discovery: Callable[[], list[dict[str, Any]]] | None = None

    @property
    def address(self) -> str:
        """`host:port` of the process endpoint ("" when not serving)."""
        endpoint = self.endpoint
        return f"{endpoint.host}:{endpoint.port}" if endpoint is not None and endpoint.port else ""

    @property
    def port(self) -> int:
        """The process endpoint's bound port (0: not serving)."""
        return self.endpoint.port if self.endpoint is not None else 0

    def close(self) -> None:
        """Stop exposing this registry (the endpoint closes with its last source)."""
        if self.endpoint is not None:
            self.endpoint.remove(self)
            self.endpoint = None


class MetricsEndpoint:
    """The HTTP server of one process (module doc); `process_endpoint()` is the instance."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sources: list[MetricsSource] = []
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self.host = ""
        self.port = 0
        self.scrapes = 0
        self._open_connections = 0  # on the endpoint's loop only

    # -- sources -------------------------------------------------------------------------

    def add(
        self, source: MetricsSource, host: str, port: int, *, any_port_if_taken: bool = False
    ) -> MetricsSource:
        """Expose `source`; bind (`host`, `port`: -1 any free one) unless bound already or
        `port` is 0. Safe from any thread; blocks until bound. `any_port_if_taken`: a port in
        use by another process is replaced by a free one (a broker task: executors sharing a
        host cannot share the port; the driver's `/sd` lists where each one went)."""
        with self._lock:
            self._sources.append(source)
            source.endpoint = self
            if port == 0 or self._thread is not None:
                if port not in (0, -1, self.port) and self._thread is not None:
                    logger.warning(
                        "%s asks for metrics.prometheus.port=%d, but this process serves its "
                        "metrics on %s:%d already (one endpoint per process)",
                        source.name,
                        port,
                        self.host,
                        self.port,
                    )
                return source
            try:
                try:
                    self._bind(host, 0 if port == -1 else port)
                except OSError as e:
                    if not any_port_if_taken:
                        raise
                    logger.warning("%s; serving metrics on a free port instead", e)
                    self._bind(host, 0)
            except OSError:
                self._sources.remove(source)
                source.endpoint = None
                raise
        return source

    def remove(self, source: MetricsSource) -> None:
        with self._lock:
            if source in self._sources:
                self._sources.remove(source)
            if self._sources:
                return
            thread, loop = self._thread, self._loop
            self._thread = self._loop = self._server = None
            self.port = 0
        # joined outside the lock: a scrape under way reads the sources under it
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            if thread is not threading.current_thread():
                thread.join(5)

    def sources(self) -> list[MetricsSource]:
        with self._lock:
            return list(self._sources)

    # -- the HTTP thread ------------------------------------------------------------------

    def _bind(self, host: str, port: int) -> None:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            try:
                server = loop.run_until_complete(
                    asyncio.start_server(self._serve, host, port, reuse_address=True)
                )
            except BaseException as e:  # noqa: BLE001 - handed to the binding thread
                failure.append(e)
                loop.close()
                ready.set()
                return
            self._loop, self._server = loop, server
            self.host = host
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            try:
                loop.run_forever()
            finally:
                server.close()
                loop.run_until_complete(server.wait_closed())
                loop.close()

        thread = threading.Thread(target=run, name="sparklog-metrics-http", daemon=True)
        thread.start()
        ready.wait()
        if failure:
            thread.join()
            raise OSError(
                f"cannot serve metrics on {host}:{port} ({failure[0]}): set "
                "metrics.prometheus.port to a free port, or -1 for any"
            ) from failure[0]
        self._thread = thread
        logger.info("serving Prometheus metrics on http://%s:%d/metrics", self.host, self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._open_connections >= MAX_HTTP_CONNECTIONS:
            status, content_type, body = "503 Service Unavailable", "text/plain", b"busy\n"
        else:
            self._open_connections += 1
            try:
                status, content_type, body = await self._read_and_answer(reader)
            except ConnectionError:
                writer.close()
                return
            finally:
                self._open_connections -= 1
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

    async def _read_and_answer(self, reader: asyncio.StreamReader) -> tuple[str, str, bytes]:
        try:
            async with asyncio.timeout(_REQUEST_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError):
            return "400 Bad Request", "text/plain", b"bad request\n"
        return await self._answer(head)

    async def _answer(self, head: bytes) -> tuple[str, str, bytes]:
        if len(head) > _MAX_REQUEST_HEAD_BYTES:
            return "431 Request Header Fields Too Large", "text/plain", b""
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3 or parts[0] not in (b"GET", b"HEAD"):
            return "405 Method Not Allowed", "text/plain", b"GET /metrics or /sd\n"
        path = parts[1].split(b"?", 1)[0]
        if path in (b"/metrics", b"/"):
            self.scrapes += 1
            body = await self.scrape()
            return "200 OK", CONTENT_TYPE_PLAIN_0_0_4, body if parts[0] == b"GET" else b""
        if path == b"/sd":
            return "200 OK", "application/json", await self._service_discovery()
        return "404 Not Found", "text/plain", b"not found: GET /metrics or /sd\n"

    async def scrape(self) -> bytes:
        """The text exposition of every source (on the endpoint's loop)."""
        sources = self.sources()
        labelled = len(sources) > 1
        waits = [_snapshot_on_loop(s, {"server": s.name} if labelled else None) for s in sources]
        snapshots = []
        for source, wait in zip(sources, waits, strict=True):
            try:
                async with asyncio.timeout(SNAPSHOT_TIMEOUT_S):
                    snapshots.append(await asyncio.wrap_future(wait))
            except Exception as e:  # noqa: BLE001 - a stuck or stopped server is left out
                logger.warning("metrics of %s left out of this scrape: %r", source.name, e)
        snapshots.append(list(_PROCESS.collect()))
        return generate_latest(prometheus.Snapshot(prometheus.merge(snapshots)))

    async def _service_discovery(self) -> bytes:
        """Prometheus HTTP SD: this endpoint, then what each server adds (the controller: the
        brokers' endpoints), each asked on its own loop; an address listed once."""
        sources = self.sources()
        groups: list[dict[str, Any]] = []
        if self.port:
            groups.append({"targets": [f"{self.host}:{self.port}"], "labels": {}})
        seen = {f"{self.host}:{self.port}"}
        for source in sources:
            if source.service_discovery is None:
                continue
            try:
                async with asyncio.timeout(SNAPSHOT_TIMEOUT_S):
                    more = await asyncio.wrap_future(_on_loop(source, source.service_discovery))
            except Exception as e:  # noqa: BLE001 - a stuck or stopped server is left out
                logger.warning("service discovery of %s left out: %r", source.name, e)
                continue
            for group in more:
                targets = [t for t in group["targets"] if t not in seen]
                seen.update(targets)
                if targets:
                    groups.append({**group, "targets": targets})
        return json.dumps(groups).encode()


#: A snapshot reads this many metrics, then lets its server's loop run (10,000 partitions'
#: gauges must not hold a broker's requests for the whole scrape).
SNAPSHOT_SLICE = 128


def _snapshot_on_loop(
    source: MetricsSource, labels: Mapping[str, str] | None
) -> concurrent.futures.Future[Any]:
    """The families of `source`'s registry, read on its own loop in slices."""

    async def take() -> list[Any]:
        builder = prometheus.FamilyBuilder(source.registry, labels)
        for i, metric in enumerate(source.registry):
            builder.add(metric)
            if i % SNAPSHOT_SLICE == SNAPSHOT_SLICE - 1:
                await asyncio.sleep(0)
        return builder.families()

    coro = take()
    try:
        return asyncio.run_coroutine_threadsafe(coro, source.loop)
    except RuntimeError as e:  # the loop closed
        coro.close()
        failed: concurrent.futures.Future[Any] = concurrent.futures.Future()
        failed.set_exception(e)
        return failed


def _on_loop(source: MetricsSource, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
    """`fn()` run on `source`'s own loop."""
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def take() -> None:
        if done.set_running_or_notify_cancel():
            try:
                done.set_result(fn())
            except BaseException as e:  # noqa: BLE001 - to the scrape
                done.set_exception(e)

    try:
        source.loop.call_soon_threadsafe(take)
    except RuntimeError as e:  # the loop closed
        done.set_exception(e)
    return done


_PROCESS_ENDPOINT = MetricsEndpoint()

#: The process's own figures (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
#: `python_gc_*`, `python_info`: what the JMX exporter's JVM metrics are to a Kafka broker),
#: read from /proc and the interpreter, not from any server.
_PROCESS = CollectorRegistry(auto_describe=False)
ProcessCollector(registry=_PROCESS)
GCCollector(registry=_PROCESS)
PlatformCollector(registry=_PROCESS)


def process_endpoint() -> MetricsEndpoint:
    return _PROCESS_ENDPOINT


def add_server(
    name: str,
    registry: Metrics,
    config: MetricsConfig,
    loop: asyncio.AbstractEventLoop,
    *,
    any_port_if_taken: bool = False,
) -> MetricsSource:
    """Expose a starting server's registry through the process's endpoint (bound if
    `config.metrics_prometheus_port` asks for it); `close()` the answer when it stops."""
    return _PROCESS_ENDPOINT.add(
        MetricsSource(name, registry, loop),
        config.metrics_prometheus_host,
        config.metrics_prometheus_port,
        any_port_if_taken=any_port_if_taken,
    )


def metrics_url(port: int, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{port}/metrics"
