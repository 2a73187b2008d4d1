"""DescribeCluster sent to Apache Kafka and to sparklog: the same error codes.

A broker asked for controller endpoints (KIP-919's endpoint_type 2) answers
MISMATCHED_ENDPOINT_TYPE (114) and for an unknown type UNSUPPORTED_ENDPOINT_TYPE (115), as
Kafka's `KafkaApis.handleDescribeCluster` does; sparklog once sent a raw 119
(INVALID_REGISTRATION) for both.
"""

from __future__ import annotations

import pytest

from sparklog.protocol.api_versions import ApiKey

from .wire import NAMES, Pair, run

pytestmark = pytest.mark.oracle


def describe_cluster(brokers, endpoint_type: int) -> dict:
    async def go():
        async with Pair(brokers) as pair:
            return await pair.ask(
                ApiKey.DESCRIBE_CLUSTER,
                {"include_cluster_authorized_operations": False, "endpoint_type": endpoint_type},
                version=1,  # v1 (KIP-919) is the first with endpoint_type
            )

    return run(go())


@pytest.mark.parametrize("endpoint_type", [1, 2, 0, 3])
def test_describe_cluster_endpoint_types(brokers, endpoint_type):
    answers = describe_cluster(brokers, endpoint_type)
    kafka, ours = (
        {
            "error_code": answers[n]["error_code"],
            "endpoint_type": answers[n]["endpoint_type"],
            "lists_brokers": bool(answers[n]["brokers"]),
        }
        for n in NAMES
    )
    assert ours == kafka, f"sparklog {ours} != Kafka {kafka}"
