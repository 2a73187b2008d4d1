"""EndTxnBatch in the coordinator: many transactions decided at once (Spark's exactly-once sink).

Every (transactional id, producer id, epoch) of a micro-batch moves to PrepareCommit in ONE
write, which also records the batch key; a key committed before (Spark replaying a micro-batch
whose decision landed but whose own commit log entry did not) is not committed again: that
request's transactions are duplicates and are aborted. If any transaction of a commit is fenced
or unknown, nothing is committed. Aborts are not remembered (a retried batch may commit later).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from sparklog.coordinator.transaction.metadata import TransactionMetadata, TxnState
from sparklog.errors import (
    ConcurrentTransactionsError,
    InvalidTxnStateError,
    TransactionAbortableError,
)

if TYPE_CHECKING:
    from sparklog.coordinator.transaction.coordinator import TransactionCoordinator

_S = TxnState


def end_txn_batch(
    core: TransactionCoordinator,
    now_ms: int,
    batch_key: str,
    committed: bool,
    transactions: list[tuple[str, int, int]],
    respond: Callable[[int, str, dict[str, int]], None],
) -> None:
    """sparklog's EndTxnBatch: decide every (transactional id, producer id, epoch) at once,
    in one write that also records a committed `batch_key`. A key committed before (a
    replayed Spark micro-batch) is not committed again: these transactions are duplicates
    and are aborted. Aborts are not remembered (a batch may be retried after one).
    `respond(error, outcome, per-transaction errors)`."""
    # only commits are remembered: an aborted micro-batch may be retried and committed
    previous = core.decided_batches.get(batch_key) if committed else None
    codes: dict[str, int] = {}
    changes: list[tuple[TransactionMetadata, TransactionMetadata]] = []
    decide_commit = committed and previous is None
    for tid, pid, epoch in transactions:
        code = core.check_producer(tid, pid, epoch)
        meta = core.transactions.get(tid)
        if not code and meta is not None:
            if meta.pending or meta.state.is_prepared or meta.state is _S.PREPARE_EPOCH_FENCE:
                code = ConcurrentTransactionsError.code
            elif meta.suspect and decide_commit:
                # a restart may have lost some of its adds (`adds._add_in_memory`)
                code = TransactionAbortableError.code
            elif meta.state is not _S.ONGOING:
                code = 0 if not meta.partitions else InvalidTxnStateError.code
        codes[tid] = code
        if not code and meta is not None and meta.state is _S.ONGOING:
            state = _S.PREPARE_COMMIT if decide_commit else _S.PREPARE_ABORT
            changes.append(
                (meta, meta.copy(state=state, last_update_ms=now_ms, transaction_version=1))
            )
    failed = {t: c for t, c in codes.items() if c}
    if failed and decide_commit:
        return respond(failed[next(iter(failed))], "", codes)  # all or nothing
    outcome = (
        ("committed" if decide_commit else "aborted")
        if previous is None
        else (f"already-{previous}")
    )
    record = {"batch_key": batch_key, "outcome": "committed" if decide_commit else "aborted"}
    batch_row = {
        "record_type": "sink_batch",
        "group_id": "",
        "commit_timestamp_ms": now_ms,
        "expire_timestamp_ms": None,
        "transactional_id": None,
        "txn_state": "committed",
        "transaction_metadata": json.dumps(record, sort_keys=True),
    }
    extra = [batch_row] if decide_commit else []

    def durable(_ms: int) -> None:
        # `replay` applied the decisions and, with the batch row, `decided_batches`
        for _meta, new in changes:
            core._send_markers(core.transactions[new.transactional_id])
        respond(0, outcome, codes)

    if not changes and not extra:
        return respond(0, outcome, codes)
    core._persist_many(changes, now_ms, durable, lambda c: respond(c, "", codes), extra)
