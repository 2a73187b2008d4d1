"""An asyncio Kafka-protocol client connection (broker -> controller, follower fetchers).

Negotiates versions with ApiVersions on connect, pipelines requests, and matches responses in
order. `request()` raises `ConnectionError` when the connection breaks; the caller reconnects.
`connect(endpoint, security, client_id=...)` is how every server-side caller opens one (the
socket itself comes from `outbound`, which carries the client-side security settings).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import time
from collections.abc import Mapping
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from sparklog.errors import KafkaError
from sparklog.protocol import codec
from sparklog.protocol.api_versions import SASL_APIS_VERSIONS, VersionRange
from sparklog.protocol.connection import NEED_DATA, ClientConnection, ProtocolError
from sparklog.protocol.outbound import PLAINTEXT, ClientSecurity, Endpoint, open_stream
from sparklog.security.sasl.client import SASL_AUTHENTICATE, SaslClientAuthenticator

logger = logging.getLogger(__name__)


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class AsyncKafkaConnection:
    """One connection to one Kafka-protocol server."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "sparklog",
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.security = security
        self.api_versions: dict[int, VersionRange] = {}
        #: KIP-368: when the SASL session should be renewed (monotonic ms; None: never)
        self.reauthenticate_at_ms: int | None = None
        self._conn = ClientConnection(client_id)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._waiters: dict[int, asyncio.Future] = {}
        self._read_task: asyncio.Task | None = None
        self._send_lock = asyncio.Lock()
        self._closed = False
        self._retire_timer: asyncio.TimerHandle | None = None

    async def connect(self, timeout_s: float = 10.0) -> AsyncKafkaConnection:
        async with asyncio.timeout(timeout_s):
            self._reader, self._writer = await open_stream(
                Endpoint(self.host, self.port), self.security
            )
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        response = await self.request(
            ApiVersionsRequest(client_software_name="sparklog", client_software_version="0.1")
        )
        if response.error_code != 0:
            raise ConnectionError(f"ApiVersions failed with error {response.error_code}")
        self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        if self.security.sasl is not None:
            await self._authenticate()
        return self

    async def _authenticate(self) -> None:
        """SaslHandshake + SaslAuthenticate with the connection's credentials (brokers to the
        controller, to each other and to the coordinator, and the coordinator to brokers:
        the inter-broker principal). A failure closes the connection and raises
        ConnectionError naming the server and the error, never a secret."""
        assert self.security.sasl is not None
        theirs = self.api_versions.get(SASL_AUTHENTICATE)
        auth = SaslClientAuthenticator(
            self.security.sasl,
            -1 if theirs is None else theirs[1],
            _monotonic_ms(),
            wall_clock_ms=int(time.time() * 1000),
        )
        try:
            while (step := auth.next_request()) is not None:
                body = codec.request_schema(step.api_key, step.version)(**step.fields)
                auth.on_response(await self.request(body), _monotonic_ms())
        except KafkaError as e:
            await self.close()
            raise ConnectionError(
                f"SASL authentication to {self.host}:{self.port} failed: {e.name}: {e}"
            ) from None
        self.reauthenticate_at_ms = auth.reauthenticate_at_ms
        if self.reauthenticate_at_ms is not None:
            delay_s = max(0, self.reauthenticate_at_ms - _monotonic_ms()) / 1000
            self._retire_timer = asyncio.get_running_loop().call_later(
                delay_s, self._retire_if_idle
            )

    def _retire_if_idle(self) -> None:
        """At the renewal point: an idle connection closes now (its owner will open a new
        one); a busy one closes once its requests are answered (the read loop)."""
        if not self._closed and not self._waiters and self._writer is not None:
            self._writer.close()

    @property
    def closed(self) -> bool:
        """Closed, broken, or its SASL session due for renewal: owners check this before
        reusing a connection, so an expiring session gets a new connection (and a new login)
        before Kafka's server would close this one (KIP-368); the old connection closes once
        its requests in flight are answered."""
        return self._closed or self.session_expiring()

    def session_expiring(self) -> bool:
        """Whether the SASL session is due for renewal (KIP-368's 85-95% point)."""
        at = self.reauthenticate_at_ms
        return at is not None and _monotonic_ms() >= at

    def version_for(self, api_key: int, ours: VersionRange) -> int:
        """Highest version both sides speak."""
        theirs = self.api_versions.get(api_key)
        if theirs is None or min(ours[1], theirs[1]) < max(ours[0], theirs[0]):
            raise ConnectionError(f"{self.host}:{self.port} does not serve api {api_key} in {ours}")
        return min(ours[1], theirs[1])

    async def request(self, body: Any, *, timeout_s: float | None = 30.0) -> Any:
        """Send a kio request and await its response body."""
        if self.closed or self._writer is None:
            raise ConnectionError(f"connection to {self.host}:{self.port} is closed")
        async with self._send_lock:
            correlation_id, data = self._conn.send_request(body)
            future = asyncio.get_running_loop().create_future()
            self._waiters[correlation_id] = future
            self._writer.write(data)
            await self._writer.drain()
        if timeout_s is None:
            return await future
        async with asyncio.timeout(timeout_s):
            return await future

    async def _read_loop(self) -> None:
        assert self._reader is not None
        error: BaseException = ConnectionError(f"connection to {self.host}:{self.port} closed")
        try:
            while True:
                data = await self._reader.read(256 * 1024)
                if not data:
                    break
                self._conn.receive_data(data)
                while (item := self._conn.next_response()) is not NEED_DATA:
                    correlation_id, body = item
                    future = self._waiters.pop(correlation_id, None)
                    if future is not None and not future.done():
                        future.set_result(body)
                if not self._waiters and self.session_expiring() and self._writer is not None:
                    self._writer.close()  # KIP-368: all it was asked is answered; owner reconnects
                    break
        except (ProtocolError, ConnectionError, OSError) as e:
            error = ConnectionError(f"connection to {self.host}:{self.port} failed: {e}")
        except asyncio.CancelledError:
            error = ConnectionError(f"connection to {self.host}:{self.port} closed")
        finally:
            self._closed = True
            for future in self._waiters.values():
                if not future.done():
                    future.set_exception(error)
            self._waiters.clear()

    async def close(self) -> None:
        self._closed = True
        if self._retire_timer is not None:
            self._retire_timer.cancel()
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
        if self._read_task is not None:
            self._read_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._read_task


async def connect(
    endpoint: Endpoint,
    security: ClientSecurity = PLAINTEXT,
    *,
    client_id: str = "sparklog",
    timeout_s: float = 10.0,
) -> AsyncKafkaConnection:
    """A connected, version-negotiated connection to `endpoint` (the outbound-connection
    factory of the asyncio side: replica fetchers, broker -> controller and -> coordinator,
    coordinator -> brokers)."""
    conn = AsyncKafkaConnection(
        endpoint.host, endpoint.port, client_id=client_id, security=security
    )
    return await conn.connect(timeout_s)


class BrokerConnections:
    """One connection per broker id, opened on first use and reopened when the broker's
    address changed or the connection closed (the coordinator's lag poller and transaction
    marker channel talk to every broker this way)."""

    def __init__(self, security: ClientSecurity, client_id: str) -> None:
        self.security = security
        self.client_id = client_id
        self._connections: dict[int, AsyncKafkaConnection] = {}

    async def get(self, broker_id: int, host: str, port: int) -> AsyncKafkaConnection:
        conn = self._connections.get(broker_id)
        if conn is not None and not conn.closed and (conn.host, conn.port) == (host, port):
            return conn
        await self.drop(broker_id)
        conn = await connect(Endpoint(host, port), self.security, client_id=self.client_id)
        self._connections[broker_id] = conn
        return conn

    async def drop(self, broker_id: int) -> None:
        """Close the broker's connection (after a failed request: the next use reconnects)."""
        conn = self._connections.pop(broker_id, None)
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def close(self) -> None:
        for broker_id in list(self._connections):
            await self.drop(broker_id)


def api_versions_response(
    apis: Any,
    version: int,
    error_code: int = 0,
    *,
    throttle_time_ms: int = 0,
    features: FeatureLevels | None = None,
) -> Any:
    """The ApiVersions response announcing `apis` and the SASL handshake APIs (every Kafka
    listener announces them) at `version`, or v0 for an unknown one; a server passes its
    pipeline's `throttle_time_ms(request)` and, from v3 (KIP-584), its `features`."""
    apis = {**apis, **SASL_APIS_VERSIONS}
    schema = codec.response_schema(18, version)
    module = __import__(schema.__module__, fromlist=["ApiVersion"])
    keys = tuple(
        module.ApiVersion(api_key=int(k), min_version=low, max_version=high)
        for k, (low, high) in sorted(apis.items())
    )
    kwargs: dict[str, Any] = {"error_code": ErrorCode(error_code), "api_keys": keys}
    if version >= 1:
        kwargs["throttle_time"] = i32Timedelta.parse(
            datetime.timedelta(milliseconds=throttle_time_ms)
        )
    if version >= 3 and features is not None:
        kwargs.update(_feature_fields(module, version, features))
    return schema(**kwargs)


@dataclasses.dataclass(frozen=True, slots=True)
class FeatureLevels:
    """What a server announces of KIP-584's features: each supported feature's level range,
    the cluster's finalized levels (absent = 0), and their epoch (the metadata offset they
    are as of; -1 unknown)."""

    supported: Mapping[str, tuple[int, int]]
    finalized: Mapping[str, int]
    epoch: int


def _feature_fields(module: Any, version: int, features: FeatureLevels) -> dict[str, Any]:
    # ApiVersionsResponse.json: "in v0-v3, features with MinSupportedVersion = 0 are omitted"
    # (older clients refuse a range starting at 0; v4 came with KIP-1022 to allow it)
    supported = tuple(
        module.SupportedFeatureKey(name=name, min_version=low, max_version=high)
        for name, (low, high) in sorted(features.supported.items())
        if low > 0 or version >= 4
    )
    finalized = tuple(
        module.FinalizedFeatureKey(name=name, max_version_level=level, min_version_level=level)
        for name, level in sorted(features.finalized.items())
        if level > 0
    )
    return {
        "supported_features": supported,
        "finalized_features_epoch": features.epoch,
        "finalized_features": finalized,
    }
