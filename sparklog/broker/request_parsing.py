"""Request parsing for the broker's handlers: plain functions over kio request bodies (and
the Fetch partition answer), testable without sockets; `kafka_apis` calls them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from sparklog.broker.fetch_params import FetchParams, FetchPartition, FetchResult
from sparklog.errors import (
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from sparklog.protocol import kio_build
from sparklog.structs import IsolationLevel, TopicPartition

_LEADER_HINT_ERRORS = frozenset(
    {NotLeaderOrFollowerError.code, FencedLeaderEpochError.code, UnknownLeaderEpochError.code}
)


def produce_entries(body: Any) -> dict[TopicPartition, bytes | None]:
    """(topic, partition) -> records of a Produce request, in request order."""
    entries: dict[TopicPartition, bytes | None] = {}
    for topic in body.topic_data:
        for p in topic.partition_data:
            entries[TopicPartition(topic.name, int(p.index))] = (
                None if p.records is None else bytes(p.records)
            )
    return entries


def fetch_params(body: Any, *, zero_copy: bool = False) -> FetchParams:
    """A Fetch request's limits; `zero_copy` lets large reads be file slices (sendfile)."""
    return FetchParams(
        replica_id=int(getattr(body, "replica_id", -1)),
        max_wait_ms=max(0, kio_build.millis(body.max_wait)),
        min_bytes=int(body.min_bytes),
        max_bytes=int(getattr(body, "max_bytes", 2**31 - 1)),
        isolation_level=int(getattr(body, "isolation_level", 0)),
        zero_copy=zero_copy,
    )


def fetch_partitions(body: Any) -> list[FetchPartition]:
    """The partitions of a Fetch request, in request order."""
    return list(fetch_partitions_steps(body))


def fetch_partitions_steps(body: Any) -> Iterator[FetchPartition]:
    for t in body.topics:
        for p in t.partitions:
            yield FetchPartition(
                topic=t.topic,
                partition=int(p.partition),
                fetch_offset=int(p.fetch_offset),
                partition_max_bytes=int(p.partition_max_bytes),
                current_leader_epoch=int(getattr(p, "current_leader_epoch", -1)),
            )


def partitions_of(topics: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
    """(topic, partition) of a request's topics -> partitions arrays, in request order."""
    for topic in topics:
        for p in topic.partitions:
            yield topic, p


def forgotten_partitions(body: Any) -> list[TopicPartition]:
    """The partitions an incremental Fetch drops from its session (v7+)."""
    return [
        TopicPartition(t.topic, int(p))
        for t in getattr(body, "forgotten_topics_data", None) or ()
        for p in t.partitions
    ]


def fetch_partition_data(p: FetchPartition, r: FetchResult, isolation_level: int) -> dict[str, Any]:
    data: dict[str, Any] = {
        "partition_index": p.partition,
        "error_code": r.error_code,
        "high_watermark": r.high_watermark,
        "last_stable_offset": r.last_stable_offset,
        "log_start_offset": r.log_start_offset,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": r.records,
    }
    if isolation_level == IsolationLevel.READ_COMMITTED and r.error_code == 0:
        data["aborted_transactions"] = [
            {"producer_id": a.producer_id, "first_offset": a.first_offset}
            for a in r.aborted_transactions or ()
        ]
    if r.error_code in _LEADER_HINT_ERRORS:
        data["current_leader"] = {"leader_id": r.leader_id, "leader_epoch": r.leader_epoch}
    return data
