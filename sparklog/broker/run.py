"""A broker's whole life as one call: the Spark task's body and `python -m sparklog serve`.

D6: the broker adopts an unclaimed identity of this cluster found under the base directory
(an executor restarted on the same disk), else takes the node id it was given.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from pathlib import Path

from sparklog.broker.controller_client import ControllerClient
from sparklog.broker.meta_properties import resolve_data_dir
from sparklog.broker.server import BrokerServer


def run_broker(
    node_id: int,
    base_dir: str | Path,
    controller_bootstrap: str,
    config: Mapping[str, object] | None = None,
    stop_event: threading.Event | None = None,
    *,
    cluster_id: str | None = None,
    executor_id: str | None = None,
    task_attempt: int = 0,
) -> str:
    """Run a broker until it is told to stop (the Spark task's body); returns why it stopped.

    D6: the broker adopts an unclaimed identity of this cluster found under `base_dir`, else it
    takes `node_id` in `<base_dir>/broker-<node_id>`.
    """
    if cluster_id is None:
        cluster_id = asyncio.run(_ask_cluster_id(controller_bootstrap))
    data_dir, meta, lock = resolve_data_dir(Path(base_dir), cluster_id, node_id)
    try:
        broker = BrokerServer(
            meta.node_id,
            data_dir,
            controller_bootstrap,
            config,
            cluster_id=cluster_id,
            executor_id=executor_id,
            task_attempt=task_attempt,
            claimed=(meta, lock),
        )
        return broker.run_forever(stop_event)
    finally:
        lock.release()


async def _ask_cluster_id(controller_bootstrap: str, timeout_s: float = 60.0) -> str:
    """The controller's cluster id, waiting up to `timeout_s` for it to answer."""
    client = ControllerClient(controller_bootstrap)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    try:
        while True:
            try:
                cluster_id, _controller_id = await client.describe_cluster()
                return cluster_id
            except (ConnectionError, OSError):
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.2)
    finally:
        await client.close()
