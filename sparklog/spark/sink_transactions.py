"""The sink's transactions: exactly-once micro-batches and all-or-nothing batch writes.

Each write task opens a transaction under `<prefix>-<Spark partition id>` (a retried or
speculative attempt of the same partition re-registers that id, which fences the older
attempt and aborts what it wrote), sends its rows, and hands the prepared transaction to the
driver in its commit message. The driver's `commit` ends every task's transaction in ONE
coordinator decision (one Delta commit) keyed by `<prefix>:<batch id>`
(`sparklog.client.end_transactions`); a key decided before - Spark replaying a micro-batch
whose Delta commit landed but whose own commit log entry did not - is recognised, and the
replay's transactions are aborted instead of committed twice. `abort` aborts them all. A
read_committed reader therefore sees each micro-batch whole, once, or not at all.

Spark does not wait for the tasks it cancels when a job fails, so `abort` also fences the ids of
the tasks without a commit message (a transaction they opened is aborted). A batch write's
task that starts its transaction only after that is told by a mark the abort leaves first
(`mark_write_aborted`), which every task checks once its transaction is registered: either the
task registered before the fence and is fenced, or it sees the mark and aborts itself.

The streaming prefix must survive a restart from the checkpoint: it is `kafka.transactional.id`
when given, else derived from the `checkpointLocation` option.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from typing import Any

from sparklog.spark.options import SinkOptions, SparkLogOptionError

logger = logging.getLogger(__name__)


def cluster_serves_transactions(options: SinkOptions) -> bool:
    """Whether the cluster has a transaction coordinator (FindCoordinator, key type 1)."""
    from sparklog.client.config import producer_config
    from sparklog.client.metadata import Metadata
    from sparklog.client.network import NetworkClient
    from sparklog.protocol.api_versions import ApiKey

    config = producer_config(options.producer_config())
    network = NetworkClient(config)
    try:
        metadata = Metadata(network, config)
        node = network.least_loaded_node(metadata.candidates())
        if node is None:
            return False
        response = network.send(
            node, ApiKey.FIND_COORDINATOR, {"key_type": 1, "coordinator_keys": ["probe"]}
        ).result()
        return int(response.coordinators[0].error_code) == 0
    except Exception as e:  # noqa: BLE001 - no coordinator reachable: no transactions
        logger.info("no transaction coordinator found (%s)", e)
        return False
    finally:
        network.close()


def streaming_prefix(options: SinkOptions) -> str | None:
    """The transactional-id prefix of an exactly-once stream, or None for at-least-once."""
    wanted = options.exactly_once
    if wanted is False:
        return None
    stable = options.transactional_id
    if stable is None and options.checkpoint_location:
        digest = hashlib.sha256(options.checkpoint_location.encode()).hexdigest()[:20]
        stable = f"sparklog-sink-{digest}"
    if stable is None:
        if wanted:
            raise SparkLogOptionError(
                "exactlyOnce needs a name that survives restarts to recognise replayed "
                "micro-batches: set the 'checkpointLocation' option (or "
                "'kafka.transactional.id'), or exactlyOnce=false"
            )
        logger.warning(
            "sparklog sink: at-least-once, because neither option 'checkpointLocation' nor "
            "'kafka.transactional.id' is set (the session-wide checkpoint location is not "
            "visible to data sources); set one for exactly-once"
        )
        return None
    if not cluster_serves_transactions(options):
        if wanted:
            raise SparkLogOptionError(
                "exactlyOnce=true but the cluster has no transaction coordinator; start the "
                "cluster with its driver-side coordinator, or set exactlyOnce=false"
            )
        logger.warning("sparklog sink: at-least-once (the cluster serves no transactions)")
        return None
    return stable


def batch_prefix(options: SinkOptions) -> str | None:
    """The prefix of an all-or-nothing batch write (`transactional=true`), else None."""
    if not options.transactional:
        return None
    if not cluster_serves_transactions(options):
        raise SparkLogOptionError(
            "transactional=true but the cluster has no transaction coordinator; start the "
            "cluster with its driver-side coordinator, or drop the option"
        )
    base = options.transactional_id or "sparklog-write"
    return f"{base}-{uuid.uuid4().hex[:12]}"


def task_transactional_id(prefix: str) -> str:
    """`<prefix>-<partition id>` of the running Spark task."""
    from pyspark import TaskContext

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    return f"{prefix}-{partition}"


def _fence_quietly(options: SinkOptions, ids: list[str], failed: str) -> bool:
    """Fence `ids` (InitProducerId, as a restarted producer would); on failure log `failed`
    with the reason and return False: the coordinator's `transaction.timeout.ms` is the
    fallback for whatever stays open."""
    from sparklog.client import fence_transactions

    try:
        fence_transactions(options.bootstrap_servers, ids, settings=options.kafka)
    except Exception as e:  # noqa: BLE001 - see the docstring
        logger.warning("%s (%s)", failed, e)
        return False
    return True


def mark_write_aborted(options: SinkOptions, prefix: str) -> None:
    """Record that the batch write under `prefix` was aborted, where its late tasks look
    (`write_was_aborted`): the prefix itself is registered as a transactional id."""
    _fence_quietly(
        options,
        [prefix],
        f"could not mark the write under {prefix} aborted; a task that starts late keeps its "
        "transaction open until transaction.timeout.ms",
    )


def write_was_aborted(options: SinkOptions, prefix: str) -> bool:
    """Whether the driver aborted the batch write under `prefix` (`mark_write_aborted`)."""
    from sparklog.client.transaction_batch import transactional_id_exists

    return transactional_id_exists(options.bootstrap_servers, prefix, settings=options.kafka)


def fence_leftovers(options: SinkOptions, prefix: str, messages: list[Any]) -> None:
    """Fence the transactional ids of the tasks that left no commit message: killed when Spark
    cancelled the job, failed mid-write, or still running (Spark does not wait for cancelled
    tasks). What they wrote, or still write, would otherwise stay in an open transaction that
    holds back read_committed readers until `transaction.timeout.ms`."""
    missing = [f"{prefix}-{i}" for i, m in enumerate(messages) if m is None]
    if missing and _fence_quietly(
        options,
        missing,
        "could not fence the transactions of tasks without a commit message under "
        f"{prefix}; the coordinator aborts them after transaction.timeout.ms",
    ):
        logger.info("fenced the transactions of %d tasks without a commit message", len(missing))


def end_all(options: SinkOptions, key: str, committed: bool, messages: list[Any]) -> Any:
    """End the prepared transactions carried by `messages` in one decision."""
    from sparklog.client import TransactionHandle, end_transactions

    handles = [
        TransactionHandle(*m.transaction)
        for m in messages
        if m is not None and getattr(m, "transaction", None) is not None
    ]
    decision = end_transactions(
        options.bootstrap_servers, key, committed, handles, settings=options.kafka
    )
    if decision.replayed:
        logger.info(
            "%s was decided before (%s): a replay; its %d new transactions were aborted",
            key,
            decision.outcome,
            len(handles),
        )
    return decision
