"""Finding the processes of a Spark application on this machine: an executor's JVM by its id
(`SparkLogCluster.describe()` lists which executor hosts each broker) and the process tree
under it (the Python daemon and workers that run the broker tasks). Used by the fault tests and
the soak to kill or pause exactly one broker."""

from __future__ import annotations

from pathlib import Path


def _cmdline(proc: Path) -> list[bytes]:
    return (proc / "cmdline").read_bytes().split(b"\0")


def executor_pid(executor_id: str) -> int:
    """The pid of the executor JVM with this id (its command line carries --executor-id)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = _cmdline(proc)
        except OSError:
            continue
        if (
            b"--executor-id" in args
            and args[args.index(b"--executor-id") + 1] == executor_id.encode()
        ):
            return int(proc.name)
    raise LookupError(f"no executor JVM with id {executor_id}")


def process_tree(roots: list[int]) -> list[int]:
    """`roots` and every process below them."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(proc.name))
    out, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def executors_of(app_id: str) -> list[int]:
    """The executor JVMs of Spark application `app_id` (`--app-id` on their command line)."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = _cmdline(proc)
        except OSError:
            continue
        if b"--app-id" in args and args[args.index(b"--app-id") + 1] == app_id.encode():
            out.append(int(proc.name))
    return out
