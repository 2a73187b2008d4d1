"""Fixtures every test tier may use."""

from __future__ import annotations

import pytest

from tests.support.certs import TestCA


@pytest.fixture(scope="session")
def tls_ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    """One trustme certificate authority per test session (tests/support/certs.py)."""
    return TestCA(tmp_path_factory.mktemp("tls"))
