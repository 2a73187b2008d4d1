"""The group coordinator on the wire: what every Kafka client relies on (FindCoordinator on any
broker naming a broker, Metadata listing brokers only, brokers forwarding group requests to the
driver's coordinator), every API at its oldest and
newest version, and bad input — truncated frames, absurd session timeouts, huge metadata,
unknown groups — answered with Kafka's errors while the coordinator keeps serving and loses no
commit."""

from __future__ import annotations

import asyncio
import socket
import struct

from sparklog.protocol.api_versions import GROUP_COORDINATOR_APIS, ApiKey

from .broker_wire import call, connect, create_topic

NONE, UNKNOWN_PARTITION, METADATA_TOO_LARGE, NOT_COORDINATOR = 0, 3, 12, 16
INVALID_SESSION_TIMEOUT, UNKNOWN_MEMBER, MEMBER_ID_REQUIRED, GROUP_ID_NOT_FOUND = 26, 25, 79, 69


def run(coro):
    return asyncio.run(coro)


async def commit(conn, group: str, topic: str, offsets: dict[int, int], metadata: str = ""):
    return await call(
        conn,
        ApiKey.OFFSET_COMMIT,
        {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": p,
                            "committed_offset": o,
                            "committed_leader_epoch": -1,
                            "committed_metadata": metadata,
                        }
                        for p, o in offsets.items()
                    ],
                }
            ],
        },
        version=GROUP_COORDINATOR_APIS[ApiKey.OFFSET_COMMIT][1],
    )


async def fetch(conn, group: str, version: int = 9) -> dict[tuple[str, int], int]:
    if version >= 8:
        response = await call(
            conn,
            ApiKey.OFFSET_FETCH,
            {"groups": [{"group_id": group, "topics": None}], "require_stable": False},
            version=version,
        )
        topics = response.groups[0].topics
    else:
        response = await call(
            conn, ApiKey.OFFSET_FETCH, {"group_id": group, "topics": None}, version=version
        )
        topics = response.topics
    return {
        (t.name, int(p.partition_index)): int(p.committed_offset)
        for t in topics
        for p in t.partitions
    }


def test_every_broker_names_a_broker_and_forwards_to_the_coordinator(cluster):
    async def go():
        broker = await connect(cluster.bootstrap_servers)
        try:
            found = {}
            for version in (0, 3, 4):
                data = (
                    {"key_type": 0, "coordinator_keys": ["g1", "g2"]}
                    if version >= 4
                    else {"key": "g1", "key_type": 0}
                )
                found[version] = await call(broker, ApiKey.FIND_COORDINATOR, data, version=version)
            meta = await call(
                broker,
                ApiKey.METADATA,
                {
                    "topics": [],
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
                version=12,
            )
            refused = await call(
                broker,
                ApiKey.HEARTBEAT,
                {"group_id": "g1", "generation_id": 1, "member_id": "m", "group_instance_id": None},
                version=4,
            )
            return found, meta, refused
        finally:
            await broker.close()

    found, meta, refused = run(go())
    broker = cluster.brokers[0]
    named = (broker.node_id, "127.0.0.1", broker.port)
    assert (found[0].node_id, found[0].host, found[0].port) == named
    assert (found[3].node_id, found[3].host, found[3].port) == named
    assert [(c.key, c.node_id, c.port) for c in found[4].coordinators] == [
        ("g1", broker.node_id, broker.port),
        ("g2", broker.node_id, broker.port),
    ]
    assert [(b.node_id, b.port) for b in meta.brokers] == [(broker.node_id, broker.port)]
    # forwarded: the coordinator's own answer to an unknown member, not NOT_COORDINATOR
    assert int(refused.error_code) == UNKNOWN_MEMBER


def test_commits_and_fetches_at_old_and_new_versions(cluster):
    async def go():
        conn = await connect(cluster.coordinator.bootstrap)
        try:
            await create_topic(conn, "wire-offsets", partitions=3)
            first = await commit(conn, "wire-g", "wire-offsets", {0: 5, 1: 6, 7: 1})
            old = await call(
                conn,
                ApiKey.OFFSET_COMMIT,
                {
                    "group_id": "wire-g",
                    "generation_id_or_member_epoch": -1,
                    "member_id": "",
                    "retention_time": -1,
                    "topics": [
                        {
                            "name": "wire-offsets",
                            "partitions": [
                                {
                                    "partition_index": 2,
                                    "committed_offset": 9,
                                    "committed_metadata": "x",
                                }
                            ],
                        }
                    ],
                },
                version=2,
            )
            return first, old, await fetch(conn, "wire-g", 9), await fetch(conn, "wire-g", 2)
        finally:
            await conn.close()

    first, old, new_view, old_view = run(go())
    codes = {int(p.partition_index): int(p.error_code) for p in first.topics[0].partitions}
    assert codes == {0: NONE, 1: NONE, 7: UNKNOWN_PARTITION}
    assert int(old.topics[0].partitions[0].error_code) == NONE
    expected = {("wire-offsets", 0): 5, ("wire-offsets", 1): 6, ("wire-offsets", 2): 9}
    assert new_view == old_view == expected


def test_bad_input_gets_kafka_errors_and_loses_no_commit(cluster):
    coordinator = cluster.coordinator

    async def go():
        conn = await connect(coordinator.bootstrap)
        try:
            await create_topic(conn, "wire-bad", partitions=1)
            assert int((await commit(conn, "wire-keep", "wire-bad", {0: 42})).topics[0]
                       .partitions[0].error_code) == NONE  # fmt: skip
            huge = await commit(conn, "wire-keep", "wire-bad", {0: 43}, metadata="m" * 100_000)
            join = {
                "group_id": "wire-j",
                "session_timeout": 10**9,
                "rebalance_timeout": 10_000,
                "member_id": "",
                "group_instance_id": None,
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}],
                "reason": None,
            }
            absurd = await call(conn, ApiKey.JOIN_GROUP, join, version=9)
            join["session_timeout"] = 10_000
            needs_id = await call(conn, ApiKey.JOIN_GROUP, join, version=9)
            unknown = await call(
                conn,
                ApiKey.DESCRIBE_GROUPS,
                {"groups": ["nobody"], "include_authorized_operations": False},
                version=5,
            )
            ghost = await call(
                conn, ApiKey.HEARTBEAT,
                {"group_id": "nobody", "generation_id": 1, "member_id": "x",
                 "group_instance_id": None},
                version=4,
            )  # fmt: skip
            deleted = await call(
                conn, ApiKey.DELETE_GROUPS, {"groups_names": ["nobody"]}, version=2
            )
            return huge, absurd, needs_id, unknown, ghost, deleted
        finally:
            await conn.close()

    huge, absurd, needs_id, unknown, ghost, deleted = run(go())
    assert int(huge.topics[0].partitions[0].error_code) == METADATA_TOO_LARGE
    assert int(absurd.error_code) == INVALID_SESSION_TIMEOUT
    assert int(needs_id.error_code) == MEMBER_ID_REQUIRED and needs_id.member_id
    assert (unknown.groups[0].group_state, int(unknown.groups[0].error_code)) == ("Dead", 0)
    assert int(ghost.error_code) == UNKNOWN_MEMBER
    assert int(deleted.results[0].error_code) == GROUP_ID_NOT_FOUND

    # broken frames: a truncated JoinGroup, random bytes, a frame that lies about its size
    header = struct.pack(">hhih", ApiKey.JOIN_GROUP, 9, 1, 4) + b"test"
    for frame in (
        struct.pack(">i", len(header) + 3) + header + b"\x00\x01\x02",
        struct.pack(">i", 64) + bytes(range(64)),
        struct.pack(">i", 2**31 - 1) + b"x" * 16,
    ):
        with socket.create_connection(("127.0.0.1", coordinator.port), timeout=5) as s:
            s.sendall(frame)
            s.settimeout(5)
            with _closed():
                assert s.recv(4096) == b""  # the coordinator closes that connection only

    async def still_serving():
        conn = await connect(coordinator.bootstrap)
        try:
            return await fetch(conn, "wire-keep")
        finally:
            await conn.close()

    assert run(still_serving()) == {("wire-bad", 0): 42}
    cluster.restart_coordinator()
    assert run(still_serving()) == {("wire-bad", 0): 42}


class _closed:
    """Accept a reset as well as an orderly close."""

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        return kind is not None and issubclass(kind, ConnectionResetError)
