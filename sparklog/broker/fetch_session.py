"""Incremental fetch sessions, the leader's side (KIP-227; Kafka's `FetchSession.scala`).

A fetcher that follows many partitions would otherwise list every one of them in every Fetch
request, and get every one back, although a round usually moves one or two. With a session the
broker remembers the partitions and their fetch offsets; each request then carries only the
partitions whose fetch parameters changed (and the ones to forget), and each response only the
partitions with something to say: records, a moved high watermark or log start offset, an error.

Sans-IO: `FetchManager.new_context` turns a request's session id, epoch and partitions into a
`FetchContext` that says which partitions to read; `FetchContext.respond` turns what was read
into the response's error, session id and partitions. The caller does the reading.

Session ids and epochs (Kafka's `FetchMetadata`): id 0 with epoch -1 is a sessionless full
fetch; epoch 0 is a full fetch that asks for a new session (closing the given id, if any); any
other epoch is an incremental fetch on an existing session, whose epoch must match. The cache
holds `max.incremental.fetch.session.cache.slots` sessions; when it is full, a new session
takes the place of one idle for `min.incremental.fetch.session.eviction.ms`, else of a smaller
(or, for a follower, a consumer's) session, else the fetch goes on without one.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import cast

from sparklog.broker.fetch_params import FetchPartition, FetchResult, Unchanged
from sparklog.errors import FetchSessionIdNotFoundError, InvalidFetchSessionEpochError
from sparklog.protocol.fetch_session_handler import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    next_epoch,
)
from sparklog.structs import TopicPartition

DEFAULT_CACHE_SLOTS = 1_000
DEFAULT_EVICTION_MS = 120_000
_INT32_MAX = 2**31 - 1


@dataclass(slots=True)
class CachedPartition:
    """A session's partition: the fetch parameters last sent and what was last answered."""

    request: FetchPartition
    high_watermark: int = -1
    log_start_offset: int = -1

    def must_respond(self, result: FetchResult) -> bool:
        """Kafka's `maybeUpdateResponseData`: whether an incremental response carries it, and
        remembers what it carried."""
        respond = bool(result.records) or result.error_code != 0
        if result.error_code:
            self.high_watermark = -1
        elif self.high_watermark != result.high_watermark:
            self.high_watermark = result.high_watermark
            respond = True
        if not result.error_code and self.log_start_offset != result.log_start_offset:
            self.log_start_offset = result.log_start_offset
            respond = True
        return respond


@dataclass(slots=True)
class FetchSession:
    id: int
    privileged: bool  # a follower's session, kept before consumers' when the cache is full
    partitions: dict[TopicPartition, CachedPartition]
    created_ms: int
    last_used_ms: int
    epoch: int = 1

    def knows(self, tp: TopicPartition, high_watermark: int, log_start_offset: int) -> bool:
        """Whether a caught-up `tp` with this high watermark and log start has nothing to say
        (`CachedPartition.must_respond` would leave it out), so it need not even be read."""
        cached = self.partitions.get(tp)
        return (
            cached is not None
            and cached.high_watermark == high_watermark
            and cached.log_start_offset == log_start_offset
        )

    def update(
        self, requested: Iterable[FetchPartition], forgotten: Iterable[TopicPartition]
    ) -> None:
        """An incremental request: add or update its partitions, drop the forgotten ones."""
        for p in requested:
            tp = TopicPartition(p.topic, p.partition)
            cached = self.partitions.get(tp)
            if cached is None:
                self.partitions[tp] = CachedPartition(p)
            else:
                cached.request = p
        for tp in forgotten:
            self.partitions.pop(tp, None)


@dataclass(slots=True)
class FetchContext:
    """What one Fetch request reads (`partitions`) and how its answer is shaped."""

    kind: str  # "sessionless", "full", "incremental" or "error"
    partitions: list[FetchPartition]
    error_code: int = 0
    session: FetchSession | None = None
    request_epoch: int = FINAL_EPOCH
    cache: FetchSessionCache | None = None
    privileged: bool = False
    now_ms: int = 0

    @property
    def unchanged(self) -> Unchanged | None:
        """For the reader: which caught-up partitions an incremental response leaves out."""
        return self.session.knows if self.kind == "incremental" and self.session else None

    def respond(
        self, results: list[FetchResult | None]
    ) -> tuple[int, int, list[tuple[FetchPartition, FetchResult]]]:
        """(error code, session id, the partitions to answer) for `results`, read in the
        order of `partitions`; None stands for a partition `unchanged` let the reader skip."""
        pairs = list(zip(self.partitions, results, strict=True))
        if self.kind == "error":
            return self.error_code, INVALID_SESSION_ID, []
        # only an incremental session's reader skips partitions (`unchanged` is None otherwise)
        whole = cast(list[tuple[FetchPartition, FetchResult]], pairs)
        if self.kind == "sessionless":
            return 0, INVALID_SESSION_ID, whole
        if self.kind == "full":
            assert self.cache is not None
            session_id = self.cache.maybe_create(self.now_ms, self.privileged, whole)
            return 0, session_id, whole
        session = self.session
        assert session is not None
        if session.epoch != next_epoch(self.request_epoch):  # another request used the session
            return InvalidFetchSessionEpochError.code, session.id, []
        answered = []
        for p, r in pairs:
            if r is None:
                continue
            tp = TopicPartition(p.topic, p.partition)
            cached = session.partitions.get(tp)
            if cached is None or not cached.must_respond(r):
                continue
            answered.append((p, r))
            if r.records:  # round-robin: partitions that just read go to the back of the line
                del session.partitions[tp]
                session.partitions[tp] = cached
        return 0, session.id, answered


@dataclass
class FetchSessionCache:
    """The broker's sessions (Kafka's `FetchSessionCacheShard`, one shard)."""

    max_entries: int = DEFAULT_CACHE_SLOTS
    eviction_ms: int = DEFAULT_EVICTION_MS
    sessions: dict[int, FetchSession] = field(default_factory=dict)
    rng: random.Random = field(default_factory=random.Random)
    evictions: int = 0

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        return self.sessions.pop(session_id, None)

    def maybe_create(
        self,
        now_ms: int,
        privileged: bool,
        pairs: list[tuple[FetchPartition, FetchResult]],
    ) -> int:
        """A new session holding `pairs` (request and what was answered), or 0 without room."""
        if len(self.sessions) >= self.max_entries and not self._evict_one(
            now_ms, privileged, len(pairs)
        ):
            return INVALID_SESSION_ID
        partitions = {}
        for p, r in pairs:
            cached = CachedPartition(p)
            cached.must_respond(r)
            partitions[TopicPartition(p.topic, p.partition)] = cached
        session_id = self._new_id()
        self.sessions[session_id] = FetchSession(
            session_id, privileged, partitions, now_ms, now_ms, next_epoch(INITIAL_EPOCH)
        )
        return session_id

    def _new_id(self) -> int:
        while True:
            session_id = self.rng.randint(1, _INT32_MAX)
            if session_id not in self.sessions:
                return session_id

    def _evict_one(self, now_ms: int, privileged: bool, size: int) -> bool:
        """Kafka's `tryEvict`: the least recently used session if it has been idle longer than
        the eviction time; else the smallest evictable session, if the new one outranks it
        (followers outrank consumers, then more partitions outrank fewer). Sessions younger
        than the eviction time are evictable only by a follower, and only if not followers."""
        if not self.sessions:
            return False
        oldest = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            return self._evict(oldest)
        evictable = [
            s
            for s in self.sessions.values()
            if now_ms - s.created_ms > self.eviction_ms or (privileged and not s.privileged)
        ]
        if not evictable:
            return False
        smallest = min(evictable, key=lambda s: (s.privileged, len(s.partitions), s.id))
        if (privileged, size) < (smallest.privileged, len(smallest.partitions)):
            return False
        return self._evict(smallest)

    def _evict(self, session: FetchSession) -> bool:
        del self.sessions[session.id]
        self.evictions += 1
        return True


class FetchManager:
    """Turns Fetch requests into contexts over one `FetchSessionCache` (Kafka's FetchManager)."""

    def __init__(self, cache: FetchSessionCache) -> None:
        self.cache = cache

    def new_context(
        self,
        session_id: int,
        epoch: int,
        partitions: list[FetchPartition],
        forgotten: list[TopicPartition],
        *,
        from_follower: bool,
        now_ms: int,
    ) -> FetchContext:
        """The context for one request (see the module docstring for the id/epoch rules)."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch
            if session_id != INVALID_SESSION_ID:
                self.cache.remove(session_id)
            if epoch == FINAL_EPOCH:
                return FetchContext("sessionless", partitions)
            return FetchContext(
                "full", partitions, cache=self.cache, privileged=from_follower, now_ms=now_ms
            )
        session = self.cache.get(session_id)
        if session is None:
            return FetchContext("error", [], error_code=FetchSessionIdNotFoundError.code)
        if session.epoch != epoch:
            return FetchContext("error", [], error_code=InvalidFetchSessionEpochError.code)
        session.update(partitions, forgotten)
        if not session.partitions:  # everything forgotten: the session ends
            self.cache.remove(session.id)
            return FetchContext("sessionless", partitions)
        session.last_used_ms = now_ms
        session.epoch = next_epoch(session.epoch)
        return FetchContext(
            "incremental",
            [c.request for c in session.partitions.values()],
            session=session,
            request_epoch=epoch,
        )
