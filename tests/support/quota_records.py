"""Client quotas set in a running sparklog cluster as the controller stores them: `ClientQuota`
metadata records (`metadata/quotas.py`) committed by the controller and replayed by every
broker's image — what AlterClientQuotas writes, without needing that API."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from sparklog.controller.results import ControllerResult
from sparklog.metadata.quotas import ClientQuotaEntity, quota_record


def set_client_quota(
    cluster: Any, entity: dict[str, str | None], key: str, value: float | None
) -> None:
    """Commit the record on the controller, then wait until every broker's image has it."""
    record = quota_record(ClientQuotaEntity.of(entity), key, value)
    controller = cluster.controller
    future = asyncio.run_coroutine_threadsafe(
        controller.commit(lambda: ControllerResult(None, (record,))), controller._loop
    )
    future.result(30)
    wanted = None if value is None else float(value)
    deadline = time.monotonic() + 30
    for broker in cluster.brokers:
        while broker.metadata.image.quotas.quotas(ClientQuotaEntity.of(entity)).get(key) != wanted:
            assert time.monotonic() < deadline, f"broker {broker.node_id} never saw {record}"
            time.sleep(0.01)
