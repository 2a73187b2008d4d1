"""The audit trail's Delta table on the driver (DESIGN D16, docs/security.md "Audit trail"):
every authentication failure, denied request and ACL or credential change of the cluster, one
row each, append-only, queryable with Spark SQL (`sparklog.audit_df(spark)`).

Theory of operation. `DeltaAuditSink` is the driver's `AuditSink`: the controller, the
coordinator and (through AuditEvents requests, `sparklog_apis`) every broker hand it events.
`record` only puts the event in a bounded buffer (`BufferedAuditSink`: full means dropped and
counted, never a stalled request). A writer thread of its own commits the buffer the way the
coordinator's runtime commits offsets (`runtime.py`): it wakes on the first event, lingers
`offsets.commit.linger.ms` so that many events share one commit (group commit), appends at
most `max_rows_per_commit` rows per Delta commit and syncs the commit to disk
(`delta_log.sync_commits`) on a local filesystem. It is a sibling of the offsets writer, not
that writer: an audit burst never delays an offset commit, and the audit table's commits
cannot conflict with the offsets table's fencing. Drops are recorded in the table itself (an
`EVENTS_DROPPED` row saying how many and where), so a gap in the trail is visible in it.

The table is created on the first event (a cluster without security never makes one) at
`audit.table.path`, by default beside the offsets table (`<metadata.log.dir>/__audit_log`).
It is only ever appended to (blind appends: a second driver writing to it does not conflict);
every `offsets.table.maintenance.commits` commits a background thread compacts, checkpoints and
vacuums it, off the commit path, as `OffsetsStore` does.

A failed append is retried (with a backoff) while new events wait in the bounded buffer; at
close, what cannot be written is logged as lost.

Thread-safety: `record` from any thread; the writer thread alone touches the table handle.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from sparklog.coordinator.delta_log import local_dir, sync_commits
from sparklog.coordinator.offsets_store import maintain_table
from sparklog.security.audit import (
    AuditConfig,
    AuditEvent,
    BufferedAuditSink,
    dropped_event,
)
from sparklog.settings import ConfigType, Scope, Setting, define
from sparklog.storage.object_store import join_location

logger = logging.getLogger(__name__)

AUDIT_TABLE_SETTINGS = define(
    Setting(
        "audit.table.path",
        ConfigType.STRING,
        None,
        doc="sparklog's own: the audit trail's Delta table (default "
        "<metadata.log.dir>/__audit_log, beside the offsets table)",
        scope=Scope.COORDINATOR,
        group="audit",
    ),
)

#: The table's schema; columns may be added, never renamed or retyped.
SCHEMA = pa.schema(
    [
        pa.field("time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("principal", pa.string()),
        pa.field("client_address", pa.string()),
        pa.field("listener", pa.string()),
        pa.field("api", pa.string()),
        pa.field("resource_type", pa.string()),
        pa.field("resource_name", pa.string()),
        pa.field("operation", pa.string()),
        pa.field("decision", pa.string(), nullable=False),
        pa.field("node_id", pa.int32()),
        pa.field("detail", pa.string()),
    ]
)
_TEXT_COLUMNS = SCHEMA.names[1:9] + ["detail"]

#: rows per Delta commit at most (a bigger backlog takes several commits)
MAX_ROWS_PER_COMMIT = 50_000
#: how long the writer waits before retrying a failed append
RETRY_BACKOFF_S = 1.0


def audit_table_path(config: Mapping[str, object], home: str) -> str:
    """`audit.table.path`, else `<home>/__audit_log` (`home`: where the offsets table is)."""
    path = AUDIT_TABLE_SETTINGS.parse(config, unknown="ignore").get("audit_table_path")
    return str(path) if path else join_location(home, "__audit_log")


def _arrow(events: list[AuditEvent]) -> pa.Table:
    columns: dict[str, list[Any]] = {
        "time": [
            datetime.datetime.fromtimestamp(e.time_ms / 1000, tz=datetime.UTC) for e in events
        ],
        "node_id": [e.node_id for e in events],
    }
    for name in _TEXT_COLUMNS:
        columns[name] = [getattr(e, name) for e in events]
    return pa.table({name: columns[name] for name in SCHEMA.names}, schema=SCHEMA)


class AuditStore:
    """The audit Delta table: created on the first `append`, only ever appended to."""

    def __init__(
        self,
        path: str,
        *,
        maintenance_commits: int = 100,
        storage_options: dict[str, str] | None = None,
    ) -> None:
        self.path = path
        self.storage_options = storage_options
        self.maintenance_commits = maintenance_commits
        self._local_dir = local_dir(path)
        self._table: Any = None  # the writer's one long-lived handle (deltalake.DeltaTable)
        self.commits = 0
        self._since_maintenance = 0
        self._maintenance: threading.Thread | None = None

    def _open(self) -> Any:
        from deltalake import DeltaTable

        if DeltaTable.is_deltatable(self.path, self.storage_options):
            table = DeltaTable(self.path, storage_options=self.storage_options)
            have = {f.name for f in table.schema().fields}
            missing = [name for name in SCHEMA.names if name not in have]
            if missing:
                raise ValueError(
                    f"{self.path} is a Delta table but not a sparklog audit table (no column "
                    f"{', '.join(missing)}); point audit.table.path at another location"
                )
            return table
        if "://" not in self.path:
            Path(self.path).mkdir(parents=True, exist_ok=True)
        table = DeltaTable.create(
            self.path,
            SCHEMA,
            mode="ignore",
            name="sparklog_audit_log",
            description="sparklog's audit trail: authentication failures, denials, ACL and "
            "credential changes (docs/security.md)",
            storage_options=self.storage_options,
        )
        if self._local_dir is not None:
            sync_commits(self._local_dir, table.version(), table.version())
        return table

    def append(self, events: list[AuditEvent]) -> None:
        """Persist `events` in one Delta commit, synced to disk on a local filesystem."""
        from deltalake import PostCommitHookProperties, write_deltalake

        if not events:
            return
        if self._table is None:
            self._table = self._open()
        before = self._table.version()
        write_deltalake(
            self._table,
            _arrow(events),
            mode="append",
            # checkpoints and log cleanup happen in `maintain`, off the commit path
            post_commithook_properties=PostCommitHookProperties(
                create_checkpoint=False, cleanup_expired_logs=False
            ),
        )
        if self._local_dir is not None:
            sync_commits(self._local_dir, before + 1, self._table.version())
        self.commits += 1
        self._since_maintenance += 1
        if self._since_maintenance >= self.maintenance_commits > 0 and not self.maintaining():
            self._since_maintenance = 0
            self._maintenance = threading.Thread(
                target=self.maintain, name="sparklog-audit-maintenance", daemon=True
            )
            self._maintenance.start()

    def maintaining(self) -> bool:
        return self._maintenance is not None and self._maintenance.is_alive()

    def wait_for_maintenance(self, timeout_s: float = 60.0) -> None:
        if self._maintenance is not None:
            self._maintenance.join(timeout_s)

    def maintain(self) -> None:
        """Compact, checkpoint, vacuum and clean the log on a handle of its own (compaction and
        blind appends do not conflict in Delta), so commits never wait for it."""
        try:
            maintain_table(self.path, self.storage_options, self._local_dir)
        except Exception:  # noqa: BLE001 - maintenance is best effort; commits carry on
            logger.exception("audit table maintenance failed on %s; will retry", self.path)


class AuditReader:
    """Reads the audit table with one long-lived handle brought up to date incrementally."""

    def __init__(self, path: str, storage_options: dict[str, str] | None = None) -> None:
        self.path = path
        self.storage_options = storage_options
        self._table: Any = None
        self._lock = threading.Lock()

    def read(self) -> pa.Table:
        """Every row so far (an empty table with the schema before the first commit)."""
        from deltalake import DeltaTable

        with self._lock:
            if self._table is None:
                if not DeltaTable.is_deltatable(self.path, self.storage_options):
                    return SCHEMA.empty_table()
                self._table = DeltaTable(self.path, storage_options=self.storage_options)
            else:
                self._table.update_incremental()
            # to_pyarrow_table() can abort the interpreter at exit (a scanner thread left
            # behind); a single-threaded dataset scan does not
            return self._table.to_pyarrow_dataset().to_table(use_threads=False)


class DeltaAuditSink(BufferedAuditSink):
    """The driver's audit sink: a bounded buffer and a writer thread group-committing it to the
    `AuditStore` (see module doc). `start()` runs the writer, `close()` writes what is left."""

    def __init__(
        self,
        store: AuditStore,
        *,
        linger_ms: int = 2,
        max_events: int = AuditConfig().audit_buffer_max_events,
        max_rows_per_commit: int = MAX_ROWS_PER_COMMIT,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        node_id: int = -1,
    ) -> None:
        self._wanted = threading.Event()
        super().__init__(max_events, wake=self._wanted.set)
        self.store = store
        self.linger_ms = linger_ms
        self.max_rows_per_commit = max_rows_per_commit
        self.now_ms = now_ms
        self.node_id = node_id
        #: events committed to the table, and given up on (the table unwritable at close)
        self.written = 0
        self.lost = 0
        self._done = threading.Condition()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def path(self) -> str:
        return self.store.path

    def start(self) -> DeltaAuditSink:
        self._thread = threading.Thread(target=self._run, name="sparklog-audit-writer", daemon=True)
        self._thread.start()
        return self

    def close(self, timeout_s: float = 30.0) -> None:
        """Write what is buffered (one attempt), then stop the writer and its upkeep."""
        self._closing.set()
        self._wanted.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        else:
            self._write_all()
        self.store.wait_for_maintenance(timeout_s)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every event recorded so far is written (or given up on); False if
        `timeout_s` passed first. For tests and shutdown: `record` never waits."""
        target = self.recorded
        self._wanted.set()
        with self._done:
            return self._done.wait_for(lambda: self.written + self.lost >= target, timeout_s)

    def statistics(self) -> dict[str, int]:
        return {
            **super().statistics(),
            "written": self.written,
            "lost": self.lost,
            "commits": self.store.commits,
        }

    # -- the writer thread ------------------------------------------------------------------

    def _run(self) -> None:
        while not self._closing.is_set():
            self._wanted.wait()
            self._wanted.clear()
            if self.linger_ms > 0:  # group commit: let more events join this one
                self._closing.wait(self.linger_ms / 1000)
            self._write_all()
        self._write_all()

    def _write_all(self) -> None:
        while True:
            events = self.drain(self.max_rows_per_commit)
            dropped = self.take_dropped()
            if dropped:
                events.append(dropped_event(self.now_ms(), dropped, self.node_id, "driver's"))
                logger.warning("%d audit events were dropped (buffers full)", dropped)
            if not events:
                return
            counted = len(events) - (1 if dropped else 0)
            self._append(events, counted)

    def _append(self, events: list[AuditEvent], counted: int) -> None:
        failures = 0
        while True:
            try:
                self.store.append(events)
            except Exception as e:  # noqa: BLE001 - keep the events, retry; the buffer bounds the rest
                failures += 1
                if self._closing.is_set():
                    logger.error(
                        "writing %d audit events to %s failed (%s); they are lost",
                        len(events),
                        self.path,
                        e,
                    )
                    self._finish(lost=counted)
                    return
                if failures == 1:  # once per outage, not once a second
                    logger.error(
                        "writing %d audit events to %s failed; retrying every %.0f s while "
                        "new events wait (at most audit.buffer.max.events, then dropped and "
                        "counted)",
                        len(events),
                        self.path,
                        RETRY_BACKOFF_S,
                        exc_info=True,
                    )
                self._closing.wait(RETRY_BACKOFF_S)
                continue
            if failures:
                logger.info("the audit table %s is writable again", self.path)
            self._finish(written=counted)
            return

    def _finish(self, written: int = 0, lost: int = 0) -> None:
        with self._done:
            self.written += written
            self.lost += lost
            self._done.notify_all()
