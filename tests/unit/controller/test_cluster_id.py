"""Cluster ids are Kafka Uuids in URL-safe base64, never starting with "-" (Kafka's
`Uuid.randomUuid` rule: `kafka-storage format -t -abc...` takes the id for an option)."""

from __future__ import annotations

import base64
import uuid

from sparklog.controller import cluster_id as cluster_ids


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch):
    dash = uuid.UUID(bytes=base64.urlsafe_b64decode("-" + "A" * 21 + "=="))
    plain = uuid.UUID(int=12345)
    draws = iter([dash, dash, plain])
    monkeypatch.setattr(cluster_ids.uuid, "uuid4", lambda: next(draws))
    cluster_id = cluster_ids.new_cluster_id()
    assert cluster_id == base64.urlsafe_b64encode(plain.bytes).rstrip(b"=").decode()
    assert len(cluster_id) == 22 and not cluster_id.startswith("-")


def test_cluster_ids_are_random_and_22_characters():
    ids = {cluster_ids.new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
