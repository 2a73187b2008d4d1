"""Admission of CreateTopics, CreatePartitions and DeleteTopics under the controller mutation
quota (KIP-599; Kafka's `ControllerApis`/`ReplicationControlManager` call
`applyPartitionChangeQuota` per topic), shared by brokers and the controller.

The controller applies it, with the client's identity: clients asking it directly, and those
whose broker forwarded the request in an Envelope carrying their principal and client id (as
Kafka 4.x's `ControllerApis`), so the quota holds once for the cluster. Each
topic costs its new partitions (DeleteTopics: the topic's partitions); topics that already
exist (CreateTopics) or are unknown cost nothing, as Kafka validates before charging.

Strict versions (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+) answer a topic over
the quota with THROTTLING_QUOTA_EXCEEDED (89) and do not forward it; older versions forward
everything and carry the throttle time. Either way the response's `throttle_time_ms` is at
least the quota's throttle time (`RequestContext.throttle_time_ms` too, so the connection is
muted for it as for the other quotas).
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Callable
from typing import Any

from sparklog.errors import ThrottlingQuotaExceededError
from sparklog.metadata import admin_authz
from sparklog.metadata.image import BROKER_RESOURCE, MetadataImage
from sparklog.metrics.controller_mutation_quota import (
    ControllerMutationQuotaManager,
)
from sparklog.protocol.api_versions import ApiKey
from sparklog.protocol.connection import Request

#: the first version refusing over-quota topics (Kafka's `strictSinceVersion`s)
STRICT_SINCE = {
    ApiKey.CREATE_TOPICS: 6,
    ApiKey.CREATE_PARTITIONS: 3,
    ApiKey.DELETE_TOPICS: 5,
}
_THROTTLED = ThrottlingQuotaExceededError.code


class ImageQuotaSource:
    """The quotas of the current metadata image (`MetadataImage.quotas`, the controller's
    `ClientQuotaRecord`s); no quota before the image has any."""

    def __init__(self, image: Callable[[], MetadataImage]) -> None:
        self._image = image

    def client_quota(self, key: str, user: str, client_id: str) -> Any:
        quotas = getattr(self._image(), "quotas", None)
        if quotas is None:
            return None
        return quotas.client_quota(key, user, client_id)


def admit(
    request: Request,
    body: Any,
    manager: ControllerMutationQuotaManager,
    image: MetadataImage,
    default_partitions: int,
    now_ms: int | None = None,
) -> tuple[Any, Any, int]:
    """(the body to pass on or None, the answer for topics refused by the quota or None, the
    throttle time in ms) of a mutating admin request whose `body` passed authorization."""
    key = ApiKey(request.api_key)
    since = STRICT_SINCE.get(key)
    if since is None or body is None:
        return body, None, 0
    session = request.session
    quota = manager.new_quota(
        session.principal.name,
        session.client_id or request.client_id or "",
        strict=request.api_version >= since,
    )
    if not quota.bounded:
        return body, None, 0
    now_ms = int(time.monotonic() * 1000) if now_ms is None else now_ms
    field = "topics"
    if key == ApiKey.DELETE_TOPICS and not getattr(body, "topics", None):
        field = "topic_names"  # v0-v5
    items = list(getattr(body, field) or ())
    refused: list[Any] = []
    kept: list[Any] = []
    for item in items:
        try:
            quota.record(_permits(key, item, image, default_partitions), now_ms)
        except ThrottlingQuotaExceededError:
            refused.append(item)
        else:
            kept.append(item)
    throttle_ms = quota.throttle_time_ms
    request.context.throttle_time_ms = max(request.context.throttle_time_ms, throttle_ms)
    if not refused:
        return body, None, throttle_ms
    sub = dataclasses.replace(request, body=dataclasses.replace(body, **{field: tuple(refused)}))
    # no message: Kafka answers THROTTLING_QUOTA_EXCEEDED with a null error_message
    # (tests/oracle/test_differential_mutation_quota.py)
    answer = admin_authz.error_response(sub, _THROTTLED, None)  # type: ignore[arg-type]
    rest = dataclasses.replace(body, **{field: tuple(kept)}) if kept else None
    return rest, answer, throttle_ms


def default_partitions(image: MetadataImage) -> int:
    """The partitions of a CreateTopics topic that names none: the cluster's dynamic
    `num.partitions`, else Kafka's default (1); the controller passes its own setting."""
    try:
        return max(1, int(image.configs(BROKER_RESOURCE, "").get("num.partitions", 1)))
    except ValueError:
        return 1


def with_throttle(response: Any, throttle_ms: int) -> Any:
    """`response` carrying at least `throttle_ms` (versions with a throttle time)."""
    current = getattr(response, "throttle_time", None)
    if current is None or throttle_ms <= 0:
        return response
    current_ms = current.total_seconds() * 1000 if hasattr(current, "total_seconds") else current
    if current_ms >= throttle_ms:
        return response
    return dataclasses.replace(response, throttle_time=datetime.timedelta(milliseconds=throttle_ms))


def _permits(key: ApiKey, item: Any, image: MetadataImage, default_partitions: int) -> int:
    """The partitions `item` creates or deletes."""
    if key == ApiKey.CREATE_TOPICS:
        if image.topic(item.name) is not None:
            return 0  # TOPIC_ALREADY_EXISTS: nothing is created
        if item.assignments:
            return len(item.assignments)
        return int(item.num_partitions) if item.num_partitions > 0 else default_partitions
    if key == ApiKey.CREATE_PARTITIONS:
        topic = image.topic(item.name)
        if topic is None:
            return 0
        return max(0, int(item.count) - len(topic.partitions))
    # DeleteTopics: a name (v0-v5) or a DeleteTopicState (name or topic id, v6+)
    if isinstance(item, str):
        topic = image.topic(item)
    elif item.name:
        topic = image.topic(item.name)
    else:
        topic_id = getattr(item, "topic_id", None)
        topic = image.topic_by_id(topic_id) if topic_id is not None else None
    return 0 if topic is None else len(topic.partitions)
