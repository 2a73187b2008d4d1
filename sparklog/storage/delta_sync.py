"""Durability of a Delta table on a local filesystem (the coordinator's offsets table, the
remote tier's topic tables).

`deltalake` writes a commit's data files, then its `_delta_log/<version>.json` (a temporary
file renamed into place), and returns before any of it reached the disk: a power loss can
leave the newest commit empty or cut, and with it a commit a caller was told is durable. So
once a write returns, `sync_commits` fsyncs the data files the new commits add, then the commit
files, then the directories that name them. On an object store a PUT is durable when it
returns, so there is nothing to do there (`local_dir` is None).
"""

from __future__ import annotations

import contextlib
import json
import os
import urllib.parse
from pathlib import Path
from typing import Any

__all__ = [
    "actions",
    "commit_path",
    "cut_newest_commit",
    "local_dir",
    "sync_checkpoint",
    "sync_commits",
]


def local_dir(path: str) -> Path | None:
    """The directory of a table on a local filesystem, None for an object store."""
    if "://" not in path:
        return Path(path)
    parsed = urllib.parse.urlparse(path)
    return Path(urllib.parse.unquote(parsed.path)) if parsed.scheme == "file" else None


def commit_path(table_dir: Path, version: int) -> Path:
    return table_dir / "_delta_log" / f"{version:020d}.json"


def _fsync(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_commits(table_dir: Path, first_version: int, last_version: int) -> None:
    """Make commits `first_version`..`last_version` durable: their data files, then the
    commit files, then the directories that name them."""
    commits = [commit_path(table_dir, v) for v in range(first_version, last_version + 1)]
    directories = {table_dir, table_dir / "_delta_log"}
    files = []
    for commit in commits:
        with contextlib.suppress(FileNotFoundError):  # maintenance may have cleaned it up
            for action in actions(commit.read_bytes()):
                if "add" in action:
                    files.append(table_dir / urllib.parse.unquote(action["add"]["path"]))
                    directories.add(files[-1].parent)
    for path in [*files, *commits]:  # data before the commits that name it
        with contextlib.suppress(FileNotFoundError):  # vacuumed: nothing left to sync
            _fsync(path)
    for directory in sorted(directories):
        _fsync(directory, directory=True)


def sync_checkpoint(table_dir: Path, version: int) -> None:
    """Make the checkpoint of `version` and `_last_checkpoint` durable (when they exist)."""
    log_dir = table_dir / "_delta_log"
    for path in (log_dir / f"{version:020d}.checkpoint.parquet", log_dir / "_last_checkpoint"):
        if path.exists():
            _fsync(path)
    _fsync(log_dir, directory=True)


def actions(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def cut_newest_commit(table_dir: Path) -> Path | None:
    """The newest commit file of a local table when it is empty or not whole JSON (a crash
    before it reached the disk), else None. Commits are synced before they count, so such a
    commit was never acknowledged (`coordinator.delta_log.check_log` checks more)."""
    log = table_dir / "_delta_log"
    if not log.is_dir():
        return None
    commits = sorted(p for p in log.glob("*.json") if p.stem.isdigit())
    if not commits:
        return None
    try:
        whole = bool(actions(commits[-1].read_bytes()))
    except ValueError:
        whole = False
    return None if whole else commits[-1]
