"""What deep validation of Produce batches costs (Kafka's LogValidator walk, issue 14).

For 1 KB and 100 B records, uncompressed and lz4, in batches of about 16 KB like a producer's:
(a) the record walk and rules alone (`validate_client_records`);
(b) `Log.append_as_leader` of the same batches with the walk, and (c) without it (the walk
switched off in the same process): the ratio (b)/(c) is what validation costs an append.
No broker or network: the log and the validator are measured as the broker's handler uses them.
MB = 10^6 bytes of record values (as bench_broker), so compressed and plain cases compare.

Usage: .venv/bin/python jobs/bench_validation.py [--mb 64] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import sparklog.storage.log_validator as validator_module
from sparklog.records import CompressionType, SimpleRecord, build_batch, iter_batches
from sparklog.storage.config import LogConfig
from sparklog.storage.log import Log
from sparklog.storage.log_validator import validate_client_records

BATCH_BYTES = 16_384


def value_mb(data: list[bytes], record_size: int) -> float:
    return sum(b.header.records_count for d in data for b in iter_batches(d)) * record_size / 1e6


def batches(record_size: int, codec: CompressionType, total_mb: float) -> list[bytes]:
    """Batches of about BATCH_BYTES of record values, half-random values (lz4 finds some)."""
    now = int(time.time() * 1000)
    per_batch = max(1, BATCH_BYTES // record_size)
    value = os.urandom(record_size // 2) + b"x" * (record_size - record_size // 2)
    records = [SimpleRecord(value, b"key-%d" % i, now) for i in range(per_batch)]
    one = build_batch(records, now_ms=now, compression=codec)
    count = max(1, int(total_mb * 1e6 / (per_batch * record_size)))
    return [one] * count


def walk_mb_s(data: list[bytes], record_size: int) -> float:
    config = LogConfig()
    now = int(time.time() * 1000)
    found = [[(b.position, b.header) for b in iter_batches(d)] for d in data]
    start = time.perf_counter()
    for d, headers in zip(data, found, strict=True):
        validate_client_records(d, headers, config, now, "bench-0")
    return value_mb(data, record_size) / (time.perf_counter() - start)


def append_mb_s(data: list[bytes], record_size: int, validate: bool) -> float:
    directory = Path(tempfile.mkdtemp(prefix="bench-validation-"))
    original = validator_module.validate_client_records
    if not validate:
        # the headers as they came: the validator returns them (maxTimestamp set) when it passes
        validator_module.validate_client_records = lambda _buf, batches, *args, **kwargs: batches
    try:
        now = int(time.time() * 1000)
        log = Log.open(directory / "t-0", LogConfig(), now_ms=now)
        start = time.perf_counter()
        for d in data:
            log.append_as_leader(d, 0, now)
        seconds = time.perf_counter() - start
        log.close()
        return value_mb(data, record_size) / seconds
    finally:
        validator_module.validate_client_records = original
        shutil.rmtree(directory, ignore_errors=True)


def run(total_mb: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for record_size in (1000, 100):
        for codec in (CompressionType.NONE, CompressionType.LZ4):
            name = f"{record_size}B_{codec.name.lower()}"
            data = batches(record_size, codec, total_mb)
            without = max(append_mb_s(data, record_size, validate=False) for _ in range(2))
            with_walk = max(append_mb_s(data, record_size, validate=True) for _ in range(2))
            out[name] = {
                "walk_mb_s": round(max(walk_mb_s(data, record_size) for _ in range(2)), 1),
                "append_mb_s_validated": round(with_walk, 1),
                "append_mb_s_unvalidated": round(without, 1),
                "append_validated_vs_unvalidated": round(with_walk / without, 3),
            }
            print(f"{name:>10}: " + ", ".join(f"{k}={v}" for k, v in out[name].items()))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=64, help="MB of batches per case")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    out = run(args.mb)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
