"""`python -m sparklog groups ...` (kafka-consumer-groups) against a cluster with a real
confluent-kafka consumer group: list, describe with lag, reset-offsets (dry run by default,
refused while members are active), delete-offsets and delete."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from .test_cli import ok, unique, user_error


@pytest.fixture
def topic_with_group(cluster):
    bs, topic, group = cluster.bootstrap_servers, unique("cg"), unique("cg-group")
    ok("topics", "create", "--bootstrap-server", bs, "--topic", topic, "--partitions", "2")
    producer = Producer({"bootstrap.servers": bs})
    for i in range(20):
        producer.produce(topic, value=b"%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }  # fmt: skip
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    while len(consumer.assignment()) < 2 and time.monotonic() < deadline:
        consumer.poll(0.1)
    consumer.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 10)],
                    asynchronous=False)  # fmt: skip
    yield bs, topic, group, consumer
    consumer.close()


def test_list_and_describe_show_members_offsets_and_lag(topic_with_group):
    bs, topic, group, _consumer = topic_with_group
    listed = ok("groups", "list", "--bootstrap-server", bs)
    assert f"{group}\tStable\tconsumer" in listed.splitlines()
    described = ok("groups", "describe", "--bootstrap-server", bs, "--group", group).splitlines()
    assert described[0].split()[:6] == [
        "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"
    ]  # fmt: skip
    rows = [line.split() for line in described[1:]]
    assert [r[:6] for r in rows] == [
        [group, topic, "0", "4", "10", "6"],
        [group, topic, "1", "10", "10", "0"],
    ]
    assert all(r[6].startswith("rdkafka-") and r[7] == "/127.0.0.1" for r in rows)


def test_reset_offsets_plans_then_executes_once_the_group_is_empty(topic_with_group):
    bs, topic, group, consumer = topic_with_group
    args = ("groups", "reset-offsets", "--bootstrap-server", bs, "--group", group,
            "--topic", topic)  # fmt: skip
    plan = ok(*args, "--to-earliest")
    assert f"{group}\t{topic}\t0\t0" in plan and "dry run" in plan
    shifted = ok(*args, "--shift-by", "-3")
    assert f"{group}\t{topic}\t0\t1" in shifted and f"{group}\t{topic}\t1\t7" in shifted
    assert "stop the group's consumers first" in user_error(*args, "--to-earliest", "--execute")
    consumer.close()
    ok(*args, "--to-offset", "2", "--execute")
    described = ok("groups", "describe", "--bootstrap-server", bs, "--group", group)
    assert [line.split()[3] for line in described.splitlines()[1:]] == ["2", "2"]
    ok("groups", "delete-offsets", "--bootstrap-server", bs, "--group", group,
       "--topic", f"{topic}:1")  # fmt: skip
    described = ok("groups", "describe", "--bootstrap-server", bs, "--group", group)
    assert [line.split()[2] for line in described.splitlines()[1:]] == ["0"]
    ok("groups", "delete", "--bootstrap-server", bs, "--group", group)
    assert group not in ok("groups", "list", "--bootstrap-server", bs)
    assert "GroupIdNotFound" in user_error(
        "groups", "delete", "--bootstrap-server", bs, "--group", group
    )


def test_user_errors_name_the_fix(cluster):
    bs = cluster.bootstrap_servers
    assert "--group is required" in user_error("groups", "describe", "--bootstrap-server", bs)
    assert "needs one of --to-earliest" in user_error(
        "groups", "reset-offsets", "--bootstrap-server", bs, "--group", "g", "--all-topics"
    )
