"""Driver-side lookups of the source: which partitions a subscription covers, and where they
start and end (Spark's `KafkaOffsetReaderAdmin`).

Used while planning, in the Python worker that Spark runs on the driver for the batch reader
and in the long-lived one it runs for a stream reader. Every lookup goes through one
`AdminClient` (Metadata and ListOffsets) and is retried `fetchOffset.numRetries` times,
`fetchOffset.retryIntervalMs` apart, as Spark's reader does, but never past one
`kafka.default.api.timeout.ms` from the first attempt: each admin call already retries until
that timeout, so retrying a call that used it all up only multiplied the wait (a wrong
bootstrap address took 4 x 60 s to fail).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from sparklog.spark.offsets import PartitionOffsets
from sparklog.spark.options import (
    Assign,
    EarliestOffsets,
    GlobalTimestamp,
    GroupOffsets,
    LatestOffsets,
    OffsetSpec,
    SourceOptions,
    SparkLogOptionError,
    SpecificOffsets,
    SpecificTimestamps,
    Subscribe,
    SubscribePattern,
)
from sparklog.spark.user_errors import SparkLogSourceError
from sparklog.structs import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition

logger = logging.getLogger(__name__)

T = TypeVar("T")


class NoMatchingOffsetError(SparkLogSourceError):
    """No record at or after a starting timestamp and the strategy is "error"."""


class OffsetReader:
    """Partitions and offsets of one source's subscription. Not thread-safe."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._admin: Any = None
        self.missing: list[TopicPartition] = []  # assigned partitions that do not exist

    @property
    def admin(self) -> Any:
        if self._admin is None:
            from sparklog.client.admin import AdminClient

            self._admin = AdminClient(self.options.admin_config())
        return self._admin

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def __enter__(self) -> OffsetReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _retrying(self, what: str, call: Callable[[], T]) -> T:
        from sparklog.errors import KafkaError, RequestTimedOutError

        attempts = self.options.fetch_offset_num_retries + 1
        timeout_ms = int(self.admin.config["default.api.timeout.ms"])
        deadline = time.monotonic() + timeout_ms / 1000
        for attempt in range(1, attempts + 1):
            try:
                return call()
            except (KafkaError, OSError) as e:
                interval_s = self.options.fetch_offset_retry_interval_ms / 1000
                used_up = isinstance(e, RequestTimedOutError)  # the admin's own retries did
                if used_up or attempt == attempts or time.monotonic() + interval_s >= deadline:
                    raise
                logger.warning("%s failed (attempt %d of %d): %s", what, attempt, attempts, e)
                time.sleep(interval_s)
        raise AssertionError("unreachable")

    # -------------------------------------------------------------- partitions

    def partitions(self) -> list[TopicPartition]:
        """The partitions the subscription covers now, sorted. Topics and assigned partitions
        that do not exist are left out (a stream picks them up once they are created) and
        listed in `missing`."""
        sub = self.options.subscription
        existing = set(self._retrying("listing topics", lambda: self.admin.list_topics()))
        if isinstance(sub, Assign):
            names = sorted({t for t, _ in sub.partitions} & existing)
        elif isinstance(sub, Subscribe):
            names = [t for t in sub.topics if t in existing]
        else:
            names = sorted(t for t in existing if sub.matches(t))
        found: list[TopicPartition] = []
        if names:
            described = self._retrying(
                "describing topics", lambda: self.admin.describe_topics(names)
            )
            found = sorted(
                TopicPartition(name, int(p.partition))
                for name, d in described.items()
                for p in d.partitions
            )
        if isinstance(sub, Assign):
            self.missing = sorted(set(sub.partitions) - set(found))
            found = sorted(set(sub.partitions) & set(found))
        return found

    def check_exists(self) -> None:
        """Fail when the subscription names topics or partitions that do not exist, as
        Spark's Kafka source does (`UnknownTopicOrPartitionException`), naming the close
        matches; a pattern subscription matches what exists whenever it runs."""
        from sparklog.errors import UnknownTopicOrPartitionError

        sub = self.options.subscription
        if isinstance(sub, SubscribePattern):
            return
        existing = self._retrying("listing topics", lambda: self.admin.list_topics())
        wanted = sorted({t for t, _ in sub.partitions}) if isinstance(sub, Assign) else sub.topics
        absent = [t for t in wanted if t not in existing]
        if absent:
            raise UnknownTopicOrPartitionError(_missing_topics(absent, existing, self.options))
        if isinstance(sub, Assign):
            self.partitions()
            if self.missing:
                raise UnknownTopicOrPartitionError(
                    "option 'assign' names partitions that do not exist: "
                    + ", ".join(f"{t}-{p}" for t, p in self.missing)
                    + "\n  fix: assign only existing partitions, or add partitions to the topic"
                )

    # ----------------------------------------------------------------- offsets

    def _list(self, specs: Mapping[TopicPartition, int]) -> dict[TopicPartition, Any]:
        if not specs:
            return {}
        found = self._retrying(
            "listing offsets",
            lambda: self.admin.list_offsets(
                dict(specs), isolation_level=self.options.isolation_level
            ),
        )
        return {TopicPartition(tp[0], int(tp[1])): r for tp, r in found.items()}

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        """Log start offsets."""
        return {
            tp: r.offset for tp, r in self._list(dict.fromkeys(tps, EARLIEST_TIMESTAMP)).items()
        }

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        """End offsets: the high watermark, or the last stable offset with read_committed."""
        return {tp: r.offset for tp, r in self._list(dict.fromkeys(tps, LATEST_TIMESTAMP)).items()}

    def resolve(
        self, spec: OffsetSpec, tps: list[TopicPartition], *, starting: bool
    ) -> PartitionOffsets:
        """Concrete offsets of `tps` for a starting or ending offset spec."""
        if not tps:
            return {}
        if isinstance(spec, EarliestOffsets):
            return self.earliest(tps)
        if isinstance(spec, LatestOffsets):
            return self.latest(tps)
        if isinstance(spec, GroupOffsets):
            return self._group_offsets(tps)
        which = "starting" if starting else "ending"
        if isinstance(spec, SpecificOffsets):
            _check_same(spec.offsets, tps, which)
            marked = {
                tp: o
                for tp, o in spec.offsets.items()
                if o in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP)
            }
            found = self._list(marked)
            return {tp: found[tp].offset if tp in found else o for tp, o in spec.offsets.items()}
        if isinstance(spec, SpecificTimestamps):
            _check_same(spec.timestamps, tps, which)
            return self._by_timestamp(dict(spec.timestamps), spec.strategy, starting)
        assert isinstance(spec, GlobalTimestamp)
        return self._by_timestamp(dict.fromkeys(tps, spec.timestamp_ms), spec.strategy, starting)

    def _group_offsets(self, tps: list[TopicPartition]) -> PartitionOffsets:
        """`kafka.group.id`'s committed offsets; the log start where it has none."""
        group = self.options.kafka["group.id"]
        committed = self._retrying(
            f"the committed offsets of group {group!r}",
            lambda: self.admin.list_group_offsets(group),
        )
        first = self.earliest([tp for tp in tps if tp not in committed])
        return {tp: committed.get(tp, first.get(tp, 0)) for tp in tps}

    def _by_timestamp(
        self, timestamps: dict[TopicPartition, int], strategy: str, starting: bool
    ) -> PartitionOffsets:
        """First offsets with a timestamp >= the given one; where no record is that recent, a
        starting offset follows `startingOffsetsByTimestampStrategy` and an ending one is the
        end of the partition (Spark's `fetchSpecificTimestampBasedOffsets`)."""
        found = self._list(timestamps)
        missing = sorted(tp for tp, r in found.items() if r.offset < 0)
        if missing and starting and strategy == "error":
            tp = missing[0]
            raise NoMatchingOffsetError(
                f"No offset matched from request of topic-partition {tp[0]}-{tp[1]} and "
                f"timestamp {timestamps[tp]}: no record is that recent. Set "
                "startingOffsetsByTimestampStrategy to 'latest' to start at the end instead"
            )
        ends = self.latest(missing)
        return {tp: (ends[tp] if r.offset < 0 else r.offset) for tp, r in sorted(found.items())}


def _check_same(given: Mapping[TopicPartition, int], tps: list[TopicPartition], which: str) -> None:
    if set(given) != set(tps):
        raise SparkLogOptionError(
            f"If {which} offsets contain specific offsets, you must specify all "
            f"TopicPartitions. Use -1 for latest, -2 for earliest. Specified: "
            f"{_names(given)} Assigned: {_names(tps)}"
        )


def _missing_topics(absent: list[str], existing: list[str], options: SourceOptions) -> str:
    """One line saying what is wrong, then one line per fix."""
    import difflib

    lines = [
        f"Topic{'s' if len(absent) > 1 else ''} {', '.join(map(repr, absent))} not present in "
        f"metadata of {options.bootstrap_servers}"
    ]
    for topic in absent:
        close = difflib.get_close_matches(topic, existing, n=3, cutoff=0.6)
        if close:
            lines.append(f"  did you mean: {', '.join(close)} (instead of {topic!r})?")
    lines.append(
        "  fix: correct the name, or create the topic first "
        f"(python -m sparklog topics create --topic {absent[0]} --bootstrap-server "
        f"{options.bootstrap_servers.split(',')[0]})"
    )
    return "\n".join(lines)


def _names(tps: Iterable[TopicPartition]) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "]"
