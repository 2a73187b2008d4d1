"""ACL enforcement with real clients (confluent-kafka, kafka-python) over PLAINTEXT: the
principal is User:ANONYMOUS, so ACLs on it (or none) exercise allow and deny per API, with
Kafka's error codes (29 topic, 30 group, 31 cluster, 53 transactional id)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from sparklog.protocol.api_versions import ApiKey
from sparklog.security.acl import CLUSTER_NAME, AclOperation, AclPermissionType, ResourceType
from tests.integration.acl_cluster import AclCluster, allow, binding
from tests.integration.broker_wire import batch, call, connect
from tests.integration.conftest import TEST_CONFIG

Op = AclOperation
T, G, C, X = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)


@pytest.fixture(scope="module")
def acls(tmp_path_factory):
    with AclCluster(
        brokers=1, data_dir=tmp_path_factory.mktemp("acls"), config=TEST_CONFIG
    ) as cluster:
        yield cluster


@pytest.fixture
def granted(acls):
    """grant(*bindings) for one test; revoked afterwards."""
    ids: list[uuid.UUID] = []

    def grant(*bindings):
        ids.extend(acls.grant(bindings))

    yield grant
    acls.revoke(ids)


def topic(acls, granted, partitions: int = 1) -> str:
    """A fresh topic, created under a CREATE grant that ends with this call."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    ids = acls.grant(allow(C, CLUSTER_NAME, Op.CREATE))
    try:
        admin = AdminClient({"bootstrap.servers": acls.bootstrap_servers})
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)
    finally:
        acls.revoke(ids)
    return name


def produce_one(bootstrap: str, name: str, **conf) -> KafkaError | None:
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 5000, **conf})
    errors = []
    producer.produce(name, b"v", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(15)
    return errors[0] if errors else KafkaError(KafkaError._MSG_TIMED_OUT)


def code(error) -> int:
    return error.code() if error is not None else 0


# -- topics: produce, fetch, metadata -------------------------------------------------------


def test_produce_needs_write_on_the_topic(acls, granted):
    name = topic(acls, granted)
    assert code(produce_one(acls.bootstrap_servers, name)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    granted(*allow(T, name, Op.WRITE))
    assert produce_one(acls.bootstrap_servers, name) is None


def test_a_deny_wins_and_a_removal_reaches_an_open_connection(acls, granted):
    name = topic(acls, granted)
    ids = acls.grant(allow(T, name, Op.WRITE))
    producer = Producer({"bootstrap.servers": acls.bootstrap_servers, "message.timeout.ms": 3000})
    errors = []

    def send():
        producer.produce(name, b"v", on_delivery=lambda err, _m: errors.append(err))
        producer.flush(10)
        return errors.pop()

    assert send() is None
    acls.revoke(ids)  # same producer, same connection: the next request is refused
    assert code(send()) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # an ALLOW and a DENY on WRITE: denied (DESCRIBE stays allowed, so Metadata finds it)
    granted(*allow(T, name, Op.WRITE), binding(T, name, Op.WRITE, AclPermissionType.DENY))
    error = produce_one(acls.bootstrap_servers, name)
    assert code(error) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_all_topics_metadata_lists_only_described_topics(acls, granted):
    seen, hidden = topic(acls, granted), topic(acls, granted)
    granted(*allow(T, seen, Op.READ))  # READ implies DESCRIBE
    admin = AdminClient({"bootstrap.servers": acls.bootstrap_servers})
    listed = admin.list_topics(timeout=10).topics
    assert seen in listed and hidden not in listed
    one = admin.list_topics(hidden, timeout=10).topics[hidden]
    assert one.error is not None and one.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_consuming_needs_read_on_the_group_and_the_topic(acls, granted):
    name = topic(acls, granted)
    group = f"g-{uuid.uuid4().hex[:6]}"
    granted(*allow(T, name, Op.WRITE))
    assert produce_one(acls.bootstrap_servers, name) is None

    def consume():
        consumer = Consumer(
            {
                "bootstrap.servers": acls.bootstrap_servers,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
            }
        )
        consumer.subscribe([name])
        try:
            for _ in range(40):
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                return msg.error().code() if msg.error() else msg.value()
        finally:
            consumer.close()
        return None

    assert consume() == KafkaError.GROUP_AUTHORIZATION_FAILED
    granted(*allow(G, group, Op.READ))
    assert consume() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    granted(*allow(T, name, Op.READ))
    assert consume() == b"v"


# -- admin ----------------------------------------------------------------------------------


def test_create_and_delete_topics_need_create_and_delete(acls, granted):
    admin = AdminClient({"bootstrap.servers": acls.bootstrap_servers})
    name, other = f"c-{uuid.uuid4().hex[:8]}", f"c-{uuid.uuid4().hex[:8]}"
    futures = admin.create_topics([NewTopic(name, 1, 1)])
    with pytest.raises(KafkaException) as refused:
        futures[name].result(15)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    granted(*allow(T, name, Op.CREATE))  # CREATE on the topic suffices; not on `other`
    futures = admin.create_topics([NewTopic(name, 1, 1), NewTopic(other, 1, 1)])
    futures[name].result(15)
    with pytest.raises(KafkaException) as refused:
        futures[other].result(15)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as refused:
        admin.delete_topics([name])[name].result(15)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    granted(*allow(T, name, Op.DELETE))
    admin.delete_topics([name])[name].result(15)


def test_describe_configs_needs_describe_configs_or_alter_configs(acls, granted):
    name = topic(acls, granted)
    admin = AdminClient({"bootstrap.servers": acls.bootstrap_servers})

    def describe(kind, resource):
        future = admin.describe_configs([ConfigResource(kind, resource)])
        return next(iter(future.values())).result(15)

    with pytest.raises(KafkaException) as refused:
        describe("topic", name)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as refused:
        describe("broker", "0")
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    granted(*allow(T, name, Op.ALTER_CONFIGS))  # implies DESCRIBE_CONFIGS
    assert "retention.ms" in describe("topic", name)


# -- transactions and idempotence -----------------------------------------------------------


def test_transactional_producer_needs_write_on_its_transactional_id(acls, granted):
    name = topic(acls, granted)
    txn_id = f"x-{uuid.uuid4().hex[:6]}"
    granted(*allow(T, name, Op.WRITE))
    conf = {"bootstrap.servers": acls.bootstrap_servers, "transactional.id": txn_id}
    producer = Producer(conf)
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(15)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    granted(*allow(X, txn_id, Op.WRITE))
    producer = Producer(conf)
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(name, b"in a transaction")
    producer.commit_transaction(15)


def test_idempotent_producer_needs_write_on_some_topic_or_idempotent_write():
    """InitProducerId without a transactional id (KIP-679), over the wire."""

    async def init_producer_id(bootstrap):
        conn = await connect(bootstrap)
        try:
            answer = await call(
                conn,
                ApiKey.INIT_PRODUCER_ID,
                {"transactional_id": None, "transaction_timeout": 60000},
            )
            return int(answer.error_code)
        finally:
            await conn.close()

    with AclCluster(brokers=1, config=TEST_CONFIG) as cluster:
        assert asyncio.run(init_producer_id(cluster.bootstrap_servers)) == 31
        cluster.grant(allow(T, "any-topic", Op.WRITE))
        assert asyncio.run(init_producer_id(cluster.bootstrap_servers)) == 0


# -- wire-level APIs: ListOffsets, DeleteRecords, OffsetForLeaderEpoch ----------------------


def test_list_offsets_and_delete_records_need_describe_and_delete(acls, granted):
    name = topic(acls, granted)

    async def run():
        conn = await connect(acls.bootstrap_servers)
        try:
            listed = await call(
                conn,
                ApiKey.LIST_OFFSETS,
                {
                    "replica_id": -1,
                    "isolation_level": 0,
                    "topics": [
                        {"name": name, "partitions": [{"partition_index": 0, "timestamp": -1}]}
                    ],
                },
            )
            deleted = await call(
                conn,
                ApiKey.DELETE_RECORDS,
                {
                    "topics": [{"name": name, "partitions": [{"partition_index": 0, "offset": 0}]}],
                    "timeout": 5000,
                },
            )
            return (
                int(listed.topics[0].partitions[0].error_code),
                int(deleted.topics[0].partitions[0].error_code),
            )
        finally:
            await conn.close()

    assert asyncio.run(run()) == (29, 29)
    granted(*allow(T, name, Op.DELETE))  # DELETE implies DESCRIBE
    assert asyncio.run(run()) == (0, 0)


def test_produce_of_transactional_records_needs_the_transactional_id(acls, granted):
    name = topic(acls, granted)
    granted(*allow(T, name, Op.WRITE))

    async def run():
        conn = await connect(acls.bootstrap_servers)
        try:
            answer = await call(
                conn,
                ApiKey.PRODUCE,
                {
                    "transactional_id": "not-mine",
                    "acks": 1,
                    "timeout": 5000,
                    "topic_data": [
                        {
                            "name": name,
                            "partition_data": [
                                {
                                    "index": 0,
                                    "records": batch(
                                        [b"x"],
                                        producer_id=5,
                                        producer_epoch=0,
                                        is_transactional=True,
                                    ),
                                }
                            ],
                        }
                    ],
                },
            )
            return int(answer.responses[0].partition_responses[0].error_code)
        finally:
            await conn.close()

    assert asyncio.run(run()) == 53


# -- the controller's broker RPCs and the coordinator's Envelopes ---------------------------


def test_the_controller_refuses_broker_rpcs_without_cluster_action(tmp_path):
    """An unauthenticated client cannot unregister, fence or impersonate brokers: Kafka's
    ControllerApis needs CLUSTER_ACTION (UnregisterBroker: ALTER) on the cluster."""
    from sparklog.controller.server import ControllerServer

    server = ControllerServer(
        tmp_path / "controller",
        config={"authorizer.class.name": "StandardAuthorizer", "super.users": "User:broker"},
    ).start_in_thread()

    async def run():
        conn = await connect(server.bootstrap)
        try:
            unregister = await call(conn, ApiKey.UNREGISTER_BROKER, {"broker_id": 0}, version=0)
            heartbeat = await call(
                conn,
                ApiKey.BROKER_HEARTBEAT,
                {
                    "broker_id": 0,
                    "broker_epoch": 1,
                    "current_metadata_offset": 0,
                    "want_fence": True,
                    "want_shut_down": True,
                },
                version=0,
            )
            return int(unregister.error_code), int(heartbeat.error_code)
        finally:
            await conn.close()

    async def describe_configs():
        conn = await connect(server.bootstrap)
        try:
            answer = await call(
                conn,
                ApiKey.DESCRIBE_CONFIGS,
                {
                    "resources": [
                        {"resource_type": 2, "resource_name": "t", "configuration_keys": None},
                        {"resource_type": 4, "resource_name": "", "configuration_keys": None},
                    ],
                    "include_synonyms": False,
                    "include_documentation": False,
                },
                version=4,
            )
            return sorted(int(r.error_code) for r in answer.results)
        finally:
            await conn.close()

    try:
        assert asyncio.run(run()) == (31, 31)
        assert asyncio.run(describe_configs()) == [29, 31]
    finally:
        server.stop()


def test_the_coordinator_serves_envelopes_of_brokers_only_under_the_clients_principal(acls):
    """Envelopes need CLUSTER_ACTION (the forwarding broker's); the inner request is checked
    under the principal the Envelope carries, not the broker's."""
    from sparklog.protocol import codec, envelope, kio_build
    from sparklog.protocol.connection import Request

    group = f"g-{uuid.uuid4().hex[:6]}"
    ids = acls.grant([binding(G, group, Op.DESCRIBE, principal="User:alice")])

    async def find_coordinator(principal: bytes) -> tuple[int, int]:
        version = 3
        body = kio_build.build(
            codec.request_schema(ApiKey.FIND_COORDINATOR, version), {"key": group, "key_type": 0}
        )
        inner = Request(int(ApiKey.FIND_COORDINATOR), version, 7, "client", body, 0)
        conn = await connect(acls.coordinator.bootstrap)
        try:
            answer = await conn.request(envelope.wrap(inner, "/127.0.0.1", principal))
            if int(answer.error_code):
                return int(answer.error_code), -1
            found = envelope.decode_inner(inner, bytes(answer.response_data))
            return 0, int(found.error_code)
        finally:
            await conn.close()

    try:
        assert asyncio.run(find_coordinator(b"User:alice")) == (0, 0)
        assert asyncio.run(find_coordinator(b"User:ANONYMOUS")) == (0, 30)
        acls.revoke(acls.base_acl_ids)  # the sender (ANONYMOUS) loses CLUSTER_ACTION
        assert asyncio.run(find_coordinator(b"User:alice")) == (31, -1)
    finally:
        acls.base_acl_ids = acls.grant([binding(C, CLUSTER_NAME, Op.CLUSTER_ACTION)])
        acls.revoke(ids)


def test_markers_need_cluster_action_and_describe_producers_read(acls, granted):
    name = topic(acls, granted)

    async def run():
        conn = await connect(acls.bootstrap_servers)
        try:
            markers = await call(
                conn,
                ApiKey.WRITE_TXN_MARKERS,
                {
                    "markers": [
                        {
                            "producer_id": 9,
                            "producer_epoch": 0,
                            "transaction_result": False,
                            "topics": [{"name": name, "partition_indexes": [0]}],
                            "coordinator_epoch": 0,
                        }
                    ]
                },
            )
            producers = await call(
                conn,
                ApiKey.DESCRIBE_PRODUCERS,
                {"topics": [{"name": name, "partition_indexes": [0]}]},
            )
            return (
                int(markers.markers[0].topics[0].partitions[0].error_code),
                int(producers.topics[0].partitions[0].error_code),
            )
        finally:
            await conn.close()

    acls.revoke(acls.base_acl_ids)  # ANONYMOUS loses CLUSTER_ACTION for this test
    try:
        assert asyncio.run(run()) == (31, 29)
    finally:
        acls.base_acl_ids = acls.grant([binding(C, CLUSTER_NAME, Op.CLUSTER_ACTION)])
    granted(*allow(T, name, Op.READ))
    assert asyncio.run(run())[1] == 0


def test_group_admin_apis_check_the_group(acls, granted):
    """ListGroups filters, DescribeGroups and DeleteGroups refuse with 30 (checked by the
    coordinator under the client's principal the broker's Envelope carries)."""
    from confluent_kafka import TopicPartition

    name = topic(acls, granted)
    group = f"g-{uuid.uuid4().hex[:6]}"
    ids = acls.grant(allow(G, group, Op.READ) + allow(T, name, Op.READ))
    consumer = Consumer({"bootstrap.servers": acls.bootstrap_servers, "group.id": group})
    consumer.commit(offsets=[TopicPartition(name, 0, 0)], asynchronous=False)
    consumer.close()
    admin = AdminClient({"bootstrap.servers": acls.bootstrap_servers})

    def listed():
        return {g.group_id for g in admin.list_consumer_groups().result(15).valid}

    assert group in listed()  # READ implies DESCRIBE
    acls.revoke(ids)
    assert group not in listed()  # left out quietly, as Kafka
    with pytest.raises(KafkaException) as refused:
        admin.describe_consumer_groups([group])[group].result(15)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as refused:
        admin.delete_consumer_groups([group])[group].result(15)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    granted(*allow(G, group, Op.DELETE))
    admin.delete_consumer_groups([group])[group].result(15)


def test_transaction_apis_check_topics_groups_and_transactional_ids(acls, granted):
    """AddPartitionsToTxn: a topic without WRITE is 29, the others OPERATION_NOT_ATTEMPTED
    (55), nothing added; AddOffsetsToTxn needs READ on the group (30); EndTxn WRITE on the
    transactional id (53). Over the wire through a broker, which forwards to the coordinator."""
    writable, other = topic(acls, granted), topic(acls, granted)
    txn_id, group = f"x-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    granted(*allow(X, txn_id, Op.WRITE), *allow(T, writable, Op.WRITE))

    async def run():
        conn = await connect(acls.bootstrap_servers)
        try:
            init = await call(
                conn,
                ApiKey.INIT_PRODUCER_ID,
                {"transactional_id": txn_id, "transaction_timeout": 60_000},
            )
            assert int(init.error_code) == 0, init
            pid, epoch = int(init.producer_id), int(init.producer_epoch)
            added = await call(
                conn,
                ApiKey.ADD_PARTITIONS_TO_TXN,
                {
                    "v3_and_below_transactional_id": txn_id,
                    "v3_and_below_producer_id": pid,
                    "v3_and_below_producer_epoch": epoch,
                    "v3_and_below_topics": [
                        {"name": writable, "partitions": [0]},
                        {"name": other, "partitions": [0]},
                    ],
                },
                version=3,
            )
            offsets = await call(
                conn,
                ApiKey.ADD_OFFSETS_TO_TXN,
                {
                    "transactional_id": txn_id,
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "group_id": group,
                },
            )
            ended = await call(
                conn,
                ApiKey.END_TXN,
                {
                    "transactional_id": "not-mine",
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "committed": False,
                },
            )
            codes = {
                t.name: int(t.results_by_partition[0].partition_error_code)
                for t in added.results_by_topic_v3_and_below
            }
            return codes, int(offsets.error_code), int(ended.error_code)
        finally:
            await conn.close()

    assert asyncio.run(run()) == ({writable: 55, other: 29}, 30, 53)


def test_denials_land_in_the_audit_table_with_the_deciding_node(acls, granted):
    """The authorize stage binds each server's audit sink: a broker's denial (the producer's
    Metadata for the topic) and the coordinator's denial of a forwarded group request reach
    the driver's audit table, each with its node."""
    from tests.integration.test_audit_trail import wait_for_rows

    name = topic(acls, granted)
    group = f"g-{uuid.uuid4().hex[:6]}"
    assert code(produce_one(acls.bootstrap_servers, name)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    consumer = Consumer({"bootstrap.servers": acls.bootstrap_servers, "group.id": group})
    consumer.subscribe([name])
    try:
        for _ in range(20):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error():
                break
    finally:
        consumer.close()
    path = acls.coordinator.audit.path
    produced = wait_for_rows(path, lambda r: r["resource_name"] == name)
    joined = wait_for_rows(path, lambda r: r["resource_name"] == group)
    assert [(r["api"], r["decision"], r["operation"], r["node_id"]) for r in produced[:1]] == [
        ("METADATA", "DENIED", "DESCRIBE", 0)
    ]
    assert ("DENIED", "DESCRIBE", 3001, "127.0.0.1") in {  # its FindCoordinator
        (r["decision"], r["operation"], r["node_id"], r["client_address"]) for r in joined
    }


def test_a_topic_refused_describe_leaks_neither_its_id_nor_its_name(acls, granted):
    name = topic(acls, granted)
    topic_id = acls.brokers[0].metadata.image.topic(name).topic_id

    async def run(**wanted):
        conn = await connect(acls.bootstrap_servers)
        try:
            answer = await call(
                conn,
                ApiKey.METADATA,
                {
                    "topics": [{"name": None, "topic_id": None, **wanted}],
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
                version=12,
            )
            (t,) = answer.topics
            return int(t.error_code), t.name, t.topic_id
        finally:
            await conn.close()

    code_, name_, id_ = asyncio.run(run(name=name))
    assert (code_, name_) == (29, name) and id_ in (None, uuid.UUID(int=0))
    assert asyncio.run(run(topic_id=topic_id)) == (29, None, topic_id)


def test_auto_creation_needs_create_on_the_cluster_or_the_topic(acls, granted):
    name = f"auto-{uuid.uuid4().hex[:8]}"
    granted(*allow(T, name, Op.DESCRIBE))

    async def run():
        conn = await connect(acls.bootstrap_servers)
        try:
            answer = await call(
                conn,
                ApiKey.METADATA,
                {
                    "topics": [{"name": name, "topic_id": None}],
                    "allow_auto_topic_creation": True,
                    "include_topic_authorized_operations": False,
                },
            )
            return int(answer.topics[0].error_code)
        finally:
            await conn.close()

    assert asyncio.run(run()) == 29
    assert acls.brokers[0].metadata.image.topic(name) is None  # not created
    granted(*allow(T, name, Op.CREATE))
    assert asyncio.run(run()) in (0, 5)  # created (LEADER_NOT_AVAILABLE while it elects)
    assert acls.brokers[0].metadata.image.topic(name) is not None


def test_replication_works_under_the_authorizer_and_needs_cluster_action(tmp_path):
    """Followers fetch with CLUSTER_ACTION (the base ACL): an acks=all produce to a topic
    replicated on three brokers completes; a consumer's Fetch posing as a follower
    (replica_id >= 0) without CLUSTER_ACTION is refused."""
    with AclCluster(brokers=3, data_dir=tmp_path, config=TEST_CONFIG) as cluster:
        name = "replicated"
        cluster.grant(allow(C, CLUSTER_NAME, Op.CREATE) + allow(T, name, Op.WRITE, Op.READ))
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([NewTopic(name, 1, 3)])[name].result(15)
        assert produce_one(cluster.bootstrap_servers, name, acks="all") is None
        cluster.revoke(cluster.base_acl_ids)

        async def follower_fetch():
            conn = await connect(cluster.bootstrap_servers)
            try:
                answer = await call(
                    conn,
                    ApiKey.FETCH,
                    {
                        "replica_id": 1,
                        "max_wait": 0,
                        "min_bytes": 0,
                        "max_bytes": 1 << 20,
                        "isolation_level": 0,
                        "session_id": 0,
                        "session_epoch": -1,
                        "topics": [
                            {
                                "topic": name,
                                "partitions": [
                                    {
                                        "partition": 0,
                                        "current_leader_epoch": -1,
                                        "fetch_offset": 0,
                                        "log_start_offset": -1,
                                        "partition_max_bytes": 1 << 16,
                                    }
                                ],
                            }
                        ],
                        "forgotten_topics_data": [],
                        "rack_id": "",
                    },
                    version=12,
                )
                return int(answer.responses[0].partitions[0].error_code)
            finally:
                await conn.close()

        assert asyncio.run(follower_fetch()) == 29


def test_acls_created_and_deleted_with_kafkas_admin_api_take_effect(acls, granted):
    """The whole path: CreateAcls (ALTER on the cluster) through a broker, the controller's
    record, every server's authorizer; DeleteAcls takes the grant back."""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    name = topic(acls, granted)
    admin = AdminClient({"bootstrap.servers": acls.bootstrap_servers})
    write = AclBinding(
        ResourceType.TOPIC,
        name,
        ResourcePatternType.LITERAL,
        "User:ANONYMOUS",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    with pytest.raises(KafkaException) as refused:
        admin.create_acls([write])[write].result(15)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    granted(*allow(C, CLUSTER_NAME, Op.ALTER))
    admin.create_acls([write])[write].result(15)
    acls.wait_for_brokers()
    assert produce_one(acls.bootstrap_servers, name) is None
    matching = AclBindingFilter(
        ResourceType.TOPIC,
        name,
        ResourcePatternType.LITERAL,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    admin.delete_acls([matching])[matching].result(15)
    acls.wait_for_brokers()
    assert code(produce_one(acls.bootstrap_servers, name)) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_mtls_principals_are_authorized_by_their_acls_and_super_users(tmp_path, tls_ca):
    """Real principals: clients' certificates map to User:alice, User:bob and User:admin
    (ssl.principal.mapping.rules on an SSL listener); alice's ACLs let her produce, bob has
    none, admin is a super user of the brokers."""
    from tests.support.tls_cluster import RULES

    class MtlsAclCluster(AclCluster):
        checked_super_users = "User:admin"

    config = {
        **TEST_CONFIG,
        "listeners": "SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        **tls_ca.server_props(client_auth="required"),
        "ssl.principal.mapping.rules": RULES,
    }
    with MtlsAclCluster(brokers=1, data_dir=tmp_path, config=config) as cluster:
        name = "alices"
        cluster.grant([binding(T, name, Op.WRITE, principal="User:alice")])
        bootstrap = cluster.brokers[0].bootstrap_of("SSL")

        def conf(user):
            return tls_ca.librdkafka_props(tls_ca.client(user))

        admin = AdminClient({"bootstrap.servers": bootstrap, **conf("admin")})
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)  # super user: no ACL
        assert produce_one(bootstrap, name, **conf("alice")) is None
        assert (
            code(produce_one(bootstrap, name, **conf("bob")))
            == KafkaError.TOPIC_AUTHORIZATION_FAILED
        )
        assert produce_one(bootstrap, name, **conf("admin")) is None
