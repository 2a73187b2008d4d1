"""Ending many prepared transactions in one decision (sparklog's EndTxnBatch; Spark's
exactly-once sink: the driver ends every task's transaction of a micro-batch at once)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterable, Mapping
from typing import Any

from sparklog.errors import KafkaError, RequestTimedOutError, error_for_code

from .transaction_manager import RETRIABLE_COORDINATOR_ERRORS, TransactionHandle


@dataclasses.dataclass(frozen=True, slots=True)
class BatchDecision:
    """What `end_transactions` decided: "committed", "aborted", or "already-committed" /
    "already-aborted" when `batch_key` was decided before (these transactions were then
    aborted as duplicates)."""

    outcome: str

    @property
    def replayed(self) -> bool:
        return self.outcome.startswith("already-")


def end_transactions(
    bootstrap_servers: str,
    batch_key: str,
    committed: bool,
    handles: Iterable[TransactionHandle],
    timeout_ms: int = 60_000,
    *,
    settings: Mapping[str, Any] | None = None,
) -> BatchDecision:
    """End every prepared transaction in ONE coordinator decision (one Delta commit) keyed by
    `batch_key` (sparklog's EndTxnBatch; Spark's exactly-once sink). A key decided before is
    recognised: nothing is committed twice. `settings`: the client's other settings (its
    `security.protocol`, `sasl.*`, `ssl.*`)."""
    return asyncio.run(
        _end_transactions(
            bootstrap_servers, batch_key, committed, list(handles), timeout_ms, settings
        )
    )


async def _end_transactions(
    bootstrap_servers: str,
    batch_key: str,
    committed: bool,
    handles: list[TransactionHandle],
    timeout_ms: int,
    settings: Mapping[str, Any] | None = None,
) -> BatchDecision:
    from kio.schema.types import ProducerId, TransactionalId
    from kio.static.primitive import i16

    from sparklog.protocol.sparklog_apis import EndTxnBatchRequest, EndTxnBatchTransaction

    request = EndTxnBatchRequest(
        batch_key=batch_key,
        committed=committed,
        transactions=tuple(
            EndTxnBatchTransaction(
                transactional_id=TransactionalId(h.transactional_id),
                producer_id=ProducerId(h.producer_id),
                producer_epoch=i16(h.producer_epoch),
            )
            for h in handles
        ),
    )
    response = await _ask_coordinator(bootstrap_servers, batch_key, request, timeout_ms, settings)
    code = int(response.error_code)
    if code:
        failed = {r.transactional_id: int(r.error_code) for r in response.results}
        raise error_for_code(code)(f"ending the transactions of {batch_key} failed: {failed}")
    return BatchDecision(response.outcome)


def fence_transactions(
    bootstrap_servers: str,
    transactional_ids: Iterable[str],
    timeout_ms: int = 60_000,
    *,
    settings: Mapping[str, Any] | None = None,
) -> None:
    """Fence each transactional id as a restarted producer would (InitProducerId): a
    transaction it left open is aborted, and its old producer can neither add partitions nor
    write to them again. Up to 8 ids at a time (the coordinator shares its Delta commits)."""
    from concurrent.futures import ThreadPoolExecutor

    from .producer import KafkaProducer

    def fence(transactional_id: str) -> None:
        config = {
            **_security_settings(settings),
            "bootstrap.servers": bootstrap_servers,
            "transactional.id": transactional_id,
            "max.block.ms": timeout_ms,
        }
        with KafkaProducer(config) as producer:
            producer.init_transactions()

    with ThreadPoolExecutor(8, thread_name_prefix="sparklog-fence") as pool:
        list(pool.map(fence, transactional_ids))


def transactional_id_exists(
    bootstrap_servers: str,
    transactional_id: str,
    timeout_ms: int = 60_000,
    *,
    settings: Mapping[str, Any] | None = None,
) -> bool:
    """Whether the coordinator knows `transactional_id` (DescribeTransactions)."""
    from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
    from kio.schema.types import TransactionalId

    from sparklog.errors import TransactionalIdNotFoundError

    response = asyncio.run(
        _ask_coordinator(
            bootstrap_servers,
            transactional_id,
            DescribeTransactionsRequest(transactional_ids=(TransactionalId(transactional_id),)),
            timeout_ms,
            settings,
        )
    )
    code = int(response.transaction_states[0].error_code)
    if code == TransactionalIdNotFoundError.code:
        return False
    if code:
        raise error_for_code(code)(f"describing {transactional_id}")
    return True


def _security_settings(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """The security part of a client's settings (what every connection of the client needs)."""
    keep = ("security.protocol", "sasl.", "ssl.")
    return {k: v for k, v in (settings or {}).items() if k.startswith(keep)}


async def _ask_coordinator(
    bootstrap_servers: str,
    key: str,
    request: Any,
    timeout_ms: int,
    settings: Mapping[str, Any] | None = None,
) -> Any:
    """Send `request` to the transaction coordinator of `key`, retrying while no coordinator
    answers (or it answers a retriable coordinator error) until `timeout_ms` passes."""
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
    from kio.static.primitive import i8

    from sparklog.client.config import admin_config
    from sparklog.client.security import client_security
    from sparklog.protocol.async_client import connect
    from sparklog.protocol.outbound import Endpoint

    security = client_security(
        admin_config({**_security_settings(settings), "bootstrap.servers": bootstrap_servers})
    )

    deadline = time.monotonic() + timeout_ms / 1000
    servers = [s.strip() for s in bootstrap_servers.split(",") if s.strip()]
    last: BaseException | None = None
    attempt = 0
    while time.monotonic() < deadline:
        host, _sep, port = servers[attempt % len(servers)].rpartition(":")
        attempt += 1
        try:
            broker = await connect(Endpoint(host, int(port)), security)
            try:
                found = await broker.request(
                    FindCoordinatorRequest(key_type=i8(1), coordinator_keys=(key,))
                )
            finally:
                await broker.close()
            node = found.coordinators[0]
            if int(node.error_code):
                raise error_for_code(int(node.error_code))("FindCoordinator")
            coordinator = await connect(Endpoint(node.host, int(node.port)), security)
            try:
                response = await coordinator.request(request)
            finally:
                await coordinator.close()
        except (KafkaError, ConnectionError, OSError, TimeoutError) as e:
            last = e
            await asyncio.sleep(0.2)
            continue
        code = int(getattr(response, "error_code", 0))
        if code in RETRIABLE_COORDINATOR_ERRORS:
            last = error_for_code(code)(f"{type(request).__name__} for {key}")
            await asyncio.sleep(0.2)
            continue
        return response
    raise RequestTimedOutError(f"{type(request).__name__} for {key} timed out: {last}")
