"""Group and transaction refusals in the shape of each API's response: what a broker answers
when it cannot forward a request to the driver's coordinator (NOT_COORDINATOR, which sends the
client back to FindCoordinator; `coordinator_forwarding`), and what the coordinator answers
while its table cannot load (COORDINATOR_NOT_AVAILABLE)."""

from __future__ import annotations

from typing import Any

from sparklog.broker import kio_build
from sparklog.errors import NotCoordinatorError
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.connection import Request
from sparklog.security.acl import AUTHORIZED_OPERATIONS_OMITTED


async def handle_not_coordinator(request: Request) -> Any:
    """NOT_COORDINATOR in the shape of the request's response."""
    return refusal(request, NotCoordinatorError.code)


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
