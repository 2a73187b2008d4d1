"""Brokers that speak Kafka's protocol and keep Kafka's logs (architecture.md §5).

Entry points: `BrokerServer` (one broker) and `run_broker` (a broker's whole life, for the
Spark task). The launcher that runs a controller and brokers in one process is
`sparklog.cluster.embedded.EmbeddedCluster`. The names below load their module on first use,
so importing one broker module (`sparklog.broker.partition`) does not load the server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparklog.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from .run import run_broker
    from .server import BrokerServer, BrokerState

_MODULES = {
    "run_broker": "run",
    "BrokerServer": "server",
    "BrokerState": "server",
}

__getattr__ = lazy_getattr(__name__, {n: f"{__name__}.{m}" for n, m in _MODULES.items()})

__all__ = [
    "BrokerServer",
    "BrokerState",
    "run_broker",
]
