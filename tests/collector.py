"""A consumer polling on its own thread through a fault, for failover tests: subclasses say
how to poll once and how to close; waiting and stopping are shared."""

from __future__ import annotations

import threading
import time
from typing import Any


class PollingCollector(threading.Thread):
    """Keeps every record `poll_once` returns; a failure ends the thread and fails `wait_for`."""

    def __init__(self, deadline_s: float) -> None:
        super().__init__(daemon=True)
        self.records: list[Any] = []
        self.error: object = None
        self.deadline_s = deadline_s
        self._changed = threading.Condition()
        self._stopping = threading.Event()

    def poll_once(self) -> list[Any]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def fail(self, error: object) -> None:
        """Record a failure seen while polling (the thread keeps going until stopped)."""
        with self._changed:
            self.error = error
            self._changed.notify_all()

    def run(self) -> None:
        try:
            while not self._stopping.is_set():
                got = self.poll_once()
                with self._changed:
                    self.records += got
                    self._changed.notify_all()
        except BaseException as e:  # noqa: BLE001 - reported by wait_for
            self.fail(e)
        finally:
            self.close()

    def wait_for(self, count: int) -> None:
        """Until `count` records arrived; fails on a consumer error or after the deadline."""
        deadline = time.monotonic() + self.deadline_s
        with self._changed:
            while len(self.records) < count and self.error is None:
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"the consumer got {len(self.records)} of {count} records"
                self._changed.wait(remaining)
        assert self.error is None, f"the consumer failed: {self.error!r}"

    def stop(self) -> list[Any]:
        self._stopping.set()
        self.join(self.deadline_s)
        return self.records
