"""The metadata log's durable store, on an object store (obstore's in-memory store here; S3Proxy
in tests/integration/test_shared_state_s3.py) and in a shared directory: a driver on an empty
local dir rebuilds the log and the image from the objects, two controllers can never both write
one offset, and damage is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
from obstore.store import MemoryStore

from sparklog.controller.cluster_id import load_or_format_cluster_id
from sparklog.controller.metadata_log import MetadataLog
from sparklog.controller.metadata_store import (
    LocalMetadataStore,
    MetadataLogFencedError,
    ObjectMetadataStore,
    open_metadata_store,
)
from sparklog.metadata.image import MetadataImage
from sparklog.metadata.log_records import MetadataRecordError
from sparklog.storage.object_store import (
    StorageLocationError,
    is_object_store_uri,
    join_location,
    redact,
    storage_options,
)

from .test_metadata_log import Durable, populate

URI = "s3://bucket/cluster"


class OnObjects(Durable):
    """`Durable` whose metadata log is durable in `objects` (an obstore store, or a Path: a
    shared directory), its working copy in `cache`."""

    def __init__(self, objects, cache, *, snapshot_records=1000, now_ms=0):
        if isinstance(objects, Path):
            self.store = LocalMetadataStore(objects)
        else:
            self.store = ObjectMetadataStore(URI, {}, store=objects)
        self.directory = cache
        self.now_ms = now_ms
        self.log, image = MetadataLog.open(
            self.store, now_ms=now_ms, snapshot_records=snapshot_records, cache_dir=cache
        )
        from sparklog.controller.quorum_controller import QuorumController
        from sparklog.metadata.configs import ControllerConfig

        from .harness import CLUSTER_ID

        self.controller = QuorumController(ControllerConfig(), CLUSTER_ID, image)


@pytest.fixture(params=["object-store", "shared-dir"])
def new_objects(request, tmp_path):
    """Makes an empty durable store: obstore's in-memory one, or a directory (a shared
    filesystem's mount: the controllers' caches are elsewhere)."""
    if request.param == "object-store":
        return MemoryStore
    return lambda: tmp_path / "shared"


def _keys(objects, prefix=""):
    import obstore

    if isinstance(objects, Path):
        return sorted(
            str(p.relative_to(objects))
            for p in objects.rglob("*")
            if p.is_file()
            and str(p.relative_to(objects)).startswith(prefix)
            and not p.name.startswith(".")
            and ".tmp" not in p.parts
        )
    return sorted(m["path"] for page in obstore.list(objects, prefix) for m in page)


@pytest.mark.parametrize("snapshot_records", [1000, 3, 1])
def test_a_driver_on_another_host_rebuilds_the_log_and_image(
    tmp_path, new_objects, snapshot_records
):
    objects = new_objects()
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


def test_a_stale_controller_is_fenced_and_the_log_never_forks(tmp_path, new_objects):
    objects = new_objects()
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


def test_a_starting_controller_claims_the_log_even_while_the_zombie_writes(tmp_path, new_objects):
    """The successor's LeaderChange goes after whatever the zombie wrote since the successor
    read the log (both are in its image); from then on the zombie's writes lose."""
    from sparklog.metadata.log_records import LEADER_CHANGE

    objects = new_objects()
    zombie = OnObjects(objects, tmp_path / "a")
    zombie.register(0)
    successor = OnObjects(objects, tmp_path / "b")  # read offsets [0, 1)
    zombie.register(1)  # offset 1, after the successor read the log
    zombie.register(2)
    claim = successor.controller.claim_leadership(3000, "inc-b", "host-b", 42, 0)
    assert successor.log.claim(lambda: claim.records, 0, successor.image) == claim.records
    successor.controller.replay(claim.records)
    assert sorted(successor.image.brokers) == [0, 1, 2] and successor.image.offset == 4
    with pytest.raises(MetadataLogFencedError, match="host host-b .pid 42, incarnation inc-b"):
        zombie.register(3)
    successor.register(4)
    final = OnObjects(objects, tmp_path / "c")
    assert sorted(final.image.brokers) == [0, 1, 2, 4]
    records = [r for _, r in _records(final.log)]
    assert [r["type"] for r in records].count(LEADER_CHANGE) == 1
    for d in (zombie, successor, final):
        d.close()


def _records(log_):
    import json

    from sparklog.records import iter_batches

    for batch in iter_batches(log_.read(0, 1 << 24).records):
        for record in batch.records():
            yield record.offset, json.loads(record.value)


def test_a_retried_put_that_landed_is_not_a_fence(tmp_path, new_objects):
    objects = new_objects()
    d = OnObjects(objects, tmp_path / "a")
    d.register(0)
    d.store.objects.create = _landed_then_retried(d.store.objects.create)
    d.register(1)
    assert OnObjects(objects, tmp_path / "b").image.broker(1) is not None


def _landed_then_retried(create):
    def twice(key, data):
        assert create(key, data)  # the first attempt lands, its answer is lost
        return create(key, data)  # the retry (an NFS retransmission) answers "exists"

    return twice


@pytest.mark.parametrize("cache", ["same-dir", "elsewhere"])
def test_a_directory_of_the_old_layout_is_adopted(tmp_path, cache):
    """A data dir written before batch objects existed: its Log was the durable copy and
    metadata.snapshot.json its snapshot. The first start keeps every record."""
    import json
    import shutil

    source = Durable(tmp_path / "source", snapshot_records=4)
    populate(source)
    live = MetadataImage.from_dict(source.image.to_dict())
    snapshot = json.loads(sorted((tmp_path / "source" / "snapshots").iterdir())[-1].read_text())
    source.close()
    old = tmp_path / "old"
    (old / "__cluster_metadata-0").mkdir(parents=True)
    for path in (tmp_path / "source" / "__cluster_metadata-0").iterdir():
        if path.is_file():  # the working log is in the old layout's format
            shutil.copy(path, old / "__cluster_metadata-0" / path.name)
    (old / "metadata.snapshot.json").write_text(json.dumps(snapshot))
    cache_dir = old if cache == "same-dir" else tmp_path / "cache"
    again = OnObjects(old, cache_dir)
    assert again.image == live
    assert [k.split("/")[-1] for k in _keys(old, "__cluster_metadata-0/segments")] == [
        f"{0:020d}-{live.offset:020d}"
    ]
    again.register(7)
    again.close()
    assert OnObjects(old, tmp_path / "third").image.broker(7) is not None


def test_a_directory_write_is_an_fsynced_file_linked_into_place(tmp_path, monkeypatch):
    """What makes a shared-directory write durable and exclusive: the data is fsynced before
    its name appears (link), the name's directory after; an existing name is never replaced."""
    import os

    from sparklog.storage.object_store import DirectoryObjects

    calls = []
    real_fsync, real_link = os.fsync, os.link
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append("fsync") or real_fsync(fd))
    monkeypatch.setattr(os, "link", lambda a, b: calls.append("link") or real_link(a, b))
    objects = DirectoryObjects(tmp_path)
    assert objects.create("a/b", b"one")
    calls.clear()
    assert objects.create("a/c", b"two")
    assert calls == ["fsync", "link", "fsync"]
    assert not objects.create("a/c", b"three") and objects.get("a/c") == b"two"
    assert objects.list("a/") == ["a/b", "a/c"] and objects.list("a/", "a/b") == ["a/c"]
    assert not list((tmp_path / ".tmp").iterdir())  # no temporary file left behind


def test_a_missing_batch_object_is_refused_by_name(tmp_path, new_objects):
    objects = new_objects()
    d = OnObjects(objects, tmp_path / "a")
    populate(d)
    d.close()
    batches = _keys(objects, "__cluster_metadata-0/batches")
    d.store.objects.delete(batches[1])
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
    secrets = {"AWS_SECRET_ACCESS_KEY": "abcd1234", "AWS_ENDPOINT_URL": "http://host:9000"}
    assert redact("signed with abcd1234 for http://host:9000", secrets) == (
        "signed with [hidden] for http://host:9000"
    )
