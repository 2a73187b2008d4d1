"""Binding a broker's listeners, a restarted broker's on the ports it had (sparklog's: the
embedded cluster and Spark tasks listen on ephemeral ports, where Kafka's brokers have static
`listeners`); the ports are kept in the data dir's `.listener-port` (`meta_properties`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from sparklog.broker.meta_properties import read_listener_ports, write_listener_ports
from sparklog.protocol.server import KafkaServer

logger = logging.getLogger(__name__)


async def bind_listeners(servers: Mapping[str, KafkaServer], data_dir: Path, node_id: int) -> None:
    """Bind the listeners (`servers`, by listener name). With an ephemeral port (`listeners`
    port 0: the embedded cluster, Spark tasks) a restarted broker takes the port its data dir
    last had for that listener when it is free, so it comes back at the address clients hold
    for its node id, as a Kafka broker with static `listeners` does. librdkafka depends on it:
    its transaction and group coordinator handles copy a broker's address when FindCoordinator
    names that broker and do not follow a later Metadata change while the same node id stays
    coordinator, so a coordinator broker back on another port would be dialled at the old one
    until FindCoordinator named some other broker (`rd_kafka_txn_coord_set`)."""
    previous = read_listener_ports(data_dir)
    if "" in previous:  # a file written by a one-listener broker: the first listener's
        previous.setdefault(next(iter(servers)), previous.pop(""))
    ephemeral = False
    for name, server in servers.items():
        if server.port != 0:
            await server.start()
            continue
        ephemeral = True
        previous_port = previous.get(name)
        if previous_port is not None:
            server.port = previous_port
            try:
                await server.start()
                continue
            except OSError as e:
                logger.warning(
                    "broker %d: port %d of listener %s's last run is taken (%s); binding "
                    "another, so clients that held the old address must find this broker "
                    "again",
                    node_id,
                    previous_port,
                    name,
                    e,
                )
                server.port = 0
        await server.start()
    if ephemeral:
        write_listener_ports(data_dir, {n: s.port for n, s in servers.items()})
