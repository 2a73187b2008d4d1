"""`sparklog.start(spark, config={"sparklog.add.scram": ...})`: the first SCRAM users of a
cluster whose brokers are Spark tasks (the EmbeddedCluster variant is
tests/integration/test_security_metadata.py)."""

from __future__ import annotations

import pytest

import sparklog
from sparklog.client import AdminClient
from sparklog.security.credentials import ScramMechanism

pytestmark = pytest.mark.slow


def test_sparklog_start_creates_the_first_users(spark, tmp_path):
    cluster = sparklog.start(
        spark,
        brokers=1,
        data_dir=tmp_path,
        config={"sparklog.add.scram": "SCRAM-SHA-512=[name=admin,password=admin-secret]"},
    )
    try:
        with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            users = admin.describe_user_scram_credentials()
        assert users == {"admin": {ScramMechanism.SCRAM_SHA_512: 4096}}
    finally:
        cluster.stop()
