"""Real clients over SASL_SSL (SCRAM-SHA-512) and mTLS, against Apache Kafka and sparklog
secured the same way (conftest.py): confluent-kafka, kafka-python, aiokafka and kcat each
create a topic, produce idempotently, consume in a group and commit, run a committed and an
aborted transaction (kcat: none, it has no transactional API), and delete the topic, as
User:alice whose only grants are PREFIXED ACLs on `sec-*`. Kafka's Java clients: test_java.py.

Each cell runs the same steps on both clusters; a step Kafka passes and sparklog fails is a
sparklog bug (or a difference to list in docs/differences.md)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import uuid

import confluent_kafka
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

from tests.support.secure_clusters import PLAIN_USERS, SecureTarget

pytestmark = [pytest.mark.interop, pytest.mark.oracle]

PARTITIONS = 2
RECORDS = 20
TXN_RECORDS = 5
DEADLINE_S = 30.0


def names(client: str, auth: str) -> tuple[str, str, str]:
    """A fresh topic, group and transactional id, all under alice's `sec-` prefix."""
    suffix = uuid.uuid4().hex[:6]
    return f"sec-{client}-{auth}-{suffix}", f"sec-g-{suffix}", f"sec-tx-{suffix}"


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


def eventually(check, timeout_s: float = DEADLINE_S):
    """`check()`'s value once it stops raising: a created topic reaches a broker's metadata
    a little after CreateTopics answered (KRaft brokers follow the controller's log)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return check()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def expected_committed_view() -> list[bytes]:
    """What read_committed sees after the plain records and one committed, one aborted txn."""
    return sorted(values("plain", RECORDS) + values("committed", TXN_RECORDS))


# ---------------------------------------------------------------------------- confluent-kafka


def confluent_read(config: dict, topic: str, want: int, **extra) -> list[bytes]:
    """Every value of `topic` (assign, from the beginning) once `want` arrived."""
    consumer = confluent_kafka.Consumer(
        config | {"group.id": "sec-unused", "enable.auto.commit": False} | extra
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(got) < want and time.monotonic() < deadline:
            for message in consumer.consume(100, 0.2):
                if message.error() is None:
                    got.append(message.value())
                elif message.error().fatal():
                    raise confluent_kafka.KafkaException(message.error())
    finally:
        consumer.close()
    return got


def test_confluent_kafka(target: SecureTarget, auth: str) -> None:
    config = target.librdkafka(auth)
    topic, group, txn = names("confluent", auth)
    admin = confluent_kafka.admin.AdminClient(config)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], request_timeout=30)[topic].result()
    described = eventually(
        lambda: admin.describe_topics(confluent_kafka.TopicCollection([topic]), request_timeout=30)[
            topic
        ].result()
    )
    assert len(described.partitions) == PARTITIONS

    producer = confluent_kafka.Producer(config | {"enable.idempotence": True})
    for value in values("plain", RECORDS):
        producer.produce(topic, value)
    assert producer.flush(DEADLINE_S) == 0

    consumer = confluent_kafka.Consumer(
        config | {"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < RECORDS and time.monotonic() < deadline:
        for message in consumer.consume(100, 0.2):
            assert message.error() is None, message.error()
            got.append(message.value())
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 30)
    consumer.close()
    assert sorted(got) == sorted(values("plain", RECORDS))
    assert sum(tp.offset for tp in committed) == RECORDS

    transactional = confluent_kafka.Producer(config | {"transactional.id": txn})
    transactional.init_transactions(30)
    for prefix, finish in (("committed", "commit"), ("aborted", "abort")):
        transactional.begin_transaction()
        for value in values(prefix, TXN_RECORDS):
            transactional.produce(topic, value)
        getattr(transactional, f"{finish}_transaction")(30)
    seen = confluent_read(
        config, topic, RECORDS + TXN_RECORDS, **{"isolation.level": "read_committed"}
    )
    assert sorted(seen) == expected_committed_view()

    admin.delete_topics([topic], request_timeout=30)[topic].result()


# ---------------------------------------------------------------------------- kafka-python


def test_kafka_python(target: SecureTarget, auth: str) -> None:
    import kafka
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic

    kwargs = target.kafka_python(auth)
    topic, group, txn = names("kpy", auth)
    admin = KafkaAdminClient(**kwargs)
    try:
        admin.create_topics([KNewTopic(topic, PARTITIONS, 1)])
        assert topic in admin.list_topics()

        producer = kafka.KafkaProducer(enable_idempotence=True, **kwargs)
        for value in values("plain", RECORDS):
            producer.send(topic, value)
        producer.flush(DEADLINE_S)
        producer.close()

        consumer = kafka.KafkaConsumer(
            topic,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            **kwargs,
        )
        got: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < RECORDS and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                got.extend(record.value for record in batch)
        consumer.commit()
        committed = [consumer.committed(kafka.TopicPartition(topic, p)) for p in range(2)]
        consumer.close()
        assert sorted(got) == sorted(values("plain", RECORDS))
        assert sum(committed) == RECORDS

        transactional = kafka.KafkaProducer(transactional_id=txn, **kwargs)
        transactional.init_transactions()
        for prefix, finish in (("committed", "commit"), ("aborted", "abort")):
            transactional.begin_transaction()
            for value in values(prefix, TXN_RECORDS):
                transactional.send(topic, value)
            getattr(transactional, f"{finish}_transaction")()
        transactional.close()

        reader = kafka.KafkaConsumer(
            isolation_level="read_committed", enable_auto_commit=False, **kwargs
        )
        reader.assign([kafka.TopicPartition(topic, p) for p in range(PARTITIONS)])
        reader.seek_to_beginning()
        seen: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(seen) < RECORDS + TXN_RECORDS and time.monotonic() < deadline:
            for batch in reader.poll(timeout_ms=200).values():
                seen.extend(record.value for record in batch)
        reader.close()
        assert sorted(seen) == expected_committed_view()

        admin.delete_topics([topic])
    finally:
        admin.close()


# ---------------------------------------------------------------------------- aiokafka


async def aiokafka_cell(target: SecureTarget, auth: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATP
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as ANewTopic

    kwargs = target.aiokafka(auth)
    topic, group, txn = names("aio", auth)
    admin = AIOKafkaAdminClient(**kwargs)
    await admin.start()
    try:
        await admin.create_topics([ANewTopic(topic, PARTITIONS, 1)])
        assert topic in await admin.list_topics()

        producer = AIOKafkaProducer(enable_idempotence=True, **kwargs)
        await producer.start()
        try:
            for value in values("plain", RECORDS):
                await producer.send(topic, value)
            await producer.flush()
        finally:
            await producer.stop()

        consumer = AIOKafkaConsumer(
            topic,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            **kwargs,
        )
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(DEADLINE_S):
                while len(got) < RECORDS:
                    for batch in (await consumer.getmany(timeout_ms=200)).values():
                        got.extend(record.value for record in batch)
            await consumer.commit()
            committed = [await consumer.committed(ATP(topic, p)) for p in range(PARTITIONS)]
        finally:
            await consumer.stop()
        assert sorted(got) == sorted(values("plain", RECORDS))
        assert sum(committed) == RECORDS

        transactional = AIOKafkaProducer(transactional_id=txn, **kwargs)
        await transactional.start()
        try:
            async with transactional.transaction():
                for value in values("committed", TXN_RECORDS):
                    await transactional.send(topic, value)
            await transactional.begin_transaction()
            for value in values("aborted", TXN_RECORDS):
                await transactional.send(topic, value)
            await transactional.abort_transaction()
        finally:
            await transactional.stop()

        reader = AIOKafkaConsumer(
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            **kwargs,
        )
        await reader.start()
        seen: list[bytes] = []
        try:
            reader.assign([ATP(topic, p) for p in range(PARTITIONS)])
            async with asyncio.timeout(DEADLINE_S):
                while len(seen) < RECORDS + TXN_RECORDS:
                    for batch in (await reader.getmany(timeout_ms=200)).values():
                        seen.extend(record.value for record in batch)
        finally:
            await reader.stop()
        assert sorted(seen) == expected_committed_view()

        await admin.delete_topics([topic])
    finally:
        await admin.close()


def test_aiokafka(target: SecureTarget, auth: str) -> None:
    asyncio.run(aiokafka_cell(target, auth))


# ---------------------------------------------------------------------------- kcat

KCAT = shutil.which("kcat")


def kcat(config: dict, *args: str, stdin: str | None = None) -> str:
    settings = [
        arg
        for key, value in config.items()
        if key != "bootstrap.servers"
        for arg in ("-X", f"{key}={value}")
    ]
    done = subprocess.run(
        [KCAT, "-b", config["bootstrap.servers"], *settings, *args],
        input=stdin, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (make kcat)")
def test_kcat(target: SecureTarget, auth: str) -> None:
    """Debian's kcat links librdkafka 2.0.2, whose SCRAM client-final-message repeats the
    client nonce (librdkafka#4895, fixed in 2.6.1): Kafka 4.x refuses it as RFC 5802 says, so
    kcat's SASL_SSL cell authenticates with PLAIN (alice is a PLAIN user too)."""
    config = target.librdkafka(auth)
    if auth == "scram":
        config |= {"sasl.mechanisms": "PLAIN", "sasl.password": PLAIN_USERS["alice"]}
    topic, group, _ = names("kcat", auth)
    admin = confluent_kafka.admin.AdminClient(config)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], request_timeout=30)[topic].result()

    listed = json.loads(kcat(config, "-L", "-J", "-t", topic))
    assert [t["topic"] for t in listed["topics"]] == [topic]
    assert len(listed["topics"][0]["partitions"]) == PARTITIONS

    lines = "\n".join(v.decode() for v in values("plain", RECORDS)) + "\n"
    kcat(config, "-P", "-t", topic, "-X", "enable.idempotence=true", stdin=lines)

    # a balanced consumer in a group: -e leaves once every assigned partition hit its end,
    # committing its offsets on the way out (enable.auto.commit)
    out = kcat(config, "-G", group, "-o", "beginning", "-e", "-f", "%s\\n", topic)
    assert sorted(out.split()) == sorted(v.decode() for v in values("plain", RECORDS))
    consumer = confluent_kafka.Consumer(config | {"group.id": group})
    committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 30)
    consumer.close()
    # a partition the sticky partitioner gave no record has nothing to commit (-1001)
    assert sum(max(tp.offset, 0) for tp in committed) == RECORDS

    admin.delete_topics([topic], request_timeout=30)[topic].result()


# ---------------------------------------------------------------------------- authorization


def authentication_error(config: dict) -> str:
    """The error librdkafka reports (through `error_cb`) for a refused SASL login."""
    errors: list[confluent_kafka.KafkaError] = []
    producer = confluent_kafka.Producer(config | {"error_cb": errors.append})
    deadline = time.monotonic() + DEADLINE_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    assert errors, "no error reported"
    assert errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION, errors[0]
    return errors[0].str()


def test_acls_deny_what_alice_was_not_granted_and_bad_passwords_fail(
    target: SecureTarget,
) -> None:
    """alice may not create or read outside `sec-` (TOPIC_AUTHORIZATION_FAILED), mallory (no
    ACLs) may not read `sec-` topics, and a wrong password fails authentication."""
    target.require("scram")
    admin = target.admin()
    private = f"private-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(private, 1, 1)], request_timeout=30)[private].result()

    alice = confluent_kafka.admin.AdminClient(target.librdkafka("scram"))
    refused = alice.create_topics([NewTopic(f"other-{private}", 1, 1)], request_timeout=30)
    with pytest.raises(confluent_kafka.KafkaException) as denied:
        next(iter(refused.values())).result()
    assert denied.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED

    producer = confluent_kafka.Producer(target.librdkafka("scram") | {"acks": "all"})
    errors: list[confluent_kafka.KafkaError] = []
    producer.produce(private, b"x", on_delivery=lambda err, _m: errors.append(err))
    producer.flush(DEADLINE_S)
    assert [e.code() for e in errors] == [confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED]

    assert authentication_error(target.librdkafka("scram", password="not-alices-password"))

    mallory = confluent_kafka.admin.AdminClient(target.librdkafka("scram", user="mallory"))
    visible = mallory.list_topics(timeout=10).topics
    assert private not in visible, "all-topics Metadata lists only authorized topics"
    admin.delete_topics([private], request_timeout=30)[private].result()
