"""The soak's duplicate classifier (`jobs/soak_duplicates.py`) on logs made here: two copies of
a record written by different epochs of one producer are the client's epoch bump (librdkafka
sends a possibly persisted message again after bumping, as with Apache Kafka); two copies in
one epoch are a broker that failed to recognise a retry."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from sparklog.records import SimpleRecord, build_batch
from sparklog.storage.config import LogConfig
from sparklog.storage.log import Log

JOBS = Path(__file__).resolve().parents[3] / "jobs"
NOW = 1_700_000_000_000


@pytest.fixture(scope="module")
def soak_duplicates():
    sys.path.insert(0, str(JOBS))
    try:
        spec = importlib.util.spec_from_file_location(
            "soak_duplicates", JOBS / "soak_duplicates.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(JOBS))


def produce(log: Log, values: list[bytes], *, pid: int = 9, epoch: int = 0, seq: int) -> int:
    batch = build_batch(
        [SimpleRecord(v, None, NOW) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )
    return log.append_as_leader(batch, leader_epoch=3, now_ms=NOW).first_offset


def test_copies_in_two_epochs_are_the_clients_bump_and_one_epoch_is_a_broker_bug(
    tmp_path, soak_duplicates
):
    # small segments: the copies sit in different segment files
    config = LogConfig.from_properties({"segment.bytes": 200})
    log = Log.open(tmp_path / "b0" / "soak-2", config, now_ms=NOW)
    produce(log, [b"0", b"1"], seq=0)
    first = produce(log, [b"2", b"3"], seq=2)  # REQUEST_TIMED_OUT, yet written
    again = produce(log, [b"2", b"3"], epoch=1, seq=0)  # librdkafka bumped and resent it
    produce(log, [b"4"], epoch=1, seq=2)
    same_epoch = produce(log, [b"4"], epoch=1, seq=3)  # what a broker must never accept
    assert len(log.segments) > 1
    log.close()

    found = soak_duplicates.classify_duplicates(
        tmp_path,
        "soak",
        {
            2: [(2, first), (2, again)],
            3: [(2, first + 1), (2, again + 1)],
            4: [(2, same_epoch - 1), (2, same_epoch)],
        },
    )

    assert (found["across_producer_epochs"], found["within_one_producer_epoch"]) == (2, 1)
    assert found["unread"] == 0
    copies = found["copies"]
    assert list(copies)[0] == "4", "violations are listed first"
    assert [c["batch"]["producer_epoch"] for c in copies["2"]] == [0, 1]
    assert [c["batch"]["sequence"] for c in copies["3"]] == [3, 1]
    assert [c["batch"]["producer_epoch"] for c in copies["4"]] == [1, 1]


def test_a_copy_in_no_replica_is_unread_and_two_producers_are_not_an_epoch_bump(
    tmp_path, soak_duplicates
):
    log = Log.open(tmp_path / "b1" / "soak-0", now_ms=NOW)
    a = produce(log, [b"7"], pid=1, seq=0)
    b = produce(log, [b"7"], pid=2, epoch=1, seq=0)
    log.close()

    found = soak_duplicates.classify_duplicates(
        tmp_path, "soak", {7: [(0, a), (0, b)], 8: [(0, a), (5, 0)]}
    )

    assert (found["within_one_producer_epoch"], found["unread"]) == (1, 1)
    assert found["across_producer_epochs"] == 0
