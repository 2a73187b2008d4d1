"""The states a broker goes through (Kafka's `org.apache.kafka.metadata.BrokerState`) and the
values its `kafka.server:type=KafkaServer,name=BrokerState` gauge shows."""

from __future__ import annotations

import enum


class BrokerState(enum.Enum):
    """Kafka's `BrokerState`, the parts a sparklog broker goes through."""

    NOT_RUNNING = "not running"
    STARTING = "starting"
    RECOVERY = "recovery"  # registered, fenced until caught up
    RUNNING = "running"
    PENDING_CONTROLLED_SHUTDOWN = "pending controlled shutdown"
    SHUTTING_DOWN = "shutting down"


#: Kafka's `BrokerState` values, as its `kafka.server:type=KafkaServer,name=BrokerState` gauge
#: shows them (dashboards alert on != 3).
BROKER_STATE_VALUES = {
    BrokerState.NOT_RUNNING: 0,
    BrokerState.STARTING: 1,
    BrokerState.RECOVERY: 2,
    BrokerState.RUNNING: 3,
    BrokerState.PENDING_CONTROLLED_SHUTDOWN: 6,
    BrokerState.SHUTTING_DOWN: 7,
}
