"""Coverage-guided fuzzing of one target with atheris (libFuzzer):

    .venv/bin/python -m tests.fuzz.run TARGET SECONDS [CORPUS_DIR]

New interesting inputs go to CORPUS_DIR (default: a scratch copy of the target's corpus); a
crash is written to `tests/fuzz/corpus/TARGET/crash-<hash>`, where the corpus replay keeps it
as a regression case, and the process exits non-zero.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import atheris

CORPUS = Path(__file__).parent / "corpus"


def main() -> None:
    name, seconds = sys.argv[1], int(sys.argv[2])
    seeds = CORPUS / name
    work = Path(sys.argv[3]) if len(sys.argv) > 3 else Path(tempfile.mkdtemp(prefix="fuzz-"))
    if seeds.is_dir():
        for seed in seeds.iterdir():
            shutil.copy(seed, work / seed.name)
    with atheris.instrument_imports(include=["sparklog"]):
        import sparklog.records.arrow_decode
        import sparklog.records.batch
        import sparklog.records.record
        import sparklog.storage.log
        import sparklog.storage.log_validator  # noqa: F401 - instrumented for coverage
        from tests.fuzz.targets import TARGETS
    target = TARGETS[name]
    args = [
        sys.argv[0],
        f"-max_total_time={seconds}",
        "-rss_limit_mb=2048",
        "-max_len=65536",
        f"-artifact_prefix={seeds}/",
        str(work),
    ]
    atheris.Setup(args, target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
