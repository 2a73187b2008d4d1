"""The driver's state on a real S3-compatible server (S3Proxy): the store's conditional put is
atomic under racing writers (what the metadata log's fencing and delta-rs's commits rest on),
the offsets table fences a zombie coordinator there as on a disk, and maintenance works."""

from __future__ import annotations

import logging
import threading
import uuid

import pytest
from deltalake import DeltaTable

from sparklog.controller.metadata_store import ObjectMetadataStore
from sparklog.coordinator.offsets_store import OffsetsStore, OffsetsStoreFencedError
from sparklog.coordinator.server import GroupCoordinatorServer
from sparklog.storage.object_store import StorageLocationError
from tests.s3proxy import SECRET_KEY

from .test_offsets_store import rows


@pytest.fixture
def location(s3proxy):
    bucket = s3proxy.create_bucket(f"state-{uuid.uuid4().hex[:8]}")
    return f"s3://{bucket}/cluster"


def test_racing_conditional_puts_have_exactly_one_winner(s3proxy, location):
    stores = [ObjectMetadataStore(location, s3proxy.storage_options()) for _ in range(2)]
    for round_ in range(20):
        key = f"__cluster_metadata-0/batches/{round_:020d}"
        start = threading.Barrier(2)
        won: list[bool] = [False, False]

        def write(i: int, key: str, start: threading.Barrier, won: list[bool]) -> None:
            start.wait()
            won[i] = stores[i]._put_if_absent(key, b"writer %d" % i)

        threads = [threading.Thread(target=write, args=(i, key, start, won)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert won.count(True) == 1, f"round {round_}: {won}"
        assert stores[0]._get(key) == b"writer %d" % won.index(True)


def test_the_offsets_table_on_s3_fences_a_zombie_coordinator(s3proxy, location):
    path = f"{location}/__consumer_offsets"
    options = s3proxy.storage_options()
    first = OffsetsStore(path, storage_options=options, maintenance_commits=3)
    first.append(rows(2))
    second = OffsetsStore(path, storage_options=options)  # the driver restarted elsewhere
    second.append(rows(2, start=10))
    with pytest.raises(OffsetsStoreFencedError, match="another group coordinator"):
        first.append(rows(1, start=99))
    for i in range(3):  # maintenance (compaction, checkpoint, vacuum) on the object store
        second.append(rows(1, start=20 + i))
    second.wait_for_maintenance()
    reread = OffsetsStore(path, storage_options=options)
    assert [r["committed_offset"] for r in reread.read_rows()] == [0, 1, 10, 11, 20, 21, 22]
    assert DeltaTable(path, storage_options=options).version() >= 5


def test_unsafe_renames_are_refused_with_the_reason(tmp_path):
    settings = {
        "offsets.table.path": "s3://bucket/offsets",
        "storage.options.AWS_S3_ALLOW_UNSAFE_RENAME": "true",
    }
    with pytest.raises(StorageLocationError, match="If-None-Match"):
        GroupCoordinatorServer(tmp_path, controller=None, config=settings)


def test_a_missing_bucket_is_named_with_the_fix(s3proxy, tmp_path):
    from sparklog.controller.server import ControllerServer

    settings = {"metadata.log.dir": "s3://no-such-bucket/cluster", **s3proxy.settings()}
    with pytest.raises(StorageLocationError, match="no-such-bucket.*bucket exists") as refused:
        ControllerServer(tmp_path, config=settings)
    assert SECRET_KEY not in str(refused.value)


def test_storage_credentials_stay_on_the_driver(s3proxy, location, tmp_path, caplog):
    """storage.options.* (object-store secrets) reach the controller and the coordinator only:
    not the brokers' settings, not DescribeConfigs, not a log line."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    from sparklog.cluster.embedded import EmbeddedCluster

    caplog.set_level(logging.DEBUG, logger="sparklog")
    config = {"metadata.log.dir": location, **s3proxy.settings()}
    with EmbeddedCluster(brokers=1, data_dir=tmp_path, config=config) as cluster:
        (broker,) = cluster.brokers
        assert not [k for k in broker.config.originals if k.startswith("storage.options.")]
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        resource = ConfigResource("broker", "0")
        entries = admin.describe_configs([resource])[resource].result(30)
        assert entries and not [
            e.name
            for e in entries.values()
            if e.name.startswith("storage.options") or SECRET_KEY in (e.value or "")
        ]
    assert SECRET_KEY not in caplog.text
