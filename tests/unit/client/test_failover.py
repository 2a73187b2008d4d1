"""Client decisions through a leader change, without sockets: produce retries and leader
hints, metadata leader epochs (KIP-320), fetch positions and their validation."""

from __future__ import annotations

import uuid

import pytest

from sparklog.client.accumulator import ProducerBatch, RecordAccumulator
from sparklog.client.fetcher import Fetcher, LogTruncationError, SubscriptionState
from sparklog.client.metadata import BrokerNode, Cluster, MetadataState, PartitionInfo, TopicInfo
from sparklog.client.request_builder import build_response
from sparklog.client.sender import (
    Decision,
    IdempotenceState,
    decide,
    decide_request_failure,
    leader_hints,
)
from sparklog.errors import (
    NetworkExceptionError,
    RequestTimedOutError,
    UnsupportedVersionError,
)
from sparklog.protocol.api_versions import ApiKey
from sparklog.records import SimpleRecord, build_batch
from sparklog.structs import TopicPartition as TP

T0 = TP("t", 0)
T1 = TP("t", 1)
LIMITS = {"retries": 2_147_483_647, "delivery_timeout_ms": 120_000}
TOPIC_ID = uuid.UUID(int=7)


def cluster(leaders: dict[TP, tuple[int, int]], brokers=(1, 2, 3), topic_id=TOPIC_ID) -> Cluster:
    """A cluster of topic `t` whose partitions have the given (leader, leader epoch)."""
    parts = tuple(
        PartitionInfo("t", tp.partition, leader, epoch, (1, 2, 3), (1, 2, 3))
        for tp, (leader, epoch) in sorted(leaders.items())
    )
    return Cluster(
        brokers={b: BrokerNode(b, "127.0.0.1", 9000 + b) for b in brokers},
        topics={"t": TopicInfo("t", parts, topic_id)},
    )


def batch(records: int = 2, created_ms: int = 0) -> ProducerBatch:
    b = ProducerBatch(T0, created_ms)
    for _ in range(records):
        b.try_append(1, None, b"v", (), lambda m, e: None, 10, 1 << 20)
    return b


# ---------------------------------------------------------------------------------- producer


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (6, "NotLeaderOrFollowerError"),
        (5, "LeaderNotAvailableError"),
        (74, "FencedLeaderEpochError"),
        (75, "UnknownLeaderEpochError"),
        (3, "UnknownTopicOrPartitionError"),
    ],
)
def test_leader_errors_retry_and_refresh_metadata(code, name):
    outcome = decide(batch(), code, 10, idempotence=None, **LIMITS)
    assert outcome.decision is Decision.RETRY and outcome.refresh_metadata
    assert type(outcome.error).__name__ == name and not outcome.reset_producer_id


@pytest.mark.parametrize("code", [19, 20, 7])  # NOT_ENOUGH_REPLICAS(_AFTER_APPEND), TIMED_OUT
def test_replication_shortfalls_and_broker_timeouts_retry_on_the_same_leader(code):
    state = IdempotenceState()
    state.set_producer_id(5, 0)
    b = batch()
    state.assign(b)
    outcome = decide(b, code, 10, idempotence=state, **LIMITS)
    assert outcome.decision is Decision.RETRY
    assert not outcome.refresh_metadata and not outcome.reset_producer_id


@pytest.mark.parametrize(
    "error",
    [
        NetworkExceptionError("node 1 closed the connection"),  # the leader died mid-request
        NetworkExceptionError("cannot connect to node 1: refused"),
        RequestTimedOutError("PRODUCE request to node 1 timed out (request.timeout.ms=30000)"),
    ],
)
def test_a_request_lost_with_its_leader_is_retried_with_fresh_metadata(error):
    state = IdempotenceState()
    state.set_producer_id(5, 0)
    b = batch()
    state.assign(b)
    outcome = decide_request_failure(b, error, 60_000, idempotence=state, **LIMITS)
    assert outcome.decision is Decision.RETRY and outcome.refresh_metadata
    assert not outcome.reset_producer_id  # same id and sequence: the new leader dedupes
    late = decide_request_failure(b, error, 120_000, idempotence=state, **LIMITS)
    assert late.decision is Decision.FAIL and isinstance(late.error, RequestTimedOutError)
    assert "delivery.timeout.ms (120000)" in str(late.error)


def test_a_retried_batch_keeps_its_sequence_and_goes_to_the_new_leader_without_backoff():
    acc = RecordAccumulator(
        batch_size=1 << 16,
        linger_ms=0,
        buffer_memory=1 << 20,
        delivery_timeout_ms=120_000,
        retry_backoff_ms=100,
        retry_backoff_max_ms=1_000,
    )
    state = IdempotenceState()
    state.set_producer_id(5, 0)
    for i in range(3):
        acc.append(T0, 1, None, b"v%d" % i, (), lambda m, e: None, 30, 0)
        old = cluster({T0: (1, 4)})
        (sent,) = acc.drain(old, 1, 1 << 20, 0)
        state.assign(sent)
        acc.on_attempt_done(sent)
        acc.reenqueue(sent, now_ms=0)  # the leader died with the request in flight
        assert sent.base_sequence == i and sent.leader_epoch == 4
        # Same leader epoch: the retry waits its backoff.
        assert acc.ready(50, old).nodes == frozenset()
        assert acc.drain(old, 1, 1 << 20, 50) == []
        # Metadata names a new leader with a newer epoch: the batch goes now, to it.
        new = cluster({T0: (2, 5)})
        assert acc.ready(50, new).nodes == {2}
        (again,) = acc.drain(new, 2, 1 << 20, 50)
        assert again is sent and again.leader_epoch == 5
        state.assign(again)
        assert again.base_sequence == i  # the new leader sees the same producer id + sequence
        acc.on_attempt_done(again)
        state.on_acked(again)
        acc.deallocate(again)
    assert state.next_sequence[T0] == 3


def test_leader_hints_of_a_produce_response():
    response = build_response(
        ApiKey.PRODUCE,
        11,
        {
            "throttle_time": 0,
            "responses": [
                {
                    "name": "t",
                    "partition_responses": [
                        {
                            "index": 0,
                            "error_code": 6,
                            "base_offset": -1,
                            "log_start_offset": -1,
                            "record_errors": [],
                            "error_message": None,
                            "current_leader": {"leader_id": 3, "leader_epoch": 9},
                        },
                        {
                            "index": 1,
                            "error_code": 0,
                            "base_offset": 7,
                            "log_start_offset": 0,
                            "record_errors": [],
                            "error_message": None,
                        },
                    ],
                }
            ],
            "node_endpoints": [{"node_id": 3, "host": "127.0.0.1", "port": 9103, "rack": None}],
        },
    )
    by_tp = {TP("t", int(p.index)): p for p in response.responses[0].partition_responses}
    hints, nodes = leader_hints(response, by_tp)
    assert hints == {T0: (3, 9)}
    assert nodes == [BrokerNode(3, "127.0.0.1", 9103)]


# ---------------------------------------------------------------------------------- metadata


def updated(state: MetadataState, c: Cluster) -> Cluster:
    state.on_update(c, 0)
    return state.cluster


def test_a_newer_leader_epoch_replaces_an_older_one_never_the_reverse():
    state = MetadataState(max_age_ms=300_000, retry_backoff_ms=100)
    updated(state, cluster({T0: (1, 4), T1: (2, 4)}))
    # A lagging broker answers with the old leader of t-0: keep the newer one we know.
    c = updated(state, cluster({T0: (2, 5), T1: (2, 4)}))
    assert (c.leader_for(T0), c.leader_epoch_for(T0)) == (2, 5)
    c = updated(state, cluster({T0: (1, 4), T1: (3, 6)}))
    assert (c.leader_for(T0), c.leader_epoch_for(T0)) == (2, 5)
    assert (c.leader_for(T1), c.leader_epoch_for(T1)) == (3, 6)
    assert state.last_seen_epochs == {T0: 5, T1: 6}
    c = updated(state, cluster({T0: (2, 5), T1: (3, 6)}))  # the same epoch is taken as is
    assert c.leader_for(T0) == 2


def test_a_recreated_topic_starts_its_epochs_over():
    state = MetadataState(max_age_ms=300_000, retry_backoff_ms=100)
    updated(state, cluster({T0: (1, 8)}))
    c = updated(state, cluster({T0: (3, 0)}, topic_id=uuid.UUID(int=8)))
    assert (c.leader_for(T0), c.leader_epoch_for(T0)) == (3, 0)


def test_responses_without_epochs_are_taken_and_forget_the_epoch():
    state = MetadataState(max_age_ms=300_000, retry_backoff_ms=100)
    updated(state, cluster({T0: (1, 8)}))
    c = updated(state, cluster({T0: (2, -1)}))
    assert c.leader_for(T0) == 2 and T0 not in state.last_seen_epochs


def test_brokers_that_disappear_are_dropped_with_their_leaderships():
    state = MetadataState(max_age_ms=300_000, retry_backoff_ms=100)
    updated(state, cluster({T0: (1, 4)}))
    # Broker 1 died; the controller has not moved the leader yet: no leader to send to.
    c = updated(state, cluster({T0: (1, 4)}, brokers=(2, 3)))
    assert sorted(c.brokers) == [2, 3]
    assert c.leader_for(T0) is None


def test_leader_hints_move_only_to_newer_epochs_of_known_nodes():
    state = MetadataState(max_age_ms=300_000, retry_backoff_ms=100)
    updated(state, cluster({T0: (1, 4), T1: (1, 4)}, brokers=(1, 2)))
    version = state.version
    assert state.on_leader_hints({T0: (2, 4)}, {}) == set()  # not newer
    assert state.on_leader_hints({T0: (7, 5)}, {}) == set()  # unknown node
    assert state.on_leader_hints({TP("t", 9): (2, 5)}, {}) == set()  # unknown partition
    assert state.on_leader_hints({T0: (-1, -1)}, {}) == set()
    assert state.version == version
    node3 = BrokerNode(3, "127.0.0.1", 9003)
    assert state.on_leader_hints({T0: (2, 5), T1: (3, 6)}, {3: node3}) == {T0, T1}
    c = state.cluster
    assert (c.leader_for(T0), c.leader_epoch_for(T0)) == (2, 5)
    assert (c.leader_for(T1), c.leader_epoch_for(T1)) == (3, 6)
    assert c.brokers[3] == node3 and state.version == version + 1
    # A later Metadata response from a lagging broker does not undo the hint.
    c = updated(state, cluster({T0: (1, 4), T1: (1, 4)}, brokers=(1, 2, 3)))
    assert c.leader_for(T1) == 3


# ----------------------------------------------------------------------------------- fetcher


def fetcher(reset: str = "earliest") -> Fetcher:
    return Fetcher(
        SubscriptionState(reset),
        fetch_min_bytes=1,
        fetch_max_bytes=1 << 20,
        fetch_max_wait_ms=500,
        max_partition_fetch_bytes=1 << 16,
        isolation_level=0,
    )


def records(base_offset: int, count: int, epoch: int) -> bytes:
    return build_batch(
        [SimpleRecord(f"v{base_offset + i}".encode(), timestamp=1) for i in range(count)],
        base_offset=base_offset,
        partition_leader_epoch=epoch,
    )


def fetch_response(code: int, data: bytes = b"", tp: TP = T0):
    partition = {
        "partition_index": tp.partition,
        "error_code": code,
        "high_watermark": 100,
        "last_stable_offset": 100,
        "log_start_offset": 0,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": data,
    }
    return build_response(
        ApiKey.FETCH,
        12,
        {
            "throttle_time": 0,
            "error_code": 0,
            "session_id": 0,
            "responses": [{"topic": tp.topic, "partitions": [partition]}],
        },
    )


def epoch_response(code: int, end_offset: int, epoch: int, tp: TP = T0):
    return build_response(
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        4,
        {
            "throttle_time": 0,
            "topics": [
                {
                    "topic": tp.topic,
                    "partitions": [
                        {
                            "error_code": code,
                            "partition": tp.partition,
                            "leader_epoch": epoch,
                            "end_offset": end_offset,
                        }
                    ],
                }
            ],
        },
    )


def consumed_to(f: Fetcher, offset: int, epoch: int) -> None:
    """Assign t-0 and read offsets [0, offset) written in leader epoch `epoch`, from node 1."""
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 0)
    f.subscriptions.maybe_validate_positions(cluster({T0: (1, epoch)}))
    f.on_fetch_response({T0: 0}, fetch_response(0, records(0, offset, epoch)))
    assert len(f.drain(1000)) == offset


def test_fetches_carry_the_leader_epoch_and_skip_busy_or_unreachable_leaders():
    f = fetcher()
    f.subscriptions.assign([T0, T1])
    f.subscriptions.seek(T0, 3)
    f.subscriptions.seek(T1, 4)
    c = cluster({T0: (1, 4), T1: (2, 7)})
    requests, _ = f.fetch_requests(c, busy_nodes={2})
    assert set(requests) == {1}
    partition = requests[1][0]["topics"][0]["partitions"][0]
    assert partition["current_leader_epoch"] == 4 and partition["fetch_offset"] == 3


@pytest.mark.parametrize("code", [6, 74, 75, 5, 3])
def test_leader_errors_keep_the_position_and_the_next_fetch_goes_to_the_new_leader(code):
    f = fetcher()
    consumed_to(f, 5, epoch=4)
    result = f.on_fetch_response({T0: 5}, fetch_response(code))
    assert result.refresh_metadata and not result.errors and not result.out_of_range
    assert f.subscriptions.state(T0).position == 5
    new = cluster({T0: (2, 5)})
    f.subscriptions.maybe_validate_positions(new)
    f.subscriptions.state(T0).awaiting_validation = False  # validated (tested below)
    requests, _ = f.fetch_requests(new, set())
    assert list(requests) == [2] and requests[2][1] == {T0: 5}


def test_drained_positions_remember_the_epoch_of_the_record_before_them():
    f = fetcher()
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 0)
    f.on_fetch_response({T0: 0}, fetch_response(0, records(0, 3, 4) + records(3, 3, 5)))
    f.drain(2)
    assert f.subscriptions.state(T0).position_epoch == 4
    f.drain(2)
    assert f.subscriptions.state(T0).position_epoch == 5  # offset 3 is in epoch 5
    arrow = fetcher()
    arrow.subscriptions.assign([T0])
    arrow.subscriptions.seek(T0, 0)
    arrow.on_fetch_response({T0: 0}, fetch_response(0, records(0, 3, 4) + records(3, 3, 5)))
    arrow.drain_arrow(3, include_headers=False)
    assert arrow.subscriptions.state(T0).position_epoch == 4
    f.subscriptions.seek(T0, 1)
    assert f.subscriptions.state(T0).position_epoch == -1  # a seek has no epoch


def test_a_newer_leader_epoch_holds_fetching_until_the_position_is_validated():
    f = fetcher()
    consumed_to(f, 5, epoch=4)
    new = cluster({T0: (2, 5)})
    f.subscriptions.maybe_validate_positions(new)
    assert f.fetch_requests(new, set())[0] == {}
    requests, _ = f.validation_requests(new, set())
    fields, asked = requests[2]
    assert asked == {T0: 5}
    assert fields["topics"] == [
        {
            "topic": "t",
            "partitions": [{"partition": 0, "current_leader_epoch": 5, "leader_epoch": 4}],
        }
    ]
    # The new leader's epoch 4 ends at 5 (or later): nothing was lost, fetch on from 5.
    result = f.on_validation_response(asked, epoch_response(0, 5, 4))
    assert not result.errors and f.subscriptions.is_fetchable(T0)
    assert f.fetch_requests(new, set())[0][2][1] == {T0: 5}


def test_a_diverged_log_moves_the_position_back_when_a_reset_policy_is_set():
    f = fetcher(reset="latest")
    consumed_to(f, 5, epoch=4)
    f.subscriptions.maybe_validate_positions(cluster({T0: (2, 5)}))
    result = f.on_validation_response({T0: 5}, epoch_response(0, 3, 4))
    assert not result.errors
    state = f.subscriptions.state(T0)
    assert (state.position, state.position_epoch, state.awaiting_validation) == (3, 4, False)


def test_a_diverged_log_without_reset_policy_raises_log_truncation():
    f = fetcher(reset="none")
    consumed_to(f, 5, epoch=4)
    f.subscriptions.maybe_validate_positions(cluster({T0: (2, 5)}))
    result = f.on_validation_response({T0: 5}, epoch_response(0, 3, 4))
    (error,) = result.errors
    assert isinstance(error, LogTruncationError) and error.divergent_offsets == {T0: 3}
    assert f.subscriptions.state(T0).position == 5 and not f.subscriptions.is_fetchable(T0)
    f.subscriptions.seek(T0, 3)  # the user decides
    assert f.subscriptions.is_fetchable(T0)


def test_an_unknown_epoch_resets_by_policy():
    f = fetcher(reset="earliest")
    consumed_to(f, 5, epoch=4)
    f.subscriptions.maybe_validate_positions(cluster({T0: (2, 5)}))
    f.on_validation_response({T0: 5}, epoch_response(0, -1, -1))
    assert f.subscriptions.needing_reset() == {T0: "earliest"}


def test_validation_errors_retry_and_stale_answers_are_ignored():
    f = fetcher()
    consumed_to(f, 5, epoch=4)
    f.subscriptions.maybe_validate_positions(cluster({T0: (2, 5)}))
    result = f.on_validation_response({T0: 5}, epoch_response(6, -1, -1))
    assert result.refresh_metadata and not f.subscriptions.is_fetchable(T0)
    f.on_validation_failure({T0: 5}, NetworkExceptionError("node 2 closed the connection"))
    assert not f.subscriptions.is_fetchable(T0)
    f.on_validation_failure({T0: 5}, UnsupportedVersionError("no OffsetForLeaderEpoch"))
    assert f.subscriptions.is_fetchable(T0)  # an old broker: trust the position, as Kafka does
    f.subscriptions.maybe_validate_positions(cluster({T0: (3, 6)}))
    f.subscriptions.seek(T0, 9)
    f.on_validation_response({T0: 5}, epoch_response(0, 1, 4))  # answers a position gone
    assert f.subscriptions.state(T0).position == 9


def test_first_sighting_of_a_leader_and_positions_without_epoch_need_no_validation():
    f = fetcher()
    f.subscriptions.assign([T0])
    f.subscriptions.seek(T0, 5)
    f.subscriptions.maybe_validate_positions(cluster({T0: (1, 4)}))
    f.subscriptions.maybe_validate_positions(cluster({T0: (2, 5)}))
    assert f.subscriptions.is_fetchable(T0)  # seek(5) carries no epoch
