"""The security interop tests' parameters: `target` (Apache Kafka, then sparklog, both secured
the same way: tests/support/secure_clusters.py) and `auth` (SCRAM-SHA-512 over SASL_SSL, or
mTLS). Every cell runs against both clusters and must pass on both."""

from __future__ import annotations

import pytest

from tests.support.secure_clusters import AUTHS, SecureTarget


@pytest.fixture(scope="session", params=["kafka", "sparklog"])
def target(request) -> SecureTarget:
    """Each secured cluster in turn (Apache Kafka first)."""
    return request.getfixturevalue(f"secure_{request.param}")


@pytest.fixture(params=AUTHS)
def auth(request, target: SecureTarget) -> str:
    """SASL_SSL with SCRAM-SHA-512 as alice, or mTLS with alice's certificate (failing at once
    when that login did not work at start)."""
    target.require(request.param)
    return request.param
