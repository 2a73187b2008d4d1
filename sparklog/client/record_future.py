"""The future `KafkaProducer.send()` returns (Kafka's `FutureRecordMetadata`).

It behaves like `concurrent.futures.Future` for what producers use (`result(timeout)`,
`exception(timeout)`, `done()`, `add_done_callback(fn)`) but costs a few attribute writes to
create and resolve: every future of a producer shares one condition, which is notified only
while somebody waits. A `concurrent.futures.Future` builds its own condition and lock, and at
a million records a second those dominate the send path.

The native core (`sparklog_native.RecordFuture`, same methods) is used when it is built: a
producer keeps every future until its batch is acknowledged, and Python objects kept that long
are scanned by each garbage collection, which then costs more than the send itself. The
native class is not tracked by the collector. This module is its reference.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from sparklog.records import native

logger = logging.getLogger(__name__)


class Waiters:
    """The condition a producer's futures share, and how many threads wait on it."""

    __slots__ = ("lock", "cond", "count")

    def __init__(self) -> None:
        self.lock = threading.Lock()  # `with lock` costs less than `with cond`
        self.cond = threading.Condition(self.lock)
        self.count = 0

    def wait(self, future: Any, timeout: float | None) -> bool:
        """Block until `future.done()` or `timeout` seconds pass; whether it is done."""
        with self.cond:
            self.count += 1
            try:
                return self.cond.wait_for(future.done, timeout)
            finally:
                self.count -= 1

    def notify_all(self) -> None:
        with self.cond:
            self.cond.notify_all()


Delivery = Callable[[Any, BaseException | None], Any]


class RecordFuture:
    """Resolved once by calling it with (metadata, error), as the sender's thunks are, or with
    its batch's futures by `resolve_all`. `on_delivery(metadata, error)` runs after the done
    callbacks (held here rather than in a closure: one object per record, not four)."""

    __slots__ = ("_waiters", "_metadata", "_error", "_done", "_callbacks", "_on_delivery")

    def __init__(self, waiters: Waiters, on_delivery: Delivery | None = None) -> None:
        self._waiters = waiters
        self._metadata: Any = None
        self._error: BaseException | None = None
        self._done = False
        self._callbacks: list[Callable[[RecordFuture], Any]] | None = None
        self._on_delivery = on_delivery

    def __call__(self, metadata: Any, error: BaseException | None) -> None:
        w = self._waiters
        with w.lock:
            if self._done:
                return
            self._metadata, self._error, self._done = metadata, error, True
            callbacks, self._callbacks = self._callbacks, None
            if w.count:
                w.cond.notify_all()
        self._after(callbacks)

    def _after(self, callbacks: list[Callable[[RecordFuture], Any]] | None) -> None:
        """Run the done callbacks, then `on_delivery`, outside the lock."""
        for fn in callbacks or ():
            self._run(fn)
        if self._on_delivery is not None:
            try:
                self._on_delivery(self._metadata, self._error)
            except Exception:
                logger.exception("on_delivery callback raised")

    def done(self) -> bool:
        return self._done

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self._done

    def cancel(self) -> bool:
        """Records already handed to the producer cannot be cancelled (as in Kafka)."""
        return False

    def result(self, timeout: float | None = None) -> Any:
        """The record's metadata, waiting up to `timeout` seconds; raises the send's error."""
        self._wait(timeout)
        if self._error is not None:
            raise self._error
        return self._metadata

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._error

    def add_done_callback(self, fn: Callable[[RecordFuture], Any]) -> None:
        """Call `fn(future)` once resolved (at once when it already is)."""
        with self._waiters.lock:
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        self._run(fn)

    def _wait(self, timeout: float | None) -> None:
        if not self._done and not self._waiters.wait(self, timeout):
            raise TimeoutError(f"the record was not acknowledged within {timeout} s")

    def _run(self, fn: Callable[[RecordFuture], Any]) -> None:
        try:
            fn(self)
        except Exception:
            logger.exception("a done callback of a record future raised")

    def __repr__(self) -> str:
        state = "pending" if not self._done else ("failed" if self._error else "done")
        return f"<RecordFuture {state}>"


def resolve_all(futures: list[Any], metadatas: list[Any]) -> None:
    """Resolve a batch's futures (all of one producer) under one lock acquisition, then run
    their callbacks: the per-record cost is a few attribute writes. Other thunks in the list
    are called with (metadata, None) after that."""
    if not futures:
        return
    pending: list[tuple[RecordFuture, list | None]] = []
    others: list[tuple[Any, Any]] = []
    w: Waiters | None = None
    for future, metadata in zip(futures, metadatas, strict=True):
        if type(future) is not RecordFuture:
            others.append((future, metadata))
        elif w is None:
            w = future._waiters
    if w is not None:
        with w.lock:
            for future, metadata in zip(futures, metadatas, strict=True):
                if type(future) is not RecordFuture or future._done:
                    continue
                future._metadata, future._done = metadata, True
                if future._callbacks is not None or future._on_delivery is not None:
                    pending.append((future, future._callbacks))
                    future._callbacks = None
            if w.count:
                w.cond.notify_all()
    for future, callbacks in pending:
        future._after(callbacks)
    for thunk, metadata in others:
        thunk(metadata, None)


def future_class() -> type:
    """The native future when the core is built, else `RecordFuture`."""
    core = native.core()
    return RecordFuture if core is None else core.RecordFuture


def resolve_batch(futures: list[Any], metadatas: list[Any]) -> None:
    """`resolve_all` of the kind of futures the list holds."""
    core = native.core()
    if futures and core is not None and type(futures[0]) is core.RecordFuture:
        core.resolve_all(futures, metadatas)
    else:
        resolve_all(futures, metadatas)
