"""Brokers forward group and transaction requests to the driver's coordinator (issue 29 item 1):
the coordinator is not a node clients see (Metadata and DescribeCluster list brokers only),
FindCoordinator names a live broker, and that broker carries the request on in an Envelope
(KIP-590) under the client's own id and address. Checked on the wire: a member's JoinGroup
waiting for its group holds back no other member's heartbeat on the same broker, ListGroups
over every broker lists each group once, and a broker whose coordinator is down answers
NOT_COORDINATOR (FindCoordinator: COORDINATOR_NOT_AVAILABLE) until it is back."""

from __future__ import annotations

import asyncio
import time

from sparklog.broker.coordinator_forwarding import coordinator_broker
from sparklog.protocol.api_versions import ApiKey

from .broker_wire import call, connect, create_topic

NONE, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 0, 15, 16
REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED = 27, 79
PROTOCOL = [{"name": "range", "metadata": b""}]


def run(coro):
    return asyncio.run(coro)


def join_fields(group: str, member_id: str = "", rebalance_ms: int = 30_000) -> dict:
    return {
        "group_id": group,
        "session_timeout": 30_000,
        "rebalance_timeout": rebalance_ms,
        "member_id": member_id,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": PROTOCOL,
        "reason": None,
    }


async def join(conn, group: str, member_id: str = "") -> object:
    """JoinGroup v9, answering MEMBER_ID_REQUIRED with the id it hands out (KIP-394)."""
    answer = await call(conn, ApiKey.JOIN_GROUP, join_fields(group, member_id), version=9)
    if answer.error_code == MEMBER_ID_REQUIRED:
        answer = await call(
            conn, ApiKey.JOIN_GROUP, join_fields(group, answer.member_id), version=9
        )
    return answer


async def sync(conn, group: str, joined, assignments: list | None = None) -> object:
    return await call(
        conn,
        ApiKey.SYNC_GROUP,
        {
            "group_id": group,
            "generation_id": joined.generation_id,
            "member_id": joined.member_id,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": assignments or [],
        },
        version=5,
    )


async def heartbeat(conn, group: str, joined) -> object:
    fields = {
        "group_id": group,
        "generation_id": joined.generation_id,
        "member_id": joined.member_id,
        "group_instance_id": None,
    }
    return await call(conn, ApiKey.HEARTBEAT, fields, version=4)


def test_metadata_lists_brokers_only_and_find_coordinator_spreads_keys(cluster3):
    ids = sorted(b.node_id for b in cluster3.brokers)
    keys = [f"group-{i}" for i in range(30)]

    async def go():
        conn = await connect(cluster3.bootstrap_servers)
        try:
            meta = await call(
                conn,
                ApiKey.METADATA,
                {
                    "topics": None,
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
                version=12,
            )
            described = await call(
                conn,
                ApiKey.DESCRIBE_CLUSTER,
                {"include_cluster_authorized_operations": False, "endpoint_type": 1},
                version=1,
            )
            found = await call(
                conn, ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": keys}, version=4
            )
            return meta, described, found
        finally:
            await conn.close()

    meta, described, found = run(go())
    assert sorted(b.node_id for b in meta.brokers) == ids
    assert sorted(b.broker_id for b in described.brokers) == ids
    ports = {b.node_id: b.port for b in cluster3.brokers}
    named = {c.key: (c.error_code, c.node_id, c.port) for c in found.coordinators}
    assert named == {
        k: (NONE, coordinator_broker(k, ids), ports[coordinator_broker(k, ids)]) for k in keys
    }
    assert set(coordinator_broker(k, ids) for k in keys) == set(ids)  # spread over all


def test_a_waiting_join_holds_back_no_heartbeat_on_the_same_broker(cluster):
    """The coordinator answers one connection's requests in order, so a forwarding channel
    with one connection would hold member A's heartbeat behind member B's JoinGroup, which
    waits for A to rejoin: A would never learn of the rebalance."""
    group = "hol-group"

    async def go():
        a, b = await connect(cluster.bootstrap_servers), await connect(cluster.bootstrap_servers)
        try:
            first = await join(a, group)
            assert first.error_code == NONE
            assert (await sync(a, group, first)).error_code == NONE
            joining = asyncio.ensure_future(join(b, group))  # waits for A to rejoin
            while (beat := await heartbeat(a, group, first)).error_code == NONE:
                await asyncio.sleep(0.01)  # until B's JoinGroup reached the coordinator
            pending_while_beating = not joining.done()
            again = await join(a, group, first.member_id)
            second = await joining
            return beat, pending_while_beating, again, second
        finally:
            await a.close()
            await b.close()

    beat, pending_while_beating, again, second = run(go())
    assert beat.error_code == REBALANCE_IN_PROGRESS
    assert pending_while_beating
    assert (again.error_code, second.error_code) == (NONE, NONE)
    assert again.generation_id == second.generation_id == 2


def test_describe_groups_through_a_broker_shows_the_client_not_the_broker(cluster):
    group = "described-group"

    async def go():
        conn = await connect(cluster.bootstrap_servers, client_id="my-consumer")
        try:
            joined = await join(conn, group)
            await sync(conn, group, joined)
            described = await call(
                conn,
                ApiKey.DESCRIBE_GROUPS,
                {"groups": [group], "include_authorized_operations": False},
                version=5,
            )
            return joined, described
        finally:
            await conn.close()

    joined, described = run(go())
    member = described.groups[0].members[0]
    assert member.member_id == joined.member_id
    assert joined.member_id.startswith("my-consumer-")
    assert (member.client_id, member.client_host) == ("my-consumer", "/127.0.0.1")


def test_list_groups_over_every_broker_lists_each_group_once(cluster3):
    groups = [f"listed-{i}" for i in range(12)]

    async def go():
        async def join_alone(group: str) -> None:  # each on its own connection: together
            conn = await connect(cluster3.bootstrap_servers)
            try:
                await join(conn, group)
            finally:
                await conn.close()

        await asyncio.gather(*(join_alone(g) for g in groups))
        listed = []
        for broker in cluster3.brokers:
            conn = await connect(broker.bootstrap)
            try:
                answer = await call(
                    conn, ApiKey.LIST_GROUPS, {"states_filter": [], "types_filter": []}, version=5
                )
                listed += [g.group_id for g in answer.groups]
            finally:
                await conn.close()
        return listed

    listed = [g for g in run(go()) if g.startswith("listed-")]
    assert sorted(listed) == sorted(groups)


def test_coordinator_down_answers_not_coordinator_then_recovers(cluster):
    group = "down-group"

    def commit_fields(offset: int) -> dict:
        partitions = [
            {
                "partition_index": 0,
                "committed_offset": offset,
                "committed_leader_epoch": -1,
                "committed_metadata": "",
            }
        ]
        return {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": "down-topic", "partitions": partitions}],
        }

    fetch_fields = {"groups": [{"group_id": group, "topics": None}], "require_stable": False}
    find_fields = {"key_type": 0, "coordinator_keys": [group]}

    async def before():
        conn = await connect(cluster.bootstrap_servers)
        try:
            await create_topic(conn, "down-topic")
            committed = await call(conn, ApiKey.OFFSET_COMMIT, commit_fields(7), version=9)
            return committed.topics[0].partitions[0].error_code
        finally:
            await conn.close()

    async def while_down():
        conn = await connect(cluster.bootstrap_servers)
        try:
            fetched = await call(conn, ApiKey.OFFSET_FETCH, fetch_fields, version=9)
            found = await call(conn, ApiKey.FIND_COORDINATOR, find_fields, version=4)
            return fetched.groups[0].error_code, found.coordinators[0].error_code
        finally:
            await conn.close()

    async def after():
        conn = await connect(cluster.bootstrap_servers)
        try:
            deadline = time.monotonic() + 30
            while True:  # the channel retries after its reconnect backoff
                found = await call(conn, ApiKey.FIND_COORDINATOR, find_fields, version=4)
                if found.coordinators[0].error_code == NONE or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            fetched = await call(conn, ApiKey.OFFSET_FETCH, fetch_fields, version=9)
            group_answer = fetched.groups[0]
            offsets = [int(p.committed_offset) for t in group_answer.topics for p in t.partitions]
            return found.coordinators[0].error_code, group_answer.error_code, offsets
        finally:
            await conn.close()

    assert run(before()) == NONE
    cluster.coordinator.stop()
    try:
        assert run(while_down()) == (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE)
    finally:
        cluster.restart_coordinator()  # same table, same port
    assert run(after()) == (NONE, NONE, [7])
