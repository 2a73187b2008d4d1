"""Produce responses written with `struct` are kio's bytes, on every version the broker serves."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.broker.delayed_produce import ProduceResult
from sparklog.broker.produce_response import encode_produce_body, produce_response_data
from sparklog.protocol import codec, kio_build
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.connection import Request, RequestContext
from sparklog.storage.log_validator import RecordError

VERSIONS = range(3, 13)  # v3..v12 (v12: transactions v2, same layout as v11)
NAMES = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12)
MESSAGES = st.none() | st.text(max_size=40)
RESULTS = st.builds(
    ProduceResult,
    error_code=st.sampled_from([0, 0, 0, 2, 3, 10, 19, 87]),
    base_offset=st.integers(-1, 2**63 - 1),
    log_append_time_ms=st.sampled_from([-1]) | st.integers(0, 2**45),
    log_start_offset=st.integers(-1, 2**63 - 1),
    error_message=MESSAGES,
    record_errors=st.lists(
        st.builds(RecordError, st.integers(0, 2**31 - 1), st.text(max_size=30)), max_size=3
    ).map(tuple),
)
ENTRIES = st.lists(st.tuples(st.tuples(NAMES, st.integers(0, 2**31 - 1)), RESULTS), max_size=12)


#: what the request pipeline decided (quotas); both writers must carry it
THROTTLE_MS = 250


def via_kio(version: int, entries: list) -> bytes:
    data, leaders = produce_response_data(entries, lambda t, p: (1, 5))
    data["node_endpoints"] = [
        {"node_id": n, "host": "127.0.0.1", "port": 9092, "rack": None} for n in sorted(leaders)
    ]
    context = RequestContext(throttle_time_ms=THROTTLE_MS)
    request = Request(ApiKey.PRODUCE, version, 77, None, None, 0, context)
    return codec.encode_response(kio_build.response(request, data), 77)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(VERSIONS), ENTRIES)
def test_the_struct_writer_writes_kios_bytes(version, entries) -> None:
    entries = list(dict(entries).items())  # one answer per partition, as a request has
    body = encode_produce_body(version, entries, throttle_time_ms=THROTTLE_MS)
    if body is None:  # only a v10+ NOT_LEADER_OR_FOLLOWER needs kio (the leader's endpoint)
        assert version >= 10 and any(r.error_code == 6 for _, r in entries)
        return
    assert codec.encode_response(body, 77) == via_kio(version, entries)


def test_a_new_leader_is_named_through_kio_from_v10() -> None:
    entries = [(("t", 0), ProduceResult(6, error_message="not the leader"))]
    assert encode_produce_body(10, entries, throttle_time_ms=0) is None
    assert encode_produce_body(9, entries, throttle_time_ms=0) is not None
    frame = via_kio(10, entries)
    _, response = codec.decode_response(frame[4:], ApiKey.PRODUCE, 10)
    partition = response.responses[0].partition_responses[0]
    assert (
        int(partition.current_leader.leader_id),
        int(partition.current_leader.leader_epoch),
    ) == (
        1,
        5,
    )
    assert [int(e.node_id) for e in response.node_endpoints] == [1]


def test_versions_outside_the_writer_go_to_kio() -> None:
    assert encode_produce_body(2, [], throttle_time_ms=0) is None
    assert encode_produce_body(13, [], throttle_time_ms=0) is None
