"""Produce response decisions: retry, fail, complete; idempotent sequence bookkeeping."""

from __future__ import annotations

import pytest

from sparklog.client.accumulator import ProducerBatch
from sparklog.client.sender import (
    Decision,
    IdempotenceState,
    decide,
    decide_request_failure,
)
from sparklog.errors import (
    InvalidRecordError,
    MessageTooLargeError,
    NetworkExceptionError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
    RequestTimedOutError,
)
from sparklog.structs import TopicPartition

TP = TopicPartition("t", 0)
LIMITS = {"retries": 3, "delivery_timeout_ms": 1000}


def batch(records: int = 2, created_ms: int = 0, sequence: int | None = None) -> ProducerBatch:
    b = ProducerBatch(TP, created_ms)
    for _ in range(records):
        b.try_append(1, None, b"v", (), lambda m, e: None, 10, 1 << 20)
    b.base_sequence = sequence
    return b


def test_success_and_duplicate_sequence_complete():
    assert decide(batch(), 0, 0, idempotence=None, **LIMITS).decision is Decision.COMPLETE
    outcome = decide(batch(sequence=0), 46, 0, idempotence=IdempotenceState(), **LIMITS)
    assert outcome.decision is Decision.COMPLETE


def test_not_leader_retries_and_refreshes_metadata():
    outcome = decide(batch(), 6, 10, idempotence=None, **LIMITS)
    assert outcome.decision is Decision.RETRY
    assert outcome.refresh_metadata
    assert isinstance(outcome.error, NotLeaderOrFollowerError)
    assert "t-0" in str(outcome.error)


def test_retries_stop_at_the_retries_setting():
    b = batch()
    b.attempts = 3
    outcome = decide(b, 6, 10, idempotence=None, **LIMITS)
    assert outcome.decision is Decision.FAIL
    assert isinstance(outcome.error, NotLeaderOrFollowerError)


def test_retries_stop_at_delivery_timeout_with_a_timeout_error():
    outcome = decide(batch(created_ms=0), 6, 1000, idempotence=None, **LIMITS)
    assert outcome.decision is Decision.FAIL
    assert isinstance(outcome.error, RequestTimedOutError)
    assert "delivery.timeout.ms (1000)" in str(outcome.error)


def test_non_retriable_errors_fail_with_the_brokers_message():
    outcome = decide(batch(), 87, 0, idempotence=None, error_message="bad record", **LIMITS)
    assert outcome.decision is Decision.FAIL
    assert isinstance(outcome.error, InvalidRecordError)
    assert "bad record" in str(outcome.error)
    assert not outcome.reset_producer_id


def test_closing_turns_retries_into_failures():
    outcome = decide(batch(), 6, 0, idempotence=None, closing=True, **LIMITS)
    assert outcome.decision is Decision.FAIL


def test_request_failures_retry_when_retriable():
    outcome = decide_request_failure(
        batch(), NetworkExceptionError("gone"), 0, idempotence=None, **LIMITS
    )
    assert outcome.decision is Decision.RETRY and outcome.refresh_metadata
    outcome = decide_request_failure(batch(), ValueError("bug"), 0, idempotence=None, **LIMITS)
    assert outcome.decision is Decision.FAIL


def test_idempotent_sequences_are_assigned_once_and_kept_on_retry():
    state = IdempotenceState()
    state.set_producer_id(5, 0)
    first, second = batch(records=3), batch(records=2)
    state.assign(first)
    state.assign(second)
    assert (first.base_sequence, second.base_sequence) == (0, 3)
    assert (first.producer_id, first.producer_epoch) == (5, 0)
    state.assign(first)  # a retry keeps its sequence
    assert first.base_sequence == 0
    assert state.next_sequence[TP] == 5


def test_out_of_order_sequence_is_transient_only_behind_an_unacked_batch():
    state = IdempotenceState()
    state.set_producer_id(5, 0)
    first, second = batch(records=3), batch(records=2)
    state.assign(first)
    state.assign(second)
    # `first` not yet acknowledged: `second` being out of order is expected, retry it.
    outcome = decide(second, 45, 0, idempotence=state, **LIMITS)
    assert outcome.decision is Decision.RETRY and not outcome.reset_producer_id
    state.on_acked(first)
    # Now `second` is the next the broker should take: out of order means a real gap.
    outcome = decide(second, 45, 0, idempotence=state, **LIMITS)
    assert outcome.decision is Decision.FAIL
    assert isinstance(outcome.error, OutOfOrderSequenceNumberError)
    assert outcome.reset_producer_id


def test_unknown_producer_id_retries_under_a_new_id():
    state = IdempotenceState()
    state.set_producer_id(5, 0)
    b = batch()
    state.assign(b)
    outcome = decide(b, 59, 0, idempotence=state, **LIMITS)
    assert outcome.decision is Decision.RETRY and outcome.reset_producer_id


def test_a_lost_sequenced_batch_asks_for_a_new_producer_id():
    state = IdempotenceState()
    state.set_producer_id(5, 0)
    b = batch()
    state.assign(b)
    outcome = decide(b, 10, 0, idempotence=state, **LIMITS)
    assert isinstance(outcome.error, MessageTooLargeError)
    assert outcome.decision is Decision.FAIL and outcome.reset_producer_id


def test_new_producer_id_restarts_sequences():
    state = IdempotenceState()
    state.set_producer_id(5, 0)
    b = batch()
    state.assign(b)
    state.on_acked(b)
    state.reset_pending = True
    state.set_producer_id(6, 0)
    assert not state.reset_pending
    fresh = batch()
    state.assign(fresh)
    assert fresh.base_sequence == 0 and fresh.producer_id == 6


@pytest.mark.parametrize("code", [47, 90])
def test_fenced_or_bad_epoch_fails(code):
    state = IdempotenceState()
    state.set_producer_id(5, 0)
    b = batch()
    state.assign(b)
    assert decide(b, code, 0, idempotence=state, **LIMITS).decision is Decision.FAIL
