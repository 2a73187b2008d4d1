"""Kafka's text checkpoint format and the atomic file replacement."""

from __future__ import annotations

import os

import pytest

from sparklog.storage.checkpoint import (
    CheckpointFile,
    CorruptCheckpointError,
    OffsetCheckpointFile,
    parse_int32,
    parse_int64,
    write_atomically,
)


def epoch_file(path):
    return CheckpointFile(path, (parse_int32, parse_int64))


def test_write_atomically_replaces_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"old contents")
    write_atomically(path, b"new")
    assert path.read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path)) == ["f"]


def test_write_atomically_overwrites_stale_temp_file(tmp_path):
    (tmp_path / "f.tmp").write_bytes(b"left over by a crash, longer than the new data")
    write_atomically(tmp_path / "f", b"ok")
    assert (tmp_path / "f").read_bytes() == b"ok"
    assert not (tmp_path / "f.tmp").exists()


def test_write_atomically_keeps_old_file_when_write_fails(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"old")
    with pytest.raises(TypeError):
        write_atomically(path, "not bytes")  # type: ignore[arg-type]
    assert path.read_bytes() == b"old"
    assert not (tmp_path / "f.tmp").exists()


def test_leader_epoch_checkpoint_bytes_match_kafka(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    epoch_file(path).write([(0, 0), (3, 150), (7, 2**40)])
    assert path.read_bytes() == b"0\n3\n0 0\n3 150\n7 1099511627776\n"
    assert epoch_file(path).read() == [(0, 0), (3, 150), (7, 2**40)]


def test_empty_entry_list_round_trip(tmp_path):
    path = tmp_path / "cp"
    epoch_file(path).write([])
    assert path.read_bytes() == b"0\n0\n"
    assert epoch_file(path).read() == []


@pytest.mark.parametrize("data", [b"", b"0\n", b"0"])
def test_missing_empty_or_version_only_file_reads_empty(tmp_path, data):
    assert epoch_file(tmp_path / "absent").read() == []
    path = tmp_path / "cp"
    path.write_bytes(data)
    assert epoch_file(path).read() == []


def test_reads_crlf_and_missing_final_newline(tmp_path):
    path = tmp_path / "cp"
    path.write_bytes(b"0\r\n2\r\n1 10\r\n2 20")
    assert epoch_file(path).read() == [(1, 10), (2, 20)]


@pytest.mark.parametrize(
    ("data", "line_number", "reason"),
    [
        (b"1\n0\n", 1, "unrecognised version 1"),
        (b"x\n0\n", 1, "bad version"),
        (b"0\ntwo\n", 2, "bad entry count"),
        (b"0\n2\n1 10\n", 2, "entry count 2 but the file holds 1"),
        (b"0\n1\n1 10\n2 20\n", 2, "entry count 1 but the file holds 2"),
        (b"0\n2\n1 10\n2\n", 4, "expected 2 fields but found 1"),
        (b"0\n2\n1 10\n\n", 4, "expected 2 fields but found 0"),
        (b"0\n1\n1 ten\n", 3, "'ten' is not an integer"),
        (b"0\n1\n1 1_0\n", 3, "not an integer"),
        (b"0\n1\n2147483648 10\n", 3, "does not fit in an int32"),
        (b"0\n1\n1 9223372036854775808\n", 3, "does not fit in an int64"),
        (b"0\n1\n1 \xff\n", 3, "not UTF-8"),
    ],
)
def test_corrupt_file_names_file_and_line(tmp_path, data, line_number, reason):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(data)
    with pytest.raises(CorruptCheckpointError) as info:
        epoch_file(path).read()
    assert info.value.path == path
    assert info.value.line_number == line_number
    assert reason in str(info.value)
    assert str(path) in str(info.value)


def test_offset_checkpoint_bytes_and_round_trip(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    offsets = {("b-topic", 1): 17, ("a.topic", 10): 5, ("a.topic", 2): 2**33, ("b-topic", 0): 0}
    OffsetCheckpointFile(path).write(offsets)
    assert path.read_bytes() == (
        b"0\n4\na.topic 2 8589934592\na.topic 10 5\nb-topic 0 0\nb-topic 1 17\n"
    )
    assert OffsetCheckpointFile(path).read() == offsets


def test_offset_checkpoint_reads_kafka_written_file(tmp_path):
    path = tmp_path / "log-start-offset-checkpoint"
    path.write_bytes(b"0\n2\n__consumer_offsets 7 120\nfoo 0 -1\n")
    assert OffsetCheckpointFile(path).read() == {("__consumer_offsets", 7): 120, ("foo", 0): -1}


def test_offset_checkpoint_missing_file_is_empty(tmp_path):
    assert OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read() == {}


def test_offset_checkpoint_rejects_bad_partition(tmp_path):
    path = tmp_path / "cp"
    path.write_bytes(b"0\n1\nfoo bar 12\n")
    with pytest.raises(CorruptCheckpointError, match="line 3"):
        OffsetCheckpointFile(path).read()


def test_offset_checkpoint_overwrite_replaces_entries(tmp_path):
    checkpoint = OffsetCheckpointFile(tmp_path / "cp")
    checkpoint.write({("t", 0): 1, ("t", 1): 2})
    checkpoint.write({("t", 1): 3})
    assert checkpoint.read() == {("t", 1): 3}
