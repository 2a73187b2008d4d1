"""An idempotent confluent-kafka producer writes a record twice on sparklog exactly when it
would on Apache Kafka: across an epoch bump it chose (librdkafka issue 4953), never within one
epoch. The scenario is `tests/epoch_bump.py`; the Kafka side is
`tests/oracle/test_differential_idempotence.py`. The soak's checker
(`jobs/soak_duplicates.py`) tells this duplicate from a broker's."""

from __future__ import annotations

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from tests import epoch_bump

pytestmark = pytest.mark.interop

pytest.importorskip("confluent_kafka")

CLUSTER_CONFIG = {
    "broker.heartbeat.interval.ms": "100",
    "broker.session.timeout.ms": "1500",
    **epoch_bump.BROKER_CONFIG,
}


def test_a_record_resent_after_the_clients_epoch_bump_is_written_in_both_epochs(tmp_path):
    with EmbeddedCluster(brokers=2, data_dir=tmp_path, config=CLUSTER_CONFIG) as cluster:
        outcome = epoch_bump.run(
            cluster.bootstrap_servers,
            tmp_path,
            leader=0,
            follower=1,
            kill_follower=lambda: cluster.kill_broker(1),
            restart_follower=lambda: cluster.restart_broker(1),
        )

    assert [v for _, v in outcome.records] == [b"a0", b"a1", b"a1"]
    assert ("b", b"b1", "MSG_SIZE_TOO_LARGE", None) in outcome.reports
    assert ("a", b"a1", None, 2) in outcome.reports  # delivered once, at the second copy
    copies = outcome.copies
    assert (copies["across_producer_epochs"], copies["within_one_producer_epoch"]) == (1, 0)
    first, second = (c["batch"] for c in copies["copies"]["a1"])
    assert (first["producer_epoch"], first["sequence"]) == (0, 1)
    assert (second["producer_epoch"], second["sequence"]) == (1, 0)
    assert first["producer_id"] == second["producer_id"]
