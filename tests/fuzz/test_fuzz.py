"""Fuzzing the decoders that see untrusted bytes (request frames, produced record batches,
segment files read by recovery): every input in `tests/fuzz/corpus/` is replayed, then each
target is fuzzed (atheris, coverage-guided) for a few seconds. `make fuzz` fuzzes longer.

The corpus keeps the crash the fuzzer found first: a 23-byte Produce v9 frame whose array
length made kio's native reader reserve 92 GB and abort the broker process
(`crash-ed5b...`); `protocol/frame_check.py` now refuses such frames."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz.targets import TARGETS

CORPUS = Path(__file__).parent / "corpus"
ROOT = Path(__file__).parents[2]
SECONDS = int(os.environ.get("SPARKLOG_FUZZ_SECONDS", "5"))  # `make fuzz`: 300


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_the_corpus_replays_without_a_crash(target: str) -> None:
    inputs = sorted((CORPUS / target).iterdir())
    assert inputs, f"no corpus for {target}: run python -m tests.fuzz.seeds"
    for path in inputs:
        TARGETS[target](path.read_bytes())  # anything but the allowed errors fails the test


@pytest.mark.slow
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_bounded_fuzzing_run_finds_no_crash(target: str, tmp_path: Path) -> None:
    pytest.importorskip("atheris")
    before = set((CORPUS / target).iterdir())
    done = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.run", target, str(SECONDS), str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SECONDS + 120,
    )
    found = set((CORPUS / target).iterdir()) - before
    assert done.returncode == 0 and not found, (
        f"the fuzzer crashed {target}; input kept in {sorted(found)}:\n" + done.stderr[-3000:]
    )
    assert "Done" in done.stderr, done.stderr[-2000:]


def test_a_frame_claiming_a_huge_array_is_refused_not_fatal() -> None:
    from sparklog.protocol.api_versions import BROKER_APIS
    from sparklog.protocol.connection import ProtocolError, ServerConnection

    crash = next((CORPUS / "request_frame").glob("crash-*")).read_bytes()
    conn = ServerConnection(BROKER_APIS)
    conn.receive_data(len(crash).to_bytes(4, "big") + crash)
    with pytest.raises(ProtocolError, match="claims"):
        conn.next_request()
