"""The driver's view of topic tables: where a topic's table is, and its files with offset stats.

Where a topic's table lives (decided once per read on the driver, in this order):

1. the source option `remoteTableRoot`: every subscribed topic's table is `<root>/<topic>`
   when a Delta table is there (a topic without one is read through brokers);
2. else the cluster says: a topic whose `remote.storage.enable` is true (DescribeConfigs of
   the topic) has its table under the brokers' `remote.table.root` (DescribeConfigs of a
   broker), the setting every broker and the driver share.

Object stores are reached with the source options `storage.options.<key>` (delta-rs option
names, as the cluster's settings: `storage.options.AWS_ENDPOINT_URL`, ...). Brokers never hand
out credentials (their `storage.options.*` are sensitive), so a read of an `s3://` table passes
them itself.

Listing uses `deltalake` (imported when a read first lists, never when the data source is
imported): the snapshot's add actions with their statistics (`min.offset`, `max.offset`,
`num_records`) give each partition's files and range (`table_plan.partition_tiers`). A file
without offset statistics makes its topic's snapshot unusable (read through brokers, with a
warning): the planner could not tell which offsets it holds.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

from sparklog.spark.table_plan import TableFile, TierSnapshot, partition_tiers
from sparklog.storage.remote.schema import TOPIC_ID_KEY, app_id, table_location

logger = logging.getLogger(__name__)

REMOTE_STORAGE_ENABLE = "remote.storage.enable"
REMOTE_TABLE_ROOT = "remote.table.root"


def open_table(location: str, storage_options: Mapping[str, str] | None = None) -> Any | None:
    """The `deltalake.DeltaTable` at `location`, None when no table is there."""
    from deltalake import DeltaTable

    options = dict(storage_options) if storage_options else None
    if not DeltaTable.is_deltatable(location, options):
        return None
    return DeltaTable(location, storage_options=options)


def table_files(table: Any, location: str) -> list[TableFile] | None:
    """The snapshot's files with their offset statistics; None when a file has none."""
    import pyarrow as pa

    actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return []
    if (
        "min.offset" not in actions.column_names
        or "partition.partition" not in actions.column_names
    ):
        return None
    rows = actions.select(
        ["path", "size_bytes", "num_records", "min.offset", "max.offset", "partition.partition"]
    ).to_pylist()
    base = location.rstrip("/") + "/"
    files = []
    for row in rows:
        if row["min.offset"] is None or row["max.offset"] is None:
            return None
        path = unquote(row["path"])
        uri = path if "://" in path or path.startswith("/") else base + path
        files.append(
            TableFile(
                uri,
                int(row["partition.partition"]),
                int(row["min.offset"]),
                int(row["max.offset"]),
                int(row["size_bytes"] or 0),
                int(row["num_records"] or 0),
            )
        )
    return files


def snapshot(
    topic: str, table: Any, location: str, storage_options: Mapping[str, str] | None = None
) -> TierSnapshot | None:
    """A topic's tier as `table` stands now; None when its files lack offset statistics."""
    files = table_files(table, location)
    if files is None:
        logger.warning(
            "the table of topic %s at %s has files without offset statistics; reading the "
            "topic through brokers",
            topic,
            location,
        )
        return None
    return TierSnapshot(
        topic,
        location,
        int(table.version()),
        partition_tiers(files, copied_ends(table, {f.partition for f in files})),
        dict(storage_options or {}),
    )


def same_topic(table: Any, topic_id: str | None) -> bool:
    """Whether the table is the one of the topic with id `topic_id` (None: unknown, trusted);
    a table that names no id is trusted too."""
    found = table.metadata().configuration.get(TOPIC_ID_KEY)
    if not found or not topic_id:
        return True
    try:
        return uuid.UUID(found) == uuid.UUID(topic_id)
    except ValueError:
        return found == topic_id


def copied_ends(table: Any, partitions: Iterable[int]) -> dict[int, int]:
    """Each partition's copied end from the commits' app transactions (`<topic id>-<p>` ->
    end offset), when the table names its topic id; the end can lie past the last row (a
    batch whose last offsets were compacted away)."""
    found = table.metadata().configuration.get(TOPIC_ID_KEY)
    if not found:
        return {}
    try:
        topic_id = uuid.UUID(found)
    except ValueError:
        return {}
    ends = {}
    for p in partitions:
        version = table.transaction_version(app_id(topic_id, p))
        if version is not None:
            ends[p] = int(version)
    return ends


class TierLocator:
    """Finds and lists the tables of a read's topics; keeps opened tables (a stream lists
    them every micro-batch and only reads the commits since). Not thread-safe."""

    def __init__(
        self,
        root: str | None,
        storage_options: Mapping[str, str] | None = None,
        admin: Any = None,
    ) -> None:
        self.root = root
        self.storage_options = dict(storage_options or {})
        self.admin = admin  # a sparklog AdminClient, asked when `root` is None
        self._locations: dict[str, str | None] = {}
        self._tables: dict[str, Any] = {}
        self._broker_root: str | None = None

    def snapshots(self, topics: Iterable[str]) -> dict[str, TierSnapshot]:
        """Snapshots of the topics that have a table now (of this topic: a table left by a
        deleted topic of the same name is not read)."""
        out = {}
        names = sorted(set(topics))
        located = {t: loc for t in names if (loc := self.location(t)) is not None}
        ids = self._topic_ids(list(located))
        for topic, location in located.items():
            table = self._table(topic, location)
            if table is None:
                continue
            if not same_topic(table, ids.get(topic)):
                logger.warning(
                    "the table at %s belongs to another topic id than topic %s has now (a "
                    "deleted topic's table?); reading the topic through brokers",
                    location,
                    topic,
                )
                continue
            found = snapshot(topic, table, location, self.storage_options)
            if found is not None:
                out[topic] = found
        return out

    def _topic_ids(self, topics: list[str]) -> dict[str, str]:
        """The topics' current ids (Metadata), where the admin can tell."""
        if not topics or self.admin is None or not hasattr(self.admin, "describe_topics"):
            return {}
        described = self.admin.describe_topics(topics)
        return {t: str(d.topic_id) for t, d in described.items() if d.topic_id is not None}

    def _table(self, topic: str, location: str) -> Any | None:
        table = self._tables.get(topic)
        if table is not None:
            table.update_incremental()
            return table
        table = open_table(location, self.storage_options)
        if table is not None:
            self._tables[topic] = table
        return table

    def location(self, topic: str) -> str | None:
        """Where `topic`'s table is, None when it has no remote tier."""
        if topic not in self._locations:
            self._locations[topic] = self._find(topic)
        return self._locations[topic]

    def _find(self, topic: str) -> str | None:
        if self.root:
            return table_location(self.root, topic)
        if self.admin is None:
            return None
        configs = self.admin.describe_configs([("topic", topic)])
        entries: dict[str, Any] = next(iter(configs.values()), {})
        enabled = entries.get(REMOTE_STORAGE_ENABLE)
        if enabled is None or str(enabled.value).lower() != "true":
            return None
        root = self.broker_root()
        if not root:
            logger.warning(
                "topic %s has remote.storage.enable=true but the brokers name no %s; reading "
                "it through brokers (set the source option remoteTableRoot)",
                topic,
                REMOTE_TABLE_ROOT,
            )
            return None
        return table_location(root, topic)

    def broker_root(self) -> str | None:
        """`remote.table.root` as a broker describes it."""
        if self._broker_root is None:
            brokers = self.admin.describe_cluster().brokers
            if not brokers:
                return None
            broker = str(min(b.node_id for b in brokers))
            configs = self.admin.describe_configs([("broker", broker)])
            described: dict[str, Any] = next(iter(configs.values()), {})
            entry = described.get(REMOTE_TABLE_ROOT)
            self._broker_root = entry.value if entry is not None and entry.value else ""
        return self._broker_root or None


def tier_snapshots(locator: TierLocator | None, topics: Iterable[str]) -> dict[str, TierSnapshot]:
    """The snapshots a read plans with; {} when table reads are off (`locator` None). A table
    that cannot be listed (damaged, unreachable) leaves its topic to the brokers, which are
    the source of truth for every offset, with a warning."""
    if locator is None:
        return {}
    try:
        return locator.snapshots(topics)
    except Exception as e:  # noqa: BLE001 - deltalake/object-store errors have no common base
        logger.warning("cannot list topic tables (%s); reading through brokers only", e)
        return {}


def locator_for(options: Any, admin: Any) -> TierLocator | None:
    """The locator of a read's `SourceOptions` (None with `remoteTableReads=false`)."""
    if not options.remote_table_reads:
        return None
    return TierLocator(options.remote_table_root, options.storage_options, admin)
