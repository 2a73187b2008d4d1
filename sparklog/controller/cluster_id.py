"""A cluster's identity on the controller's metadata store (what Kafka's `kafka-storage format`
writes): a Kafka-style cluster id in the store's `meta.properties`, written there by the first
controller that starts on an empty store and checked by every later one.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

from sparklog.controller.metadata_store import META_PROPERTIES, LocalMetadataStore, MetadataStore
from sparklog.metadata.configs import parse_properties
from sparklog.structs import CONTROLLER_NODE_ID


def new_cluster_id() -> str:
    """A Kafka-style cluster id: a random UUID in URL-safe base64 without padding. Like Kafka's
    `Uuid.randomUuid`, never one starting with "-", which command lines (`kafka-storage format
    -t ID`) would take for an option."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def load_or_format_cluster_id(store: MetadataStore | Path, cluster_id: str | None = None) -> str:
    """The cluster id in the store's `meta.properties`, written there first if absent (two
    drivers formatting one object store at once agree on the first one's id).

    Raises ValueError when the store belongs to another cluster than `cluster_id`.
    """
    if isinstance(store, Path):
        store = LocalMetadataStore(store)
    where = f"{store.location}/{META_PROPERTIES}"
    text = store.read_meta_properties()
    if text is None:
        proposed = cluster_id or new_cluster_id()
        new = f"version=1\ncluster.id={proposed}\nnode.id={CONTROLLER_NODE_ID}\n"
        text = store.create_meta_properties(new)
    found = parse_properties(text, where).get("cluster.id")
    if not found:
        raise ValueError(f"{where} has no cluster.id")
    if cluster_id is not None and cluster_id != found:
        raise ValueError(
            f"{where} belongs to cluster {found}, not {cluster_id}; use another "
            "metadata.log.dir (controller data dir) or the matching cluster id"
        )
    return found
