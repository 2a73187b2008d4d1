"""The group coordinator's Kafka-protocol handlers: kio request in, core call, kio response out.

One handler per API serves every version in `GROUP_COORDINATOR_APIS` (`kio_build` drops the
fields a version lacks). JoinGroup, SyncGroup, OffsetCommit, OffsetDelete and DeleteGroups may
wait for a rebalance or a durable write: the core answers through a callback that resolves an
asyncio future, and the handler awaits it. `after_call` runs after every core call so the edge
can flush the writes the call produced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from sparklog.coordinator.context import TopicIds
from sparklog.coordinator.group.coordinator import GroupCoordinator, OffsetCommitPartition
from sparklog.errors import (
    GroupIdNotFoundError,
    InvalidRequestError,
    RequestTimedOutError,
    UnstableOffsetCommitError,
)
from sparklog.protocol import kio_build
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.connection import Request
from sparklog.protocol.pipeline import authorized_operations
from sparklog.protocol.responses import group_by_topic
from sparklog.security.acl import AUTHORIZED_OPERATIONS_OMITTED, ResourceType
from sparklog.structs import TopicPartition

#: Join/Sync wait at most this long past the rebalance timeout before answering (a bug guard).
_WAIT_SLACK_S = 30.0


def offset_commit_partitions(body: Any) -> list[OffsetCommitPartition]:
    """The partitions of an OffsetCommit or TxnOffsetCommit request, in request order."""
    return [
        OffsetCommitPartition(
            topic=t.name,
            partition=int(p.partition_index),
            committed_offset=int(p.committed_offset),
            leader_epoch=int(getattr(p, "committed_leader_epoch", -1)),
            metadata=p.committed_metadata,
        )
        for t in body.topics
        for p in t.partitions
    ]


class GroupCoordinatorApis:
    """Handlers for the group APIs; `clock()` gives now in ms, `after_call()` flushes."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        clock: Callable[[], int],
        after_call: Callable[[], None],
        topics: TopicIds | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.clock = clock
        self.after_call = after_call
        #: topic name <-> id lookups (`topic_id(name)`, `topic_name(id)`), for KIP-848 APIs
        self.topics = topics
        self.handlers: dict[int, Callable[[Request], Any]] = {
            ApiKey.JOIN_GROUP: self.handle_join_group,
            ApiKey.SYNC_GROUP: self.handle_sync_group,
            ApiKey.HEARTBEAT: self.handle_heartbeat,
            ApiKey.LEAVE_GROUP: self.handle_leave_group,
            ApiKey.OFFSET_COMMIT: self.handle_offset_commit,
            ApiKey.OFFSET_FETCH: self.handle_offset_fetch,
            ApiKey.OFFSET_DELETE: self.handle_offset_delete,
            ApiKey.LIST_GROUPS: self.handle_list_groups,
            ApiKey.DESCRIBE_GROUPS: self.handle_describe_groups,
            ApiKey.DELETE_GROUPS: self.handle_delete_groups,
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self.handle_consumer_group_heartbeat,
            ApiKey.CONSUMER_GROUP_DESCRIBE: self.handle_consumer_group_describe,
        }

    @property
    def _topic_ids(self) -> TopicIds:
        assert self.topics is not None, "the KIP-848 APIs are served with topic lookups"
        return self.topics

    async def _wait(
        self, start: Callable[[Callable[[Any], None]], None], wait_s: float, slack_s: float = 0.0
    ) -> Any:
        """Start a core call that answers through a callback, and await the answer."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def resolve(value: Any) -> None:
            if not future.done():
                future.set_result(value)

        start(resolve)
        self.after_call()
        return await asyncio.wait_for(future, wait_s + slack_s)

    # -- membership -------------------------------------------------------------------------

    async def handle_join_group(self, request: Request) -> Any:
        body, version = request.body, request.api_version
        session_ms = kio_build.millis(body.session_timeout)
        rebalance_ms = kio_build.millis(getattr(body, "rebalance_timeout", session_ms))
        values = await self._wait(
            lambda respond: self.coordinator.join_group(
                self.clock(),
                respond,
                group_id=body.group_id,
                member_id=body.member_id,
                group_instance_id=getattr(body, "group_instance_id", None),
                client_id=request.client_id or "",
                client_host=request.session.client_host,
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=rebalance_ms,
                protocol_type=body.protocol_type,
                protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
                require_known_member_id=version >= 4,
                supports_skip_assignment=version >= 9,
            ),
            max(session_ms, rebalance_ms) / 1000,
            _WAIT_SLACK_S,
        )
        if version < 7 and values.get("protocol_name") is None:
            values = {**values, "protocol_name": ""}
        return kio_build.response(request, {**values})

    async def handle_sync_group(self, request: Request) -> Any:
        body = request.body
        values = await self._wait(
            lambda respond: self.coordinator.sync_group(
                self.clock(),
                respond,
                group_id=body.group_id,
                generation_id=int(body.generation_id),
                member_id=body.member_id,
                group_instance_id=getattr(body, "group_instance_id", None),
                protocol_type=getattr(body, "protocol_type", None),
                protocol_name=getattr(body, "protocol_name", None),
                assignments={a.member_id: bytes(a.assignment) for a in body.assignments},
            ),
            self._max_rebalance_s(body.group_id),
            _WAIT_SLACK_S,
        )
        answer = {"assignment": b"", **values}
        answer["assignment"] = answer.get("assignment") or b""
        return kio_build.response(request, answer)

    async def handle_heartbeat(self, request: Request) -> Any:
        body = request.body
        code = self.coordinator.heartbeat(
            self.clock(),
            group_id=body.group_id,
            generation_id=int(body.generation_id),
            member_id=body.member_id,
            group_instance_id=getattr(body, "group_instance_id", None),
        )
        self.after_call()
        return kio_build.response(request, {"error_code": code})

    async def handle_leave_group(self, request: Request) -> Any:
        body = request.body
        members: list[tuple[str, str | None]]
        if request.api_version < 3:
            members = [(body.member_id, None)]
        else:
            members = [(m.member_id, m.group_instance_id) for m in body.members]
        top, codes = self.coordinator.leave_group(self.clock(), body.group_id, members)
        self.after_call()
        if request.api_version < 3:
            return kio_build.response(request, {"error_code": top or codes[0]})
        answer = [
            {"member_id": mid, "group_instance_id": iid, "error_code": code}
            for (mid, iid), code in zip(members, codes, strict=True)
        ]
        return kio_build.response(
            request,
            {"error_code": top, "members": [] if top else answer},
        )

    def _write_timeout_s(self) -> float:
        """How long a request waits for its rows to be durable (`offsets.commit.timeout.ms`)."""
        return self.coordinator.config.offsets_commit_timeout_ms / 1000

    def _max_rebalance_s(self, group_id: str) -> float:
        group = self.coordinator.groups.get(group_id)
        return (group.max_rebalance_timeout_ms() / 1000) if group is not None else 0.0

    # -- offsets ----------------------------------------------------------------------------

    async def handle_offset_commit(self, request: Request) -> Any:
        body = request.body
        partitions = offset_commit_partitions(body)
        retention = getattr(body, "retention_time", -1)
        retention_ms = kio_build.millis(retention) if retention is not None else -1
        try:
            codes = await self._commit(body, partitions, retention_ms, self._write_timeout_s())
        except TimeoutError:  # not durable in time: the client retries (Kafka's answer)
            codes = dict.fromkeys(
                ((p.topic, p.partition) for p in partitions), RequestTimedOutError.code
            )
        items = [
            (p.topic, {"partition_index": p.partition, "error_code": codes[(p.topic, p.partition)]})
            for p in partitions
        ]
        return kio_build.response(request, {"topics": group_by_topic(items, "name")})

    async def _commit(
        self,
        body: Any,
        partitions: list[OffsetCommitPartition],
        retention_ms: int,
        timeout_s: float,
    ) -> dict[tuple[str, int], int]:
        return await self._wait(
            lambda respond: self.coordinator.commit_offsets(
                self.clock(),
                group_id=body.group_id,
                generation_id=int(body.generation_id_or_member_epoch),
                member_id=body.member_id,
                group_instance_id=getattr(body, "group_instance_id", None),
                retention_time_ms=retention_ms,
                partitions=partitions,
                respond=respond,
            ),
            timeout_s,
        )

    async def handle_offset_fetch(self, request: Request) -> Any:
        body, version = request.body, request.api_version
        stable = bool(getattr(body, "require_stable", False))
        if version >= 8:
            groups = [
                {
                    "group_id": g.group_id,
                    "topics": self._fetched_topics(g.group_id, g.topics, stable),
                    "error_code": 0,
                }
                for g in body.groups
            ]
            return kio_build.response(request, {"groups": groups})
        topics = self._fetched_topics(body.group_id, body.topics, stable)
        return kio_build.response(request, {"topics": topics, "error_code": 0})

    def _fetched_topics(
        self, group_id: str, topics: Any, require_stable: bool = False
    ) -> list[dict[str, Any]]:
        """Committed offsets; with `require_stable` (read_committed consumers, KIP-447) a
        partition an open transaction holds an offset for answers UNSTABLE_OFFSET_COMMIT."""
        wanted = None
        if topics is not None:
            wanted = [TopicPartition(t.name, int(p)) for t in topics for p in t.partition_indexes]
        found = self.coordinator.fetch_offsets(group_id, wanted)
        items = []
        for (topic, partition), o in found.items():
            if require_stable and self.coordinator.has_pending_txn_offset(
                group_id, TopicPartition(topic, partition)
            ):
                items.append(
                    (
                        topic,
                        {
                            "partition_index": partition,
                            "committed_offset": -1,
                            "committed_leader_epoch": -1,
                            "metadata": "",
                            "error_code": UnstableOffsetCommitError.code,
                        },
                    )
                )
                continue
            items.append(
                (
                    topic,
                    {
                        "partition_index": partition,
                        "committed_offset": -1 if o is None else o.committed_offset,
                        "committed_leader_epoch": -1 if o is None else o.leader_epoch,
                        "metadata": "" if o is None else o.metadata,
                        "error_code": 0,
                    },
                )
            )
        return group_by_topic(items, "name")

    async def handle_offset_delete(self, request: Request) -> Any:
        body = request.body
        partitions = [
            TopicPartition(t.name, int(p.partition_index))
            for t in body.topics
            for p in t.partitions
        ]
        top, codes = await self._wait(
            lambda respond: self.coordinator.delete_offsets(
                body.group_id,
                partitions,
                self.clock(),
                lambda error, per_partition: respond((error, per_partition)),
            ),
            self._write_timeout_s(),
        )
        items = [
            (t, {"partition_index": p, "error_code": codes.get((t, p), 0)}) for t, p in partitions
        ]
        return kio_build.response(
            request,
            {
                "error_code": top,
                "topics": [] if top else group_by_topic(items, "name"),
            },
        )

    # -- admin ------------------------------------------------------------------------------

    async def handle_list_groups(self, request: Request) -> Any:
        body = request.body
        states = set(getattr(body, "states_filter", None) or ())
        types = set(getattr(body, "types_filter", None) or ())
        groups = self.coordinator.list_groups(states, types)
        return kio_build.response(request, {"error_code": 0, "groups": groups})

    async def handle_describe_groups(self, request: Request) -> Any:
        version = request.api_version
        described = []
        for group_id in request.body.groups:
            values = self.coordinator.describe_group(group_id)
            if values is None:
                # Kafka answers an unknown group as Dead (v6+: GROUP_ID_NOT_FOUND)
                values = {
                    "group_id": group_id,
                    "group_state": "Dead",
                    "protocol_type": "",
                    "protocol_data": "",
                    "members": [],
                    "error_code": GroupIdNotFoundError.code if version >= 6 else 0,
                }
            entry = {"error_code": 0, **values}
            # Kafka answers operations for the groups it describes without error (KafkaApis)
            entry["authorized_operations"] = authorized_operations(
                request,
                ResourceType.GROUP,
                group_id,
                include=False if entry["error_code"] else None,  # None: as the request asks
            )
            described.append(entry)
        return kio_build.response(request, {"groups": described})

    async def handle_delete_groups(self, request: Request) -> Any:
        names = list(request.body.groups_names)
        if len(set(names)) != len(names):
            raise InvalidRequestError("DeleteGroups names a group twice")
        codes = await self._wait(
            lambda respond: self.coordinator.delete_groups(names, self.clock(), respond),
            self._write_timeout_s(),
        )
        results = [{"group_id": g, "error_code": codes[g]} for g in names]
        return kio_build.response(request, {"results": results})

    # -- KIP-848 ----------------------------------------------------------------------------

    async def handle_consumer_group_heartbeat(self, request: Request) -> Any:
        body = request.body
        owned = None
        if body.topic_partitions is not None:
            owned = {}
            for tp in body.topic_partitions:
                name = self._topic_ids.topic_name(tp.topic_id)
                if name is not None:  # a deleted topic's partitions are simply gone
                    owned[name] = {int(p) for p in tp.partitions}
        values = self.coordinator.consumer_heartbeat(
            self.clock(),
            group_id=body.group_id,
            member_id=body.member_id,
            member_epoch=int(body.member_epoch),
            instance_id=body.instance_id,
            rack_id=body.rack_id,
            rebalance_timeout_ms=kio_build.millis(body.rebalance_timeout),
            subscribed_topic_names=(
                None if body.subscribed_topic_names is None else list(body.subscribed_topic_names)
            ),
            subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
            server_assignor=body.server_assignor,
            owned=owned,
            client_id=request.client_id or "",
            client_host=request.session.client_host,
        )
        self.after_call()
        assignment = values["assignment"]
        answer = {
            **values,
            "heartbeat_interval": values["heartbeat_interval_ms"],  # kio's field name
            "assignment": None
            if assignment is None
            else {"topic_partitions": self._by_id(assignment)},
        }
        return kio_build.response(request, answer)  # keys the version lacks are dropped

    def _by_id(self, assignment: dict[str, set[int]]) -> list[dict[str, Any]]:
        out = []
        for topic, partitions in sorted(assignment.items()):
            topic_id = self._topic_ids.topic_id(topic)
            if topic_id is not None and partitions:
                out.append({"topic_id": topic_id, "partitions": sorted(partitions)})
        return out

    async def handle_consumer_group_describe(self, request: Request) -> Any:
        from sparklog.coordinator.group.consumer_group import ConsumerGroup

        described = []
        for group_id in request.body.group_ids:
            group = self.coordinator.groups.get(group_id)
            if not isinstance(group, ConsumerGroup):
                described.append(
                    {
                        "error_code": GroupIdNotFoundError.code,
                        "error_message": f"Group {group_id} is not a consumer group",
                        "group_id": group_id,
                        "group_state": "Dead",
                        "group_epoch": -1,
                        "assignment_epoch": -1,
                        "assignor_name": "",
                        "members": [],
                        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
                    }
                )
                continue
            described.append(
                {
                    "error_code": 0,
                    "error_message": None,
                    "group_id": group_id,
                    "group_state": group.state.value,
                    "group_epoch": group.group_epoch,
                    "assignment_epoch": group.assignment_epoch,
                    "assignor_name": group.assignor,
                    "members": [
                        {
                            "member_id": m.member_id,
                            "instance_id": m.instance_id,
                            "rack_id": m.rack_id,
                            "member_epoch": m.member_epoch,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "subscribed_topic_names": m.subscribed_topics,
                            "subscribed_topic_regex": m.subscribed_regex,
                            "assignment": {"topic_partitions": self._named(m.assigned)},
                            "target_assignment": {
                                "topic_partitions": self._named(group.target.get(m.member_id, {}))
                            },
                            "member_type": 1,
                        }
                        for m in group.members.values()
                    ],
                    "authorized_operations": authorized_operations(
                        request, ResourceType.GROUP, group_id
                    ),
                }
            )
        return kio_build.response(request, {"groups": described})

    def _named(self, assignment: dict[str, set[int]]) -> list[dict[str, Any]]:
        return [
            {"topic_id": self._topic_ids.topic_id(t), "topic_name": t, "partitions": sorted(ps)}
            for t, ps in sorted(assignment.items())
            if ps and self._topic_ids.topic_id(t) is not None
        ]
