"""A log dir that failed (Kafka's `LogDirFailureChannel`): the first I/O error in it (a full
disk, EIO) takes the whole dir offline, once, with one log line.

From then on the broker touches nothing in it: produce, fetch and follower appends answer
KAFKA_STORAGE_ERROR at once, background work stops, and the broker's heartbeats ask the
controller to fence it, so leaderships move to replicas on healthy disks while the process
keeps running (sparklog has one log dir per broker, so the broker's replicas all go; Kafka
with JBOD reports the dir instead, and with a single dir halts the broker). Once the disk is
fixed, restarting the broker recovers the logs and the replicas catch up and rejoin the ISR.

Thread-safety: `mark_offline` may be called from any thread; listeners run in that thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from sparklog.errors import KafkaStorageError

logger = logging.getLogger(__name__)


class LogDirFailureChannel:
    """Whether the broker's log dir is offline, and why."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.reason: str | None = None
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], object]] = []

    @property
    def offline(self) -> bool:
        return self.reason is not None

    def add_listener(self, listener: Callable[[], object]) -> None:
        """Call `listener()` when the dir goes offline (e.g. to send a heartbeat now)."""
        self._listeners.append(listener)

    def mark_offline(self, error: OSError, what: str) -> None:
        """The dir failed while doing `what`; the first call logs and notifies, later ones
        do nothing."""
        with self._lock:
            if self.reason is not None:
                return
            self.reason = f"{what}: {error}"
        logger.error(
            "log dir %s is offline after an I/O error (%s); its partitions answer "
            "KAFKA_STORAGE_ERROR and the broker asks the controller to move its leaderships "
            "away; free space or replace the disk, then restart the broker",
            self.log_dir,
            self.reason,
        )
        for listener in self._listeners:
            listener()

    def check(self) -> None:
        """Raise KafkaStorageError when the dir is offline."""
        if self.reason is not None:
            raise KafkaStorageError(f"log dir {self.log_dir} is offline ({self.reason})")
