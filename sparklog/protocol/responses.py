"""Response pieces the three servers share (broker, controller, coordinator).

`Response(request)` builds the response entities of the request's version and keeps only the
fields that version has, so one handler serves every version a server announces (e.g.
CreateTopics v2 has no per-topic configs, Metadata v1 no throttle time); `kio_build` does the
same from plain dicts. Also here: `group_by_topic`, the FindCoordinator answer naming the
group coordinator, `refusal` (an error in the shape of a group or transaction API's response)
and the names of Kafka's transaction states, which brokers and the coordinator both check
ListTransactions filters against.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Iterable
from dataclasses import fields
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from sparklog.errors import NotCoordinatorError
from sparklog.protocol import codec, kio_build
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.connection import Request
from sparklog.protocol.pipeline import authorized_operations, throttle_time_ms
from sparklog.security.acl import AUTHORIZED_OPERATIONS_OMITTED, ResourceType
from sparklog.structs import GROUP_COORDINATOR_NODE_ID


class Response:
    """Builds kio entities of one response version, keeping only the fields it has; the
    response's `throttle_time_ms` and `authorized_operations` come from the request pipeline
    (`sparklog.protocol.pipeline`)."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.schema = codec.response_schema(request.api_key, request.api_version)
        self.module = sys.modules[self.schema.__module__]

    def __call__(self, **values: Any) -> Any:
        throttle = i32Timedelta.parse(
            datetime.timedelta(milliseconds=throttle_time_ms(self.request))
        )
        return _make(self.schema, {**values, "throttle_time": throttle})

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """A resource's `authorized_operations` field (omitted unless the request asked)."""
        return authorized_operations(self.request, resource_type, name)

    def has(self, entity: str) -> bool:
        """Whether this version has the nested entity (e.g. CreateTopics configs from v5)."""
        return hasattr(self.module, entity)

    def nested(self, entity: str, /, **values: Any) -> Any:
        return _make(getattr(self.module, entity), values)


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def _make(cls: type, values: dict[str, Any]) -> Any:
    names = _field_names(cls)
    kept = {k: v for k, v in values.items() if k in names}
    if "error_code" in kept:
        kept["error_code"] = ErrorCode(kept["error_code"])
    return cls(**kept)


def to_ms(value: Any) -> int:
    """Milliseconds of a kio timedelta field (or a plain int)."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def group_by_topic(items: Iterable[tuple[str, dict[str, Any]]], key: str) -> list[dict[str, Any]]:
    """[(topic, partition dict)] -> [{"<key>": topic, "partitions": [...]}], first-seen order."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for topic, partition in items:
        grouped.setdefault(topic, []).append(partition)
    return [{key: topic, "partitions": parts} for topic, parts in grouped.items()]


def find_coordinator_response(
    request: Request, host: str, port: int, error: tuple[int, str] | None = None
) -> Any:
    """A FindCoordinator answer naming the group coordinator at host:port (or `error`), for
    every version (v4+ batches keys)."""
    code, message = error or (0, None)
    node = {
        "error_code": code,
        "error_message": message,
        "node_id": -1 if code else GROUP_COORDINATOR_NODE_ID,
        "host": "" if code else host,
        "port": -1 if code else port,
    }
    if request.api_version >= 4:
        keys = request.body.coordinator_keys
        return kio_build.response(request, {"coordinators": [{"key": k, **node} for k in keys]})
    answer = {**node}
    if request.api_version == 0:
        answer.pop("error_message")
    return kio_build.response(request, answer)


#: The names of Kafka's transaction states (its `TransactionState`), which ListTransactions
#: filters name; the coordinator's `TxnState` has exactly these values.
TRANSACTION_STATE_NAMES = frozenset(
    {
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    }
)


def refusal(request: Request, code: int) -> Any:
    """Error `code` in the shape of a group or transaction API's response (also what the
    driver's coordinator answers with COORDINATOR_NOT_AVAILABLE when its table cannot load)."""
    body, key, version = request.body, ApiKey(request.api_key), request.api_version
    data: dict[str, Any] = {}
    if key == ApiKey.JOIN_GROUP:
        data.update(
            error_code=code,
            generation_id=-1,
            protocol_type=None,
            protocol_name=None if version >= 7 else "",
            leader="",
            member_id=body.member_id,
            members=[],
        )
    elif key == ApiKey.SYNC_GROUP:
        data.update(error_code=code, assignment=b"")
    elif key in (ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.OFFSET_DELETE):
        data.update(error_code=code, members=[], topics=[])
    elif key in (ApiKey.OFFSET_COMMIT, ApiKey.TXN_OFFSET_COMMIT):
        data["topics"] = [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": code} for p in t.partitions
                ],
            }
            for t in body.topics
        ]
    elif key == ApiKey.OFFSET_FETCH:
        if version >= 8:
            data["groups"] = [
                {"group_id": g.group_id, "topics": [], "error_code": code} for g in body.groups
            ]
        else:
            data.update(error_code=code, topics=[])
    elif key == ApiKey.DESCRIBE_GROUPS:
        data["groups"] = [
            {
                "error_code": code,
                "group_id": g,
                "group_state": "",
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
                "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,  # errors carry none
            }
            for g in body.groups
        ]
    elif key == ApiKey.CONSUMER_GROUP_HEARTBEAT:
        data.update(
            error_code=code,
            error_message=(
                "not the group coordinator"
                if code == NotCoordinatorError.code
                else "the group coordinator is not available"
            ),
            member_id=body.member_id or None,
            member_epoch=-1,
            heartbeat_interval=0,
            assignment=None,
        )
    elif key == ApiKey.CONSUMER_GROUP_DESCRIBE:
        data["groups"] = [
            {
                "error_code": code,
                "error_message": None,
                "group_id": g,
                "group_state": "",
                "group_epoch": -1,
                "assignment_epoch": -1,
                "assignor_name": "",
                "members": [],
                "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,  # errors carry none
            }
            for g in body.group_ids
        ]
    elif key == ApiKey.DELETE_GROUPS:
        data["results"] = [{"group_id": g, "error_code": code} for g in body.groups_names]
    elif key in (ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN):
        data["error_code"] = code
    elif key == ApiKey.ADD_PARTITIONS_TO_TXN:
        if version >= 4:
            data.update(error_code=code, results_by_transaction=[])
        else:
            data["results_by_topic_v3_and_below"] = [
                {
                    "name": t.name,
                    "results_by_partition": [
                        {"partition_index": p, "partition_error_code": code} for p in t.partitions
                    ],
                }
                for t in body.v3_and_below_topics
            ]
    elif key == ApiKey.DESCRIBE_TRANSACTIONS:
        data["transaction_states"] = [
            {
                "error_code": code,
                "transactional_id": tid,
                "transaction_state": "",
                "transaction_timeout": 0,
                "transaction_start_time": -1,  # no transaction started
                "producer_id": -1,
                "producer_epoch": -1,
                "topics": [],
            }
            for tid in body.transactional_ids
        ]
    elif key == ApiKey.LIST_GROUPS:
        data.update(error_code=code, groups=[])
    elif key == ApiKey.LIST_TRANSACTIONS:
        data.update(error_code=code, unknown_state_filters=[], transaction_states=[])
    elif key == ApiKey.INIT_PRODUCER_ID:
        data.update(error_code=code, producer_id=-1, producer_epoch=-1)
    elif key == ApiKey.SPARKLOG_END_TXN_BATCH:
        data.update(error_code=code, error_message=None, outcome="", results=[])
    else:
        raise AssertionError(f"{key.name} is not a refused group API")
    return kio_build.response(request, data)
