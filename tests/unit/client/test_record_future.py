"""The futures `send()` returns: the native class and its Python reference behave alike."""

from __future__ import annotations

import gc
import logging
import threading

import pytest

from sparklog.client.record_future import RecordFuture, Waiters, resolve_all
from sparklog.records import native

core = native.core()
KINDS = [pytest.param((RecordFuture, resolve_all), id="reference")]
if core is not None:
    KINDS.append(pytest.param((core.RecordFuture, core.resolve_all), id="native"))


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


def test_record_futures_resolve_wait_and_call_back_like_futures(kind):
    """result() waits (and times out), callbacks run once, errors raise."""
    future_class, _ = kind
    waiters = Waiters()
    ok, failed = future_class(waiters), future_class(waiters)
    seen = []
    ok.add_done_callback(lambda f: seen.append(f.result()))
    assert not ok.done() and ok.running() and not ok.cancel() and not ok.cancelled()
    with pytest.raises(TimeoutError):
        ok.result(timeout=0.01)
    threading.Timer(0.05, ok, args=("meta", None)).start()
    assert ok.result(timeout=5) == "meta" and ok.done() and seen == ["meta"]
    ok("other", None)  # resolved once: later calls change nothing
    assert ok.result() == "meta" and seen == ["meta"]
    failed(None, ValueError("boom"))
    assert isinstance(failed.exception(), ValueError)
    with pytest.raises(ValueError, match="boom"):
        failed.result()
    late = []
    failed.add_done_callback(late.append)
    assert late == [failed]
    assert (repr(ok), repr(failed)) == ("<RecordFuture done>", "<RecordFuture failed>")


def test_resolve_all_wakes_waiters_then_runs_callbacks_in_order(kind):
    future_class, resolve = kind
    waiters = Waiters()
    calls = []
    futures = [
        future_class(waiters, lambda m, e, i=i: calls.append(("delivery", i, m, e)))
        for i in range(3)
    ]
    futures[1].add_done_callback(lambda f: calls.append(("done", f.result())))
    other = []
    thunk = lambda m, e: other.append((m, e))  # noqa: E731  (not a future: called as a thunk)
    futures[0]("early", None)  # already resolved: keeps its outcome
    got = []
    waiter = threading.Thread(target=lambda: got.append(futures[2].result(timeout=10)))
    waiter.start()
    while waiters.count == 0:
        threading.Event().wait(0.001)
    resolve([*futures, thunk], ["m0", "m1", "m2", "m3"])
    waiter.join(10)
    assert got == ["m2"] and [f.result() for f in futures] == ["early", "m1", "m2"]
    assert calls == [
        ("delivery", 0, "early", None),
        ("done", "m1"),
        ("delivery", 1, "m1", None),
        ("delivery", 2, "m2", None),
    ]
    assert other == [("m3", None)]


def test_callback_errors_are_logged_not_raised(kind, caplog):
    future_class, resolve = kind

    def boom(*_args):
        raise RuntimeError("callback bug")

    futures = [future_class(Waiters(), boom), future_class(Waiters())]
    futures[1].add_done_callback(boom)
    with caplog.at_level(logging.ERROR, logger="sparklog.client.record_future"):
        resolve(futures, ["a", "b"])
    assert [f.result() for f in futures] == ["a", "b"]
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["on_delivery callback raised", "a done callback of a record future raised"]
    assert all("callback bug" in str(r.exc_info[1]) for r in caplog.records)


@pytest.mark.skipif(core is None, reason="the native core is not built")
def test_native_futures_stay_out_of_the_garbage_collector():
    """Why the native class exists: a producer keeps a future per record until the batch is
    acknowledged, and the collector would scan every one of them at each collection."""
    waiters = Waiters()
    assert not gc.is_tracked(core.RecordFuture(waiters, print))
    assert gc.is_tracked(RecordFuture(waiters, print))
