"""Incremental fetch sessions (KIP-227): the leader's cache and contexts, the fetcher's handler,
and both together over random rounds."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.broker.fetch_params import FetchPartition, FetchResult
from sparklog.broker.fetch_session import FetchManager, FetchSessionCache
from sparklog.protocol.fetch_session_handler import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchSessionHandler,
    next_epoch,
)

FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, NOT_LEADER = 70, 71, 6


def part(partition: int, offset: int = 0, topic: str = "t") -> FetchPartition:
    return FetchPartition(topic, partition, offset, 1 << 20)


def result(hw: int = 10, records: bytes = b"", error: int = 0, log_start: int = 0) -> FetchResult:
    return FetchResult(error, high_watermark=hw, log_start_offset=log_start, records=records)


def manager(slots: int = 10, eviction_ms: int = 1_000) -> FetchManager:
    return FetchManager(FetchSessionCache(slots, eviction_ms, rng=random.Random(7)))


def answer(context, **by_partition: FetchResult):
    """respond() with `by_partition["p<n>"]` for partition n, a plain result for the rest."""
    return context.respond(
        [by_partition.get(f"p{p.partition}", result()) for p in context.partitions]
    )


def open_session(fm: FetchManager, partitions: list[FetchPartition], *, follower=True, now=0):
    context = fm.new_context(0, INITIAL_EPOCH, partitions, [], from_follower=follower, now_ms=now)
    error, session_id, answered = context.respond([result() for _ in partitions])
    assert (error, len(answered)) == (0, len(partitions))
    return session_id


def test_a_sessionless_fetch_answers_everything_and_keeps_nothing():
    fm = manager()
    context = fm.new_context(0, FINAL_EPOCH, [part(0), part(1)], [], from_follower=True, now_ms=0)
    error, session_id, answered = context.respond([result(), result()])
    assert (error, session_id, len(answered)) == (0, 0, 2)
    assert not fm.cache.sessions


def test_an_incremental_fetch_reads_the_whole_session_and_answers_only_news():
    fm = manager()
    session_id = open_session(fm, [part(0, 5), part(1, 7), part(2, 9)])
    assert fm.cache.get(session_id).epoch == 1

    # Only partition 1 moved; the session still reads all three, with the cached offsets.
    context = fm.new_context(session_id, 1, [part(1, 8)], [], from_follower=True, now_ms=1)
    assert [(p.partition, p.fetch_offset) for p in context.partitions] == [(0, 5), (1, 8), (2, 9)]
    error, answered_id, answered = context.respond([result(), result(records=b"x"), result(hw=11)])
    assert (error, answered_id) == (0, session_id)
    assert [p.partition for p, _r in answered] == [1, 2]  # records; a moved high watermark

    # Nothing new: an empty answer. Then an error, then a moved log start, are news.
    context = fm.new_context(session_id, 2, [], [], from_follower=True, now_ms=2)
    assert answer(context, p2=result(hw=11))[2] == []
    context = fm.new_context(session_id, 3, [], [], from_follower=True, now_ms=3)
    news = answer(context, p0=result(error=NOT_LEADER), p1=result(log_start=4), p2=result(hw=11))[2]
    assert [(p.partition, r.error_code) for p, r in news] == [(0, NOT_LEADER), (1, 0)]


def test_partitions_that_read_records_go_to_the_back_of_the_session():
    fm = manager()
    session_id = open_session(fm, [part(0), part(1), part(2)])
    context = fm.new_context(session_id, 1, [], [], from_follower=True, now_ms=1)
    context.respond([result(records=b"a"), result(), result()])
    context = fm.new_context(session_id, 2, [], [], from_follower=True, now_ms=2)
    assert [p.partition for p in context.partitions] == [1, 2, 0]


def test_session_errors_unknown_id_wrong_epoch_and_a_duplicate_request():
    fm = manager()
    session_id = open_session(fm, [part(0)])
    unknown = fm.new_context(session_id + 1, 1, [], [], from_follower=True, now_ms=1)
    assert unknown.respond([])[:2] == (FETCH_SESSION_ID_NOT_FOUND, 0)
    stale = fm.new_context(session_id, 5, [], [], from_follower=True, now_ms=1)
    assert stale.respond([])[:2] == (INVALID_FETCH_SESSION_EPOCH, 0)

    # Two requests with the same epoch (a retry racing the original): the second is refused.
    first = fm.new_context(session_id, 1, [], [], from_follower=True, now_ms=2)
    second = fm.new_context(session_id, 1, [], [], from_follower=True, now_ms=2)
    assert second.error_code == INVALID_FETCH_SESSION_EPOCH
    assert first.respond([result()])[:2] == (0, session_id)


def test_closing_and_emptying_a_session_removes_it():
    fm = manager()
    session_id = open_session(fm, [part(0), part(1)])
    closed = fm.new_context(session_id, FINAL_EPOCH, [part(0)], [], from_follower=True, now_ms=1)
    assert closed.respond([result()])[:2] == (0, 0) and session_id not in fm.cache.sessions

    session_id = open_session(fm, [part(0), part(1)])
    forgotten = [("t", 0), ("t", 1)]
    emptied = fm.new_context(session_id, 1, [], forgotten, from_follower=True, now_ms=1)
    assert emptied.partitions == [] and session_id not in fm.cache.sessions

    session_id = open_session(fm, [part(0)])
    renewed = fm.new_context(session_id, INITIAL_EPOCH, [part(0)], [], from_follower=True, now_ms=1)
    new_id = renewed.respond([result()])[1]
    assert new_id not in (0, session_id) and set(fm.cache.sessions) == {new_id}


def test_a_full_cache_evicts_idle_sessions_then_consumers_for_followers():
    fm = manager(slots=2, eviction_ms=1_000)
    consumer = open_session(fm, [part(0)], follower=False, now=0)
    follower = open_session(fm, [part(0), part(1)], follower=True, now=0)
    # Full, nothing idle long enough: a consumer gets no session, a follower evicts the consumer.
    assert open_session(fm, [part(0), part(1), part(2)], follower=False, now=10) == 0
    newer = open_session(fm, [part(5)], follower=True, now=10)
    assert (
        newer and set(fm.cache.sessions) == {follower, newer} and consumer not in fm.cache.sessions
    )
    # A session idle past the eviction time gives way to anyone.
    fm.new_context(newer, 1, [], [], from_follower=True, now_ms=1_500).respond([result()])
    late = open_session(fm, [part(9)], follower=False, now=1_600)
    assert late and set(fm.cache.sessions) == {newer, late} and fm.cache.evictions == 2


def test_no_slots_means_no_sessions():
    assert open_session(manager(slots=0), [part(0)]) == 0


def test_epochs_wrap_to_one_and_full_epochs_stay():
    assert next_epoch(2**31 - 1) == 1 and next_epoch(4) == 5
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


# -- the fetcher's handler ---------------------------------------------------------------------


def test_the_handler_sends_only_changes_and_forgets_what_it_dropped():
    handler: FetchSessionHandler[str, int] = FetchSessionHandler()
    first = handler.build({"a": 1, "b": 2})
    assert (first.session_id, first.epoch, first.to_send, first.is_full) == (
        0,
        0,
        {"a": 1, "b": 2},
        True,
    )
    assert handler.handle_response(first, 0, 42, ["a", "b"])

    second = handler.build({"a": 1, "b": 3, "c": 4})
    assert (second.session_id, second.epoch, second.to_send) == (42, 1, {"b": 3, "c": 4})
    assert handler.handle_response(second, 0, 42, ["b"])
    third = handler.build({"c": 4})
    assert (third.epoch, third.to_send, third.to_forget) == (2, {}, ["a", "b"])


def test_the_handler_starts_over_after_refusals():
    handler: FetchSessionHandler[str, int] = FetchSessionHandler()
    handler.handle_response(handler.build({"a": 1}), 0, 42, ["a"])
    request = handler.build({"a": 1})
    assert not handler.handle_response(request, INVALID_FETCH_SESSION_EPOCH, 0, [])
    assert (handler.session_id, handler.epoch) == (42, 0)  # closes 42 and asks for a new one
    request = handler.build({"a": 1})
    assert request.is_full and request.to_send == {"a": 1}
    assert handler.handle_response(request, 0, 43, ["a"])
    assert not handler.handle_response(handler.build({"a": 1}), FETCH_SESSION_ID_NOT_FOUND, 0, [])
    assert (handler.session_id, handler.epoch) == (0, 0)
    # A broker without sessions: full fetches every time, and answers are still used.
    assert handler.handle_response(handler.build({"a": 1}), 0, 0, ["a"])
    assert handler.build({"a": 1}).is_full
    # Partitions nobody asked for: ignored, and the next request is full.
    handler.handle_response(handler.build({"a": 1}), 0, 44, ["a"])
    assert not handler.handle_response(handler.build({"a": 2}), 0, 44, ["zzz"])
    assert handler.build({"a": 2}).is_full


# -- both sides over random rounds --------------------------------------------------------------

rounds = st.lists(
    st.tuples(
        st.dictionaries(st.integers(0, 7), st.integers(0, 3), max_size=6),  # partition -> offset
        st.sampled_from(["ok", "ok", "ok", "lost", "evicted"]),
        st.randoms(use_true_random=False),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(rounds)
def test_the_leader_always_reads_what_the_fetcher_wants_and_answers_every_change(script):
    """Whatever the fetcher wants each round, lost responses and evicted sessions included, a
    request the leader accepts reads exactly the wanted partitions at the wanted offsets, and
    every partition whose high watermark moved or that read records is answered, also when the
    reader skipped the caught-up partitions `context.unchanged` said the session knew."""
    fm = manager(slots=3)
    handler: FetchSessionHandler[tuple[str, int], int] = FetchSessionHandler()
    hw_seen: dict[tuple[str, int], int] = {}
    for wanted_offsets, fate, rnd in script:
        wanted = {("t", p): o for p, o in wanted_offsets.items()}
        request = handler.build(wanted)
        if fate == "evicted" and request.session_id:
            fm.cache.remove(request.session_id)
        context = fm.new_context(
            request.session_id,
            request.epoch,
            [part(p, o) for (_t, p), o in request.to_send.items()],
            list(request.to_forget),
            from_follower=True,
            now_ms=0,
        )
        if context.error_code:
            assert not handler.handle_response(request, context.error_code, 0, [])
            continue
        assert {(p.topic, p.partition): p.fetch_offset for p in context.partitions} == wanted
        results = [result(hw=rnd.randint(0, 2), records=rnd.choice([b"", b"x"])) for _ in wanted]
        # the reader skips caught-up partitions the session already knows all about
        unchanged = context.unchanged
        read = [
            None
            if unchanged is not None
            and not r.records
            and unchanged((p.topic, p.partition), r.high_watermark, r.log_start_offset)
            else r
            for p, r in zip(context.partitions, results, strict=True)
        ]
        error, session_id, answered = context.respond(read)
        if fate == "lost":
            handler.handle_error()
            continue
        keys = [(p.topic, p.partition) for p, _r in answered]
        assert handler.handle_response(request, error, session_id, keys)
        for p, r in zip(context.partitions, results, strict=True):
            tp = (p.topic, p.partition)
            if r.records or hw_seen.get(tp) != r.high_watermark:
                assert tp in keys
        for p, r in answered:
            hw_seen[(p.topic, p.partition)] = r.high_watermark
        for tp in list(hw_seen):
            if tp not in wanted:
                del hw_seen[tp]  # forgotten: a re-added partition starts over
