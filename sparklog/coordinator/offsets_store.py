"""The group coordinator's Delta table: one row per committed offset, group membership change or
deletion (DESIGN D8; schema in docs/groups.md). Written with `deltalake`, read by anything that
reads Delta.

The table is append-only: the live state is, per key, the row with the highest `sequence`
(key = group for `group` rows, (group, topic, partition) for `offset` rows; a row whose value
is null is a deletion). Callers batch many client requests into one commit (group commit),
in three steps the runtime pipelines (`store.CoordinatorStore`): `prepare(rows)` numbers the
rows and writes their Parquet file into the table's directory (built column by column with
Arrow, not row by row); `commit(prepared)` adds one or more prepared files in ONE Delta commit
(`create_write_transaction` on one long-lived table handle); `sync(version)` makes it durable.
`append(rows)` does all three. Every commit carries a Delta app transaction (`APP_ID`,
sequence of its last row): once a second coordinator (a zombie driver's successor) has
written, Delta's conflict check refuses the first one's next commit, which raises
`OffsetsStoreFencedError`; a successor's commit that lands right after ours (read back when
the handle catches up with our own commit) refuses our next one the same way. A prepared file
never committed (fenced, or a crash in between) is in no commit: readers never see it and
`maintain`'s vacuum deletes it.

On a local filesystem `sync` fsyncs every commit and its files before the runtime answers,
and opening the table first checks its log for a torn or incomplete commit (`delta_log`),
refusing with `OffsetsTableDamagedError` (naming the file and the repair) rather than losing a
commit silently.

Every `offsets.table.maintenance.commits` commits a background thread compacts small files,
writes a checkpoint and vacuums, so loading and Spark reads stay fast however long the cluster
runs, and commits never wait for it.

Thread-safety: one owner, up to three threads, one per step: `prepare` (and `discard`) keep to
the next sequence to hand out and the files they write, `commit` to the table handle and the
committed sequence, `sync` to the synced version; each step is called by one thread at a time.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

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
from sparklog.coordinator.store import PreparedAppend
from sparklog.storage.object_store import open_object_store

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


#: the size compaction makes files (Delta's default, 100 MiB, would rewrite a table of less
#: than that at every maintenance: what a coordinator commits in hours)
COMPACTED_FILE_BYTES = 8 * 1024 * 1024


class OffsetsStoreFencedError(Exception):
    """Another writer committed to the offsets table since we last did: we are a zombie."""


#: integer columns whose min/max go into a data file's Delta stats (file skipping for readers)
_STATS_COLUMNS = ("sequence", "partition", "committed_offset", "leader_epoch", "producer_id")
_TIMESTAMP_COLUMNS = ("commit_timestamp", "expire_timestamp")


def arrow_rows(rows: list[dict[str, Any]], first_sequence: int) -> pa.Table:
    """`rows` as a table of `SCHEMA`, numbered from `first_sequence`: built column by column
    (one list per column, timestamps converted by Arrow), not row by row."""
    columns: list[pa.Array] = [
        pa.array(range(first_sequence, first_sequence + len(rows)), pa.int64())
    ]
    for field in list(SCHEMA)[1:]:
        if field.name in _TIMESTAMP_COLUMNS:
            millis = pa.array([row[field.name + "_ms"] for row in rows], pa.int64())
            columns.append(pc.multiply(millis, 1000).cast(_TS))
        else:
            columns.append(pa.array([row.get(field.name) for row in rows], field.type))
    return pa.Table.from_arrays(columns, schema=SCHEMA)


@dataclasses.dataclass(frozen=True, slots=True)
class _DataFile:
    """A prepared append's Parquet file in the table's directory (not yet added)."""

    name: str
    size: int
    #: Delta file statistics (JSON), for readers' file skipping
    stats: str

    def add_action(self) -> Any:
        from deltalake.transaction import AddAction

        return AddAction(
            self.name,
            self.size,
            {},
            int(time.time() * 1000),
            True,
            self.stats,
        )


def _stats(table: pa.Table) -> dict[str, Any]:
    """Delta file statistics: row count, null counts, min/max of the integer columns."""
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    for name in _STATS_COLUMNS:
        bounds = pc.min_max(table[name])
        if bounds["min"].is_valid:
            low[name], high[name] = bounds["min"].as_py(), bounds["max"].as_py()
    return {
        "numRecords": table.num_rows,
        "minValues": low,
        "maxValues": high,
        "nullCount": {name: table[name].null_count for name in table.column_names},
    }


class OffsetsStore:
    """Appends coordinator rows to a Delta table and reads them back in order."""

    def __init__(
        self,
        path: str | Path,
        *,
        maintenance_commits: int = 20,
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
        #: the sequence the next `prepare` starts at (>= next_sequence: prepared, not committed)
        self._prepared_sequence = self.next_sequence
        self.commits = 0
        #: a coordinator committed right after one of ours: the next commit is refused
        self._fenced_by_successor = False
        self._store: Any = None
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
        for name in _TIMESTAMP_COLUMNS:  # epoch ms, converted by Arrow rather than per row
            at = table.schema.get_field_index(name)
            millis = pc.divide(table[name].cast(pa.int64()), 1000)
            table = table.set_column(at, name + "_ms", millis)
        yield from table.to_pylist()

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
        """Persist `rows` in one durable Delta commit (fenced if another writer got in
        first): `prepare`, `commit` and `sync` in one call."""
        if rows:
            self.sync(self.commit([self.prepare(rows)]))

    def prepare(self, rows: list[dict[str, Any]]) -> PreparedAppend:
        """Number `rows` after everything prepared so far and write their Parquet file into
        the table's directory; it is not part of the table until `commit` adds it (a crash
        before that leaves an unreferenced file, which `maintain`'s vacuum deletes)."""
        assert rows, "an empty append is never prepared"
        first = self._prepared_sequence
        table = arrow_rows(rows, first)
        buffer = pa.BufferOutputStream()
        pq.write_table(table, buffer, compression="snappy")
        data = buffer.getvalue()
        name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        self._write_file(name, data)
        self._prepared_sequence = first + len(rows)
        data_file = _DataFile(name, data.size, json.dumps(_stats(table)))
        return PreparedAppend(first, first + len(rows) - 1, data_file)

    def _write_file(self, name: str, data: pa.Buffer) -> None:
        if self._local_dir is not None:
            with open(self._local_dir / name, "wb") as f:  # synced with its commit
                f.write(data)
            return
        import obstore

        obstore.put(self._objects(), name, data.to_pybytes())  # durable once it returns

    def _objects(self) -> Any:
        """The object store under the table (`obstore`, keys relative to the table)."""
        if self._store is None:
            self._store = open_object_store(self.path, self.storage_options or {})
        return self._store

    def commit(self, prepared: Sequence[PreparedAppend]) -> int:
        """Add prepared files to the table in ONE Delta commit carrying the app transaction
        (`APP_ID`, the last row's sequence); fenced if another writer got in first. Prepared
        appends commit in the order they were prepared. Returns the version to `sync`."""
        from deltalake import CommitProperties, PostCommitHookProperties, Transaction

        assert prepared, "a commit adds at least one prepared file"
        assert prepared[0].first_sequence >= self.next_sequence, "commits keep prepare's order"
        if self._fenced_by_successor:
            raise self._fenced()
        last = prepared[-1].last_sequence
        files: list[_DataFile] = [p.payload for p in prepared]
        read_version = self._table.version()
        try:
            self._table.create_write_transaction(
                [f.add_action() for f in files],
                mode="append",
                schema=SCHEMA,
                commit_properties=CommitProperties(
                    app_transactions=[Transaction(APP_ID, last)],
                    custom_metadata={
                        # what the commit must hold, for `delta_log.check_log` after a crash
                        LAST_SEQUENCE_KEY: str(last),
                        "operationMetrics": {
                            "num_added_files": str(len(files)),
                            "num_removed_files": "0",
                        },
                    },
                ),
                # checkpoints and log cleanup happen in `maintain`, off the commit path
                post_commithook_properties=PostCommitHookProperties(
                    create_checkpoint=False, cleanup_expired_logs=False
                ),
            )
        except Exception as e:
            # Delta's conflict check: a commit since our snapshot carries our app id
            if "Concurrent transaction" in str(e):
                raise self._fenced() from e
            if not self._landed_anyway(last):
                raise
        # the commit exists from here on, synced or not: its sequences are taken
        self._last_version = last
        self.next_sequence = last + 1
        self.commits += 1
        # the handle does not follow its own commits (the next commit's conflict check reads
        # from it): read ours, and whatever else landed since
        self._table.update_incremental()
        version = self._table.version()
        # more than our one commit since our snapshot (maintenance, or a successor): if the
        # newest app transaction is not ours, another coordinator committed right after us;
        # ours stands, our next is refused
        if version > read_version + 1 and self._table.transaction_version(APP_ID) != last:
            self._fenced_by_successor = True
        self._maybe_maintain()
        return version

    def _landed_anyway(self, last: int) -> bool:
        """After a failed commit: whether it is in the table all the same (an error after
        the commit file was in place). Reading the log again also keeps the handle's snapshot
        from taking our own commit for a rival's at the next commit."""
        try:
            self._table.update_incremental()
            return self._table.transaction_version(APP_ID) == last
        except Exception:  # noqa: BLE001 - the table cannot be read now: the commit failed
            logger.warning("cannot read %s back after a failed commit", self.path, exc_info=True)
            return False

    def discard(self, prepared: PreparedAppend) -> None:
        """Delete a prepared file that will never be committed (best effort: vacuum would)."""
        name = prepared.payload.name
        try:
            if self._local_dir is not None:
                (self._local_dir / name).unlink(missing_ok=True)
            else:
                import obstore

                obstore.delete(self._objects(), name)
        except Exception:  # noqa: BLE001 - an orphan file is harmless
            logger.warning("could not delete the uncommitted file %s of %s", name, self.path)

    def _fenced(self) -> OffsetsStoreFencedError:
        return OffsetsStoreFencedError(
            f"{self.path} was written by another group coordinator since this one last "
            "did; this one stops serving"
        )

    def _maybe_maintain(self) -> None:
        self._since_maintenance += 1
        if self._since_maintenance >= self.maintenance_commits and not self.maintaining():
            self._since_maintenance = 0
            self._maintenance = threading.Thread(
                target=self.maintain, name="sparklog-offsets-maintenance", daemon=True
            )
            self._maintenance.start()

    def sync(self, version: int) -> None:
        """fsync every commit up to `version` not synced yet, with its data files (local
        paths only): the coordinator answers only after this returns. Called on one thread,
        in version order, beside `commit` (it reads commit files, never the handle)."""
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
    # files of COMPACTED_FILE_BYTES and more are left alone: each run rewrites the small files
    # written since the last one, not the whole table again
    table.optimize.compact(target_size=COMPACTED_FILE_BYTES)
    table.create_checkpoint()
    if local is not None:
        sync_commits(local, first, table.version())
        sync_checkpoint(local, table.version())
    # files replaced within the last hour stay, for readers that listed them; a full vacuum
    # also deletes files no commit names (prepared, then fenced or cut off by a crash) once
    # they are an hour old: a file being prepared now is younger than that
    table.vacuum(retention_hours=1, dry_run=False, enforce_retention_duration=False, full=True)
    table.cleanup_metadata()
