"""Child process for the crash test: appends numbered batches forever and reports each one.

Usage: python crash_child.py DIR SEED. After every append returns it prints
"<batch number> <first offset> <last offset>" and flushes, so the parent knows exactly which
batches were fully written when it sends SIGKILL.
"""

from __future__ import annotations

import random
import sys

from sparklog.records import SimpleRecord, build_batch
from sparklog.records.compression import CompressionType
from sparklog.storage.config import LogConfig
from sparklog.storage.log import Log

NOW = 1_700_000_000_000
PREPARED_BATCHES = 600


def records_for(number: int, rng: random.Random) -> list[SimpleRecord]:
    count = rng.randint(1, 40)
    return [
        SimpleRecord(
            value=f"{number}:{i}:".encode() + rng.randbytes(rng.randint(0, 2000)),
            key=f"k{number % 7}".encode(),
            timestamp=NOW + number,
        )
        for i in range(count)
    ]


def batch_for(seed: int, number: int) -> tuple[CompressionType, list[SimpleRecord]]:
    """The codec and records of batch `number` (deterministic, so the parent can check)."""
    rng = random.Random(seed * 1_000_003 + number)
    codec = CompressionType(rng.choice([0, 0, 1, 3, 4]))
    return codec, records_for(number, rng)


def main() -> None:
    directory, seed = sys.argv[1], int(sys.argv[2])
    config = LogConfig.from_properties({"segment.bytes": 64 * 1024, "index.interval.bytes": 512})
    log = Log.open(directory, config, now_ms=NOW)
    # Encode ahead so the kill lands inside appends (writes, index updates, rolls), not encoding.
    prepared = []
    for n in range(PREPARED_BATCHES):
        codec, records = batch_for(seed, n)
        prepared.append(build_batch(records, compression=codec))
    print("ready", flush=True)
    number = 0
    while number < PREPARED_BATCHES:
        raw = prepared[number]
        info = log.append_as_leader(raw, leader_epoch=number // 50, now_ms=NOW + number)
        print(number, info.first_offset, info.last_offset, flush=True)
        number += 1


if __name__ == "__main__":
    main()
