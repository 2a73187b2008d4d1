"""The asyncio edge of a Kafka-protocol server (broker or controller).

Moves bytes between sockets and `ServerConnection`s and hands each decoded request to an async
handler. Per connection, requests are handled one at a time and answered in order, as Kafka's
network layer mutes a channel while a request is in flight. A `ProtocolError` from one peer
closes that connection only; everything else keeps serving.

Every request goes to its handler through one `RequestPipeline` (`sparklog.protocol.pipeline`,
the one call in `_serve_connection`): the ordered stages authenticate → authorize → throttle
→ measure run around each handler call there and nowhere else. Security (SASL, ACLs), quotas
and metrics plug in by passing `stages` (or replacing one with `RequestPipeline.with_stage`);
the default stages allow everything, throttle nothing and cost nothing. Each request carries
its connection's `Session` (listener, security protocol, principal, client id, client address).

Throttling (KIP-219). A request the throttle stage gave a throttle time is answered at once
and the connection is then muted for that time: nothing more is read or handled from it, so a
client ignoring the throttle is held anyway; a request version older than KIP-219 gets its
answer after the throttle time instead. `connection_throttle(ip)` (KIP-612's
`connection_creation_rate`) may close a new connection unserved after its throttle time.

TLS (an SSL listener: `ssl_context`). A connection is accepted and counted (and refused over
`max.connections[.per.ip]`) as a plaintext one is, then upgraded with a TLS handshake bounded
by `ssl_handshake_timeout_ms`; a peer that stalls, sends plaintext Kafka requests or garbage
fails its handshake and loses that connection only. The principal is the peer certificate's
subject mapped by `ssl.principal.mapping.rules` (`security.principal.PrincipalBuilder`), or
`User:ANONYMOUS` without a certificate; a subject no rule maps closes the connection (Kafka's
`SslAuthenticationException`).

A connection's bytes come in through `server_transport.RequestProtocol` (received straight
into its `ServerConnection`), and responses with file ranges (Fetch's `FileResponse`) go out
through `server_transport.send_file_response` (`sendfile`, but not over TLS: see there).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable, Mapping, Sequence

from sparklog.metrics.registry import Metrics
from sparklog.protocol import cooperative
from sparklog.protocol.api_versions import ApiKey, VersionRange, client_throttles
from sparklog.protocol.connection import (
    DEFAULT_MAX_REQUEST_BYTES,
    NEED_DATA,
    ProtocolError,
    Request,
    ServerConnection,
)
from sparklog.protocol.file_response import FileResponse
from sparklog.protocol.pipeline import Handler, RequestPipeline, RequestStage
from sparklog.protocol.request_queue import (
    DEFAULT_QUEUED_MAX_REQUESTS,
    UNBOUNDED,
    MemoryPool,
    RequestSlots,
)
from sparklog.protocol.sasl_authenticator import (
    SASL_APIS,
    SaslReply,
    sasl_reply,
)
from sparklog.protocol.server_transport import (
    DRAIN_ABOVE_BYTES,
    RequestProtocol,
    send_file_response,
    wall_clock_ms,
)
from sparklog.protocol.socket_server_metrics import (
    ConnectionSensors,
    register_socket_server_metrics,
)
from sparklog.security.audit import LOG_ONLY, AuditSink, authentication_failed
from sparklog.security.listeners import ListenerSecurity
from sparklog.security.principal import NoMatchingRule, PrincipalBuilder
from sparklog.security.sasl.enabled import SaslServerConfig
from sparklog.security.session import SecurityProtocol

logger = logging.getLogger(__name__)

#: A TLS handshake that has not finished after this long is abandoned (the default of
#: `sparklog.ssl.handshake.timeout.ms`, `ssl_factory.SslConfig.handshake_timeout_ms`).
DEFAULT_SSL_HANDSHAKE_TIMEOUT_MS = 10_000


class KafkaServer:
    """Listens on (host, port) and serves Kafka-protocol requests with `handler`."""

    def __init__(
        self,
        handler: Handler,
        apis: Mapping[ApiKey, VersionRange],  # the versions served (api_versions.py's tables)
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        name: str = "server",
        max_connections: int = 2**31 - 1,
        max_connections_per_ip: int = 2**31 - 1,
        max_connections_per_ip_overrides: Mapping[str, int] | None = None,
        connections_max_idle_ms: int = 600_000,
        queued_max_requests: int = DEFAULT_QUEUED_MAX_REQUESTS,
        queued_max_request_bytes: int = UNBOUNDED,
        listener_name: str = "PLAINTEXT",
        stages: Sequence[RequestStage] | None = None,
        audit: AuditSink | None = None,
        security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT,
        ssl_context: ssl.SSLContext | None = None,
        principal_builder: PrincipalBuilder | None = None,
        ssl_handshake_timeout_ms: int = DEFAULT_SSL_HANDSHAKE_TIMEOUT_MS,
        sasl: SaslServerConfig | None = None,
        security: ListenerSecurity | None = None,
        node_id: int = -1,
        connection_throttle: Callable[[str], int] | None = None,
    ) -> None:
        """`security`, when given, is the listener's (`security.listeners.listener_security`)
        and sets `listener_name`, `security_protocol`, `ssl_context`, `principal_builder`,
        `ssl_handshake_timeout_ms` and `sasl` (a SASL_PLAINTEXT / SASL_SSL listener's SASL
        server side: every connection then authenticates first) from it. `audit` gets the
        connection-level authentication failures (a failed TLS handshake, an unmapped
        certificate subject, a failed SASL login) as `node_id`'s."""
        if security is not None:
            listener_name = security.listener_name
            security_protocol = security.security_protocol
            ssl_context = security.ssl_context
            principal_builder = security.principal_builder
            ssl_handshake_timeout_ms = security.ssl_handshake_timeout_ms
            sasl = security.sasl
        self.security = security
        #: the one place cross-cutting policy runs around `handler` (module docstring)
        self.pipeline = RequestPipeline(handler, stages)
        #: the owning server's audit sink (`BrokerServer.audit`, ...), for what this listener
        #: audits outside a request's pipeline (authentication failures)
        self.audit: AuditSink = audit or LOG_ONLY
        self.listener_name = listener_name
        tls = security_protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)
        if tls != (ssl_context is not None):
            raise ValueError(
                f"listener {listener_name} ({security_protocol.name}) "
                + ("needs a TLS context (ssl.* settings)" if tls else "takes no TLS context")
            )
        self.security_protocol = security_protocol
        #: the listener's TLS server context (`ssl_factory.server_context`), None: no TLS
        self.ssl_context = ssl_context
        self.principal_builder = principal_builder or PrincipalBuilder()
        self.ssl_handshake_timeout_ms = ssl_handshake_timeout_ms
        #: the listener's SASL server side (`sasl.enabled.SaslServerConfig`), None: no SASL
        self.sasl = sasl
        self.failed_tls_handshakes = 0
        #: connections closed for failed authentication (an unmapped certificate subject, a
        #: failed SASL login), SASL sessions that expired (KIP-368), SASL handshakes not
        #: finished in `sparklog.sasl.handshake.timeout.ms`, successful SASL logins
        #: (re-authentications included)
        self.failed_authentications = 0
        self.expired_sessions = 0
        self.handshake_timeouts = 0
        self.authentications = 0
        self.node_id = node_id
        self.apis = apis
        self.host = host
        self.port = port
        self.max_request_bytes = max_request_bytes
        self.name = name
        #: Kafka's `max.connections`, `max.connections.per.ip`, `connections.max.idle.ms`
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.max_connections_per_ip_overrides = dict(max_connections_per_ip_overrides or {})
        self.connections_max_idle_ms = connections_max_idle_ms
        #: Kafka's `queued.max.requests` and `queued.max.request.bytes`
        self.request_slots = RequestSlots(queued_max_requests)
        self.memory_pool = MemoryPool(queued_max_request_bytes)
        self.refused_connections = 0
        self.idle_closed_connections = 0
        #: responses whose records went out by sendfile (Fetch's `FileResponse`): what proves
        #: a stage (quotas, metrics) kept the zero-copy path, for tests and benchmarks
        self.file_responses_sent = 0
        #: where connections are counted (`bind_metrics`); None: not measured
        self.connection_sensors: ConnectionSensors | None = None
        #: connections muted right now for a throttle (KIP-219)
        self.muted_connections = 0
        #: connection tasks sleeping out a throttle (muted, a delayed answer, a KIP-612 close):
        #: `stop` cancels them at once rather than waiting for their throttle to pass
        self._throttle_sleepers: set[asyncio.Task] = set()
        #: `connection_throttle(ip)`: 0 to serve a new connection, else the ms after which to
        #: close it (client quotas' `connection_creation_rate`, KIP-612); None: no such quota
        self.connection_throttle = connection_throttle
        self.throttled_connections = 0
        self._server: asyncio.base_events.Server | None = None
        self._connections: dict[asyncio.Task, asyncio.StreamWriter] = {}
        self._per_ip: dict[str, int] = {}
        self._last_refusal_log = 0.0
        self._last_tls_failure_log = 0.0

    @property
    def handler(self) -> Handler:
        """The handler the pipeline wraps; replacing it keeps the pipeline's stages."""
        return self.pipeline.handler

    @handler.setter
    def handler(self, handler: Handler) -> None:
        self.pipeline.handler = handler

    async def start(self) -> None:
        """Bind and start accepting; `port` holds the bound port afterwards."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: RequestProtocol(self, loop), self.host, self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        logger.info("%s listening on %s:%d", self.name, self.host, self.port)

    async def stop(self) -> None:
        """Stop accepting, close every connection and wait for their tasks."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        for task in list(self._throttle_sleepers):
            task.cancel()  # a muted connection has nothing in flight: end it now
        for writer in list(self._connections.values()):
            writer.close()  # the connection loop sees EOF and ends
        tasks = list(self._connections)
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=5)
            for task in pending:  # stuck in a handler: cancel as a backstop
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._connections.clear()

    async def _throttle_sleep(self, seconds: float) -> None:
        """Sleep out a throttle, cancellable by `stop`."""
        task = asyncio.current_task()
        assert task is not None
        self._throttle_sleepers.add(task)
        try:
            await asyncio.sleep(seconds)
        finally:
            self._throttle_sleepers.discard(task)

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def bind_metrics(self, metrics: Metrics) -> None:
        """Record this listener's socket-server metrics into `metrics` (Kafka's
        `socket-server-metrics,listener=<name>`: `socket_server_metrics`)."""
        self.connection_sensors = register_socket_server_metrics(metrics, self)

    async def _start_tls(
        self, protocol: RequestProtocol, writer: asyncio.StreamWriter, peer: object
    ) -> bool:
        """Run the TLS handshake and authenticate the connection from its peer's certificate;
        False (the caller closes the connection) when either fails."""
        assert self.ssl_context is not None
        timeout_s = self.ssl_handshake_timeout_ms / 1000
        protocol.on_tls_handshake()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_s):
                transport = await loop.start_tls(
                    writer.transport,
                    protocol,
                    self.ssl_context,
                    server_side=True,
                    ssl_handshake_timeout=timeout_s,
                )
            if transport is None:  # asyncio (3.11) hands back none when the peer closed
                raise ConnectionResetError("the peer closed the connection during the handshake")
        except (OSError, TimeoutError, EOFError) as e:  # ssl.SSLError is an OSError
            self.failed_tls_handshakes += 1
            self._log_tls_failure("TLS handshake with %s failed: %r", peer, e)
            self._audit_failure(protocol, f"TLS handshake failed: {e!r}")
            writer.transport.abort()
            return False
        # what StreamWriter.start_tls does, without its crash on a None transport
        writer._transport = transport  # type: ignore[attr-defined]
        protocol._replace_writer(writer)  # type: ignore[attr-defined]
        protocol.on_tls(transport)
        if self.security_protocol is not SecurityProtocol.SSL:
            return True  # SASL_SSL: SASL authenticates the connection, over the TLS
        ssl_object = transport.get_extra_info("ssl_object")
        certificate = ssl_object.getpeercert(binary_form=True) if ssl_object else None
        try:
            principal = self.principal_builder.ssl(certificate)
        except NoMatchingRule as e:
            self.failed_authentications += 1
            self._log_tls_failure("TLS client %s failed authentication: %s", peer, e)
            self._audit_failure(protocol, str(e))
            return False
        protocol.conn.authenticated(principal)
        return True

    def _audit_failure(self, protocol: RequestProtocol, reason: str) -> None:
        """An authentication failure for the audit trail (`AuditSink.record` never blocks)."""
        self.audit.record(
            authentication_failed(
                int(time.time() * 1000),
                client_address=protocol.conn.client_address,
                listener=self.listener_name,
                mechanism="SSL",
                reason=reason,
                node_id=self.node_id,
                api="",
            )
        )

    def _log_tls_failure(self, message: str, *args: object) -> None:
        """At most one warning per 10 s (a port scanner must not flood the log)."""
        now = asyncio.get_running_loop().time()
        if now - self._last_tls_failure_log > 10:
            self._last_tls_failure_log = now
            logger.warning("%s: " + message, self.name, *args)
        else:
            logger.debug("%s: " + message, self.name, *args)

    def _refuse(self, ip: str) -> bool:
        """Whether a new connection from `ip` goes over `max.connections[.per.ip]`."""
        if len(self._connections) >= self.max_connections:
            why = f"max.connections={self.max_connections}"
        elif self._per_ip.get(ip, 0) >= (
            limit := self.max_connections_per_ip_overrides.get(ip, self.max_connections_per_ip)
        ):
            setting = (
                "max.connections.per.ip.overrides"
                if ip in self.max_connections_per_ip_overrides
                else "max.connections.per.ip"
            )
            why = f"{setting}={limit} for {ip}"
        else:
            return False
        self.refused_connections += 1
        now = asyncio.get_running_loop().time()
        if now - self._last_refusal_log > 10:  # one line per 10 s, however many are refused
            self._last_refusal_log = now
            logger.warning(
                "%s: refusing connections over %s (%d refused so far)",
                self.name,
                why,
                self.refused_connections,
            )
        return True

    async def _serve_connection(
        self, protocol: RequestProtocol, writer: asyncio.StreamWriter
    ) -> None:
        peer = writer.get_extra_info("peername")
        ip = peer[0] if isinstance(peer, tuple) and peer else ""
        if self.connection_throttle is not None and (delay_ms := self.connection_throttle(ip)):
            # KIP-612: over its IP's connection_creation_rate; closed after the throttle time
            # (so a client reconnecting in a loop is slowed to the rate), never served
            self.throttled_connections += 1
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._throttle_sleep(delay_ms / 1000)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            return
        if self._refuse(ip):
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        sensors = self.connection_sensors
        if sensors is not None:
            sensors.created.record(1.0)
        conn = protocol.conn
        idle_s = self.connections_max_idle_ms / 1000
        reserved = 0
        try:
            if self.ssl_context is not None and not await self._start_tls(protocol, writer, peer):
                return
            while True:
                if self.memory_pool.bounded and not reserved:
                    reserved = await self.memory_pool.reserve(conn.incomplete_request_bytes)
                if not conn.has_request():
                    sasl = protocol.sasl
                    deadline_ms = sasl.handshake_deadline_ms if sasl is not None else None
                    wait_s = idle_s
                    if deadline_ms is not None:  # a SASL handshake under way is bounded
                        wait_s = min(idle_s, max(0.0, (deadline_ms - wall_clock_ms()) / 1000))
                    try:  # asyncio.timeout, not wait_for: no task per read (16 -> 5 us)
                        async with asyncio.timeout(wait_s):
                            if not await protocol.receive():
                                return
                    except TimeoutError:  # connections.max.idle.ms: Kafka closes idle ones
                        if sasl is not None and sasl.handshake_timed_out(wall_clock_ms()):
                            self.handshake_timeouts += 1
                            self._on_authentication_failure(
                                conn, "SASL handshake not finished in time"
                            )
                        else:
                            self.idle_closed_connections += 1
                        return
                    cooperative.restart()  # this connection just got the loop
                # Checking, decoding, handling and encoding each let other connections run
                # once they held the loop for a slice, and so does a connection sending
                # requests back to back, between them (Kafka: one I/O thread per request).
                while (
                    request := await cooperative.complete(conn.next_request_steps())
                ) is not NEED_DATA:
                    request.context.received_ns = time.monotonic_ns()
                    if protocol.sasl is not None or request.api_key in SASL_APIS:
                        reply = sasl_reply(conn, request, wall_clock_ms())
                        if reply is not None:
                            if not await self._send_sasl_reply(writer, conn, request, reply):
                                return
                            continue
                    pipeline = self.pipeline
                    async with self.request_slots.slot():
                        body = await pipeline(request)
                    throttle_s = request.context.throttle_time_ms / 1000
                    if throttle_s and not client_throttles(request.api_key, request.api_version):
                        await self._throttle_sleep(throttle_s)  # before KIP-219: delay the answer
                        throttle_s = 0
                    start_ns = time.monotonic_ns() if pipeline.measures else 0
                    if body is not None:
                        try:  # a peer that never reads its responses is idle too
                            if isinstance(body, FileResponse):
                                await asyncio.wait_for(
                                    send_file_response(writer, conn, request, body), idle_s
                                )
                                self.file_responses_sent += 1
                            else:
                                frame = await cooperative.complete(
                                    conn.send_response_steps(request, body)
                                )
                                writer.write(frame)
                            # drain() only waits above the transport's high-water mark
                            if writer.transport.get_write_buffer_size() > DRAIN_ABOVE_BYTES:
                                async with asyncio.timeout(idle_s):
                                    await writer.drain()
                        except TimeoutError:
                            self.idle_closed_connections += 1
                            writer.transport.abort()
                            return
                    if start_ns:
                        pipeline.on_sent(request, body, start_ns, time.monotonic_ns())
                    if throttle_s:  # KIP-219: answered; now muted, the next request waits
                        self.muted_connections += 1
                        try:
                            await self._throttle_sleep(throttle_s)
                        finally:
                            self.muted_connections -= 1
                    await cooperative.checkpoint()
                if not conn.incomplete_request_bytes:
                    self.memory_pool.release(reserved)
                    reserved = 0
        except ProtocolError as e:
            logger.warning("%s: closing connection from %s: %s", self.name, peer, e)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # server stopping
        except Exception:
            logger.exception("%s: handler failed; closing connection from %s", self.name, peer)
        finally:
            conn.close()  # a partly received request's buffer goes now, not at a collection
            self.memory_pool.release(reserved)
            self._connections.pop(task, None)
            if sensors is not None:
                sensors.closed.record(1.0)
            self._per_ip[ip] -= 1
            if not self._per_ip[ip]:
                del self._per_ip[ip]
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _send_sasl_reply(
        self,
        writer: asyncio.StreamWriter,
        conn: ServerConnection,
        request: Request,
        reply: SaslReply,
    ) -> bool:
        """Write the authenticator's reply; False when the connection is to close (after
        `connection.failed.authentication.delay.ms` for a failed login, as Kafka delays it)."""
        # counted before the reply is written: the client may act on it at once
        if reply.authenticated is not None:
            self.authentications += 1
        if reply.close and not reply.expired and reply.failure is not None:
            self.failed_authentications += 1
        if reply.body is not None:
            writer.write(conn.send_response(request, reply.body))
        elif reply.raw is not None:
            writer.write(reply.raw)
        if not reply.close:
            return True
        if reply.expired:
            self.expired_sessions += 1
            logger.info(
                "%s: closing %s's connection from %s: %s",
                self.name,
                conn.principal,
                conn.client_address,
                reply.failure,
            )
        elif reply.failure is not None:
            api = ApiKey(request.api_key).name if request.api_key in SASL_APIS else "SASL_TOKEN"
            self._on_authentication_failure(conn, reply.failure, api)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.connections_max_idle_ms / 1000):
                await writer.drain()
            if reply.close_delay_ms:
                await asyncio.sleep(reply.close_delay_ms / 1000)
        return False

    def _on_authentication_failure(
        self, conn: ServerConnection, reason: str, api: str = "SASL_AUTHENTICATE"
    ) -> None:
        """Log and audit a failed authentication (the reason never holds a secret)."""
        sasl = conn.sasl
        mechanism = getattr(sasl, "mechanism", None) or ""
        logger.info(
            "%s: failed authentication with /%s (%s%s)",
            self.name,
            conn.client_address,
            f"{mechanism}: " if mechanism else "",
            reason,
        )
        self.audit.record(
            authentication_failed(
                wall_clock_ms(),
                client_address=conn.client_address,
                listener=self.listener_name,
                mechanism=mechanism,
                reason=reason,
                principal=str(conn.principal) if conn.principal is not None else "",
                node_id=self.node_id,
                api=api,
            )
        )
