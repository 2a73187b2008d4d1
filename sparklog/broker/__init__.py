"""Brokers that speak Kafka's protocol and keep Kafka's logs (architecture.md §5).

Entry points: `BrokerServer` (one broker), `run_broker` (a broker's whole life, for the Spark
task) and `EmbeddedCluster` (controller + brokers in this process).
"""

from sparklog.broker.embedded import EmbeddedCluster
from sparklog.broker.run import run_broker
from sparklog.broker.server import BrokerServer, BrokerState

__all__ = ["BrokerServer", "BrokerState", "EmbeddedCluster", "run_broker"]
