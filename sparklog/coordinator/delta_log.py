"""Durability and damage checks for the coordinator's Delta table on a local filesystem.

Durability. `deltalake` writes a commit's data files, then its `_delta_log/<version>.json`
(a temporary file renamed into place), and returns before any of it reached the disk: a power
loss can leave the newest commit empty, cut mid-line or cut at a line boundary, and with it a
commit a client was told is durable. So once a write returns, `sync_commits` fsyncs the data
files the new commits add, then the commit files, then both directories, and only then does
the coordinator answer — as Kafka flushes its log before acknowledging when told to. On an
object store a PUT is durable when it returns, so there is nothing to do there.

Damage. A crash between the write and the sync (never acknowledged) or a disk that lost synced
data leaves a commit `check_log` recognises, before `deltalake` opens the table:
- an empty file, or a line that is not whole JSON (cut mid-line);
- a commit missing lines: `deltalake` writes `commitInfo` first, and its `operationMetrics`
  count the `add`/`remove` actions that follow (WRITE: `num_added_files`, `num_removed_files`;
  OPTIMIZE: `numFilesAdded`, `numFilesRemoved`); sparklog's appends also name their last row's
  sequence (`sparklog.lastSequence`), which the commit's `txn` action must carry; CREATE TABLE
  must hold `protocol` and `metaData`;
- a data file of such a commit missing or shorter than its `add` says;
- the newest checkpoint shorter than `_last_checkpoint` says.
Only commits after the newest checkpoint are read (the table's state depends on nothing older).
What cannot be told: a whole newest commit that vanished (its directory entry lost) leaves a
shorter, consistent table; so does a commit whose file content was replaced by other valid
JSON. The sync before answering is what keeps those from losing an acknowledged commit.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from pathlib import Path
from typing import Any

# the durability helpers live in storage (the remote tier's tables use them too); they are
# re-exported here for the coordinator's modules
from sparklog.storage.delta_sync import commit_path, local_dir, sync_checkpoint, sync_commits

__all__ = [
    "APP_ID",
    "LAST_SEQUENCE_KEY",
    "OffsetsTableDamagedError",
    "check_log",
    "commit_path",
    "local_dir",
    "sync_checkpoint",
    "sync_commits",
]

#: The app id of sparklog's commits (Delta `txn` action) and the commitInfo key naming the
#: sequence of a commit's last row.
APP_ID = "sparklog-group-coordinator"
LAST_SEQUENCE_KEY = "sparklog.lastSequence"

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
#: operation -> (metric counting add actions, metric counting remove actions)
_ACTION_METRICS: dict[str | None, tuple[str, ...]] = {
    "WRITE": ("num_added_files", "num_removed_files"),
    "OPTIMIZE": ("numFilesAdded", "numFilesRemoved"),
}


class OffsetsTableDamagedError(Exception):
    """The offsets table's log is damaged; the message names the file and the repair."""


# -- damage ---------------------------------------------------------------------------------


def check_log(table_dir: Path) -> None:
    """Raise OffsetsTableDamagedError if a commit or checkpoint the table's state depends on is
    damaged (see the module doc); a table without a log is left to `deltalake`."""
    log_dir = table_dir / "_delta_log"
    if not log_dir.is_dir():
        return
    names = os.listdir(log_dir)
    versions = sorted(int(m.group(1)) for n in names if (m := _COMMIT.match(n)))
    checkpoints = sorted(int(m.group(1)) for n in names if (m := _CHECKPOINT.match(n)))
    checkpoint = checkpoints[-1] if checkpoints else -1
    if checkpoint >= 0:
        _check_checkpoint(table_dir, checkpoint)
    if not versions:
        return
    newest = versions[-1]
    removed: set[str] = set()
    for version in reversed([v for v in versions if v > checkpoint]):
        path = commit_path(table_dir, version)
        problem, actions = _commit_problem(path)
        if problem is None:
            problem = _data_file_problem(table_dir, actions, removed)
        if problem is not None:
            raise OffsetsTableDamagedError(_damaged_commit(table_dir, version, newest, problem))
        removed.update(a["remove"]["path"] for a in actions if "remove" in a)


def _commit_problem(path: Path) -> tuple[str | None, list[dict[str, Any]]]:
    """What is wrong with one commit file (None: nothing seen), and its actions."""
    data = path.read_bytes()
    if not data.strip():
        return f"is empty ({len(data)} bytes)", []
    lines = data.splitlines()
    actions = []
    for number, line in enumerate(lines, 1):
        try:
            action = json.loads(line)
        except ValueError:
            return f"is cut off: line {number} of {len(lines)} is not whole JSON", []
        if not isinstance(action, dict):
            return f"holds something else than Delta actions (line {number})", []
        actions.append(action)
    return _missing_actions(actions), actions


def _missing_actions(actions: list[dict[str, Any]]) -> str | None:
    """Compare a commit's actions with what its commitInfo announces."""
    info = next((a["commitInfo"] for a in actions if "commitInfo" in a), None)
    if not isinstance(info, dict):
        return None  # another writer's commit: nothing to compare with
    operation = info.get("operation")
    counts = {k: sum(1 for a in actions if k in a) for k in ("add", "remove")}
    metrics = info.get("operationMetrics") or {}
    for kind, metric in zip(("add", "remove"), _ACTION_METRICS.get(operation, ()), strict=False):
        expected = metrics.get(metric)
        if expected is not None and int(expected) != counts[kind]:
            return (
                f"is missing lines: it holds {counts[kind]} '{kind}' actions where its "
                f"commitInfo ({operation}) announces {expected}"
            )
    if (last := info.get(LAST_SEQUENCE_KEY)) is not None:
        txns = [a["txn"] for a in actions if "txn" in a]
        if not any(t.get("appId") == APP_ID and str(t.get("version")) == str(last) for t in txns):
            return f"is missing lines: its app transaction ({APP_ID}, {last}) is not there"
    if operation == "CREATE TABLE" and not all(
        any(k in a for a in actions) for k in ("protocol", "metaData")
    ):
        return "is missing lines: a CREATE TABLE without its protocol or metaData"
    return None


def _data_file_problem(
    table_dir: Path, actions: list[dict[str, Any]], removed_later: set[str]
) -> str | None:
    for action in actions:
        add = action.get("add")
        if not isinstance(add, dict) or add.get("path") in removed_later:
            continue
        data_file = table_dir / urllib.parse.unquote(add["path"])
        if not data_file.exists():
            return f"adds the data file {data_file.name}, which is missing"
        size = data_file.stat().st_size
        if add.get("size") is not None and size != int(add["size"]):
            return f"adds the data file {data_file.name}, which has {size} of {add['size']} bytes"
    return None


def _check_checkpoint(table_dir: Path, version: int) -> None:
    log_dir = table_dir / "_delta_log"
    path = log_dir / f"{version:020d}.checkpoint.parquet"
    try:
        last = json.loads((log_dir / "_last_checkpoint").read_bytes())
    except (OSError, ValueError):
        return  # deltalake finds the checkpoint by listing; nothing to compare with
    expected = last.get("sizeInBytes") if last.get("version") == version else None
    size = path.stat().st_size
    if expected is None or int(expected) == size:
        return
    older = [
        v
        for v in range(version + 1)
        if not commit_path(table_dir, v).exists()  # cleaned up after an older checkpoint
    ]
    outcome = (
        "Delta then replays the JSON commits, which are all still there: nothing is lost"
        if not older
        else f"but commits up to version {older[-1]} were cleaned up, so the table can only be "
        "rebuilt from a backup of that checkpoint"
    )
    raise OffsetsTableDamagedError(
        f"The group coordinator's offsets table {table_dir} is damaged: its checkpoint {path} "
        f"has {size} of {expected} bytes (a crash before it reached the disk). "
        f"{_NOT_STARTED} To repair: stop sparklog, move {path.name} and _last_checkpoint out "
        f"of {log_dir} and start again; {outcome}."
    )


_NOT_STARTED = (
    "The group and transaction coordinator does not start on it (brokers and controller keep "
    "running; group and transaction requests are answered COORDINATOR_NOT_AVAILABLE)."
)


def _damaged_commit(table_dir: Path, version: int, newest: int, problem: str) -> str:
    path = commit_path(table_dir, version)
    head = f"The group coordinator's offsets table {table_dir} is damaged: "
    if version == newest:
        return (
            f"{head}its newest commit {path} {problem} (a crash before the file reached the "
            f"disk). {_NOT_STARTED} To repair: stop sparklog, move {path.name} out of "
            f"{path.parent} (keep it for inspection) and start again. The table then ends at "
            f"version {version - 1}; what that one commit held (one group commit of offsets, "
            "group changes and transaction decisions) is lost. sparklog syncs every commit to "
            "disk before answering, so none of it was acknowledged to a client."
        )
    return (
        f"{head}commit {path} {problem}, and {newest - version} newer commits follow it (the "
        f"disk lost data that had been synced). {_NOT_STARTED} To repair: stop sparklog, move "
        f"commits {version:020d}.json to {newest:020d}.json out of {path.parent} and start "
        f"again. The table then ends at version {version - 1}; everything those commits held "
        "is lost, acknowledged offsets and transaction decisions included."
    )
