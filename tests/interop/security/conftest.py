"""The security interop tests' parameters: `target` (Apache Kafka, then sparklog, both secured
the same way: tests/support/secure_clusters.py) and `auth` (SCRAM-SHA-512 over SASL_SSL, or
mTLS)."""

from __future__ import annotations

import pytest

from tests.support.secure_clusters import AUTHS, SPARKLOG_PENDING, SecureTarget


@pytest.fixture(scope="session", params=["kafka", pytest.param("sparklog", marks=SPARKLOG_PENDING)])
def target(request) -> SecureTarget:
    """Each secured cluster in turn (Apache Kafka first)."""
    return request.getfixturevalue(f"secure_{request.param}")


@pytest.fixture(params=AUTHS)
def auth(request) -> str:
    """SASL_SSL with SCRAM-SHA-512 as alice, or mTLS with alice's certificate."""
    return request.param
