"""The future `KafkaProducer.send()` returns (Kafka's `FutureRecordMetadata`).

It behaves like `concurrent.futures.Future` for what producers use (`result(timeout)`,
`exception(timeout)`, `done()`, `add_done_callback(fn)`) but costs a few attribute writes to
create and resolve: every future of a producer shares one condition, which is notified only
while somebody waits. A `concurrent.futures.Future` builds its own condition and lock, and at
a million records a second those dominate the send path.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class Waiters:
    """The condition a producer's futures share, and how many threads wait on it."""

    __slots__ = ("lock", "cond", "count")

    def __init__(self) -> None:
        self.lock = threading.Lock()  # `with lock` costs less than `with cond`
        self.cond = threading.Condition(self.lock)
        self.count = 0


class RecordFuture:
    """Resolved once by calling it with (metadata, error), as the sender's thunks are."""

    __slots__ = ("_waiters", "_metadata", "_error", "_done", "_callbacks")

    def __init__(self, waiters: Waiters) -> None:
        self._waiters = waiters
        self._metadata: Any = None
        self._error: BaseException | None = None
        self._done = False
        self._callbacks: list[Callable[[RecordFuture], Any]] | None = None

    def __call__(self, metadata: Any, error: BaseException | None) -> None:
        w = self._waiters
        with w.lock:
            if self._done:
                return
            self._metadata, self._error, self._done = metadata, error, True
            callbacks, self._callbacks = self._callbacks, None
            if w.count:
                w.cond.notify_all()
        for fn in callbacks or ():
            self._run(fn)

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
        if self._done:
            return
        w = self._waiters
        with w.cond:
            w.count += 1
            try:
                if not w.cond.wait_for(lambda: self._done, timeout):
                    raise TimeoutError(f"the record was not acknowledged within {timeout} s")
            finally:
                w.count -= 1

    def _run(self, fn: Callable[[RecordFuture], Any]) -> None:
        try:
            fn(self)
        except Exception:
            log.exception("a done callback of a record future raised")

    def __repr__(self) -> str:
        state = "pending" if not self._done else ("failed" if self._error else "done")
        return f"<RecordFuture {state}>"
