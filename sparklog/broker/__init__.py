"""Brokers that speak Kafka's protocol and keep Kafka's logs (architecture.md §5).

Entry points: `BrokerServer` (one broker) and `run_broker` (a broker's whole life, for the
Spark task). The launcher that runs a controller and brokers in one process is
`sparklog.cluster.embedded.EmbeddedCluster`.
"""

from sparklog.broker.run import run_broker
from sparklog.broker.server import BrokerServer, BrokerState

__all__ = ["BrokerServer", "BrokerState", "run_broker"]
