"""The tier verifier itself (tests/support/tier_verifier.py): a hand-built topic table in the
contract's layout (storage/remote/schema.py), read back with deltalake, and records as a
consumer would see them. A faithful table passes; each kind of damage (a gap, a duplicate, an
offset with two values, aborted data in the committed view, a missing app transaction, a data
row where a marker belongs) is reported. The cluster runs are in test_tiered_chaos.py."""

from __future__ import annotations

import datetime as dt
import struct
import uuid

import pyarrow as pa
import pytest
from deltalake import CommitProperties, Transaction, write_deltalake

from sparklog.storage.remote.schema import (
    PARTITION_COLUMNS,
    TABLE_SCHEMA,
    app_id,
)
from tests.support.tier_verifier import (
    Record,
    check_partition,
    committed_view,
    open_table,
    read_rows,
    txn_version,
)

TOPIC_ID = uuid.UUID("6f1c2e1a-0000-4000-8000-00000000abcd")
T0 = 1_790_000_000_000


def _marker(commit: bool) -> bytes:
    return struct.pack(">hh", 0, 1 if commit else 0)


def _log() -> list[dict]:
    """Partition 0's rows: a 3-record idempotent batch [0, 2], an aborted transaction [3, 4]
    and its marker 5, a committed transaction [6] and its marker 7."""
    rows = []

    def add(offset, base, delta, *, txn=False, control=False, aborted=False, key=None, value=None):
        rows.append(
            {
                "partition": 0,
                "date": dt.date(2026, 9, 21),
                "offset": offset,
                "timestamp": dt.datetime.fromtimestamp((T0 + offset) / 1000, dt.UTC),
                "timestamp_type": 0,
                "key": key,
                "value": value,
                "headers": [{"key": "h", "value": b"%d" % offset}] if not control else [],
                "batch_base_offset": base,
                "batch_last_offset_delta": delta,
                "batch_max_timestamp": T0 + base + delta,
                "batch_base_timestamp": T0 + base,
                "create_timestamp": None,
                "leader_epoch": 0,
                "producer_id": 7,
                "producer_epoch": 0,
                "base_sequence": 0,
                "compression": 0,
                "is_transactional": txn,
                "is_control": control,
                "aborted": aborted,
            }
        )

    for o in range(3):
        add(o, 0, 2, key=b"k%d" % o, value=b"v%d" % o)
    for o in (3, 4):
        add(o, 3, 1, txn=True, aborted=True, key=b"k%d" % o, value=b"v%d" % o)
    add(5, 5, 0, txn=True, control=True, aborted=True, key=_marker(False), value=b"\0" * 6)
    add(6, 6, 0, txn=True, key=b"k6", value=b"v6")
    add(7, 7, 0, txn=True, control=True, key=_marker(True), value=b"\0" * 6)
    return rows


def _consumed(offsets) -> list[Record]:
    return [Record(o, b"k%d" % o, b"v%d" % o, (("h", b"%d" % o),), 0, T0 + o) for o in offsets]


UNCOMMITTED = _consumed([0, 1, 2, 3, 4, 6])
COMMITTED = _consumed([0, 1, 2, 6])


def _write(path, rows, end_offset) -> str:
    location = str(path / "topic")
    write_deltalake(
        location,
        pa.Table.from_pylist(rows, schema=TABLE_SCHEMA),
        partition_by=list(PARTITION_COLUMNS),
        commit_properties=CommitProperties(
            app_transactions=[Transaction(app_id(TOPIC_ID, 0), end_offset)]
        ),
    )
    return location


def _check(location, uncommitted=UNCOMMITTED, committed=COMMITTED):
    table = open_table(location)
    report, errors = check_partition(
        0,
        uncommitted=uncommitted,
        committed=committed,
        rows=read_rows(table).get(0, []),
        committed_view_offsets=committed_view(table).get(0, ()),
        txn_version=txn_version(table, 0, TOPIC_ID),
    )
    return report, errors


def test_a_faithful_table_passes(tmp_path):
    report, errors = _check(_write(tmp_path, _log(), 8))
    assert errors == []
    assert (report.table_start_offset, report.table_end_offset, report.txn_version) == (0, 8, 8)
    assert (report.rows, report.control_rows, report.aborted_rows, report.compared) == (8, 2, 2, 6)


def test_a_table_behind_the_log_passes_over_what_it_holds(tmp_path):
    """The tier trails the log (closed segments only): rows [0, 3) against six records."""
    report, errors = _check(_write(tmp_path, _log()[:3], 3))
    assert errors == [] and report.compared == 3


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("gap", "gap in the table: offsets [3, 5)"),
        ("duplicate", "offset 1 has 2 identical rows"),
        ("two_values", "offset 1 has two values"),
        ("aborted_visible", "offset 3 in the committed view, not read_committed"),
        ("no_txn", "no app transaction"),
        ("txn_behind", "app transaction version 5 but the rows end at 8"),
        ("value", "offset 2 differs"),
        ("control_consumed", "offset 6 is a control row but was consumed"),
        ("half_batch", "the table starts at 1, inside the batch at 0"),
        ("flag_wrong", "offset 4 has aborted=False in the table but its transaction's marker"),
        ("broker_served_aborted", "a read_committed consumer got offset 3"),
    ],
)
def test_each_kind_of_damage_is_reported(tmp_path, damage, expected):
    rows, end = _log(), 8
    if damage == "gap":
        rows = [r for r in rows if r["offset"] not in (3, 4)]
    elif damage == "duplicate":
        rows.append(dict(rows[1]))
    elif damage == "two_values":
        rows.append({**rows[1], "value": b"other"})
    elif damage == "aborted_visible":
        rows[3]["aborted"] = False
    elif damage == "txn_behind":
        end = 5
    elif damage == "value":
        rows[2]["value"] = b"changed"
    elif damage == "control_consumed":
        rows[6].update(is_control=True, key=_marker(True))
    elif damage == "half_batch":
        rows = rows[1:]
    elif damage == "flag_wrong":
        rows[4]["aborted"] = False
    location = _write(tmp_path, rows, end)
    if damage == "no_txn":
        location = str(tmp_path / "bare")
        write_deltalake(
            location,
            pa.Table.from_pylist(rows, schema=TABLE_SCHEMA),
            partition_by=list(PARTITION_COLUMNS),
        )
    committed = COMMITTED
    if damage == "broker_served_aborted":
        committed = _consumed([0, 1, 2, 3, 6])
    _report, errors = _check(location, committed=committed)
    assert any(expected in e for e in errors), errors
