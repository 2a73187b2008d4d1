"""Embedded clusters on loopback for integration tests (module-scoped: one per test file)."""

from __future__ import annotations

import os

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from tests.s3proxy import s3proxy  # noqa: F401 - the session's S3-compatible server fixture

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

#: Short background intervals so retention, flushes and leases happen within a test.
TEST_CONFIG = {
    "log.retention.check.interval.ms": "100",
    "log.flush.offset.checkpoint.interval.ms": "200",
    "log.flush.start.offset.checkpoint.interval.ms": "200",
    "log.cleaner.backoff.ms": "100",
    "broker.heartbeat.interval.ms": "100",
    "broker.session.timeout.ms": "1500",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
}

#: Replication tests: followers that stop fetching leave the ISR within a second.
REPLICATION_CONFIG = {**TEST_CONFIG, "replica.lag.time.max.ms": "1000"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A controller and one broker."""
    with EmbeddedCluster(
        brokers=1, data_dir=tmp_path_factory.mktemp("cluster"), config=TEST_CONFIG
    ) as running:
        yield running


@pytest.fixture
def replicated_cluster(tmp_path):
    """A controller and three brokers for one test that may kill and restart them."""
    with EmbeddedCluster(brokers=3, data_dir=tmp_path, config=REPLICATION_CONFIG) as running:
        yield running


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory):
    """A controller and three brokers."""
    with EmbeddedCluster(
        brokers=3, data_dir=tmp_path_factory.mktemp("cluster3"), config=TEST_CONFIG
    ) as running:
        yield running
