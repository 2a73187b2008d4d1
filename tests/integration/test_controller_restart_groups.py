"""A controller restarted under a running group coordinator (`EmbeddedCluster.
restart_controller`): the coordinator follows the new controller, so groups keep committing
on topics created after the restart (it answered UNKNOWN_TOPIC_OR_PARTITION from the stopped
controller's image before)."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Producer

from sparklog.cluster.embedded import EmbeddedCluster

from .conftest import TEST_CONFIG


def test_a_group_commits_on_a_topic_created_after_a_controller_restart(tmp_path):
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=TEST_CONFIG) as cluster:
        cluster.restart_controller()
        topic = f"after-restart-{uuid.uuid4().hex[:8]}"
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        producer.produce(topic, b"x")
        assert producer.flush(30) == 0
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": f"g-{topic}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.subscribe([topic])
            message = None
            for _ in range(60):
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    break
            assert message is not None and message.error() is None
            committed = consumer.commit(message=message, asynchronous=False)
            assert [(tp.topic, tp.offset, tp.error) for tp in committed] == [(topic, 1, None)]
        finally:
            consumer.close()
