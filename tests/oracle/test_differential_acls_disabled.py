"""CreateAcls / DescribeAcls / DeleteAcls with no `authorizer.class.name`, sent to Apache Kafka
and to sparklog: Kafka's `AclApis` answers SECURITY_DISABLED (54) with its messages (in every
creation and filter result for CreateAcls and DeleteAcls, at the top for DescribeAcls), and so
do sparklog's broker and controller. Both oracle clusters of `conftest.py` run without an
authorizer.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from sparklog.protocol import codec, kio_build
from sparklog.protocol.api_versions import BROKER_APIS, ApiKey
from sparklog.protocol.async_client import AsyncKafkaConnection
from tests.integration.broker_wire import host_port

from .test_differential_acls import ALTER, CLUSTER, GROUP, PREFIXED, acl_filter, creation
from .wire import Pair, plain, run

pytestmark = pytest.mark.oracle

SECURITY_DISABLED = 54


def _answers(answer: dict, api_key: ApiKey) -> object:
    if api_key == ApiKey.CREATE_ACLS:
        return [(r["error_code"], r["error_message"]) for r in answer["results"]]
    if api_key == ApiKey.DELETE_ACLS:
        return [
            (f["error_code"], f["error_message"], f["matching_acls"])
            for f in answer["filter_results"]
        ]
    return answer["error_code"], answer["error_message"], answer["resources"]


def _requests() -> list[tuple[ApiKey, dict]]:
    name = f"off-{uuid.uuid4().hex[:8]}"
    return [
        (ApiKey.CREATE_ACLS, {"creations": [creation(name)]}),
        # an invalid binding among them: still SECURITY_DISABLED for each, not its own error
        (ApiKey.CREATE_ACLS, {"creations": [creation(name, rt=GROUP), creation("x", rt=CLUSTER)]}),
        (ApiKey.CREATE_ACLS, {"creations": [creation("kafka-cluster", rt=CLUSTER, op=ALTER)]}),
        (ApiKey.DESCRIBE_ACLS, acl_filter()),
        (ApiKey.DESCRIBE_ACLS, acl_filter(name=name, pt=PREFIXED)),
        (ApiKey.DELETE_ACLS, {"filters": [acl_filter(), acl_filter(name=name)]}),
        (ApiKey.DELETE_ACLS, {"filters": []}),
    ]


def test_acl_apis_without_an_authorizer_answer_security_disabled_like_kafka(brokers):
    async def go() -> None:
        async with Pair(brokers) as pair:
            for api_key, data in _requests():
                answers = await pair.ask(api_key, data)
                kafka, ours = (_answers(answers[n], api_key) for n in ("kafka", "sparklog"))
                assert ours == kafka, f"{api_key.name}: sparklog {ours} != Kafka {kafka}"
            describe = await pair.ask(ApiKey.DESCRIBE_ACLS, acl_filter())
            assert describe["kafka"]["error_code"] == SECURITY_DISABLED

    run(go())


def test_the_controller_answers_security_disabled_as_kafka_does(brokers, sparklog_cluster):
    """The same requests sent straight to sparklog's controller (Kafka's `ControllerApis` has
    an `AclApis` of its own), compared with Kafka's broker's answers."""

    async def go() -> None:
        host, port = host_port(brokers["kafka"])
        kafka = await AsyncKafkaConnection(host, port, client_id="oracle").connect()
        controller = await AsyncKafkaConnection(
            "127.0.0.1", sparklog_cluster.controller.port, client_id="oracle"
        ).connect()
        try:
            for api_key, data in _requests():
                version = min(
                    c.version_for(api_key, BROKER_APIS[api_key]) for c in (kafka, controller)
                )
                body = kio_build.build(codec.request_schema(api_key, version), data)
                theirs, ours = await asyncio.gather(kafka.request(body), controller.request(body))
                expected = _answers(plain(theirs), api_key)
                assert _answers(plain(ours), api_key) == expected, api_key.name
        finally:
            await kafka.close()
            await controller.close()

    run(go())
