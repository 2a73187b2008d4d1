"""A topic's remote tier as one Delta table (DESIGN D17): `DeltaTopicTable`, the `TopicTable`
of `tier.py`, and the only module of the tier that imports `deltalake`.

Theory of operation. One long-lived `DeltaTable` handle per topic per process, brought up to
date by `update_incremental()` (`refresh`). The per-partition view every request starts from,
`files.PartitionFiles`, is computed from the add actions' statistics once per table version;
reads open only the data files the statistics say they need (`scans`, through the filesystem
of the table's `to_pyarrow_dataset`, single-threaded, row group by row group, without the
table's lock) and rebuild whole batches with `codec.rows_to_batch_list`.

Exactly once (KIP-405's copy contract over Delta's app transactions): `append` writes every
partition's rows in ONE commit carrying one `txn` action per partition, `app_id(topic id,
partition)` -> the copied end offset. Before writing, an upload whose partition already ends at
its `end_offset` is skipped (a retry or a duplicate), one ending elsewhere than its
`start_offset` is fenced. Delta's conflict check closes the race between that look and the
commit: a concurrent commit carrying one of our app ids fails ours with "Concurrent
transaction" (FencedUploadError, nothing written), while commits for other partitions are
merely retried on the next version (concurrent leaders of different partitions both succeed).

Retention never splits a batch: `delete_before` removes rows whose whole batch lies below the
offset (Delta copy-on-write delete; files entirely below go with a plain remove). The table stays
at protocol (1, 2): no deletion vectors, no column mapping.

Durability: on a local path every commit and its data files are fsynced before the call returns
(`storage.delta_sync`); on an object store a PUT is durable when it returns.

Thread-safety: every public method takes the instance's lock (the broker calls from worker
threads); instances in other processes coordinate through Delta's optimistic concurrency.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.storage.delta_sync import (
    cut_newest_commit,
    local_dir,
    sync_checkpoint,
    sync_commits,
)
from sparklog.storage.object_store import redact, remove_location
from sparklog.storage.remote import scans
from sparklog.storage.remote.codec import rows_to_batch_list
from sparklog.storage.remote.files import EMPTY_PARTITION, PartitionFiles, partition_files
from sparklog.storage.remote.rows import (
    aborted_txns,
    fenced_message,
    pending_uploads,
    row_bytes,
    rows_end_offset,
    upload_rows,
)
from sparklog.storage.remote.schema import (
    DELTA_ENCODED,
    PARTITION_COLUMNS,
    STATS_COLUMNS,
    TABLE_SCHEMA,
    TOPIC_ID_KEY,
    TOPIC_NAME_KEY,
    app_id,
    commit_metadata,
    row_group_rows,
    table_location,
)
from sparklog.storage.remote.tier import (
    EpochEntry,
    FencedUploadError,
    ProducerSnapshotEntry,
    RemoteRead,
    RemoteStorageError,
    SegmentUpload,
)
from sparklog.storage.remote.values import TYPED_COLUMN, ValueDecoder, value_decoder, without_typed

logger = logging.getLogger(__name__)

_COMMIT_RETRIES = 20
_MAX_TIMESTAMP = -3  # ListOffsets' MAX_TIMESTAMP (KIP-734)


class DeltaTopicTable:
    """The remote tier of one topic, a Delta table at `table_location(root, topic)`."""

    def __init__(
        self,
        root: str,
        topic: str,
        topic_id: uuid.UUID | None = None,
        *,
        storage_options: Mapping[str, str] | None = None,
        create: bool = True,
        fsync: bool = True,
        value_format: str = "binary",
        value_schema: str = "",
        maintenance_commits: int = 100,
    ) -> None:
        """Open the topic's table, creating it when `create` (then `topic_id` is required).

        A table of another topic id (the topic was deleted and re-created while its table was
        kept) raises RemoteStorageError naming both ids and what to do. `value_format` /
        `value_schema` are the topic's `remote.table.value.*` (see `configure_values`). Every
        `maintenance_commits` appends of this instance (0: never), `maintain` runs in a thread
        of its own. `fsync` False skips the local durability syncs (tests, benchmarks)."""
        self.topic = topic
        self.location = table_location(root, topic)
        self.storage_options = dict(storage_options or {})
        self._lock = threading.RLock()
        self._values: ValueDecoder | None = None
        self.configure_values(value_format, value_schema)
        self._local = local_dir(self.location) if fsync else None
        self._dt: Any = self._open(topic_id, create)
        config = self._dt.metadata().configuration
        found = config.get(TOPIC_ID_KEY)
        if topic_id is not None and found != str(topic_id):
            raise RemoteStorageError(
                f"The topic table {self._where()} belongs to topic id {found} "
                f"({config.get(TOPIC_NAME_KEY)}), not to {topic}'s id {topic_id}: the topic "
                "was deleted and re-created while its table was kept "
                "(remote.log.delete.on.disable=false). Move the old table away (or drop it) "
                "and the tier starts a new one; nothing is copied until then."
            )
        self.topic_id = uuid.UUID(found) if found else uuid.UUID(int=0)
        self._files_version = -1
        self._files: dict[int, PartitionFiles] = {}
        self._dataset: Any = None
        self._footers = scans.FooterCache()
        self.maintenance_commits = maintenance_commits
        self._since_maintenance = 0
        self._maintenance: threading.Thread | None = None

    def configure_values(self, value_format: str, value_schema: str) -> None:
        """Decode the values of later uploads into `value_typed` / `value_error` columns
        (`values.py`): the topic's `remote.table.value.format` and `.schema` changed. Raises
        ValueSchemaError when the schema cannot be used (nothing changes then)."""
        decoder = value_decoder(value_format, value_schema)
        with self._lock:
            self._values = decoder

    # -- open / create ------------------------------------------------------------------------

    def _open(self, topic_id: uuid.UUID | None, create: bool) -> Any:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        options = self.storage_options or None
        try:
            return DeltaTable(self.location, storage_options=options)
        except TableNotFoundError:
            if not create:
                raise RemoteStorageError(
                    f"No topic table at {self._where()}: nothing of topic {self.topic} was "
                    "copied to the remote tier yet (or the table was deleted)"
                ) from None
        except Exception as e:
            raise self._error("cannot be opened", e) from e
        if topic_id is None:
            raise ValueError("creating a topic table needs the topic id")
        return self._create(topic_id)

    def _create(self, topic_id: uuid.UUID) -> Any:
        from deltalake import DeltaTable

        if self._local is not None:
            self._local.mkdir(parents=True, exist_ok=True)
        configuration = {
            TOPIC_ID_KEY: str(topic_id),
            TOPIC_NAME_KEY: self.topic,
            "delta.dataSkippingStatsColumns": ",".join(STATS_COLUMNS),
        }
        try:
            table = DeltaTable.create(
                self.location,
                TABLE_SCHEMA,
                mode="ignore",  # another broker may create it at the same time
                partition_by=list(PARTITION_COLUMNS),
                name=self.topic,
                description=f"sparklog topic {self.topic}: its remote tier (KIP-405), one row "
                "per record; committed data: is_control = false AND aborted = false",
                configuration=configuration,
                storage_options=self.storage_options or None,
                raise_if_key_not_exists=False,
            )
        except Exception as e:  # lost the race to create version 0: open the winner's table
            try:
                table = DeltaTable(self.location, storage_options=self.storage_options or None)
            except Exception:
                raise self._error("cannot be created", e) from e
        self._sync_local(0, table.version())
        return table

    # -- state --------------------------------------------------------------------------------

    def refresh(self) -> None:
        with self._lock:
            if self._local is not None and not (self._local / "_delta_log").is_dir():
                # a write now would start a headless log (the local object store creates
                # directories): refuse until the table is back
                raise RemoteStorageError(
                    f"The topic table {self._where()} of {self.topic} is gone (no _delta_log "
                    "directory). Local data is kept and nothing is copied until the table is "
                    "restored there (or the topic's tier is dropped and re-created)"
                )
            try:
                self._dt.update_incremental()
            except Exception as e:
                raise self._error("cannot be read", e) from e

    def version(self) -> int:
        with self._lock:
            return int(self._dt.version())

    def copied_end_offset(self, partition: int) -> int | None:
        with self._lock:
            return self._copied_end(partition)

    def _copied_end(self, partition: int) -> int | None:
        version = self._dt.transaction_version(app_id(self.topic_id, partition))
        return None if version is None else int(version)

    def start_offset(self, partition: int) -> int | None:
        with self._lock:
            return self._partition(partition).start_offset

    def partitions(self) -> list[int]:
        """The partitions the table holds rows of."""
        with self._lock:
            return sorted(self._index())

    def _index(self) -> dict[int, PartitionFiles]:
        version = self._dt.version()
        if version != self._files_version:
            actions = pa.table(self._dt.get_add_actions(flatten=True))
            self._files = partition_files(actions)
            # an empty dataset of the table: its filesystem and format open single files
            self._dataset = self._dt.to_pyarrow_dataset(file_pruning_predicate="partition = -1")
            self._files_version = version
        return self._files

    def _partition(self, partition: int) -> PartitionFiles:
        return self._index().get(partition, EMPTY_PARTITION)

    def _scanner(self) -> scans.FileScanner:
        """Opens data files of the current version (call `_partition` first)."""
        return scans.FileScanner(self._dataset, self._error, self._footers)

    # -- append -------------------------------------------------------------------------------

    def append(self, uploads: Sequence[SegmentUpload]) -> int | None:
        with self._lock:
            return self._append(list(uploads))

    def _append(self, uploads: list[SegmentUpload]) -> int | None:
        from deltalake import CommitProperties, Transaction

        partitions = [u.partition for u in uploads]
        if len(set(partitions)) != len(partitions):
            raise ValueError(f"one upload per partition per commit, got partitions {partitions}")
        rows_by_partition = {u.partition: upload_rows(u) for u in uploads}
        for _attempt in range(_COMMIT_RETRIES):
            self.refresh()
            todo = pending_uploads(uploads, self._copied_end, self.topic, self._where())
            if not todo:
                return None
            rows = pa.concat_tables([rows_by_partition[u.partition] for u in todo])
            if self._values is not None:
                rows = self._values.append_to(rows)
            ranges = {u.partition: (u.start_offset, u.end_offset) for u in todo}
            epochs = {str(u.partition): u.leader_epoch for u in todo}
            properties = CommitProperties(
                custom_metadata={"userMetadata": commit_metadata(ranges, leader_epochs=epochs)},
                app_transactions=[
                    Transaction(app_id(self.topic_id, u.partition), u.end_offset) for u in todo
                ],
                max_commit_retries=_COMMIT_RETRIES,
            )
            before = self._dt.version()
            try:
                self._write(rows, properties)
            except Exception as e:
                text = str(e)
                if "Concurrent transaction" in text:
                    self.refresh()
                    raise FencedUploadError(
                        fenced_message(todo, self._copied_end, self.topic, self._where())
                    ) from e
                if _raced(e):  # another writer's commit (other partitions, retention, compaction)
                    logger.debug("%s: commit raced another writer (%s); retrying", self, text)
                    continue
                raise self._error("cannot be written", e) from e
            version = int(self._dt.version())
            self._sync_local(before + 1, version)
            self._maybe_maintain()
            return version
        raise RemoteStorageError(
            f"The topic table {self._where()} kept changing under {_COMMIT_RETRIES} commit "
            "attempts; the copy retries later"
        )

    def _write(self, rows: pa.Table, properties: Any) -> None:
        """One append commit; columns the table or the rows lack are merged in (typed values
        switched on or off). A typed column the table holds with another type is left null,
        and `value_error` says so: the upload goes on."""
        from deltalake import PostCommitHookProperties, write_deltalake

        have = set(pa.schema(self._dt.schema().to_arrow()).names)
        merge = have != set(rows.schema.names)
        try:
            write_deltalake(
                self._dt,
                rows,
                mode="append",
                schema_mode="merge" if merge else None,
                writer_properties=writer_properties(row_bytes(rows), rows.num_rows),
                commit_properties=properties,
                post_commithook_properties=PostCommitHookProperties(
                    create_checkpoint=False, cleanup_expired_logs=False
                ),
            )
        except Exception as e:
            if TYPED_COLUMN not in rows.schema.names or "Concurrent" in str(e):
                raise
            logger.warning("%s: typed values left out of this commit: %s", self, e)
            note = f"value_typed not written: the table's column has another type ({e})"[:500]
            self._write(without_typed(rows, note), properties)

    # -- read ---------------------------------------------------------------------------------

    def read(
        self,
        partition: int,
        start_offset: int,
        max_bytes: int,
        *,
        upper_bound_offset: int | None = None,
        include_aborted: bool = False,
    ) -> RemoteRead:
        """See `TopicTable.read`. A handle that does not know `start_offset` yet (another
        broker copied it since) catches up first; one whose files were compacted away and
        vacuumed since catches up and reads again."""
        for attempt in (0, 1):
            with self._lock:  # a snapshot of the files; the scan runs without the lock
                files = self._partition(partition)
                if attempt or not len(files) or int(files.max_batch_end.max()) < start_offset:
                    self.refresh()
                    files = self._partition(partition)
                scanner = self._scanner()
            try:
                rows = scans.read_rows(files, scanner, start_offset, max_bytes, upper_bound_offset)
                break
            except RemoteStorageError:
                if attempt:
                    raise
        batches = rows_to_batch_list(rows)
        taken, size = 0, 0
        for batch in batches:  # whole batches up to max_bytes, at least one
            if taken and size + len(batch) > max_bytes:
                break
            taken += 1
            size += len(batch)
        records = b"".join(batches[:taken])
        aborted = None
        if include_aborted:
            end = rows_end_offset(batches[taken - 1]) if taken else start_offset
            aborted = aborted_txns(rows.filter(pc.field("offset") <= end))
        return RemoteRead(start_offset, records, aborted)

    def offset_for_timestamp(
        self, partition: int, timestamp: int, *, start_offset: int = 0
    ) -> tuple[int, int] | None:
        with self._lock:
            files = self._partition(partition)
            if not len(files):
                return None
            if timestamp == _MAX_TIMESTAMP:
                return scans.max_timestamp(files, self._scanner(), start_offset)
            return scans.first_at_or_after(files, self._scanner(), timestamp, start_offset)

    # -- retention ----------------------------------------------------------------------------

    def delete_before(self, partition: int, offset: int) -> int:
        with self._lock:
            self.refresh()
            files = self._partition(partition)
            start = files.start_offset
            if start is not None and start < offset:
                self._delete(
                    f"partition = {int(partition)} AND "
                    f"batch_base_offset + batch_last_offset_delta < {int(offset)}"
                )
            new_start = self._partition(partition).start_offset
            return offset if new_start is None else new_start

    def _delete(self, predicate: str) -> None:
        from deltalake import CommitProperties, PostCommitHookProperties

        for _attempt in range(_COMMIT_RETRIES):
            before = self._dt.version()
            try:
                self._dt.delete(
                    predicate,
                    commit_properties=CommitProperties(max_commit_retries=_COMMIT_RETRIES),
                    post_commithook_properties=PostCommitHookProperties(
                        create_checkpoint=False, cleanup_expired_logs=False
                    ),
                )
            except Exception as e:
                if _raced(e):
                    self.refresh()
                    continue
                raise self._error("cannot be written (retention)", e) from e
            self._sync_local(before + 1, int(self._dt.version()))
            return
        raise RemoteStorageError(f"The topic table {self._where()} kept changing; retry later")

    def expire(
        self, partition: int, *, retention_ms: int, retention_bytes: int, now_ms: int
    ) -> int | None:
        """Kafka's remote retention over whole files (`files.PartitionFiles.expire_offset`);
        `retention_bytes` is the tier's budget (the caller leaves out what only the local log
        holds); -1 disables either."""
        with self._lock:
            self.refresh()
            files = self._partition(partition)
            drop = files.expire_offset(
                cutoff_ms=now_ms - retention_ms if retention_ms >= 0 else None,
                retention_bytes=retention_bytes if retention_bytes >= 0 else None,
            )
            if drop is None or files.start_offset is None or drop <= files.start_offset:
                return None
            return self.delete_before(partition, drop)

    # -- follower rebuild ---------------------------------------------------------------------

    def epochs(self, partition: int, end_offset: int) -> list[EpochEntry]:
        with self._lock:
            return scans.epochs(self._partition(partition), self._scanner(), end_offset)

    def producer_states(self, partition: int, end_offset: int) -> list[ProducerSnapshotEntry]:
        with self._lock:
            files, scanner = self._partition(partition), self._scanner()
        return scans.producer_states(files, scanner, end_offset)

    # -- drop / maintenance -------------------------------------------------------------------

    def drop(self) -> None:
        self.wait_for_maintenance()
        with self._lock:
            try:
                remove_location(self.location, self.storage_options)
            except Exception as e:
                raise self._error("cannot be dropped", e) from e

    def maintain(self, *, vacuum_retention_hours: int = 1) -> dict[str, Any]:
        """Compact small files, checkpoint, vacuum and clean the log, on a handle of its own
        (compaction and blind appends do not conflict in Delta): call it off the hot path,
        e.g. from the remote log manager's task every N commits. Files replaced less than
        `vacuum_retention_hours` ago stay for readers that listed them."""
        from deltalake import DeltaTable

        try:
            table = DeltaTable(self.location, storage_options=self.storage_options or None)
            first = table.version() + 1
            actions = pa.table(table.get_add_actions(flatten=True))
            sizes = (pc.sum(actions.column("size_bytes")).as_py() or 0) if actions.num_rows else 0
            rows = (pc.sum(actions.column("num_records")).as_py() or 0) if actions.num_rows else 0
            compacted = table.optimize.compact(writer_properties=writer_properties(sizes, rows))
            table.create_checkpoint()
            self._sync_local(first, table.version())
            if self._local is not None:
                sync_checkpoint(self._local, table.version())
            removed = table.vacuum(
                retention_hours=vacuum_retention_hours,
                dry_run=False,
                enforce_retention_duration=False,
            )
            table.cleanup_metadata()
        except Exception as e:
            raise self._error("cannot be maintained", e) from e
        return {"compacted": compacted, "vacuumed": len(removed)}

    def _maybe_maintain(self) -> None:
        self._since_maintenance += 1
        if not self.maintenance_commits or self._since_maintenance < self.maintenance_commits:
            return
        if self._maintenance is not None and self._maintenance.is_alive():
            return
        self._since_maintenance = 0
        self._maintenance = threading.Thread(
            target=self._maintain_quietly,
            name=f"sparklog-tier-maintenance-{self.topic}",
            daemon=True,
        )
        self._maintenance.start()

    def _maintain_quietly(self) -> None:
        try:
            outcome = self.maintain()
        except RemoteStorageError as e:  # another broker's maintenance, a flaky store: later
            logger.warning("maintenance of %s failed; retried later: %s", self, e)
            return
        logger.debug("maintenance of %s: %s", self, outcome)

    def wait_for_maintenance(self, timeout_s: float = 60.0) -> None:
        """Let a running maintenance finish (before a drop, in tests)."""
        if self._maintenance is not None:
            self._maintenance.join(timeout_s)

    # -- helpers ------------------------------------------------------------------------------

    def _sync_local(self, first: int, last: int) -> None:
        if self._local is not None and last >= first:
            sync_commits(self._local, first, last)

    def _where(self) -> str:
        return redact(self.location, self.storage_options)

    def _error(self, what: str, e: BaseException) -> RemoteStorageError:
        cause = redact(f"{type(e).__name__}: {e}".split("\n")[0], self.storage_options)
        return RemoteStorageError(
            f"The topic table {self._where()} of {self.topic} {what}: {cause}. "
            f"{self._damage()}Local data is kept; copies and remote reads retry"
        )

    def _damage(self) -> str:
        """What is wrong with a local table's newest commit, and the repair ("" if nothing
        seen). Commits are synced before a copy counts, so a cut newest commit was never
        acknowledged: its range is still in the local log and is copied again."""
        newest = cut_newest_commit(self._local) if self._local is not None else None
        if newest is None:
            return ""
        return (
            f"Its newest commit {newest} is cut or empty (a crash before it reached the disk). "
            f"To repair: move {newest.name} out of {newest.parent}; that commit was never "
            "acknowledged, so its offsets are still in the brokers' logs and are copied again. "
        )

    def __repr__(self) -> str:
        return f"DeltaTopicTable({self.topic}, {self._where()})"


def _raced(e: BaseException) -> bool:
    """A commit lost to another writer's (nothing of it committed): worth retrying on the
    new version. Delta's conflict checker also refuses an append beside a concurrent delete
    ("a concurrent transaction deleted data this operation read")."""
    from deltalake.exceptions import CommitFailedError

    text = str(e)
    return (
        isinstance(e, CommitFailedError)
        or "already exists" in text
        or "conflict" in text.lower()
        or "concurrent" in text.lower()
    )


def open_topic_table(
    root: str,
    topic: str,
    topic_id: uuid.UUID | None = None,
    *,
    storage_options: Mapping[str, str] | None = None,
    create: bool = True,
    value_format: str = "binary",
    value_schema: str = "",
    maintenance_commits: int = 100,
) -> DeltaTopicTable:
    """The topic's table under `remote.table.root` (see `DeltaTopicTable`); created when
    missing if `topic_id` is given. A broker passes `maintenance_commits=0`: its remote log
    manager maintains the table from one broker only (the leader of partition 0)."""
    return DeltaTopicTable(
        root,
        topic,
        topic_id,
        storage_options=storage_options,
        create=create and topic_id is not None,
        value_format=value_format,
        value_schema=value_schema,
        maintenance_commits=maintenance_commits,
    )


def writer_properties(row_bytes: int, rows: int) -> Any:
    """Parquet settings of the data files (`schema.row_group_rows`, `DELTA_ENCODED`); values
    without dictionary or min/max statistics (no reader prunes by a value; computing them
    costs the writer); pages compressed with Snappy as Spark and Delta write theirs (an
    uncompressed table of 3 M 100-byte records took 362 MB where Spark's Parquet took 40 MB)."""
    from deltalake import ColumnProperties, WriterProperties

    delta = ColumnProperties(dictionary_enabled=False, encoding="DELTA_BINARY_PACKED")
    columns = {name: delta for name in DELTA_ENCODED}
    columns["value"] = ColumnProperties(dictionary_enabled=False, statistics_enabled="NONE")
    return WriterProperties(
        max_row_group_size=row_group_rows(row_bytes, rows),
        column_properties=columns,
        compression="SNAPPY",
    )
