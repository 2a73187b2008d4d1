"""Kafka's text checkpoint files, written atomically (D4).

Format (Kafka's `org.apache.kafka.server.common.CheckpointFile`)::

    0                 <- version
    2                 <- number of entries
    my-topic 0 42     <- one entry per line, fields separated by a space
    my-topic 1 17

Used for `leader-epoch-checkpoint` (entries `epoch start_offset`, see `epoch_cache.py`) and the
broker-level `recovery-point-offset-checkpoint` / `log-start-offset-checkpoint` /
`replication-offset-checkpoint` (entries `topic partition offset`, `OffsetCheckpointFile`).

A file that cannot be parsed raises `CorruptCheckpointError` naming the file and line; the caller
decides whether to rebuild (Kafka rebuilds the leader epoch cache from the log, and treats a
missing recovery point as "recover everything").
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sparklog.structs import TopicPartition

__all__ = [
    "CURRENT_VERSION",
    "CheckpointFile",
    "CorruptCheckpointError",
    "OffsetCheckpointFile",
    "fsync_dir",
    "parse_int32",
    "parse_int64",
    "parse_token",
    "write_atomically",
]

CURRENT_VERSION = 0
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# Java's Integer.parseInt/Long.parseLong: optional sign, ASCII digits, nothing else.
_INTEGER = re.compile(r"[+-]?[0-9]+")
# Java's BufferedReader.readLine ends a line at \n, \r or \r\n.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class CorruptCheckpointError(ValueError):
    """A checkpoint file exists but cannot be parsed; carries the file and 1-based line number."""

    def __init__(self, path: Path, line_number: int, reason: str) -> None:
        super().__init__(f"Malformed checkpoint file {path} at line {line_number}: {reason}")
        self.path = path
        self.line_number = line_number
        self.reason = reason


def write_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace `path` with `data` so a crash leaves either the old or the new file, never a mix.

    Writes `<path>.tmp`, fsyncs it, renames it over `path` and fsyncs the directory (Kafka's
    `CheckpointFile.write` + `Utils.atomicMoveWithFallback(..., needFlushParentDir=true)`).
    """
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, target)
    fsync_dir(target.parent)


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a rename or file creation in `directory` durable (POSIX needs an fsync of the dir)."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _parse_integer(token: str, low: int, high: int, kind: str) -> int:
    if not _INTEGER.fullmatch(token):
        raise ValueError(f"{token!r} is not an integer")
    value = int(token)
    if not low <= value <= high:
        raise ValueError(f"{token} does not fit in an {kind}")
    return value


def parse_int32(token: str) -> int:
    """Parse a field like Java's `Integer.parseInt` (ValueError when it would throw)."""
    return _parse_integer(token, _INT32_MIN, _INT32_MAX, "int32")


def parse_int64(token: str) -> int:
    """Parse a field like Java's `Long.parseLong` (ValueError when it would throw)."""
    return _parse_integer(token, _INT64_MIN, _INT64_MAX, "int64")


def parse_token(token: str) -> str:
    """A free-text field (a topic name): any non-empty run of non-whitespace characters."""
    return token


class CheckpointFile:
    """One checkpoint file: a version line, a count line, then one space-separated entry per line.

    `fields` holds one parser per entry field (`parse_int32`, `parse_int64`, `parse_token`);
    entries are tuples with that many values. `write` replaces the file atomically; `read`
    returns `[]` for a missing or empty file, and for a file holding only the version line
    (both as Kafka does).

    Invariant: the file at `path` is always a complete checkpoint (the old one or the new one).
    Thread-safety: none; the owner (a log, or the log manager) serialises calls.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        fields: Sequence[Callable[[str], Any]],
        version: int = CURRENT_VERSION,
    ) -> None:
        assert fields, "a checkpoint entry has at least one field"
        self.path = Path(path)
        self.version = version
        self._fields = tuple(fields)

    def write(self, entries: Sequence[tuple[Any, ...]]) -> None:
        """Atomically replace the file with `entries`."""
        write_atomically(self.path, self.encode(entries))

    def encode(self, entries: Sequence[tuple[Any, ...]]) -> bytes:
        """The file's bytes for `entries` (exactly what `write` puts on disk)."""
        lines = [str(self.version), str(len(entries))]
        for entry in entries:
            assert len(entry) == len(self._fields), f"entry {entry!r} has the wrong arity"
            tokens = [str(value) for value in entry]
            # A whitespace inside a field would make the file unreadable: that is our bug.
            assert all(token and token.split() == [token] for token in tokens), entry
            lines.append(" ".join(tokens))
        return ("\n".join(lines) + "\n").encode("utf-8")

    def read(self) -> list[tuple[Any, ...]]:
        """Parse the file; raises `CorruptCheckpointError` naming the bad line."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        return self.decode(data)

    def decode(self, data: bytes) -> list[tuple[Any, ...]]:
        """Parse checkpoint bytes (see `read`)."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            line_number = data[: e.start].count(b"\n") + 1
            raise CorruptCheckpointError(self.path, line_number, "not UTF-8 text") from None
        lines = _LINE_BREAK.split(text)
        if lines[-1] == "":
            lines.pop()  # the newline ending the last line
        if not lines:
            return []
        version = self._header(lines[0], 1, "version")
        if version != self.version:
            reason = f"unrecognised version {version}, expected version {self.version}"
            raise CorruptCheckpointError(self.path, 1, reason)
        if len(lines) == 1:
            return []
        expected_count = self._header(lines[1], 2, "entry count")
        entries = [self._entry(line, n) for n, line in enumerate(lines[2:], start=3)]
        if len(entries) != expected_count:
            reason = f"entry count {expected_count} but the file holds {len(entries)} entries"
            raise CorruptCheckpointError(self.path, 2, reason)
        return entries

    def _header(self, line: str, line_number: int, what: str) -> int:
        try:
            return parse_int32(line)
        except ValueError:
            raise CorruptCheckpointError(self.path, line_number, f"bad {what} {line!r}") from None

    def _entry(self, line: str, line_number: int) -> tuple[Any, ...]:
        tokens = line.split()
        if len(tokens) != len(self._fields):
            reason = f"expected {len(self._fields)} fields but found {len(tokens)} in {line!r}"
            raise CorruptCheckpointError(self.path, line_number, reason)
        try:
            return tuple(parse(token) for parse, token in zip(self._fields, tokens, strict=True))
        except ValueError as e:
            raise CorruptCheckpointError(self.path, line_number, f"{e} in {line!r}") from None


class OffsetCheckpointFile:
    """A broker-level `(topic, partition) -> offset` checkpoint (Kafka's `OffsetCheckpointFile`).

    Backs `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint` and
    `replication-offset-checkpoint` in each log dir. Entries are written sorted by
    (topic, partition) so the bytes are deterministic; on read, a repeated partition keeps its
    last value, as Kafka's map does.

    Thread-safety: none; the log manager serialises calls.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file = CheckpointFile(path, (parse_token, parse_int32, parse_int64))

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Atomically replace the file with `offsets`."""
        entries = [(topic, partition, offset) for (topic, partition), offset in offsets.items()]
        entries.sort(key=lambda entry: (entry[0], entry[1]))
        self._file.write(entries)

    def read(self) -> dict[TopicPartition, int]:
        """The checkpointed offsets; `{}` if the file does not exist yet."""
        return {
            TopicPartition(topic, partition): offset
            for topic, partition, offset in self._file.read()
        }
