"""Broker identity on disk: meta.properties, the data dir lock, adopting an identity (D6)."""

from __future__ import annotations

import uuid

import pytest

from sparklog.broker.meta_properties import (
    DataDirError,
    DataDirLock,
    claim_data_dir,
    kafka_uuid_string,
    parse_kafka_uuid,
    read_meta_properties,
    resolve_data_dir,
)


def test_claim_writes_identity_and_locks(tmp_path):
    meta, lock = claim_data_dir(tmp_path / "d", "cluster-a", 3)
    try:
        stored = read_meta_properties(tmp_path / "d")
        assert stored == meta
        assert (stored.cluster_id, stored.node_id, stored.version) == ("cluster-a", 3, 1)
        text = (tmp_path / "d" / "meta.properties").read_text()
        assert "cluster.id=cluster-a" in text and "node.id=3" in text and "directory.id=" in text
        with pytest.raises(DataDirError, match="in use"):
            claim_data_dir(tmp_path / "d", "cluster-a", 3)
    finally:
        lock.release()
    meta2, lock2 = claim_data_dir(tmp_path / "d", "cluster-a", 3)
    lock2.release()
    assert meta2 == meta  # the same identity, directory id included


def test_foreign_cluster_and_other_node_are_refused(tmp_path):
    _meta, lock = claim_data_dir(tmp_path / "d", "cluster-a", 1)
    lock.release()
    with pytest.raises(DataDirError, match="belongs to cluster 'cluster-a'"):
        claim_data_dir(tmp_path / "d", "cluster-b", 1)
    with pytest.raises(DataDirError, match="holds node id 1"):
        claim_data_dir(tmp_path / "d", "cluster-a", 2)
    lock = DataDirLock(tmp_path / "d")
    assert lock.try_acquire(), "a refused claim must not keep the lock"
    lock.release()


def test_resolve_adopts_an_unclaimed_identity_of_this_cluster(tmp_path):
    _m, lock = claim_data_dir(tmp_path / "broker-7", "c", 7)
    lock.release()
    _m, foreign = claim_data_dir(tmp_path / "broker-1", "other", 1)
    foreign.release()
    data_dir, meta, held = resolve_data_dir(tmp_path, "c", 42)
    try:
        assert (data_dir.name, meta.node_id) == ("broker-7", 7)
        # broker-7 is now held: the next broker takes its launch id
        data_dir2, meta2, held2 = resolve_data_dir(tmp_path, "c", 42)
        held2.release()
        assert (data_dir2.name, meta2.node_id) == ("broker-42", 42)
    finally:
        held.release()


def test_kafka_uuid_strings_round_trip():
    value = uuid.uuid4()
    text = kafka_uuid_string(value)
    assert len(text) == 22 and "=" not in text
    assert parse_kafka_uuid(text) == value


def test_malformed_meta_properties_names_the_file(tmp_path):
    (tmp_path / "meta.properties").write_text("cluster.id=x\n")
    with pytest.raises(DataDirError, match="meta.properties is malformed"):
        read_meta_properties(tmp_path)
