"""A test-only throttle stage: a real broker answering a fixed `throttle_time_ms` to one
client id, so clients can be tested against throttling on their own."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from sparklog.protocol.connection import Request
from sparklog.protocol.pipeline import RequestStage


class FixedThrottle(RequestStage):
    """Throttles every `api_key` request of `client_id` by `throttle_ms`; notes when each
    such request reached the broker (its monotonic clock, ms)."""

    name = "throttle"

    def __init__(self, client_id: str, api_key: int, throttle_ms: int) -> None:
        self.client_id = client_id
        self.api_key = api_key
        self.throttle_ms = throttle_ms
        self.arrivals: list[float] = []

    def on_request(self, request: Request) -> None:
        if request.client_id == self.client_id and request.api_key == self.api_key:
            self.arrivals.append(time.monotonic() * 1000)
            request.context.throttle_time_ms = self.throttle_ms
        return None


@contextlib.contextmanager
def throttle_installer(cluster: Any) -> Iterator[Callable[[FixedThrottle], FixedThrottle]]:
    """`install(stage)` puts a `FixedThrottle` in the first broker's pipeline ("throttle"
    slot); the original pipeline is back when the context ends."""
    server = cluster.brokers[0].server
    original = server.pipeline

    def install(stage: FixedThrottle) -> FixedThrottle:
        server.pipeline = original.with_stage(stage)
        return stage

    try:
        yield install
    finally:
        server.pipeline = original
