"""The same Kafka request to Apache Kafka and to sparklog, responses as plain values.

`Pair` holds one protocol connection to each broker (sparklog's own `AsyncKafkaConnection`,
requests built with kio) and sends a request at the highest version both brokers and sparklog's
table share, so the two answers are comparable field by field. `plain()` turns kio objects into
dicts, lists and scalars; `without()` drops fields that legitimately differ (node ids, ports,
topic ids, throttle times, clocks).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import uuid
from collections.abc import Iterable
from typing import Any

from sparklog.protocol import codec, kio_build
from sparklog.protocol.api_versions import BROKER_APIS, ApiKey
from sparklog.protocol.async_client import AsyncKafkaConnection
from tests.integration.broker_wire import host_port

NAMES = ("kafka", "sparklog")


def plain(value: Any) -> Any:
    """A kio response (or part of one) as dicts, lists, ints, strings, bytes and None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bool) or value is None:
        return value
    for kind in (int, float, str, bytes):  # kio's i16/i32/... are subclasses
        if isinstance(value, kind):
            return kind(value)
    return value


def without(value: Any, fields: Iterable[str]) -> Any:
    """`value` with every dict key in `fields` removed, at any depth."""
    drop = set(fields)
    if isinstance(value, dict):
        return {k: without(v, drop) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [without(v, drop) for v in value]
    return value


class Pair:
    """A connection to each broker; `ask()` sends one request to both."""

    def __init__(self, brokers: dict[str, str]) -> None:
        self.brokers = brokers
        self.conns: dict[str, AsyncKafkaConnection] = {}

    async def __aenter__(self) -> Pair:
        for name in NAMES:
            host, port = host_port(self.brokers[name])
            self.conns[name] = await AsyncKafkaConnection(host, port, client_id="oracle").connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for conn in self.conns.values():
            await conn.close()

    def version(self, api_key: ApiKey) -> int:
        return min(c.version_for(api_key, BROKER_APIS[api_key]) for c in self.conns.values())

    async def ask(
        self, api_key: ApiKey, data: dict[str, Any], version: int | None = None
    ) -> dict[str, Any]:
        """name -> the plain response of that broker to the same request."""
        version = self.version(api_key) if version is None else version
        body = kio_build.build(codec.request_schema(api_key, version), data)
        answers = await asyncio.gather(*(self.conns[n].request(body) for n in NAMES))
        return {n: plain(a) for n, a in zip(NAMES, answers, strict=True)}

    async def ask_each(self, api_key: ApiKey, data: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """Like `ask`, with a request of its own for each broker (e.g. its own producer id)."""
        version = self.version(api_key)
        schema = codec.request_schema(api_key, version)
        answers = await asyncio.gather(
            *(self.conns[n].request(kio_build.build(schema, data[n])) for n in NAMES)
        )
        return {n: plain(a) for n, a in zip(NAMES, answers, strict=True)}


def run(coro: Any) -> Any:
    return asyncio.run(coro)
