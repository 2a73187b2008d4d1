"""The tier's table damaged under a running broker (issue 32 §4, bad input and faults): the
table's directory deleted, its last Delta commit file torn. Each time the copy fails with an
error naming the table, the broker keeps every local segment that was not copied (local
retention waits for the tier), producers and consumers of local offsets carry on, and once
the table is repaired the uploads resume and the verifier finds it equal to the log.

The object store that stops answering is in test_tiered_s3.py.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from sparklog.cluster.embedded import EmbeddedCluster
from tests.support.tier_cluster import (
    Tier,
    consume_values,
    produce,
    tier_settings,
    wait_until,
)

from .conftest import TEST_CONFIG

ON_BROKER_0 = {0: [0]}


@pytest.fixture
def tier(tmp_path):
    root = tmp_path / "tables"
    with EmbeddedCluster(
        brokers=1, data_dir=tmp_path / "cluster", config=tier_settings(root, TEST_CONFIG)
    ) as cluster:
        running = Tier(cluster, root)
        yield running
        running.close()


def _error_naming(caplog, location: str) -> logging.LogRecord:
    """The first warning or error logged that names the table's location, in its message or
    in its exception's (what an operator reads)."""

    def names(record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return location in record.getMessage() or (error is not None and location in str(error))

    def found():
        for record in list(caplog.records):
            if record.levelno >= logging.WARNING and names(record):
                return record
        return None

    return wait_until(found, f"an error naming {location}")


def _values(n: int, start: int = 0) -> list[bytes]:
    return [b"v%d" % i for i in range(start, start + n)]


def _damage_then_repair(tier: Tier, caplog, damage, repair) -> None:
    topic = tier.create_topic(assignment=ON_BROKER_0)
    produce(tier.bootstrap, topic, _values(3))
    tier.wait_tiered(topic, {0: 3})  # all three: local retention rolls the active one too
    location = tier.location(topic)
    copied_end = tier.table_ranges(topic)[0][1]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        damage(Path(location))
        produce(tier.bootstrap, topic, _values(4, start=3))  # offsets 3..6: 4 more segments
        _error_naming(caplog, location)
    # nothing past the copied end left the disk: local retention waits for the tier
    assert min(tier.local_segments(topic, 0)) <= copied_end
    got = consume_values(tier.bootstrap, topic, 0, copied_end, 7 - copied_end)
    assert got == [(o, b"v%d" % o) for o in range(copied_end, 7)]
    repair(Path(location))
    tier.wait_tiered(topic, {0: 6})
    tier.verify(topic)


def test_table_directory_deleted_under_a_running_broker(tier, caplog, tmp_path):
    backup = tmp_path / "backup"

    def damage(location: Path) -> None:
        shutil.copytree(location, backup)
        shutil.rmtree(location)

    def repair(location: Path) -> None:
        shutil.rmtree(location, ignore_errors=True)  # whatever appeared meanwhile
        shutil.copytree(backup, location)

    _damage_then_repair(tier, caplog, damage, repair)


def test_torn_commit_file_under_a_running_broker(tier, caplog):
    """A writer that died mid-write on a store without atomic puts leaves the next commit
    file half written: the broker's next commit finds that version taken and cannot read it."""
    torn: list[Path] = []

    def damage(location: Path) -> None:
        log = location / "_delta_log"
        last = max(log.glob("*.json"))
        data = last.read_bytes()
        torn.append(log / f"{int(last.stem) + 1:020d}.json")
        torn[0].write_bytes(data[: len(data) // 2])  # cut mid-action

    def repair(location: Path) -> None:
        torn[0].unlink()

    _damage_then_repair(tier, caplog, damage, repair)
