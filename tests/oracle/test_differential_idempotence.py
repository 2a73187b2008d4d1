"""Apache Kafka and sparklog write the same two copies of a record when confluent-kafka's
idempotent producer bumps its epoch itself and sends a possibly persisted message again
(`tests/epoch_bump.py`; librdkafka issue 4953): the duplicate the network-partition soak found
once is the client's, and the soak's checker now tells it from a broker's (a copy per epoch)."""

from __future__ import annotations

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.oracle.kafka_server import ApacheKafka, java_available
from tests import epoch_bump

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

pytest.importorskip("confluent_kafka")


def summary(outcome: epoch_bump.Outcome) -> dict:
    """What both brokers must agree on: the log, the deliveries, each copy's epoch/sequence."""
    copies = outcome.copies["copies"].get("a1", [])
    return {
        "log": outcome.records,
        "reports": sorted(outcome.reports, key=repr),
        "copies": [
            (c["offset"], c["batch"]["producer_epoch"], c["batch"]["sequence"]) for c in copies
        ],  # fmt: skip
        "across_epochs": outcome.copies["across_producer_epochs"],
        "within_epoch": outcome.copies["within_one_producer_epoch"],
    }


def test_kafka_and_sparklog_write_the_same_duplicate_across_the_clients_epoch_bump(tmp_path):
    if not java_available():
        pytest.skip("java is not installed: the Apache Kafka oracle needs a JDK >= 17")
    with ApacheKafka(tmp_path / "kafka", brokers=2, heap="512m",
                     config=epoch_bump.BROKER_CONFIG) as kafka:  # fmt: skip
        on_kafka = epoch_bump.run(
            kafka.bootstrap_servers,
            kafka.data_dir,
            leader=1,
            follower=2,
            kill_follower=lambda: kafka.kill(2),
            restart_follower=lambda: kafka.restart(2),
        )
    config = {"broker.heartbeat.interval.ms": "100", "broker.session.timeout.ms": "1500",
              **epoch_bump.BROKER_CONFIG}  # fmt: skip
    with EmbeddedCluster(brokers=2, data_dir=tmp_path / "sparklog", config=config) as cluster:
        on_sparklog = epoch_bump.run(
            cluster.bootstrap_servers,
            tmp_path / "sparklog",
            leader=0,
            follower=1,
            kill_follower=lambda: cluster.kill_broker(1),
            restart_follower=lambda: cluster.restart_broker(1),
        )

    assert summary(on_kafka) == summary(on_sparklog)
    assert summary(on_kafka)["copies"] == [(1, 0, 1), (2, 1, 0)]
