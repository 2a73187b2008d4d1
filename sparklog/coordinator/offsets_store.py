"""The group coordinator's Delta table: one row per committed offset, group membership change or
deletion (DESIGN D8; schema in docs/groups.md). Written with `deltalake`, read by anything that
reads Delta.

The table is append-only: the live state is, per key, the row with the highest `sequence`
(key = group for `group` rows, (group, topic, partition) for `offset` rows; a row whose value
is null is a deletion). One `append(rows)` is one Delta commit, so callers batch many client
requests into one call (group commit). Every commit carries a Delta app transaction
(`APP_ID`, sequence of its last row): once a second coordinator (a zombie driver's successor)
has written, Delta's conflict check refuses the first one's next commit, which raises
`OffsetsStoreFencedError`.

On a local filesystem every commit is synced to disk before `append` returns, and opening the
table first checks its log for a torn or incomplete commit (`delta_log`), refusing with
`OffsetsTableDamagedError` (naming the file and the repair) rather than losing a commit
silently.

Every `offsets.table.maintenance.commits` commits a background thread compacts small files,
writes a checkpoint and vacuums, so loading and Spark reads stay fast however long the cluster
runs, and commits never wait for it.

Not thread-safe: one owner (the coordinator's flush thread) calls it.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from sparklog.coordinator.delta_log import (
    APP_ID,
    LAST_SEQUENCE_KEY,
    OffsetsTableDamagedError,
    check_log,
    commit_path,
    local_dir,
    sync_checkpoint,
    sync_commits,
)

logger = logging.getLogger(__name__)

_TS = pa.timestamp("us", tz="UTC")

#: The table's schema; columns may be added, never renamed or retyped.
SCHEMA = pa.schema(
    [
        pa.field("sequence", pa.int64(), nullable=False),
        pa.field("record_type", pa.string(), nullable=False),
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("committed_offset", pa.int64()),
        pa.field("leader_epoch", pa.int32()),
        pa.field("metadata", pa.string()),
        pa.field("commit_timestamp", _TS),
        pa.field("expire_timestamp", _TS),
        pa.field("group_metadata", pa.string()),
        # transactions (docs/transactions.md): `transaction` and `txn_offset` rows
        pa.field("transactional_id", pa.string()),
        pa.field("producer_id", pa.int64()),
        pa.field("producer_epoch", pa.int16()),
        pa.field("txn_state", pa.string()),
        pa.field("transaction_metadata", pa.string()),
    ]
)

#: Columns added after the first release: a table without them gains them on open.
_ADDED_COLUMNS = (
    "transactional_id",
    "producer_id",
    "producer_epoch",
    "txn_state",
    "transaction_metadata",
)


class OffsetsStoreFencedError(Exception):
    """Another writer committed to the offsets table since we last did: we are a zombie."""


def _ts(ms: int | None) -> datetime.datetime | None:
    if ms is None:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def _ms(value: Any) -> int | None:
    if value is None:
        return None
    return int(value.timestamp() * 1000)


class OffsetsStore:
    """Appends coordinator rows to a Delta table and reads them back in order."""

    def __init__(
        self,
        path: str | Path,
        *,
        maintenance_commits: int = 100,
        storage_options: dict[str, str] | None = None,
    ) -> None:
        from deltalake import DeltaTable

        self.path = str(path)
        self.storage_options = storage_options
        self.maintenance_commits = maintenance_commits
        #: where fsync applies (None: an object store, where a PUT is durable when it returns)
        self._local_dir = local_dir(self.path)
        if self._local_dir is not None:
            check_log(self._local_dir)
        if DeltaTable.is_deltatable(self.path, storage_options):
            self._table = DeltaTable(self.path, storage_options=storage_options)
            self._check_schema()
        else:
            if "://" not in self.path:
                Path(self.path).mkdir(parents=True, exist_ok=True)
            self._table = DeltaTable.create(
                self.path,
                SCHEMA,
                mode="ignore",
                name="sparklog_group_offsets",
                description="sparklog consumer-group offsets and membership (docs/groups.md)",
                storage_options=storage_options,
            )
        self._synced_version = self._table.version()
        if self._local_dir is not None:  # a new table, or one that just gained columns
            sync_commits(self._local_dir, self._synced_version, self._synced_version)
        self._last_version = self._table.transaction_version(APP_ID)
        self.next_sequence = 0 if self._last_version is None else self._last_version + 1
        self.commits = 0
        self._since_maintenance = 0
        self._maintenance: threading.Thread | None = None

    def _check_schema(self) -> None:
        have = {f.name for f in self._table.schema().fields}
        missing = [f.name for f in SCHEMA if f.name not in have]
        if missing and set(missing) <= set(_ADDED_COLUMNS):
            from deltalake import Field

            logger.info("adding columns %s to %s", ", ".join(missing), self.path)
            self._table.alter.add_columns(
                [Field.from_arrow(SCHEMA.field(name)) for name in missing]
            )
        elif missing:
            raise ValueError(
                f"{self.path} is a Delta table but not a sparklog offsets table (no column "
                f"{', '.join(missing)}); point offsets.table.path at another location"
            )

    # -- reads ------------------------------------------------------------------------------

    def read_rows(self) -> Iterator[dict[str, Any]]:
        """Every row, in sequence order, with timestamps as epoch milliseconds."""
        # to_pyarrow_table() can abort the interpreter at exit (a scanner thread left behind);
        # a single-threaded dataset scan does not
        table = self._table.to_pyarrow_dataset().to_table(use_threads=False)
        table = table.sort_by("sequence")
        self._check_sequences(table)
        for row in table.to_pylist():
            row["commit_timestamp_ms"] = _ms(row.pop("commit_timestamp"))
            row["expire_timestamp_ms"] = _ms(row.pop("expire_timestamp"))
            yield row

    def _check_sequences(self, table: pa.Table) -> None:
        """Every row's sequence is at most the app transaction's version: more means a commit
        kept its rows but lost its last line (the `txn` action), and the next append would
        reuse their sequences."""
        if table.num_rows == 0:
            return
        highest = table["sequence"][-1].as_py()
        if highest >= self.next_sequence:
            newest = self.version()
            where = commit_path(self._local_dir, newest) if self._local_dir else f"version {newest}"
            raise OffsetsTableDamagedError(
                f"The group coordinator's offsets table {self.path} is damaged: it holds rows up "
                f"to sequence {highest} but its app transaction ({APP_ID}) ends at "
                f"{self.next_sequence - 1}, so a commit lost its last line; the newest commit "
                f"is {where}. To repair: stop sparklog, move that commit out of _delta_log and "
                "start again; the rows of that one commit are lost."
            )

    # -- writes -----------------------------------------------------------------------------

    def append(self, rows: list[dict[str, Any]]) -> None:
        """Persist `rows` in one Delta commit (fenced if another writer got in first)."""
        from deltalake import (
            CommitProperties,
            PostCommitHookProperties,
            Transaction,
            write_deltalake,
        )

        if not rows:
            return
        first = self.next_sequence
        columns: dict[str, list[Any]] = {f.name: [] for f in SCHEMA}
        for i, row in enumerate(rows):
            columns["sequence"].append(first + i)
            for name in SCHEMA.names[1:]:
                if name == "commit_timestamp":
                    columns[name].append(_ts(row["commit_timestamp_ms"]))
                elif name == "expire_timestamp":
                    columns[name].append(_ts(row["expire_timestamp_ms"]))
                else:
                    columns[name].append(row.get(name))
        last = first + len(rows) - 1
        try:
            write_deltalake(
                self._table,
                pa.table(columns, schema=SCHEMA),
                mode="append",
                commit_properties=CommitProperties(
                    app_transactions=[Transaction(APP_ID, last)],
                    # what the commit must hold, for `delta_log.check_log` after a crash
                    custom_metadata={LAST_SEQUENCE_KEY: str(last)},
                ),
                # checkpoints and log cleanup happen in `maintain`, off the commit path
                post_commithook_properties=PostCommitHookProperties(
                    create_checkpoint=False, cleanup_expired_logs=False
                ),
            )
        except Exception as e:
            # Delta's conflict check: a commit since our snapshot carries our app id
            if "Concurrent transaction" in str(e):
                raise OffsetsStoreFencedError(
                    f"{self.path} was written by another group coordinator since this one last "
                    "did; this one stops serving"
                ) from e
            raise
        # the commit exists from here on, synced or not: its sequences are taken
        self._last_version = last
        self.next_sequence = last + 1
        self.commits += 1
        self._sync(self._table.version())  # raises when the disk fails: the caller answers so
        self._since_maintenance += 1
        if self._since_maintenance >= self.maintenance_commits and not self.maintaining():
            self._since_maintenance = 0
            self._maintenance = threading.Thread(
                target=self.maintain, name="sparklog-offsets-maintenance", daemon=True
            )
            self._maintenance.start()

    def _sync(self, version: int) -> None:
        """fsync every commit up to `version` not synced yet, with its data files (local
        paths only): the coordinator answers only after this returns."""
        if self._local_dir is not None and version > self._synced_version:
            sync_commits(self._local_dir, self._synced_version + 1, version)
        self._synced_version = max(self._synced_version, version)

    def maintaining(self) -> bool:
        return self._maintenance is not None and self._maintenance.is_alive()

    def wait_for_maintenance(self, timeout_s: float = 60.0) -> None:
        if self._maintenance is not None:
            self._maintenance.join(timeout_s)

    def maintain(self) -> None:
        """Compact small files, checkpoint, vacuum unreferenced files, drop old log entries.
        Runs beside appends on its own table handle (compaction and blind appends do not
        conflict in Delta), so commits never wait for it."""
        started = time.monotonic()
        try:
            maintain_table(self.path, self.storage_options, self._local_dir)
        except Exception:  # noqa: BLE001 - maintenance is best effort; commits carry on
            logger.exception("offsets table maintenance failed on %s; will retry", self.path)
            return
        logger.debug("offsets table maintenance took %.0f ms", (time.monotonic() - started) * 1e3)

    def version(self) -> int:
        return self._table.version()


def maintain_table(path: str, storage_options: dict[str, str] | None, local: Path | None) -> None:
    """Compact, checkpoint, vacuum and clean one Delta table's log on a handle of its own
    (compaction and blind appends do not conflict in Delta, so commits never wait for it);
    on a local table, the new commits and checkpoint are made durable before vacuum deletes
    the files they replaced. Raises what deltalake raises (callers log and retry later)."""
    from deltalake import DeltaTable

    table = DeltaTable(path, storage_options=storage_options)
    first = table.version() + 1
    table.optimize.compact()
    table.create_checkpoint()
    if local is not None:
        sync_commits(local, first, table.version())
        sync_checkpoint(local, table.version())
    # files replaced within the last hour stay, for readers that listed them
    table.vacuum(retention_hours=1, dry_run=False, enforce_retention_duration=False)
    table.cleanup_metadata()
