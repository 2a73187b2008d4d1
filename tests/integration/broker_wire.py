"""Protocol-level helpers for broker integration tests: kio requests over AsyncKafkaConnection.

Every helper takes plain values and builds the request at the newest version both sides speak
(or the one given), so a test reads like the Kafka exchange it checks.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from typing import Any

from sparklog.protocol import codec, kio_build
from sparklog.protocol.api_versions import BROKER_APIS, ApiKey
from sparklog.protocol.async_client import AsyncKafkaConnection
from sparklog.records import SimpleRecord, build_batch, iter_batches


def host_port(bootstrap: str) -> tuple[str, int]:
    host, _sep, port = bootstrap.split(",")[0].rpartition(":")
    return host, int(port)


async def connect(bootstrap: str, client_id: str = "test") -> AsyncKafkaConnection:
    host, port = host_port(bootstrap)
    return await AsyncKafkaConnection(host, port, client_id=client_id).connect()


async def call(
    conn: AsyncKafkaConnection,
    api_key: ApiKey,
    data: dict[str, Any],
    version: int | None = None,
    timeout_s: float = 30.0,
) -> Any:
    if version is None:
        version = conn.version_for(api_key, BROKER_APIS[api_key])
    body = kio_build.build(codec.request_schema(api_key, version), data)
    return await conn.request(body, timeout_s=timeout_s)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def batch(values: list[bytes | None], **kwargs: Any) -> bytes:
    records = [SimpleRecord(v, key=kwargs.pop("key", None)) for v in values]
    return build_batch(records, now_ms=now_ms(), **kwargs)


async def create_topic(
    conn: AsyncKafkaConnection,
    name: str,
    partitions: int = 1,
    configs: dict[str, str] | None = None,
    replication_factor: int = 1,
) -> Any:
    response = await call(
        conn,
        ApiKey.CREATE_TOPICS,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": replication_factor,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
                }
            ],
            "timeout": 10_000,
            "validate_only": False,
        },
    )
    return response.topics[0]


async def metadata(
    conn: AsyncKafkaConnection, topics: list[str] | None, allow_auto: bool = True
) -> Any:
    return await call(
        conn,
        ApiKey.METADATA,
        {
            "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": allow_auto,
            "include_topic_authorized_operations": False,
        },
    )


async def produce(
    conn: AsyncKafkaConnection,
    topic: str,
    records: bytes | None,
    partition: int = 0,
    acks: int = 1,
    timeout_ms: int = 10_000,
    version: int | None = None,
    transactional_id: str | None = None,
) -> Any:
    """The partition response (None for acks=0)."""
    body = kio_build.build(
        codec.request_schema(
            ApiKey.PRODUCE, version or conn.version_for(ApiKey.PRODUCE, BROKER_APIS[ApiKey.PRODUCE])
        ),
        {
            "transactional_id": transactional_id,
            "acks": acks,
            "timeout": timeout_ms,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": records}]}
            ],
        },
    )
    if acks == 0:
        await _send_without_response(conn, body)
        return None
    response = await conn.request(body)
    return response.responses[0].partition_responses[0]


async def _send_without_response(conn: AsyncKafkaConnection, body: Any) -> None:
    # AsyncKafkaConnection expects a response to every request; acks=0 gets none.
    _correlation_id, data = conn._conn.send_request(body, expects_response=False)
    assert conn._writer is not None
    conn._writer.write(data)
    await conn._writer.drain()


async def fetch(
    conn: AsyncKafkaConnection,
    topic: str,
    offset: int,
    partition: int = 0,
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 50 * 1024 * 1024,
    partition_max_bytes: int = 1024 * 1024,
    isolation_level: int = 0,
    current_leader_epoch: int = -1,
    session_id: int = 0,
    session_epoch: int = -1,
    version: int | None = None,
) -> Any:
    """The partition data of a one-partition Fetch (the whole response when it failed)."""
    response = await call(
        conn,
        ApiKey.FETCH,
        {
            "replica_id": -1,
            "max_wait": max_wait_ms,
            "min_bytes": min_bytes,
            "max_bytes": max_bytes,
            "isolation_level": isolation_level,
            "session_id": session_id,
            "session_epoch": session_epoch,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": partition,
                            "current_leader_epoch": current_leader_epoch,
                            "fetch_offset": offset,
                            "partition_max_bytes": partition_max_bytes,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
        },
        version=version,
        timeout_s=30 + max_wait_ms / 1000,
    )
    if getattr(response, "error_code", 0) or not response.responses:
        return response
    return response.responses[0].partitions[0]


def records_of(data: bytes) -> list[Any]:
    """Every record in fetched bytes (a partial tail ignored)."""
    out = []
    for b in iter_batches(data, allow_partial_tail=True):
        b.ensure_valid()
        out.extend(b.records())
    return out


async def list_offset(
    conn: AsyncKafkaConnection,
    topic: str,
    timestamp: int,
    partition: int = 0,
    isolation_level: int = 0,
) -> Any:
    response = await call(
        conn,
        ApiKey.LIST_OFFSETS,
        {
            "replica_id": -1,
            "isolation_level": isolation_level,
            "topics": [
                {
                    "name": topic,
                    "partitions": [{"partition_index": partition, "timestamp": timestamp}],
                }
            ],
        },
    )
    return response.topics[0].partitions[0]


def raw_socket(bootstrap: str) -> socket.socket:
    sock = socket.create_connection(host_port(bootstrap), timeout=10)
    return sock


def frame(api_key: int, version: int, correlation_id: int, payload: bytes = b"") -> bytes:
    """A request frame with a v1 header (no client id) and `payload` as its body."""
    body = struct.pack(">hhih", api_key, version, correlation_id, -1) + payload
    return struct.pack(">i", len(body)) + body


def read_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", _read_exactly(sock, 4))[0]
    return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def closed_by_peer(sock: socket.socket, timeout_s: float = 10.0) -> bool:
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def run(coro: Any) -> Any:
    return asyncio.run(coro)
