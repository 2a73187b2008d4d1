"""The log cleaner's thread (Kafka's `LogCleaner` with one `CleanerThread`): rounds of
`cleaner.Cleaner` over the dirtiest compacted log chosen by `cleaner_manager.CleanerManager`,
then retention of the compacted logs, a backoff when there is nothing to clean, settings
applied between rounds (`reconfigure`), and a clean stop that abandons a round in progress.
See `cleaner.py` for what a round does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparklog.storage.cleaner import Cleaner, CleanerConfig
from sparklog.storage.cleaner_manager import CleanerManager, LogCleaningAbortedError, LogToClean
from sparklog.storage.offset_map import CleanerStats
from sparklog.structs import TopicPartition

if TYPE_CHECKING:
    from sparklog.storage.log import Log

logger = logging.getLogger(__name__)

__all__ = ["CleanResult", "LogCleaner"]


@dataclass(frozen=True, slots=True)
class CleanResult:
    """One finished round: the log, the dirty range it started from, where the next starts."""

    topic_partition: TopicPartition
    first_dirty_offset: int
    end_offset: int
    stats: CleanerStats


class _CleanerShutdown(Exception):
    """`stop()` was called while a round ran (Kafka's `ThreadShutdownException`)."""


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class LogCleaner:
    """Compacts the logs it is given on a background thread (Kafka's `LogCleaner` with one
    `CleanerThread`): each round cleans the dirtiest compacted log, then runs retention
    (`delete_old_segments`) on the compacted logs, so cleaning and retention of a compacted log
    never overlap. With nothing to clean it sleeps `log.cleaner.backoff.ms`.

    A failed round marks its partition uncleanable (Kafka does the same) and is counted in
    `statistics()`; the thread keeps running.
    """

    def __init__(
        self,
        config: CleanerConfig | None = None,
        *,
        persist_checkpoints: bool = True,
        clock_ms: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        self.config = config or CleanerConfig()
        self.manager = CleanerManager(persist_checkpoints=persist_checkpoints)
        self.cleaner = Cleaner(self.config, check_done=self._check_done)
        self._clock_ms = clock_ms
        self._stopping = threading.Event()
        self._wakeup = threading.Event()  # stop() or reconfigure() ends a backoff sleep
        self._pending: CleanerConfig | None = None  # set by reconfigure(), taken by a round
        self._pending_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._rounds = 0
        self._aborted_rounds = 0
        self._errors: list[str] = []
        self.last_result: CleanResult | None = None

    # -- logs (delegated to the manager) -------------------------------------------------------

    def add_log(self, log_: Log, topic_partition: TopicPartition | None = None) -> TopicPartition:
        return self.manager.add_log(log_, topic_partition)

    def remove_log(self, topic_partition: TopicPartition) -> None:
        self.manager.remove_log(topic_partition)

    def abort_and_pause_cleaning(self, topic_partition: TopicPartition) -> None:
        self.manager.abort_and_pause_cleaning(topic_partition)

    def resume_cleaning(self, topic_partition: TopicPartition) -> None:
        self.manager.resume_cleaning([topic_partition])

    # -- running -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the background thread."""
        assert self._thread is None, "LogCleaner.start called twice"
        self._stopping.clear()
        self._thread = threading.Thread(
            target=self._run, name="kafka-log-cleaner-thread-0", daemon=True
        )
        self._thread.start()

    def reconfigure(self, config: CleanerConfig) -> None:
        """New `log.cleaner.*` settings, set dynamically (Kafka's `LogCleaner.reconfigure`,
        which restarts its threads): a round in progress finishes with the old ones, the next
        round builds its offset map with the new ones; a backoff sleep ends at once."""
        with self._pending_lock:
            if config == (self._pending or self.config):
                return
            self._pending = config
        logger.info("log cleaner reconfigured: %s", config)
        if self._thread is None:
            self._take_pending()
        self._wakeup.set()

    def _take_pending(self) -> None:
        with self._pending_lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            self.config = pending
            self.cleaner = Cleaner(pending, check_done=self._check_done)

    def stop(self) -> None:
        """Stop the thread and wait for it; a round in progress is abandoned cleanly."""
        self._stopping.set()
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                result = self.clean_once(self._clock_ms())
            except _CleanerShutdown:
                return
            except Exception as e:  # noqa: BLE001 - the thread must survive any one failure
                logger.exception("log cleaner round failed")
                self._errors.append(repr(e))
                result = None
            if result is None:
                self._wakeup.wait(self.config.backoff_ms / 1000)
                self._wakeup.clear()

    def clean_once(self, now_ms: int) -> CleanResult | None:
        """One round: clean the dirtiest log if any qualifies, then retention of compacted logs."""
        self._take_pending()
        result = None
        cleanable = self.manager.grab_filthiest_compacted_log(now_ms)
        if cleanable is not None:
            result = self._clean(cleanable, now_ms)
        deletable = self.manager.deletable_logs()
        try:
            for tp, log_ in deletable:
                try:
                    log_.delete_old_segments(now_ms)
                except Exception as e:  # noqa: BLE001 - one log's failure must not stop others
                    logger.exception("retention of %s failed", tp)
                    self._errors.append(repr(e))
        finally:
            self.manager.done_deleting(tp for tp, _ in deletable)
        return result

    def _clean(self, cleanable: LogToClean, now_ms: int) -> CleanResult | None:
        tp = cleanable.topic_partition
        end_offset = cleanable.first_dirty_offset
        result = None
        try:
            end_offset, stats = self.cleaner.clean(cleanable, now_ms)
            result = CleanResult(tp, cleanable.first_dirty_offset, end_offset, stats)
            self.last_result = result
            self._rounds += 1
        except LogCleaningAbortedError as e:
            logger.info("cleaning of %s given up: %s", tp, e)
            self._aborted_rounds += 1
        except _CleanerShutdown:
            raise
        except Exception as e:  # noqa: BLE001 - Kafka marks the partition uncleanable
            logger.exception("cleaning of %s failed; marking it uncleanable", tp)
            self._errors.append(repr(e))
            self.manager.mark_partition_uncleanable(tp)
        finally:
            self.manager.done_cleaning(tp, end_offset)
        return result

    def _check_done(self, topic_partition: TopicPartition) -> None:
        if self._stopping.is_set():
            raise _CleanerShutdown()
        self.manager.check_cleaning_aborted(topic_partition)

    def statistics(self) -> dict[str, object]:
        """Rounds done and given up, errors seen, the dirtiest ratio of the last round."""
        return {
            "rounds": self._rounds,
            "aborted_rounds": self._aborted_rounds,
            "errors": list(self._errors),
            "max_dirty_ratio": self.manager.dirtiest_log_cleanable_ratio,
            "uncleanable_partitions": sorted(self.manager.uncleanable_partitions()),
        }
