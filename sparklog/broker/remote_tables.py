"""The broker's open topic tables (DESIGN D17): one `TopicTable` per topic per process, shared
by the remote log manager (copies, expiry) and the remote fetch path (reads).

Opening a table does I/O: `table` is called from worker threads only, never from the event
loop. The registry itself is thread-safe (a lock around its map; opening happens outside it,
so a slow object store does not hold other topics up).
"""

from __future__ import annotations

import functools
import importlib
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import cast

from sparklog.storage.remote.tier import TableOpener, TopicTable

logger = logging.getLogger(__name__)


def default_opener() -> TableOpener:
    """`storage.remote.table.open_topic_table` (imported late: it pulls `deltalake` in), with
    the table's own maintenance off: the remote log manager maintains each table from one
    broker (the leader of partition 0), so brokers never compact one table side by side."""
    module = importlib.import_module("sparklog.storage.remote.table")
    return cast(TableOpener, functools.partial(module.open_topic_table, maintenance_commits=0))


class RemoteTables:
    """Topic tables under `remote.table.root`, opened on first use and kept."""

    def __init__(
        self,
        root: str,
        storage_options: Mapping[str, str] | None = None,
        *,
        opener: TableOpener | None = None,
        topic_ids: Callable[[str], uuid.UUID | None] | None = None,
    ) -> None:
        self.root = root
        self.storage_options = dict(storage_options or {})
        self._opener = opener
        #: topic -> its current id (the broker's metadata); for `table_for`
        self._topic_ids = topic_ids
        self._lock = threading.Lock()
        self._tables: dict[str, TopicTable] = {}

    def table(self, topic: str, topic_id: uuid.UUID, *, create: bool = False) -> TopicTable:
        """The topic's table, opened on first use (created when missing if `create`: only a
        copying leader creates one); a table of an older topic id of the same name is
        replaced. Raises RemoteStorageError."""
        with self._lock:
            found = self._tables.get(topic)
        if found is not None and found.topic_id == topic_id:
            return found
        opener = self._opener or default_opener()
        opened = opener(
            self.root, topic, topic_id, storage_options=self.storage_options, create=create
        )
        with self._lock:
            current = self._tables.get(topic)
            if current is not None and current.topic_id == topic_id:
                return current  # another thread opened it first
            self._tables[topic] = opened
        logger.info("opened the remote tier of %s at %s", topic, opened.location)
        return opened

    def table_for(self, topic: str) -> TopicTable | None:
        """The table of `topic` under its current id (the fetch path's lookup), None when the
        broker knows no such topic."""
        topic_id = self._topic_ids(topic) if self._topic_ids is not None else None
        if topic_id is None:
            with self._lock:
                return self._tables.get(topic)
        return self.table(topic, topic_id)

    def opened(self, topic: str) -> TopicTable | None:
        """The table if it is open already (no I/O)."""
        with self._lock:
            return self._tables.get(topic)

    def forget(self, topic: str) -> None:
        """Drop the open table of `topic` (dropped, or the topic is gone)."""
        with self._lock:
            self._tables.pop(topic, None)
