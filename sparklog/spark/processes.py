"""Finding the processes of a Spark application on this machine: an executor's JVM by its id
(`SparkLogCluster.describe()` lists which executor hosts each broker) and the process tree
under it (the Python daemon and workers that run the broker tasks). Used by the fault tests and
the soak to kill or pause exactly one broker."""

from __future__ import annotations

from pathlib import Path


def _with_arg(flag: bytes, value: str) -> list[int]:
    """Pids whose command line has `flag` followed by `value`."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        at = args.index(flag) + 1 if flag in args else len(args)
        if at < len(args) and args[at] == value.encode():
            out.append(int(proc.name))
    return out


def executor_pid(executor_id: str, app_id: str | None = None) -> int:
    """The pid of the executor JVM with this id (its command line carries --executor-id) of
    application `app_id` (`--app-id`; give it wherever another Spark application may run on the
    machine, whose executors have the same small ids)."""
    found = _with_arg(b"--executor-id", executor_id)
    if app_id is not None:
        found = [pid for pid in found if pid in _with_arg(b"--app-id", app_id)]
    if not found:
        of = "" if app_id is None else f" in application {app_id}"
        raise LookupError(f"no executor JVM with id {executor_id}{of}")
    return found[0]


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
    return _with_arg(b"--app-id", app_id)
