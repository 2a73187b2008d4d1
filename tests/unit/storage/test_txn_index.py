"""TransactionIndex: Kafka's `.txnindex` format and semantics (cases from TransactionIndexTest)."""

from __future__ import annotations

import dataclasses
import struct

import pytest

from sparklog.storage.abstract_index import CorruptIndexError
from sparklog.storage.txn_index import AbortedTxn, TransactionIndex

ABORTED = [
    AbortedTxn(producer_id=0, first_offset=0, last_offset=10, last_stable_offset=11),
    AbortedTxn(producer_id=1, first_offset=5, last_offset=15, last_stable_offset=13),
    AbortedTxn(producer_id=2, first_offset=18, last_offset=35, last_stable_offset=25),
    AbortedTxn(producer_id=3, first_offset=32, last_offset=50, last_stable_offset=40),
]


@pytest.fixture
def path(tmp_path):
    return tmp_path / "00000000000000000000.txnindex"


@pytest.fixture
def index(path):
    idx = TransactionIndex(path, 0)
    yield idx
    idx.close()


def fill(index, entries=ABORTED):
    for aborted in entries:
        index.append(aborted)


def test_on_disk_format_is_kafkas_34_byte_entry(index, path):
    index.append(AbortedTxn(983493, 137, 299, 200))
    data = path.read_bytes()
    assert len(data) == 34
    assert data == struct.pack(">hqqqq", 0, 983493, 137, 299, 200)
    assert data[:2] == b"\x00\x00"  # version 0
    assert AbortedTxn(983493, 137, 299, 200).to_bytes() == data


def test_aborted_txn_is_a_frozen_value():
    aborted = AbortedTxn(1, 2, 3, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        aborted.last_offset = 5  # type: ignore[misc]
    assert aborted == AbortedTxn(1, 2, 3, 4)


def test_position_set_correctly_when_reopened(index, path):
    fill(index)
    index.close()
    reopened = TransactionIndex(path, 0)
    reopened.sanity_check()
    another = AbortedTxn(3, 50, 60, 55)
    reopened.append(another)
    assert reopened.all_aborted() == [*ABORTED, another]
    assert TransactionIndex(path, 0).all_aborted() == [*ABORTED, another]
    assert len(path.read_bytes()) == 5 * 34


def test_sanity_check_last_offset_below_start_offset(index, path):
    fill(index)
    index.close()
    with pytest.raises(CorruptIndexError, match="less than start offset 100"):
        TransactionIndex(path, 100).sanity_check()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (ABORTED[0].to_bytes() + b"\x00" * 10, "not a multiple of 34"),
        (ABORTED[0].to_bytes() + struct.pack(">hqqqq", 1, 1, 20, 30, 31), "version 1"),
        (ABORTED[1].to_bytes() + ABORTED[0].to_bytes(), "does not end after"),
    ],
)
def test_sanity_check_detects_corrupt_files(path, data, message):
    path.write_bytes(data)
    index = TransactionIndex(path, 0)
    with pytest.raises(CorruptIndexError, match=message):
        index.sanity_check()
    index.reset()
    index.sanity_check()
    assert path.read_bytes() == b""
    index.append(ABORTED[0])
    assert path.read_bytes() == ABORTED[0].to_bytes()


def test_last_offset_must_increase(index):
    index.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(0, 0, 15, 11))


def test_last_offset_cannot_decrease(index, path):
    index.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(0, 0, 10, 11))
    assert index.all_aborted() == [AbortedTxn(1, 5, 15, 13)]
    assert len(path.read_bytes()) == 34


def test_collect_aborted_transactions(index):
    fill(index)
    assert index.collect_aborted_txns(0, 100) == (ABORTED, False)
    assert index.collect_aborted_txns(0, 32) == (ABORTED[0:3], True)
    assert index.collect_aborted_txns(0, 35) == (ABORTED, True)
    assert index.collect_aborted_txns(10, 35) == (ABORTED, True)
    assert index.collect_aborted_txns(11, 35) == (ABORTED[1:4], True)
    assert index.collect_aborted_txns(20, 41) == (ABORTED[2:4], False)


def test_collect_on_empty_index(index):
    assert index.collect_aborted_txns(0, 100) == ([], False)


def test_truncate(index, path):
    entries = [
        AbortedTxn(0, 0, 10, 2),
        AbortedTxn(1, 5, 15, 16),
        AbortedTxn(2, 18, 35, 25),
        AbortedTxn(3, 32, 50, 40),
    ]
    fill(index, entries)
    index.truncate_to(51)
    assert index.collect_aborted_txns(0, 100)[0] == entries
    index.truncate_to(50)
    assert index.collect_aborted_txns(0, 100)[0] == entries[0:3]
    assert len(path.read_bytes()) == 3 * 34
    assert index.last_offset == 35
    index.append(AbortedTxn(4, 40, 45, 41))  # the truncated last offset no longer blocks it
    index.reset()
    assert index.collect_aborted_txns(0, 100)[0] == []
    assert index.last_offset is None
    assert path.read_bytes() == b""


def test_rename_index(index, tmp_path):
    renamed = tmp_path / "00000000000000000000.txnindex.deleted"
    index.append(AbortedTxn(0, 0, 10, 2))
    index.rename(renamed)
    index.append(AbortedTxn(1, 5, 15, 16))
    assert [a.first_offset for a in index.collect_aborted_txns(0, 100)[0]] == [0, 5]
    assert len(renamed.read_bytes()) == 68
    assert [a.first_offset for a in TransactionIndex(renamed, 0).all_aborted()] == [0, 5]


def test_flush(index, path):
    index.flush()
    index.append(AbortedTxn(0, 0, 10, 2))
    index.flush()
    assert path.stat().st_size == 34


def test_delete_if_exists(index, path):
    index.append(AbortedTxn(0, 0, 10, 2))
    assert path.exists()
    assert index.delete() is True
    assert not path.exists()
    assert index.delete() is False


def test_is_empty(index):
    assert index.is_empty()
    index.append(AbortedTxn(0, 0, 10, 2))
    assert not index.is_empty()


def test_do_not_create_file_until_needed(path, tmp_path):
    index = TransactionIndex(path, 0)
    assert not path.exists()
    index.reset()
    index.truncate_to(0)
    index.flush()
    index.rename(tmp_path / "renamed.txnindex")
    assert list(tmp_path.iterdir()) == []
    index.append(AbortedTxn(0, 0, 10, 2))
    assert (tmp_path / "renamed.txnindex").exists()


def test_append_and_collect_after_close(index):
    index.close()
    index.append(AbortedTxn(0, 0, 10, 2))
    index.close()
    index.append(AbortedTxn(1, 5, 15, 16))
    index.close()
    assert [a.first_offset for a in index.collect_aborted_txns(0, 100)[0]] == [0, 5]
