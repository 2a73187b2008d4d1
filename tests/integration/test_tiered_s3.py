"""The tier on a real S3-compatible server (S3Proxy, filesystem backend; tests/s3proxy.py):
Kafka's offload-and-consume case with the table under `s3://`, and an object store that stops
answering (the server paused with SIGSTOP, so requests time out rather than being refused):
uploads back off, local retention deletes nothing that was not uploaded, and once the store
answers again the uploads resume and the verifier finds the table equal to the log.

The brokers reach the store with the driver's `storage.options.*` settings when the cluster
hands them over, and through the AWS_* environment (what delta-rs reads) either way: the
embedded brokers run in this process.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from tests.s3proxy import S3Proxy, java_available
from tests.support.tier_cluster import Tier, consume_values, produce, tier_settings

from .conftest import TEST_CONFIG

pytestmark = pytest.mark.slow

ON_BROKER_0 = {0: [0]}


def _values(n: int, start: int = 0) -> list[bytes]:
    return [b"v%d" % i for i in range(start, start + n)]


def _tier_on(proxy: S3Proxy, tmp_path, monkeypatch, extra: dict[str, str] | None = None):
    bucket = proxy.create_bucket(f"tier-{uuid.uuid4().hex[:8]}")
    options = {**proxy.storage_options(), **(extra or {})}
    for key, value in options.items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    settings = {**TEST_CONFIG, **{f"storage.options.{k}": v for k, v in options.items()}}
    root = f"s3://{bucket}/tables"
    cluster = EmbeddedCluster(
        brokers=1, data_dir=tmp_path / "cluster", config=tier_settings(root, settings)
    )
    return cluster, root, options


def test_offload_and_consume_from_the_leader_on_s3(s3proxy, tmp_path, monkeypatch):
    cluster, root, options = _tier_on(s3proxy, tmp_path, monkeypatch)
    with cluster:
        tier = Tier(cluster, root, options)
        try:
            topic = tier.create_topic(assignment=ON_BROKER_0)
            assert produce(tier.bootstrap, topic, _values(4)) == [0, 1, 2, 3]
            tier.wait_tiered(topic, {0: 3})
            assert consume_values(tier.bootstrap, topic, 0, 0, 4) == list(enumerate(_values(4)))
            tier.verify(topic)
        finally:
            tier.close()


@pytest.fixture
def own_proxy(tmp_path):
    """An S3Proxy of this test's own: pausing the session's would stall the other tests."""
    if not java_available():
        pytest.skip("java is not installed: S3Proxy needs a JDK >= 17")
    with S3Proxy(tmp_path / "s3proxy") as proxy:
        yield proxy
        os.kill(proxy._proc.pid, signal.SIGCONT)  # never leave it stopped


def test_an_object_store_that_times_out(own_proxy, tmp_path, monkeypatch):
    # a short client timeout, so a copy attempt against the paused store ends in seconds
    cluster, root, options = _tier_on(own_proxy, tmp_path, monkeypatch, {"timeout": "2s"})
    with cluster:
        tier = Tier(cluster, root, options)
        try:
            topic = tier.create_topic(assignment=ON_BROKER_0)
            produce(tier.bootstrap, topic, _values(3))
            tier.wait_tiered(topic, {0: 3})  # all three: local retention rolls the active one too
            copied_end = tier.table_ranges(topic)[0][1]
            os.kill(own_proxy._proc.pid, signal.SIGSTOP)
            try:
                produce(tier.bootstrap, topic, _values(5, start=3))  # 5 more one-batch segments
                # the copy task tries (and times out) several times meanwhile; retention runs
                # every 100 ms: nothing past the copied end may leave the disk
                time.sleep(6.0)
                assert min(tier.local_segments(topic, 0)) <= copied_end
                got = consume_values(tier.bootstrap, topic, 0, copied_end, 8 - copied_end)
                assert [o for o, _ in got] == list(range(copied_end, 8))
            finally:
                os.kill(own_proxy._proc.pid, signal.SIGCONT)
            tier.wait_tiered(topic, {0: 7}, timeout_s=90)
            tier.verify(topic)
        finally:
            tier.close()
