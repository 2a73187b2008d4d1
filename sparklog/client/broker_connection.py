"""One blocking Kafka connection for the clients: a socket to one broker, a reader thread.

`BrokerConnection` wraps the sans-IO `ClientConnection`: any thread may `send()` (a lock keeps
correlation ids and bytes in wire order) and gets a `concurrent.futures.Future`; the reader
thread completes the futures in order as responses arrive (Kafka answers in order per
connection). A request older than its timeout (`request.timeout.ms`) closes the connection and
fails everything in flight, as Kafka's `NetworkClient` does. On connect it negotiates versions
through ApiVersions (the highest version both sides speak from `CLIENT_APIS`) and, on a SASL
listener, authenticates (KIP-152; `client.security`) and notes when the session wants renewing
(KIP-368). `network.NetworkClient` holds these connections by node id.

Requests are built by name (`request_builder.build_request`) at the version negotiated with
each broker. Sockets come from the outbound-connection factory (`protocol.outbound`), which
carries `security.protocol`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import selectors
import socket
import threading
import time
import types
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from sparklog.client.request_builder import build_request
from sparklog.client.security import authenticate
from sparklog.client.throttle import ThrottleRecorder, ThrottleState, response_throttle_ms
from sparklog.errors import (
    NetworkExceptionError,
    RequestTimedOutError,
    UnsupportedVersionError,
)
from sparklog.protocol.api_versions import (
    CLIENT_QUOTA_APIS,
    SECURITY_METADATA_APIS,
    ApiKey,
    UnsupportedApiError,
    VersionRange,
    pick_version,
)
from sparklog.protocol.connection import NEED_DATA, ClientConnection, ProtocolError
from sparklog.protocol.outbound import PLAINTEXT, ClientSecurity, Endpoint, open_socket
from sparklog.security.sasl.client import SaslRequest

logger = logging.getLogger(__name__)

#: The versions of each API this client speaks (negotiated down to what a broker serves).
CLIENT_APIS: Mapping[ApiKey, VersionRange] = types.MappingProxyType(
    {
        # v12: a transactional batch adds its partition itself (transactions v2, KIP-890)
        ApiKey.PRODUCE: (3, 12),
        ApiKey.FETCH: (4, 12),
        ApiKey.LIST_OFFSETS: (1, 7),
        ApiKey.METADATA: (1, 12),
        ApiKey.API_VERSIONS: (3, 3),
        ApiKey.CREATE_TOPICS: (2, 7),
        ApiKey.DELETE_TOPICS: (1, 5),
        ApiKey.DELETE_RECORDS: (0, 2),
        ApiKey.INIT_PRODUCER_ID: (0, 5),
        ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
        ApiKey.DESCRIBE_CONFIGS: (1, 4),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
        **SECURITY_METADATA_APIS,
        **CLIENT_QUOTA_APIS,
        ApiKey.CREATE_PARTITIONS: (0, 3),
        ApiKey.DESCRIBE_CLUSTER: (0, 1),
        ApiKey.ELECT_LEADERS: (0, 2),
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
        ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
        # consumer groups (members and admin calls; built with the newest field layout)
        ApiKey.FIND_COORDINATOR: (4, 4),
        ApiKey.JOIN_GROUP: (5, 9),
        ApiKey.SYNC_GROUP: (5, 5),
        ApiKey.HEARTBEAT: (3, 4),
        ApiKey.LEAVE_GROUP: (3, 5),
        ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
        ApiKey.LIST_GROUPS: (4, 5),
        ApiKey.DESCRIBE_GROUPS: (5, 5),
        ApiKey.OFFSET_FETCH: (8, 9),
        ApiKey.OFFSET_COMMIT: (8, 9),
        ApiKey.DELETE_GROUPS: (2, 2),
        ApiKey.OFFSET_DELETE: (0, 0),
        # transactions
        # transactions v2 (KIP-890 part 2): EndTxn v5 bumps the epoch and answers it, and
        # TxnOffsetCommit v5 adds the group; AddPartitionsToTxn stays v3 (v4+ are brokers')
        ApiKey.ADD_PARTITIONS_TO_TXN: (3, 3),
        ApiKey.ADD_OFFSETS_TO_TXN: (3, 4),
        ApiKey.END_TXN: (3, 5),
        ApiKey.TXN_OFFSET_COMMIT: (3, 5),
        # SASL (KIP-152: the handshake v1 and the tokens in SaslAuthenticate)
        ApiKey.SASL_HANDSHAKE: (1, 1),
        ApiKey.SASL_AUTHENTICATE: (0, 2),
    }
)

_RECV_BYTES = 256 * 1024
_READER_WAKEUP_S = 0.25  # how late a request timeout may be noticed at worst


def now_ms() -> int:
    """Monotonic milliseconds: the clock the blocking edges pass into the sans-IO cores."""
    return time.monotonic_ns() // 1_000_000


# --------------------------------------------------------------------------- connection


@dataclasses.dataclass(slots=True)
class _Pending:
    future: Future
    deadline_ms: int
    api_key: int
    version: int


class BrokerConnection:
    """One socket to one broker. Thread-safe `send`; a reader thread completes futures in order.

    A closed connection stays closed: `NetworkClient` makes a new one. Every pending future
    fails with `NetworkExceptionError` when the connection breaks and with
    `RequestTimedOutError` when a request outlives its timeout.
    """

    def __init__(
        self,
        node_id: int,
        host: str,
        port: int,
        *,
        client_id: str = "sparklog",
        request_timeout_ms: int = 30_000,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
        security: ClientSecurity = PLAINTEXT,
        on_throttle_time: ThrottleRecorder | None = None,
    ) -> None:
        self.node_id = node_id
        self.security = security
        self.host = host
        self.port = port
        self.request_timeout_ms = request_timeout_ms
        self.versions: dict[int, int] = {}
        #: the finalized feature levels the node announced (ApiVersions v3+)
        self.finalized_features: dict[str, int] = {}
        #: KIP-368: when the SASL session should be renewed (None: it does not expire)
        self.reauthenticate_at_ms: int | None = None
        self._retiring = False
        self._conn = ClientConnection(client_id or None)
        self._sock: socket.socket | None = None
        self._send_buffer_bytes = send_buffer_bytes
        self._receive_buffer_bytes = receive_buffer_bytes
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._pending: deque[_Pending] = deque()
        self._reader: threading.Thread | None = None
        #: written on close so the reader's select wakes at once (a shut-down socket does not
        #: always wake it)
        self._wake_r, self._wake_w = socket.socketpair()
        self._closed = False
        self._close_reason: BaseException | None = None
        #: KIP-219: until when the broker mutes this connection after a throttled response
        self.throttle = ThrottleState()
        self._on_throttle_time = on_throttle_time

    def __repr__(self) -> str:
        return f"BrokerConnection(node {self.node_id} at {self.host}:{self.port})"

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight_count(self) -> int:
        return len(self._pending)

    def connect(self, timeout_ms: int) -> None:
        """Open the socket and negotiate versions (ApiVersions); raises NetworkExceptionError."""
        try:
            sock = open_socket(
                Endpoint(self.host, self.port),
                self.security,
                timeout_s=timeout_ms / 1000,
                send_buffer_bytes=self._send_buffer_bytes,
                receive_buffer_bytes=self._receive_buffer_bytes,
            )
        except OSError as e:
            self._closed = True
            raise NetworkExceptionError(
                f"cannot connect to node {self.node_id} at {self.host}:{self.port}: {e}"
            ) from None
        self._sock = sock
        self._reader = threading.Thread(
            target=self._read_loop, name=f"sparklog-reader-{self.node_id}", daemon=True
        )
        self._reader.start()
        fields = {"client_software_name": "sparklog", "client_software_version": "0.1"}
        future = self._send_built(build_request(ApiKey.API_VERSIONS, 3, fields), True, timeout_ms)
        try:
            response = future.result()
        except Exception:
            self.close()
            raise
        if response.error_code != 0:
            self.close()
            raise UnsupportedVersionError(
                f"node {self.node_id} refused ApiVersions v3 (error {int(response.error_code)})"
            )
        theirs = {
            int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys
        }
        self.finalized_features = {
            str(f.name): int(f.max_version_level) for f in response.finalized_features
        }
        for api_key, ours in CLIENT_APIS.items():
            try:
                self.versions[int(api_key)] = pick_version(ours, theirs.get(int(api_key)), api_key)
            except UnsupportedApiError:
                continue  # fails later, only if this API is used
        if self.security.sasl is not None:
            self._authenticate(timeout_ms)

    def _authenticate(self, timeout_ms: int) -> None:
        """SaslHandshake + SaslAuthenticate before any other request (KIP-152); a failure
        closes the connection and raises the server's error (Kafka closes it too)."""
        assert self.security.sasl is not None

        def exchange(request: SaslRequest) -> Any:
            body = build_request(request.api_key, request.version, request.fields)
            return self._send_built(body, True, timeout_ms).result()

        try:
            auth = authenticate(
                self.security.sasl,
                self.versions.get(ApiKey.SASL_AUTHENTICATE, -1),
                exchange,
                now_ms,
            )
        except Exception:
            self.close()
            raise
        self.reauthenticate_at_ms = auth.reauthenticate_at_ms

    def session_expiring(self, now_ms: int) -> bool:
        """Whether the SASL session is due for renewal (KIP-368's 85-95% point)."""
        return self.reauthenticate_at_ms is not None and now_ms >= self.reauthenticate_at_ms

    def retire(self) -> None:
        """Take no new requests' place any more: close now if idle, else once the requests in
        flight are answered. sparklog's client renews an expiring SASL session with a new
        connection rather than re-authenticating this one (KIP-368 allows either: the server
        only closes a connection used after its session expired)."""
        with self._lock:
            idle = not self._pending
            self._retiring = True
        if idle:
            self.close(NetworkExceptionError(f"SASL session to node {self.node_id} renewed"))

    def version(self, api_key: int) -> int:
        """The negotiated version of `api_key`; UnsupportedVersionError when there is none."""
        try:
            return self.versions[api_key]
        except KeyError:
            raise UnsupportedVersionError(
                f"node {self.node_id} ({self.host}:{self.port}) speaks no version of "
                f"{ApiKey(api_key).name} in {CLIENT_APIS[ApiKey(api_key)]}"
            ) from None

    def send(
        self,
        api_key: int,
        fields: Mapping[str, Any],
        *,
        expects_response: bool = True,
        timeout_ms: int | None = None,
    ) -> Future:
        """Send a request built at the negotiated version; the future gets the response body
        (None when no response is expected, e.g. Produce with acks=0)."""
        body = build_request(api_key, self.version(api_key), fields)
        return self._send_built(body, expects_response, timeout_ms)

    def _send_built(self, body: Any, expects_response: bool, timeout_ms: int | None) -> Future:
        future: Future = Future()
        timeout_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        # Two locks: `_send_lock` keeps correlation ids, pending order and bytes in wire order;
        # the reader only takes `_lock`, so a send blocked on a full socket never stops reads.
        with self._send_lock:
            with self._lock:
                if self._closed or self._sock is None:
                    future.set_exception(self._closed_error())
                    return future
                _cid, data = self._conn.send_request(body, expects_response=expects_response)
                if expects_response:
                    # A request sent while the broker mutes us (KIP-219) waits out the throttle
                    # in the broker's socket: that wait is not the broker being slow.
                    now = now_ms()
                    deadline_ms = now + timeout_ms + self.throttle.delay_ms(now)
                    kind = type(body)
                    self._pending.append(
                        _Pending(future, deadline_ms, kind.__api_key__, kind.__version__)
                    )
                sock = self._sock
            try:
                sock.sendall(data)
            except OSError as e:
                self.close(NetworkExceptionError(f"send to node {self.node_id} failed: {e}"))
                if not future.done():
                    future.set_exception(self._closed_error())
                return future
        if not expects_response:
            future.set_result(None)
        return future

    def close(self, reason: BaseException | None = None) -> None:
        """Close the socket and fail whatever is still in flight."""
        reason = reason or NetworkExceptionError(f"connection to node {self.node_id} closed")
        with self._lock:
            if not self._closed:
                self._closed = True
                self._close_reason = reason
            pending, self._pending = list(self._pending), deque()
            sock = self._sock
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for p in pending:  # outside the lock: done-callbacks may send again
            if not p.future.done():
                p.future.set_exception(self._closed_error())
        reader = self._reader
        if reader is not None and reader is not threading.current_thread():
            reader.join(timeout=5)
        if reader is None or reader is not threading.current_thread():
            self._release(sock)

    def _release(self, sock: socket.socket | None) -> None:
        """Close the sockets once the reader no longer selects on them."""
        if sock is not None:
            sock.close()
        self._wake_r.close()
        self._wake_w.close()

    def _closed_error(self) -> BaseException:
        reason = self._close_reason
        if isinstance(reason, RequestTimedOutError):
            return RequestTimedOutError(str(reason))
        return NetworkExceptionError(
            str(reason) if reason else f"connection to node {self.node_id} closed"
        )

    def _read_loop(self) -> None:
        sock = self._sock
        assert sock is not None
        selector = selectors.DefaultSelector()
        selector.register(sock, selectors.EVENT_READ)
        selector.register(self._wake_r, selectors.EVENT_READ)
        try:
            while not self._closed:
                if not selector.select(self._wait_s()):
                    self._expire_requests()
                    continue
                if self._closed:
                    break
                target = self._conn.receive_buffer()
                if target is not None:  # a large response: straight into its own buffer
                    count = sock.recv_into(target)
                    target.release()
                    if count:
                        self._conn.received(count)
                else:
                    data = sock.recv(_RECV_BYTES)
                    count = len(data)
                    if count:
                        self._conn.receive_data(data)
                if not count:
                    self.close(NetworkExceptionError(f"node {self.node_id} closed the connection"))
                    return
                while (item := self._conn.next_response()) is not NEED_DATA:
                    self._complete(item[1])
                self._expire_requests()
        except (OSError, ValueError) as e:
            if not self._closed:
                self.close(NetworkExceptionError(f"connection to node {self.node_id} failed: {e}"))
        except ProtocolError as e:
            self.close(NetworkExceptionError(f"node {self.node_id} broke the protocol: {e}"))
        finally:
            selector.close()
            if self._closed and threading.current_thread() is self._reader:
                self._release(sock)

    def _wait_s(self) -> float:
        with self._lock:
            if not self._pending:
                return _READER_WAKEUP_S
            wait_ms = min(p.deadline_ms for p in self._pending) - now_ms()
        return min(_READER_WAKEUP_S, max(0.0, wait_ms / 1000))

    def _complete(self, body: Any) -> None:
        with self._lock:
            pending = self._pending.popleft() if self._pending else None
            drained = self._retiring and not self._pending
            if pending is not None:  # before the future completes: its waiter sees the throttle
                throttle_ms = response_throttle_ms(body)
                now = now_ms()
                self.throttle.on_response(pending.api_key, pending.version, throttle_ms, now)
        if pending is not None and self._on_throttle_time is not None:
            self._on_throttle_time(throttle_ms, now)
        if pending is not None and not pending.future.done():
            pending.future.set_result(body)
        if drained:
            self.close(NetworkExceptionError(f"SASL session to node {self.node_id} renewed"))

    def _expire_requests(self) -> None:
        now = now_ms()
        with self._lock:
            late = next((p for p in self._pending if p.deadline_ms <= now), None)
        if late is not None:
            name = (
                ApiKey(late.api_key).name
                if late.api_key in ApiKey._value2member_map_
                else late.api_key
            )
            self.close(
                RequestTimedOutError(
                    f"{name} request to node {self.node_id} timed out "
                    f"(request.timeout.ms={self.request_timeout_ms}); disconnecting"
                )
            )
