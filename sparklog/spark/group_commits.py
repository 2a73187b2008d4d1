"""The group's committed offsets follow every finished micro-batch (`kafka.group.id`).

The Python stream reader commits a batch's end offsets in `commit(end)`, but Spark calls that
only while planning the *next* batch: after `query.stop()` a processing-time query's group
trailed its checkpoint by up to one trigger. The driver hears of every finished batch through
`StreamingQueryListener.onQueryProgress`, whose sources carry the batch's `endOffset`, so
`GroupCommitListener` commits that to the group as soon as the batch is done.

The listener runs in the driver's Python process, which never sees the reader (it lives in a
planner worker): it learns each query's sparklog sources from the query itself when it starts
(`onQueryStarted` is delivered before `start()` returns, while the query is active): the
analysed plan's `StreamingRelationV2` leaves named "sparklog" carry the reader's options, so
the group, the bootstrap and the client settings (security) are the ones the reader uses. A
progress source is matched to the sparklog source whose subscription covers its topics.

`sparklog.register` (and so `sparklog.start`) adds one listener per session; without them,
`spark.streams.addListener(GroupCommitListener(spark))`. A failed commit is logged, never
fails the query (as the reader's own commits); the offsets are the checkpoint's, so a commit
repeated by the reader's `commit(end)` commits the same offsets.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import StreamingQueryListener

from sparklog.spark.offsets import PartitionOffsets
from sparklog.spark.options import Assign, Subscribe, SubscribePattern, Subscription
from sparklog.spark.progress import source_offsets

logger = logging.getLogger(__name__)

NAME = "sparklog"


@dataclass
class GroupTarget:
    """One sparklog source of a query that commits to a group."""

    group: str
    subscription: Subscription
    admin_config: dict[str, Any] = field(repr=False)
    committed: PartitionOffsets | None = None

    def covers(self, topics: set[str]) -> bool:
        sub = self.subscription
        if isinstance(sub, Subscribe):
            return topics <= set(sub.topics)
        if isinstance(sub, SubscribePattern):
            return all(sub.matches(t) for t in topics)
        assert isinstance(sub, Assign)
        return topics <= {tp.topic for tp in sub.partitions}


def group_target(
    options: Mapping[str, str], default_bootstrap: str | None = None
) -> GroupTarget | None:
    """The target of a sparklog source with these (reader) options; None without a group."""
    from sparklog.spark.options import parse_source_options
    from sparklog.spark.source import (
        running_cluster_bootstrap,
        running_cluster_client_settings,
    )

    opts = {str(k).lower(): str(v) for k, v in options.items()}
    group = opts.get("kafka.group.id")
    if not group:
        return None
    if "kafka.bootstrap.servers" not in opts:
        defaults = {f"kafka.{k}": v for k, v in running_cluster_client_settings().items()}
        opts = {**defaults, **opts}
    parsed = parse_source_options(
        opts, streaming=True, default_bootstrap=default_bootstrap or running_cluster_bootstrap()
    )
    return GroupTarget(group, parsed.subscription, parsed.admin_config())


def query_source_options(spark: SparkSession, query_id: str) -> list[dict[str, str]]:
    """The options of each sparklog source of the active query `query_id` (from its analysed
    plan's `StreamingRelationV2` leaves); [] when the query is not active here."""
    jquery = spark._jsparkSession.streams().get(query_id)
    if jquery is None:
        return []
    leaves = jquery.streamingQuery().analyzedPlan().collectLeaves().iterator()
    found = []
    while leaves.hasNext():
        leaf = leaves.next()
        if not leaf.getClass().getName().endswith(".StreamingRelationV2"):
            continue
        if str(leaf.sourceName()).lower() != NAME:
            continue
        found.append({str(k): str(v) for k, v in leaf.extraOptions().asCaseSensitiveMap().items()})
    return found


class GroupCommitListener(StreamingQueryListener):
    """Commits each finished batch's end offsets of every `format("sparklog")` source with
    `kafka.group.id` to that group as the batch's progress is reported (Spark calls the
    stream's own `commit(end)` only when it plans the next batch), so after `query.stop()`
    the group holds the last finished batch's end. `sparklog.register` and `sparklog.start`
    add one per session; else `spark.streams.addListener(GroupCommitListener(spark))`."""

    def __init__(self, spark: SparkSession, default_bootstrap: str | None = None) -> None:
        self._spark = spark
        self._default_bootstrap = default_bootstrap
        self._lock = threading.Lock()
        self._targets: dict[str, list[GroupTarget]] = {}

    def onQueryStarted(self, event: Any) -> None:
        query_id = str(event.id)
        try:
            targets = [
                t
                for options in query_source_options(self._spark, query_id)
                if (t := group_target(options, self._default_bootstrap)) is not None
            ]
        except Exception as e:  # never fail the query for monitoring
            logger.warning("query %s: cannot read its sparklog sources' groups: %s", query_id, e)
            return
        if targets:
            with self._lock:
                self._targets[query_id] = targets
            logger.info("query %s commits finished batches to %s", query_id, targets)

    def onQueryProgress(self, event: Any) -> None:
        with self._lock:
            targets = self._targets.get(str(event.progress.id))
        if not targets:
            return
        for offsets in source_offsets(event.progress):
            topics = {tp.topic for tp in offsets}
            for target in targets:
                if target.covers(topics):
                    self._commit(target, offsets)
                    break

    def _commit(self, target: GroupTarget, offsets: PartitionOffsets) -> None:
        if not offsets or offsets == target.committed:
            return
        from sparklog.client import AdminClient
        from sparklog.errors import KafkaError

        try:
            with AdminClient(target.admin_config) as admin:
                admin.alter_group_offsets(target.group, offsets)
            target.committed = dict(offsets)
        except (KafkaError, OSError) as e:
            logger.warning("committing a batch's offsets to group %r failed: %s", target.group, e)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        # progress events are delivered in order before this one: nothing is left to commit
        with self._lock:
            self._targets.pop(str(event.id), None)


_installed: dict[int, GroupCommitListener] = {}
_installed_lock = threading.Lock()


def install(spark: SparkSession, default_bootstrap: str | None = None) -> GroupCommitListener:
    """Add a `GroupCommitListener` to `spark`'s streams once per session (registering again
    updates the bootstrap used for sources that name none)."""
    key = id(spark._jsparkSession)
    with _installed_lock:
        listener = _installed.get(key)
        if listener is None:
            listener = GroupCommitListener(spark, default_bootstrap)
            spark.streams.addListener(listener)
            _installed[key] = listener
        listener._default_bootstrap = default_bootstrap
        return listener
