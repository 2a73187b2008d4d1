"""Fixtures every test tier may use."""

from __future__ import annotations

import pytest

from tests.support.certs import TestCA


@pytest.fixture(scope="session")
def tls_ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    """One trustme certificate authority per test session (tests/support/certs.py)."""
    return TestCA(tmp_path_factory.mktemp("tls"))


# Apache Kafka and sparklog secured the same way (SASL_SSL, mTLS, ACLs), one of each per
# session, started by the first test that asks (tests/support/secure_clusters.py).
from tests.support.secure_clusters import secure_kafka, secure_sparklog  # noqa: E402, F401
