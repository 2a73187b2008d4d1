"""Run an asyncio server on a loop in its own daemon thread (the driver's controller and group
coordinator, and any embedded server): started when its `start()` coroutine returns, stopped
by running its `shutdown()` coroutine from another thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any


class LoopThread:
    """A daemon thread running one event loop for one server."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(
        self, start: Callable[[], Coroutine[Any, Any, None]], timeout_s: float | None
    ) -> asyncio.AbstractEventLoop:
        """Run `start()` on a new loop in a new thread; return once it returned (raising what
        it raised), leaving the loop running. `timeout_s` None: `start()` bounds itself."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self.loop = loop
            try:
                loop.run_until_complete(start())
            except BaseException as e:  # noqa: BLE001 - handed to the starting thread
                failure.append(e)
            ready.set()
            if not failure:
                loop.run_forever()
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s):
            raise TimeoutError(f"{self.name} did not start within {timeout_s} s")
        if failure:
            self._thread.join()
            raise failure[0]
        assert self.loop is not None
        return self.loop

    def stop(self, shutdown: Callable[[], Coroutine[Any, Any, None]], timeout_s: float) -> None:
        """Run `shutdown()` on the loop, then stop the loop and join the thread (also when the
        shutdown failed or timed out: its error is raised after)."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        assert threading.current_thread() is not self._thread, "stop() from the loop itself"
        try:
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout_s)
        finally:
            if self._thread is not None:
                loop.call_soon_threadsafe(loop.stop)
                self._thread.join(timeout_s)
                self._thread = None
