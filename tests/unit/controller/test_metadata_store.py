"""The metadata log on an object store (obstore's in-memory store here; S3Proxy in
tests/integration/test_shared_state_s3.py): a driver on an empty local dir rebuilds the log and
the image from the objects, two controllers can never both write one offset, and damage is
refused by name."""

from __future__ import annotations

import pytest
from obstore.store import MemoryStore

from sparklog.controller.image import MetadataImage, MetadataRecordError
from sparklog.controller.metadata_log import MetadataLog
from sparklog.controller.metadata_store import (
    LocalMetadataStore,
    MetadataLogFencedError,
    ObjectMetadataStore,
    open_metadata_store,
)
from sparklog.controller.server import load_or_format_cluster_id
from sparklog.storage.object_store import (
    StorageLocationError,
    is_object_store_uri,
    join_location,
    storage_options,
)

from .test_metadata_log import Durable, populate

URI = "s3://bucket/cluster"


class OnObjects(Durable):
    """`Durable` whose metadata log is durable in `objects`, its working copy in `cache`."""

    def __init__(self, objects, cache, *, snapshot_records=1000, now_ms=0):
        self.store = ObjectMetadataStore(URI, {}, store=objects)
        self.directory = cache
        self.now_ms = now_ms
        self.log, image = MetadataLog.open(
            self.store, now_ms=now_ms, snapshot_records=snapshot_records, cache_dir=cache
        )
        from sparklog.controller.configs import ControllerConfig
        from sparklog.controller.quorum_controller import QuorumController

        from .harness import CLUSTER_ID

        self.controller = QuorumController(ControllerConfig(), CLUSTER_ID, image)


def _keys(objects, prefix=""):
    import obstore

    return sorted(m["path"] for page in obstore.list(objects, prefix) for m in page)


@pytest.mark.parametrize("snapshot_records", [1000, 3, 1])
def test_a_driver_on_another_host_rebuilds_the_log_and_image(tmp_path, snapshot_records):
    objects = MemoryStore()
    first = OnObjects(objects, tmp_path / "host-a", snapshot_records=snapshot_records)
    populate(first)
    live = MetadataImage.from_dict(first.image.to_dict())
    end = first.log.end_offset
    first.close()  # no shutdown snapshot: a lost host writes none
    again = OnObjects(objects, tmp_path / "host-b")
    assert again.image == live
    assert again.log.start_offset == 0 and again.log.end_offset == end  # brokers read from 0
    assert again.log.read(0, 1 << 20).records == first.log.read(0, 1 << 20).records
    again.register(7)  # and writing continues where the first driver stopped
    again.close()
    keys = _keys(objects)
    assert ("__cluster_metadata-0/segments/" in "".join(keys)) == (snapshot_records < 1000)


def test_a_stale_controller_is_fenced_and_the_log_never_forks(tmp_path):
    objects = MemoryStore()
    zombie = OnObjects(objects, tmp_path / "a")
    zombie.register(0)
    successor = OnObjects(objects, tmp_path / "b")  # loads offset 1; the zombie runs on
    successor.register(1)
    with pytest.raises(MetadataLogFencedError, match="already holds offset 1"):
        zombie.register(2)
    with pytest.raises(MetadataLogFencedError):  # and it stays fenced
        zombie.register(3)
    successor.register(4)
    final = OnObjects(objects, tmp_path / "c")
    assert sorted(final.image.brokers) == [0, 1, 4]
    for d in (zombie, successor, final):
        d.close()


def test_a_retried_put_that_landed_is_not_a_fence(tmp_path):
    objects = MemoryStore()
    d = OnObjects(objects, tmp_path / "a")
    d.register(0)
    d.store._put_if_absent = _landed_then_retried(d.store._put_if_absent)
    d.register(1)
    assert OnObjects(objects, tmp_path / "b").image.broker(1) is not None


def _landed_then_retried(put):
    def twice(key, data):
        assert put(key, data)  # the first attempt lands, its answer is lost
        return put(key, data)  # the retry finds its own bytes

    return twice


def test_a_missing_batch_object_is_refused_by_name(tmp_path):
    import obstore

    objects = MemoryStore()
    d = OnObjects(objects, tmp_path / "a")
    populate(d)
    d.close()
    batches = _keys(objects, "__cluster_metadata-0/batches")
    obstore.delete(objects, batches[1])
    with pytest.raises(MetadataRecordError, match="objects are missing"):
        OnObjects(objects, tmp_path / "b")


def test_the_cluster_id_lives_with_the_log_and_the_first_formatter_wins(tmp_path):
    objects = MemoryStore()
    store = ObjectMetadataStore(URI, {}, store=objects)
    first = load_or_format_cluster_id(store)
    assert load_or_format_cluster_id(ObjectMetadataStore(URI, {}, store=objects)) == first
    with pytest.raises(ValueError, match="belongs to cluster"):
        load_or_format_cluster_id(store, "another-cluster-id")
    local = LocalMetadataStore(tmp_path)
    assert load_or_format_cluster_id(local, "abc") == "abc" == load_or_format_cluster_id(tmp_path)


def test_locations_and_storage_options():
    assert is_object_store_uri("s3://b/p") and is_object_store_uri("gs://b")
    assert not is_object_store_uri("/mnt/shared") and not is_object_store_uri("file:///mnt/x")
    assert isinstance(open_metadata_store("file:///tmp/x"), LocalMetadataStore)
    assert join_location("s3://b/p/", "__consumer_offsets") == "s3://b/p/__consumer_offsets"
    settings = {"storage.options.AWS_REGION": "eu-west-1", "storage.options.": "x", "a": "b"}
    assert storage_options(settings) == {"AWS_REGION": "eu-west-1"}
    with pytest.raises(StorageLocationError, match="conditional"):
        storage_options({"storage.options.AWS_S3_ALLOW_UNSAFE_RENAME": "true"})
    with pytest.raises(StorageLocationError, match="storage.options"):
        open_metadata_store("s3://bucket/p", {"AWS_NOT_AN_OPTION": "1"})
