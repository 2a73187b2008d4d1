"""SIGKILL a process in the middle of appends; the reopened log keeps every fully written batch.

The child prints a line after each append returns. Killing it at random moments (mid-write,
between the log write and the index write, during a roll) must leave a log that reopens to a
valid prefix holding at least every reported batch, never a corrupt one.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparklog.records import SimpleRecord, build_batch, iter_batches
from sparklog.storage.config import LogConfig
from sparklog.storage.log import Log

sys.path.insert(0, str(Path(__file__).parent))
from crash_child import NOW, batch_for  # noqa: E402

CHILD = Path(__file__).with_name("crash_child.py")


def run_and_kill(directory: Path, seed: int, rng: random.Random) -> list[tuple[int, int, int]]:
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(directory), str(seed)],
        stdout=subprocess.PIPE,
        text=True,
    )
    reported: list[tuple[int, int, int]] = []
    target = rng.randint(20, 400)
    deadline = time.monotonic() + 60
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    while len(reported) < target and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line.endswith("\n"):
            break
        reported.append(tuple(map(int, line.split())))
    time.sleep(rng.random() * 0.01)  # land somewhere inside a later append
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    for line in proc.stdout:  # lines printed before the kill landed are also fully written
        if line.endswith("\n"):  # the kill can cut the last line short: not a report
            reported.append(tuple(map(int, line.split())))
    assert reported, f"child wrote nothing (exit {proc.returncode})"
    return reported


def tear_active_segment(directory: Path, rng: random.Random) -> None:
    """Also simulate what a power loss can leave: a torn prefix of one more batch."""
    active = max(directory.glob("*.log"))
    garbage = build_batch([SimpleRecord(b"torn" * 100)])
    with open(active, "ab") as f:
        f.write(garbage[: rng.randint(1, len(garbage) - 1)])


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_sigkill_mid_append_loses_no_written_batch(tmp_path, seed):
    rng = random.Random(seed)
    directory = tmp_path / f"crash-{seed}"
    reported = run_and_kill(directory, seed, rng)
    if seed % 2 == 0:
        tear_active_segment(directory, rng)
    config = LogConfig.from_properties({"segment.bytes": 64 * 1024, "index.interval.bytes": 512})
    log = Log.open(directory, config, now_ms=NOW)
    assert log.log_end_offset >= reported[-1][2] + 1, f"seed={seed}: lost acknowledged batches"
    data = log.read(0, 1 << 30).records
    number = 0
    next_offset = 0
    for batch in iter_batches(data):
        batch.ensure_valid()
        codec, expected = batch_for(seed, number)
        assert batch.header.compression == codec
        got = batch.records()
        assert [r.value for r in got] == [r.value for r in expected], f"seed={seed} batch {number}"
        assert batch.header.base_offset == next_offset
        next_offset = batch.header.next_offset
        number += 1
    assert next_offset == log.log_end_offset
    assert number >= len(reported)
    for n, first, last in reported:
        assert log.read(first, 1).records, f"seed={seed}: batch {n} at {first}..{last} missing"
    # the recovered log accepts new appends right after the last valid batch
    log.update_high_watermark(log.log_end_offset)
    assert log.fetch_offset_by_timestamp(-1) == (log.log_end_offset, -1)
    log.close()
